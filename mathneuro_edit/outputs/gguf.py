"""The GGUF files for llama.cpp: the edited checkpoint written again as ``checkpoint/model-<TYPE>.gguf``, one file
per type of ``outputs.gguf`` (llama.cpp's quantizer makes the K-quants: :mod:`~..weights.gguf_quantize`), with the
edit's survival in each quantized file (``gguf_survival.json``: :mod:`~..weights.gguf_survival`).

Its entry, its run step (after the checkpoint's, from the finished checkpoint folder; checked once, before the
model loads: :func:`prepare_gguf`), its naming (llama.cpp's convention and the ``general.*`` metadata, from the
lock's public form: the same lock always gives the same names, and never a local path) and its card's data (its
text is ``card_template.md``'s).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ..errors import InputError
from ..util.files import write_json_atomic
from ..util.paths import LOCAL, is_local_path
from .checkpoint import CHECKPOINT
from .common import card_fields, folder_dtype, hub_origin, label
from .registry import BaseRecord, CardView, Output, RunView, register_output

__all__ = [
    "GGUF",
    "UNQUANTIZED",
    "gguf_naming",
    "gguf_repo_name",
    "gguf_general",
    "gguf_meta",
    "gguf_types",
    "requantized",
    "prepare_gguf",
    "write_gguf_step",
    "llama_cpp_usage",
    "beside_checkpoint",
    "read_survival",
    "read_gguf_eval",
    "llama_cpp_facts",
    "estimate_gguf_survival",
    "survival_table",
    "shown_file",
    "file_verdicts",
]

UNQUANTIZED = ("F32", "F16", "BF16")  # GGUF types that store each weight as a float, not in quantized blocks
_SIZE = re.compile(r"^(?P<name>.+?)-(?P<size>(?:\d+x)?\d+(?:\.\d+)?[KMBT])(?:-(?P<rest>.+))?$", re.IGNORECASE)


def _size_label(n: int) -> str:
    """llama.cpp's size label of a parameter count (``135M``, ``1.1M``, ``8.0B``)."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            value = n / scale
            digits = max(2 - len(str(round(value)).lstrip("0")), 0)
            return f"{value:.{digits}f}{suffix}"
    return str(n)


def gguf_naming(lock: Mapping[str, Any]) -> dict[str, str | None]:
    """``{"basename", "size_label", "finetune"}`` of the edited model, as llama.cpp's converter names a model
    (``SmolLM2`` / ``135M`` / ``Instruct-MathNeuro-Prune``): from the lock's public base name (``base.hub_id`` for
    a local folder or GGUF file that names its Hub origin; else a GGUF base's own ``general.basename``,
    ``size_label`` and ``finetune``), parameter count and edit (the same lock always gives the same names; never a
    local path)."""
    base = lock.get("base") or {}
    model = hub_origin(lock)[0] or str(base.get("model") or "model")
    own = (base.get("gguf") or {}).get("general") or {}
    edit = (lock.get("recipe") or {}).get("edit") or {}
    scale = edit.get("scale", 1)
    variant = (
        "MathNeuro-Prune"
        if edit.get("prune")
        else "MathNeuro-ScaleMap"  # a scale per layer band and component: no one number names it
        if isinstance(scale, Mapping)
        else f"MathNeuro-Scale{float(scale):g}"
    )
    if model == LOCAL and own.get("basename"):  # the GGUF's own names, as its converter wrote them
        head, size, rest = (_name_part(own.get(k)) for k in ("basename", "size_label", "finetune"))
    else:
        if model == LOCAL:
            arch = str((base.get("description") or {}).get("architecture") or "Model")
            name = re.sub(r"(ForCausalLM|LMHeadModel|Model)$", "", arch)
        else:
            name = model.rstrip("/").split("/")[-1].removesuffix(".gguf")
            name = name[:1].upper() + name[1:]
        name = _name_part(name) or "Model"
        if m := _SIZE.match(name):
            head, size, rest = m.groups()
        else:
            params = int((lock.get("edit_summary") or {}).get("model_params") or 0)
            head, size, rest = name, (_size_label(params) if params else None), None
    return {"basename": head or "Model", "size_label": size, "finetune": "-".join(p for p in (rest, variant) if p)}


def _name_part(x: Any) -> str | None:
    """A part of a GGUF file's name: letters, digits, ``.`` and ``-`` (``None`` for an empty one)."""
    return re.sub(r"[^A-Za-z0-9.-]+", "-", str(x)).strip("-") or None if x else None


def gguf_types(files: Mapping[str, str] | list[str]) -> list[str]:
    """The GGUF types of ``model-<TYPE>.gguf`` files (or of their names in the GGUF repo), in order.

    Example:
        >>> gguf_types(["model-Q8_0.gguf", "SmolLM2-135M-MathNeuro-Prune-F16.gguf"])
        ['Q8_0', 'F16']
    """
    return [f.rsplit("/", 1)[-1].removesuffix(".gguf").rsplit("-", 1)[-1] for f in files]


def gguf_repo_name(lock: Mapping[str, Any], local_name: str) -> str:
    """The name of a GGUF file in its Hub repo, by llama.cpp's convention ``<Base>-<Size>-<Variant>-<Type>.gguf``
    (``local_name`` is the run folder's ``model-<TYPE>.gguf``); the same lock always gives the same name.

    Example:
        >>> lock = {"base": {"model": "HuggingFaceTB/SmolLM2-135M-Instruct"}, "recipe": {"edit": {"prune": True}},
        ...         "edit_summary": {"model_params": 134515008}}
        >>> gguf_repo_name(lock, "model-Q8_0.gguf")
        'SmolLM2-135M-Instruct-MathNeuro-Prune-Q8_0.gguf'
    """
    qtype = gguf_types([local_name])[0]
    n = gguf_naming(lock)
    return "-".join(p for p in (n["basename"], n["size_label"], n["finetune"], qtype) if p) + ".gguf"


def gguf_general(lock: Mapping[str, Any], fields: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``general.*`` metadata of the run's GGUF (for :func:`~mathneuro_edit.weights.gguf_writer.write_gguf`):
    the names of :func:`gguf_naming`, the base's Hub owner and id (else a GGUF base's own), license fields,
    languages and tags."""
    fields = card_fields(dict(fields or {}))
    meta: dict[str, Any] = dict(gguf_naming(lock))
    own = ((lock.get("base") or {}).get("gguf") or {}).get("general") or {}
    meta.update({k: fields[k] for k in ("license", "license_name", "license_link") if k in fields})
    if fields.get("language") or own.get("languages"):
        meta["languages"] = fields.get("language") or own["languages"]
    model = hub_origin(lock)[0] or str((lock.get("base") or {}).get("model") or "")
    if model.count("/") == 1 and not is_local_path(model):  # a Hub id (the organism and <local> have no "/")
        org, name = model.split("/")
        meta["organization"] = org
        meta["base_models"] = [{"name": name, "organization": org, "repo_url": f"https://huggingface.co/{model}"}]
    elif own.get("organization"):
        meta["organization"] = own["organization"]
    edit = (lock.get("recipe") or {}).get("edit") or {}
    meta["tags"] = ["mathneuro", "mathneuro-edit", "model-editing", "math"] + (["pruning"] if edit.get("prune") else [])
    return meta


def gguf_meta(recipe: Any, n_params: int, base: BaseRecord) -> dict[str, Any]:
    """The ``general.*`` metadata of the run's GGUF, from the same public names the lock and the GGUF repo use
    (:func:`gguf_general`): the parts of the lock the run already has (the public recipe, the base's GGUF entry
    and description, the parameter count), before the lock is written."""
    public = recipe.public_dict()
    entry: dict[str, Any] = {"model": public["base"]["model"], **({"gguf": base.gguf} if base.gguf else {})}
    if base.description is not None:
        entry["description"] = base.description
    parts = {"base": entry, "recipe": {"edit": public["edit"], "base": public["base"]}}
    return gguf_general({**parts, "edit_summary": {"model_params": n_params}}, base.card_fields)


def _gguf_types(recipe: Any) -> tuple[list[str], str | None]:
    """``(types, tokenizer.ggml.pre)`` of ``outputs.gguf``, one type or a list (``base``: the GGUF base's own)."""
    from ..weights.gguf_reader import gguf_output

    found = [gguf_output(recipe.base, t) for t in recipe.outputs.gguf_types]
    return [t for t, _ in found if t is not None], next((p for _, p in found if p is not None), None)


def _public_name(recipe: Any) -> str:
    """The GGUF's ``general.name``, the same in the check and the write: ``base.hub_id`` when set, else
    ``base.model`` (never a local path: :func:`~mathneuro_edit.weights.gguf_writer.gguf_public_name`)."""
    from ..weights.gguf_writer import gguf_public_name

    return gguf_public_name(recipe.base.hub_id or recipe.base.model)


def prepare_gguf(recipe: Any, folder: Path) -> None:
    """The GGUF's one check, before the model loads (and before the long steps): its types (a K-quant: its float
    source and llama.cpp's quantizer), the gguf package, the architecture, rope scaling, tensor names, the
    tokenizer and its ``general.name``, from the base's folder."""
    from ..weights.gguf_quantize import LLAMA_CPP_TYPES, find_quantizer
    from ..weights.gguf_writer import check_gguf

    name = _public_name(recipe)
    for t in _gguf_types(recipe)[0]:
        check_gguf(folder, "F16" if t in LLAMA_CPP_TYPES else t, name=name)
        if t in LLAMA_CPP_TYPES:
            find_quantizer(t)
    if recipe.evaluation is not None and recipe.evaluation.llama_cpp:
        from ..evaluation.llama_cpp import llama_cpp_version

        try:
            llama_cpp_version()
        except ImportError:
            raise InputError(
                "evaluation.llama_cpp: evaluating the GGUF files needs llama-cpp-python, which is not installed; "
                "`pip install llama-cpp-python`, or set evaluation.llama_cpp: false"
            ) from None


def write_gguf_step(job: RunView, dest: Path) -> None:
    """The GGUF's step: ``model-TYPE.gguf`` for each type, written from the finished checkpoint folder ``dest``
    (checked before the model loaded: :func:`prepare_gguf`; K-quants by llama.cpp from the float GGUF that holds
    the checkpoint exactly), then the edit's survival in each quantized file, measured against the base written
    the same way (``gguf_survival.json``; one line where most of the edit is gone), and with
    ``evaluation.llama_cpp`` each file's own evaluation in llama.cpp against that base (``gguf_eval.json``)."""
    from ..weights.gguf_quantize import write_gguf_types
    from ..weights.gguf_survival import SURVIVAL_NAME, gone_line, measure_survival
    from .checkpoint import output_dtype

    recipe, ev = job.recipe, job.recipe.evaluation
    types, pre = _gguf_types(recipe)
    meta, source = gguf_meta(recipe, job.n_params, job.base), _source(dest, recipe)
    files = write_gguf_types(dest, types, source=source, name=_public_name(recipe), pre=pre, meta=meta)
    # the run's math task when evaluation.llama_cpp asks for each GGUF file's own evaluation (``export`` has no
    # evaluation, so none: its files are evaluated by a run)
    asked = ev is not None and ev.llama_cpp
    task = next((t for t in job.tasks if t.name == "math"), None) if asked else None
    if task is None and all(t in UNQUANTIZED for t in files):
        return
    note = job.stages.note if job.stages is not None else None
    evaluated: dict[str, Any] = {}

    def evaluate(base_files: Mapping[str, Path]) -> None:  # each file against the base's file of its type
        from transformers import AutoTokenizer, GenerationConfig

        from ..evaluation.llama_cpp import evaluate_gguf_pairs
        from ..evaluation.runtime import special_ids

        tok = AutoTokenizer.from_pretrained(dest, trust_remote_code=recipe.base.trust_remote_code)
        gen = GenerationConfig.from_pretrained(dest) if (dest / "generation_config.json").is_file() else None
        # the eos ids the evaluation stops at (the run's evaluation already passed this check on this tokenizer)
        eos_ids = special_ids(SimpleNamespace(generation_config=gen), tok)[1]
        pairs = {files[t].name: (t, base_files[t], files[t]) for t in files}
        evaluated.update(evaluate_gguf_pairs(pairs, tok, task, eos_ids, note=note))

    found = measure_survival(
        dest,
        job.base.folder,
        job.mask,
        files,
        source=source,
        dtype=output_dtype(recipe),
        trust_remote_code=recipe.base.trust_remote_code,
        with_base=evaluate if task is not None else None,
    )
    if found["files"]:
        write_json_atomic(dest / SURVIVAL_NAME, found)
    if evaluated:
        from ..evaluation.llama_cpp import GGUF_EVAL_NAME

        write_json_atomic(dest / GGUF_EVAL_NAME, evaluated)
    for name, entry in found["files"].items():
        line = gone_line(entry["type"], entry["total"])
        if line is not None and note is not None:
            note(f"{name}: {line}")


def _source(dest: Path, recipe: Any) -> str:
    """The float GGUF type K-quants are made from: the one that holds the checkpoint exactly."""
    from ..weights.gguf_quantize import source_type
    from .checkpoint import output_dtype

    return source_type(output_dtype(recipe) or folder_dtype(dest))


def _stage(recipe: Any) -> str:
    from ..weights.gguf_writer import gguf_filename

    return " + " + ", ".join(gguf_filename(t) for t in _gguf_types(recipe)[0])


def requantized(types: list[str]) -> str:
    """How GGUF files of ``types`` relate to the checkpoint they were written from: converted (float types) or
    quantized (block types: close to the checkpoint's numbers, not equal to them)."""
    shown = ", ".join(types) or "the type in each file's name"
    if types and all(t in UNQUANTIZED for t in types):
        return f"converted to {shown}"
    return f"quantized to {shown}: close to the checkpoint's numbers, not equal to them"


def llama_cpp_usage(out: Output, view: CardView) -> dict[str, Any]:
    """The data of the GGUF repo's "How to use" (``card_template.md``'s ``gguf_usage``): its files (under their
    names in the repo when the card is for one) with their types and sha256, the repo, and the edit's survival in
    each file as the run measured it (:func:`survival_table`)."""
    repo, survival = view.repo, view.gguf_survival
    files = {out.name_in_repo(view.lock, f) if repo else f: h for f, h in view.files.items()}
    types, first = gguf_types(files), shown_file(files)
    return {
        "source": view.base_repo,
        "files": [{"name": f, "type": t, "sha256": h} for (f, h), t in zip(files.items(), types)],
        "requantized": requantized(types),
        "survival": survival_table(dict(view.files), survival, dict(zip(view.files, files))) if survival else None,
        "repo": repo,
        "first": first,
        "qtype": gguf_types([first])[0],
    }


def beside_checkpoint(
    repo: str | None, files: Mapping[str, str], lock: Mapping[str, Any] | None = None
) -> dict[str, Any] | None:
    """The data of the checkpoint card's GGUF paragraph (``card_template.md``'s ``gguf_beside``) when its folder
    holds GGUF files (``{file: sha256}``): a local card names the files here; a published one names them in the
    GGUF repo (``<repo>-GGUF``, their own); ``None`` without files."""
    if not files:
        return None
    gguf_repo = f"{repo}{GGUF.repo_suffix}" if repo else None
    names = {(GGUF.name_in_repo(lock, f) if gguf_repo and lock is not None else f): h for f, h in files.items()}
    return {
        "repo": gguf_repo,
        "files": [{"name": f, "sha256": h} for f, h in names.items()],
        "requantized": requantized(gguf_types(files)),
        "first": shown_file(names),
    }


# the type the card's commands show, first present wins: the files most likely to keep the edit (docs/results.md:
# Q8_0 and Q6_K keep 98-100% of SmolLM2's x1.05 edit and its measured gain; 4- and 5-bit types lose a fifth to a
# half of the edited weights), the smaller first; then the float types; then the rest as named
_SHOWN_FIRST = ("Q8_0", "Q6_K", "F16", "BF16", "F32", "Q5_K_M", "Q5_K_S", "Q4_K_M", "Q4_K_S")


def shown_file(files: Mapping[str, Any] | list[str]) -> str:
    """The file the card's llama.cpp commands name (:data:`_SHOWN_FIRST`), else the first (``MODEL.gguf``: none).

    Example:
        >>> shown_file(["m-Q4_0.gguf", "m-Q4_K_M.gguf", "m-Q8_0.gguf"]), shown_file(["m-Q2_K.gguf"]), shown_file([])
        ('m-Q8_0.gguf', 'm-Q2_K.gguf', 'MODEL.gguf')
    """
    names = list(files)
    by_type = dict(zip(gguf_types(names), names))
    return next((by_type[t] for t in _SHOWN_FIRST if t in by_type), names[0] if names else "MODEL.gguf")


def estimate_gguf_survival(recipe: Any, mask: Any, folder: Path) -> dict[str, Any]:
    """``plan --mask``'s estimate of the edit's survival in each GGUF type of ``outputs.gguf``, before anything is
    written: the base's edited matrices (from ``folder``, edited and cast as the export does) quantized as the run
    would (:func:`~..weights.gguf_survival.estimate_survival`), else a note (a float or llama.cpp type)."""
    from ..engine.mask import as_mask
    from ..weights.checkpoint import open_checkpoint
    from ..weights.gguf_quantize import LLAMA_CPP_TYPES
    from ..weights.gguf_survival import estimate_survival
    from ..weights.gguf_tensors import gguf_plan
    from .checkpoint import output_dtype

    mask, ckpt, dtype = as_mask(mask), open_checkpoint(folder), output_dtype(recipe)
    out: dict[str, Any] = {}
    for t in _gguf_types(recipe)[0]:
        if t in LLAMA_CPP_TYPES:
            out[t] = {"note": "made by llama.cpp's quantizer: measured after quantizing (gguf_survival.json, verify)"}
        elif t in UNQUANTIZED:
            out[t] = {"note": "a float type: every edited weight is kept"}
        else:
            stored = {src: qt for _, src, _, qt in gguf_plan(folder, t) if isinstance(src, str)}
            out[t] = estimate_survival(_edited_matrices(ckpt, mask, stored, recipe.edit.effective_scale, dtype))
    return out


def _edited_matrices(ckpt: Any, mask: Any, stored: Mapping[str, str], scale: float, dtype: str | None) -> Any:
    """``(base, edited, GGUF type)`` float32 arrays of each masked matrix the GGUF quantizes, edited as the export
    edits it (:func:`~mathneuro_edit.engine.apply.scale_masked`) and cast to the checkpoint's dtype."""
    import torch

    from ..engine.apply import scale_masked, scale_of

    for name in mask:
        if name not in stored or stored[name] in UNQUANTIZED or name not in ckpt.tensors:
            continue
        w = ckpt.read(name)
        e = scale_masked(w, mask[name], scale_of(scale, name))
        cast = getattr(torch, dtype) if dtype else w.dtype
        yield w.to(cast).float().numpy(), e.to(cast).float().numpy(), stored[name]


def read_survival(folder: str | Path) -> dict[str, Any] | None:
    """A folder's ``gguf_survival.json`` (the edit's survival in each quantized GGUF, as the run measured it), or
    ``None`` without a readable one."""
    from ..weights.gguf_survival import SURVIVAL_NAME

    return _folder_json(Path(folder) / SURVIVAL_NAME, "the GGUF survival file")


def read_gguf_eval(folder: str | Path) -> dict[str, Any] | None:
    """A folder's ``gguf_eval.json`` (each GGUF file's own evaluation in llama.cpp, as the run measured it), or
    ``None`` without a readable one."""
    from ..evaluation.llama_cpp import GGUF_EVAL_NAME

    return _folder_json(Path(folder) / GGUF_EVAL_NAME, "the GGUF evaluation file")


def _folder_json(path: Path, what: str) -> dict[str, Any] | None:
    from ..util.reading import read_json

    try:
        found = read_json(path, 64 << 20, what, "run the export again") if path.is_file() else None
    except Exception:  # noqa: BLE001 - a damaged file: the card says nothing of it (verify measures survival again)
        return None
    return found if isinstance(found, dict) else None


def survival_table(
    files: Mapping[str, str], survival: Mapping[str, Any] | None, names: Mapping[str, str]
) -> dict[str, Any]:
    """The data of the GGUF card's survival table (``card_template.md``'s ``survival_table``): each file's type
    (what a type keeps of a weight is the template's), size, and the edit's survival in it (the share of edited
    weights whose quantized value differs from the base's in the same type, and the share of the intended change
    it delivers); a line for each type where most of the edit is gone."""
    from ..weights.gguf_survival import gone_line

    survival = survival or {}
    measured, sizes = dict(survival.get("files") or {}), dict(survival.get("bytes") or {})
    rows, gone = [], []
    for f in files:
        t = gguf_types([f])[0]
        total = (measured.get(f) or {}).get("total") or {}
        size = f"{sizes[f] / 1e6:,.1f} MB" if f in sizes else "-"
        if total.get("survived_share") is not None:
            kept = f"{total['survived']:,} of {total['edited']:,} ({total['survived_share']:.2%})"
            delivered = f"{total['delivered']:.1%}" if total.get("delivered") is not None else "-"
        else:
            kept, delivered = ("all (a float type)", "100%") if t in UNQUANTIZED else ("not measured", "-")
        rows.append({"name": names.get(f, f), "type": t, "size": size, "kept": kept} | {"delivered": delivered})
        gone += [line] if total and (line := gone_line(t, total)) else []
    return {
        "source": label(survival.get("source", "float")),
        "quantizer": label(survival["quantizer"]) if survival.get("quantizer") else None,
        "rows": rows,
        "gone": gone,
    }


def file_verdicts(evaluated: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """Each evaluated file's p-value text and verdict, Holm-adjusted over the run's files: the card offers several
    files, and calling the best of five raw tests "significant" would pick a winner by chance (five files each at
    p < 0.05 under no effect: about 23% for at least one). A gain (loss) is significant when its adjusted p is
    below 0.05 and the edited (base) file answers more problems the other does not.

    Example:
        >>> from mathneuro_edit.evaluation.llama_cpp import pair_row
        >>> a = pair_row("Q8_0", [False] * 9 + [True], [True] * 10)
        >>> b = pair_row("Q6_K", [False] * 10, [False] * 5 + [True] * 5)
        >>> v = file_verdicts({"a.gguf": a, "b.gguf": b})
        >>> v["a.gguf"], v["b.gguf"]["verdict"]
        ({'p': 'p = 0.00391; Holm over the 2 files 0.00781', 'verdict': 'significant gain'}, 'not significant')
    """
    from ..evaluation.report import format_p
    from ..evaluation.significance import ALPHA, holm_adjust

    names = list(evaluated)
    adjusted = dict(zip(names, holm_adjust([float(evaluated[f]["mcnemar_p"]) for f in names])))
    out = {}
    for f in names:
        r, p = evaluated[f], adjusted[f]
        b, c = r["discordant"]["base_only"], r["discordant"]["edited_only"]
        verdict = "not significant" if p >= ALPHA or b == c else "significant gain" if c > b else "significant loss"
        text = format_p(r["mcnemar_p"]) + (f"; Holm over the {len(names)} files {p:.3g}" if len(names) > 1 else "")
        out[f] = {"p": text, "verdict": verdict}
    return out


def llama_cpp_facts(
    files: Mapping[str, str], found: Mapping[str, Any] | None, names: Mapping[str, str]
) -> dict[str, Any] | None:
    """The data of the GGUF card's own figures (``card_template.md``'s ``gguf_effect``, the first paragraph's
    sentence, and ``gguf_eval``, its evaluation): each evaluated file in llama.cpp against the base written the
    same way, paired on the run's problems (``gguf_eval.json``: ``found``; ``None``: not evaluated). Never the
    checkpoint's figures: those are transformers' on the unquantized weights, not what these files compute.

    Example:
        >>> from mathneuro_edit.evaluation.llama_cpp import pair_row
        >>> found = {"n": 2, "files": {"m-Q8_0.gguf": pair_row("Q8_0", [False, True], [True, True])}}
        >>> llama_cpp_facts({}, found, {})["effect"]
        [{'type': 'Q8_0', 'base': '50.0%', 'edited': '100.0%', 'change': '+50.0', 'p': 'p = 1', 'verdict': 'not significant'}]
    """
    from ..evaluation.report import format_accuracy

    if found is None:
        return None
    try:  # a damaged or edited file (verify compares it with the lock): the card says the files were not evaluated
        evaluated = dict(found.get("files") or {})
        verdicts = file_verdicts(evaluated)
        effect = [
            {
                "type": label(r["type"]),
                "base": f"{r['base']['accuracy']:.1%}",
                "edited": f"{r['edited']['accuracy']:.1%}",
            }
            | {"change": f"{r['difference_pp']:+.1f}", "p": verdicts[f]["p"]}
            | {"verdict": "significant" if verdicts[f]["verdict"] != "not significant" else "not significant"}
            for f, r in evaluated.items()
        ]
        rows = []
        for f in (f for f in files if f in evaluated):
            r, keys = evaluated[f], ("math_accuracy", "math_correct", "math_ci95_low", "math_ci95_high")
            base, edited = (
                format_accuracy(dict(zip(keys, (a["accuracy"], a["correct"], *a["wilson95"])), math_total=r["n"]))
                for a in (r["base"], r["edited"])
            )
            rows.append(
                {"name": names.get(f, f), "type": label(r["type"]), "base": base, "edited": edited, **verdicts[f]}
            )
            rows[-1] |= {"change": f"{r['difference_pp']:+.1f}"} | {k: label(v) for k, v in r["discordant"].items()}
        p = found.get("prompt") or {}
        prompt = {"chat": bool(p.get("chat_template"))} | {
            k: label(p.get(k)) for k in ("prompt_style", "n_shot", "max_new_tokens")
        }
        return {"engine": label(found.get("engine")), "n": label(found.get("n")), "prompt": prompt} | {
            "effect": effect,
            "rows": rows,
        }
    except (TypeError, KeyError, ValueError, AttributeError):
        return None


def _refusal(model: Any, targets: Any, config: Mapping[str, Any]) -> str | None:
    """``plan``'s line on the GGUF: the families the GGUF writer writes (:mod:`mathneuro_edit.weights.gguf_arch`)."""
    from ..weights.gguf_arch import gguf_refusal

    return gguf_refusal(dict(config))


GGUF = register_output(
    Output(
        name="gguf",
        folder=CHECKPOINT.folder,
        gguf_files=True,
        repo_suffix="-GGUF",
        library="gguf",
        relation="quantized",
        tags=("gguf", "llama.cpp"),
        holds="repo holds, as GGUF files for llama.cpp,",
        evaluated=False,
        usage=llama_cpp_usage,
        files_cell=lambda weights_dtype, files: "GGUF: " + ", ".join(gguf_types(files) or ["none"]),
        on_gguf_base=lambda cast, files: (
            f"These GGUF files are that dequantized model with the edit (computed in float32{cast}), written from the "
            f"edited checkpoint and {requantized(gguf_types(files))}"
        ),
        write=write_gguf_step,
        stage=_stage,
        derived_from=CHECKPOINT.name,
        repo_file_name=gguf_repo_name,
        beside=beside_checkpoint,
        absent="no .gguf file here; write one with outputs.gguf: TYPE (or export --gguf TYPE), then push --gguf",
        prepare=prepare_gguf,
        refusal=_refusal,
    )
)
