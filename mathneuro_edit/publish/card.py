"""The model card (README.md) of an edited model, built with huggingface_hub's ``ModelCard``.

Three kinds, one per Hub repo: ``checkpoint`` (a transformers folder), ``adapter`` (the PEFT SHiRA adapter) and
``gguf`` (the checkpoint's GGUF files, named by llama.cpp's convention, :func:`~.gguf_naming.gguf_repo_name`).

Metadata: ``base_model`` (Hub ids only), ``base_model_relation`` (``finetune`` for a checkpoint, ``adapter`` for a
PEFT adapter, ``quantized`` for the GGUF repo, whose ``base_model`` is the edited checkpoint's repo when pushed),
``library_name`` (``transformers`` / ``peft`` / ``gguf``), ``tags`` (the adapter's as PEFT writes them:
``base_model:adapter:<id>``, the method), ``datasets`` (Hub ids of the calibration data, and the base card's),
the base card's ``license``, ``license_name``, ``license_link`` and ``language``
(:func:`~.base_card.base_card_fields`), ``pipeline_tag: text-generation``, and the evaluation of the edited model as Hub
evaluation results (``model-index``, built with huggingface_hub's ``EvalResult``; it parses back with
``ModelCard.load``). Body: what was edited (base, method and paper, top_k, scale,
% of weights), the data with its sha256, the base (Hub id + revision, or a local base's file hashes), the
before/after evaluation, how to load it, how to install mathneuro-edit and reproduce the edit (the exact command),
the library versions, the recipe, the full lock file, the paper's citation, and limitations. The sections drawn
from the lock alone live in :mod:`mathneuro_edit.publish.card_sections`, the ``model-index`` in
:mod:`mathneuro_edit.publish.model_index`, and the paragraphs on a GGUF base, a cast dtype and GGUF files beside a
checkpoint in :mod:`mathneuro_edit.publish.card_weights`.

One card per folder, rendered from the folder itself (:func:`card_for_folder`: its lock and ``eval.json``), so
``push`` renders it again for the target repo: the published card loads ``from_pretrained("user/name")``; a card
still in a local folder loads ``"."`` (that folder). No placeholder, no timestamp, no local path.

Privacy: a local base path never appears in the card (its lock is the public form, see :mod:`mathneuro_edit.publish.lock`);
:func:`build_card` checks the finished text and refuses to build a card that would reveal one.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from huggingface_hub import ModelCard, ModelCardData
from huggingface_hub.utils import HFValidationError, validate_repo_id

from ..errors import InputError
from ..evaluation.report import effect_sentence, eval_markdown
from ..layout import EVAL_NAME, LOCK_NAME
from ..recipe.io import recipe_fields, recipe_from_dict
from ..recipe.safe_yaml import dump_yaml
from ..recipe.schema import Recipe
from ..util.config_sizes import read_model_json
from ..util.console import document_safe
from ..util.files import write_text_atomic
from ..util.hashing import sha256_file
from ..util.paths import LOCAL, is_local_path
from ..util.reading import read_json
from . import card_sections as sections
from .base_card import card_fields
from .card_weights import _dtype_note, _gguf_note, _gguf_usage, files_cell
from .gguf_naming import hub_origin
from .lock import check_private, read_lock
from .model_index import BUILT_IN as BUILT_IN  # re-exported: card.py was their home
from .model_index import SOURCE_URL as SOURCE_URL
from .model_index import eval_results_metadata
from .outputs import CHECKPOINT, GGUF, CardView, output, output_of_folder, repo_for

# an eval.json holds a few tasks' metrics and completions: a 2,000-problem evaluation's is a few MB
MAX_EVAL_BYTES = 256 * 1024 * 1024

__all__ = [
    "build_card",
    "write_card",
    "card_for_folder",
    "summarize_edit",
    "eval_results_metadata",
    "CITATION",
    "lock_file_sha256",
    "folder_dtype",
    "has_chat_template",
    "short_recipe",
]
PAPER = "https://arxiv.org/abs/2410.16930"

CITATION = """@article{christ2024mathneurosurgery,
  title   = {Math Neurosurgery: Isolating Language Models' Math Reasoning Abilities Using Only Forward Passes},
  author  = {Christ, Bryan R. and Gottesman, Zack and Kropko, Jonathan and Hartvigsen, Thomas},
  journal = {arXiv preprint arXiv:2410.16930},
  year    = {2024},
  url     = {https://arxiv.org/abs/2410.16930}
}"""


def summarize_edit(counts: Mapping[str, tuple[int, int]], *, model_params: int) -> dict[str, Any]:
    """Group a mask's ``counts()`` by module type, for the card's "what was edited" table.

    The module type is the parameter name's last part without ``.weight``/``.bias``
    (``model.layers.0.self_attn.q_proj.weight`` -> ``q_proj``; fused experts keep ``gate_up_proj``).

    Args:
        counts: ``{parameter name: (selected, total)}`` (:meth:`Mask.counts`).
        model_params: number of parameters of the whole model (for "fraction of the model").

    Returns:
        ``{"selected", "targeted", "matrices", "model_params", "by_module": {type: {"matrices", "selected",
        "total"}}}``.

    Example:
        >>> s = summarize_edit({"m.0.q_proj.weight": (2, 8), "m.1.q_proj.weight": (1, 8)}, model_params=100)
        >>> s["by_module"]["q_proj"], s["selected"]
        ({'matrices': 2, 'selected': 3, 'total': 16}, 3)
    """
    by_module: dict[str, dict[str, int]] = {}
    for name, (selected, total) in counts.items():
        parts = name.split(".")
        kind = parts[-2] if parts[-1] in ("weight", "bias") and len(parts) > 1 else parts[-1]
        row = by_module.setdefault(kind, {"matrices": 0, "selected": 0, "total": 0})
        row["matrices"] += 1
        row["selected"] += int(selected)
        row["total"] += int(total)
    return {
        "selected": sum(r["selected"] for r in by_module.values()),
        "targeted": sum(r["total"] for r in by_module.values()),
        "matrices": len(counts),
        "model_params": int(model_params),
        "by_module": dict(sorted(by_module.items())),
    }


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.3g}%" if whole else "n/a"


def build_card(
    *,
    recipe: Recipe,
    lock: Mapping[str, Any],
    base_model_id: str | None,
    kind: str,
    edit_summary: Mapping[str, Any],
    eval_results: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None,
    license: str | Mapping[str, Any] | None = None,
    repo_id: str | None = None,
    base_repo: str | None = None,
    lock_sha256: str | None = None,
    weights_dtype: str | None = None,
    chat: bool = False,
) -> ModelCard:
    """Build the model card of an edited model.

    Args:
        recipe: the recipe that ran.
        lock: the run's lock (:func:`mathneuro_edit.publish.lock.build_lock`), embedded in full.
        base_model_id: the base's Hub id, or ``None`` for a local base (then no ``base_model`` metadata).
        kind: ``"checkpoint"`` (full model), ``"adapter"`` (PEFT) or ``"gguf"`` (the GGUF repo).
        edit_summary: :func:`summarize_edit` output.
        eval_results: eval.json's dict (:meth:`~mathneuro_edit.evaluation.results.EvalResults.to_dict`): ``{task:
            {"base": {...}, "edited": {...}, "comparison": {...}}}``; any part may be missing. A math comparison
            that is not significant is said in the card's first paragraph.
        license: license id for the metadata (see :func:`license_from_base`), or the base card's fields
            (:func:`base_card_fields`: license, license_name, license_link, language, datasets).
        repo_id: the Hub repo the card is published in (``push`` passes it); default the recipe's
            ``hub.repo_id``; ``None`` for a card in a local folder (its snippets then load ``"."``).
        base_repo: for an output made from another (``kind="gguf"``: :attr:`~.outputs.Output.derived_from`), that
            output's Hub repo (the GGUF's ``base_model``: the edited checkpoint's; default the original base).
        lock_sha256: the sha256 of the folder's ``mathneuro_recipe.lock.yaml`` (the card names the file and this
            hash instead of embedding the lock).
        weights_dtype: the dtype the checkpoint's config.json names (:func:`folder_dtype`), for the sentence on
            ``outputs.dtype`` and the files row.
        chat: the model's tokenizer has a chat template (:func:`has_chat_template`): the snippet generates a chat
            reply.

    Returns:
        The card; save it with :func:`write_card`.

    Raises:
        InputError: ``kind`` unknown, or ``base_model_id`` not a Hub repo id.
        MathNeuroEditError: the card would contain a local path of the recipe.

    Example:
        >>> card = build_card(recipe=r, lock=lock, base_model_id=None, kind="checkpoint",
        ...                   edit_summary=summarize_edit(mask.counts(), model_params=n))  # doctest: +SKIP
    """
    out = output(kind)  # InputError for a kind that is not registered
    if base_model_id is not None:
        try:
            validate_repo_id(base_model_id)
        except HFValidationError:
            raise InputError(
                f"base_model_id: {base_model_id!r} is not a Hub repo id; pass None for a local base"
            ) from None
        if is_local_path(base_model_id):
            raise InputError(f"base_model_id: {base_model_id!r} is a local path; pass None for a local base")
    fields = card_fields({"license": license} if isinstance(license, str) else dict(license or {}))
    datasets = sorted(
        {s.hub_id or s.hub_dataset for s in (recipe.data.math, *recipe.data.general) if s.hub_id or s.hub_dataset}
        | set(fields.pop("datasets", []))
    )
    tags = ["mathneuro", "mathneuro-edit", "model-editing", "math"] + (["pruning"] if recipe.edit.prune else [])
    ggufs = {  # the GGUF output's files when they lie in this output's folder (the checkpoint's, or its own)
        k.removeprefix(out.folder + "/"): v
        for k, v in sorted(lock.get("outputs", {}).items())
        if out.folder == GGUF.folder and GGUF.owns(k)
    }
    extra: dict[str, Any] = {}
    origin = hub_origin(lock)
    gguf_base = (lock.get("base") or {}).get("gguf") or {}
    # the model this repo's files are made from, for the Hub's model tree: the base (an adapter of a GGUF base
    # names the Hub model that GGUF is a conversion of, and its card says which weights its deltas are to), or
    # for the GGUF repo the edited checkpoint's repo it quantizes
    relation_base = (base_repo or base_model_id) if out.derived_from else base_model_id
    tags += list(out.tags)  # each repo's own: `gguf` only on the repo that holds GGUF files
    if relation_base is not None:
        extra["base_model_relation"] = out.relation
        tags += [f"base_model:{out.relation}:{relation_base}"]  # the tag the Hub derives, written as PEFT does
    own_languages = (gguf_base.get("general") or {}).get("languages")
    if "language" not in fields and isinstance(own_languages, list) and own_languages:
        fields["language"] = [str(x) for x in own_languages]  # the GGUF base's own, as its GGUF output carries
    # a card rendered before the push names the repo its output is pushed to (one repo per output)
    repo = repo_id or (repo_for(recipe.hub.repo_id, out.name) if recipe.hub else None)
    local_base = lock.get("recipe", {}).get("base", {}).get("model") == LOCAL
    base_name = (
        origin.split("/")[-1]
        if origin
        else str(gguf_base.get("file", "local GGUF")).removesuffix(".gguf")
        if local_base and gguf_base
        else "local model"
        if local_base
        else (base_model_id or recipe.base.model).split("/")[-1]
    )
    action = "pruned (set to 0)" if recipe.edit.prune else f"scaled by {recipe.edit.effective_scale:g}"
    title = repo.split("/")[-1] if repo else f"{base_name} (MathNeuro edit: {action})"
    results = eval_results_metadata(eval_results, recipe) if out.evaluated else []
    data = ModelCardData(
        base_model=relation_base,
        library_name=out.library,
        tags=tags,
        datasets=datasets or None,
        pipeline_tag="text-generation",
        eval_results=results or None,
        model_name=title if results else None,
        **fields,
        **extra,
    )
    lock_view = {**lock, "edit_summary": lock.get("edit_summary") or dict(edit_summary)}
    if base_model_id is not None and base_model_id != origin:  # the caller's Hub id names the base (metadata and
        lock_view["base"] = {**(lock.get("base") or {}), "model": base_model_id}  # snippets agree)
    base_text = sections.base_sentence(lock_view)
    edit, mask, s = recipe.edit, recipe.mask, edit_summary
    top = f"top {mask.top_k * 100:g}% of each {mask.granularity}"
    method = {
        "mathneuro": f"MathNeuro scores every weight as `|W_ij| * sum over samples of ||x_j||_2` on math text and on "
        f"general text, keeps the {top} for each, and selects the weights in the math set but not in "
        "the general one: the math-specific weights.",
        "wanda": f"Weights were selected as the {top} by the same score on math text only (the paper's Wanda-style "
        "baseline, without the general-text subtraction).",
        "random": f"Weights were selected at random, as many as the {top} (a control for MathNeuro).",
    }[mask.method]
    module_rows = "\n".join(
        f"| {k} | {r['matrices']} | {r['selected']:,} | {r['total']:,} | {_pct(r['selected'], r['total'])} |"
        for k, r in s["by_module"].items()
    )
    evaluation = (
        f"## Evaluation\n\nBase vs edited model, on the same problems and texts. Accuracy: percent "
        "(correct/n, 95% Wilson interval); its change in percentage points with the paired exact McNemar "
        "test (significant: p < 0.05). Loss: mean next-token loss ± its standard error over texts. "
        f"KL: mean KL(base || edited) per token.\n\n{eval_markdown(eval_results, sections.card_text)}\n"
        if eval_results
        else "## Evaluation\n\nNo evaluation was run for this model.\n"
    )
    effect = sections.sweep_effect(lock) or effect_sentence(eval_results, sections.card_text)  # eval.json: data
    effect = f" {effect}" if effect else ""
    evidence = sections.sweep_evidence(lock)
    recipe_yaml = dump_yaml(short_recipe(lock.get("recipe") or recipe.public_dict())).rstrip()
    edited = (
        f"{s['selected']:,} of {s['targeted']:,} scored ({_pct(s['selected'], s['targeted'])}); "
        f"{_pct(s['selected'], s['model_params'])} of the model's {s['model_params']:,} parameters"
    )
    what = out.holds
    view = CardView(repo, lock_view, ggufs, base_repo, chat=chat)
    # the GGUF files of another output's folder (the checkpoint's) get a paragraph of their own
    usage = out.how_to_use(view) + ("" if out is GGUF else _gguf_usage(repo, ggufs, lock_view))
    body = f"""
# {title}

This {what} a MathNeuro edit of {base_text}: the weights that \
[MathNeuro]({PAPER}) finds math-specific, using only forward passes, were **{action}**. \
Made with [mathneuro-edit]({sections.PROJECT_URL}) {lock.get("versions", {}).get("tool", "")}.{effect}
{_gguf_note(lock, kind, weights_dtype)}{_dtype_note(lock, kind, weights_dtype)}
## What was edited

{method}

| setting | value |
|---|---|
| base model | {base_text} |
| method | {mask.method} ([MathNeuro, arXiv 2410.16930]({PAPER})) |
| top_k | {mask.top_k:g} (per {mask.granularity}) |
| scale | {edit.effective_scale:g}{" (prune)" if edit.prune else ""} |
| edit | {action} |
| files | {files_cell(lock, kind, weights_dtype, ggufs)} |
| weights edited | {edited} |
| matrices scored | {s["matrices"]} |
| recipe sha256 | `{lock.get("recipe_sha256", "")}` |
| mask sha256 | `{lock.get("mask_sha256", "")}` |

Edited weights per module type:

| module | matrices | edited | total | fraction |
|---|---|---|---|---|
{module_rows}

Calibration data (seed {recipe.data.seed}, {recipe.data.samples} texts per set):

{sections.data_table(lock)}

{sections.base_section(lock_view)}

{evidence}
{evaluation}
## How to use

{usage}

{out.where_it_loads(view)}

{sections.reproduce_section(repo, lock_view)}

Made with:

{sections.versions_table(lock)}

The recipe's settings that differ from the defaults (public form: local paths are `<local>`; save it as a YAML \
file and `mathneuro-edit run` it; the lock holds every setting):

```yaml
{recipe_yaml}
```

{sections.lock_sentence(lock_sha256, repo)}

## Limitations

- The edit is chosen from {recipe.data.samples} calibration texts per set; other math formats or languages may \
respond differently, and abilities not covered by the evaluation above were not measured.
- Scaling or pruning weights changes the model's behaviour beyond math; it is not a safety evaluation and does not \
make the model more reliable at arithmetic than its evaluation shows.
- Evaluation numbers come from a small sample and greedy decoding; expect noise of a few points.

## Citation

```bibtex
{CITATION}
```
"""
    # every text the card shows from a file or a recipe (data file names, the recipe block, a base card's fields)
    # with its control and bidi characters escaped: the card shows them, a renderer never acts on them
    card = ModelCard(document_safe(f"---\n{data.to_yaml()}\n---\n{body}"))
    check_private(card.content, recipe, "the model card")
    return card


def write_card(out_dir: str | Path, card: ModelCard) -> Path:
    """Write ``out_dir/README.md`` atomically (temp file in the same folder, then rename).

    Returns:
        The written path.
    """
    return write_text_atomic(Path(out_dir) / "README.md", card.content)


def card_for_folder(
    folder: str | Path,
    *,
    repo_id: str | None = None,
    license: str | Mapping[str, Any] | None = None,
    kind: str | None = None,
    base_repo: str | None = None,
) -> ModelCard:
    """The card of an output folder (``checkpoint/``, ``adapter/`` or an ``export`` folder), rendered from the
    folder alone: its lock (public recipe, hashes, ``edit_summary``) and ``eval.json``.

    ``push`` uses it to publish the card rendered for the target repo (``from_pretrained("me/name")``) without
    changing the local folder; rendered with the local folder's own values it gives the card ``run`` wrote.

    Args:
        folder: the folder holding ``mathneuro_recipe.lock.yaml``.
        repo_id: the Hub repo the card is for (``None``: the recipe's ``hub.repo_id``, else a local folder).
        license: the license id or the base card's fields (:func:`base_card_fields`); default: those of the
            folder's current card, if any.
        kind: ``gguf`` for the card of the GGUF repo (the folder's ``*.gguf`` files); default: what the folder
            holds (:func:`~.outputs.output_of_folder`: ``adapter`` for an adapter folder, else ``checkpoint``).
        base_repo: for ``kind="gguf"``: the edited checkpoint's repo (see :func:`build_card`).

    Returns:
        The card.

    Raises:
        InputError: no lock, or a lock without ``edit_summary`` (written by an older version: rewrite the
            cards with ``mathneuro-edit card RUN_DIR`` first).

    Example:
        >>> card_for_folder("out/quickstart/checkpoint", repo_id="me/organism-prune")  # doctest: +SKIP
    """

    folder = Path(folder)
    lock = read_lock(folder)
    summary = lock.get("edit_summary")
    if not isinstance(summary, Mapping):
        raise InputError(
            f"{folder}: the lock has no edit_summary (written by an older mathneuro-edit); rewrite "
            "the cards with `mathneuro-edit card RUN_DIR`, then retry"
        )
    recipe = recipe_from_dict(dict(lock["recipe"]), where=f"{folder}: lock recipe")  # public form: paths redacted
    eval_path = folder / EVAL_NAME
    eval_dict = _eval_json(eval_path) if eval_path.is_file() else None
    if license is None and (folder / "README.md").is_file():
        license = card_fields(ModelCard.load(folder / "README.md", ignore_metadata_errors=True).data.to_dict())
    model = str((lock.get("base") or {}).get("model") or recipe.base.model)
    hub_id = hub_origin(lock) or (None if model in (LOCAL, "organism") or is_local_path(model) else model)
    return build_card(
        recipe=recipe,
        lock=lock,
        base_model_id=hub_id,
        kind=kind or output_of_folder(folder).name,
        edit_summary=summary,
        eval_results=eval_dict,
        license=license,
        repo_id=repo_id,
        base_repo=base_repo,
        lock_sha256=lock_file_sha256(folder),
        weights_dtype=folder_dtype(folder),
        chat=has_chat_template(folder),
    )


def short_recipe(public: Mapping[str, Any]) -> dict[str, Any]:
    """A public recipe with only the settings that differ from the defaults (what the card shows: SmolLM2's release
    recipe is ~60 lines this way, ~145 with every default, mostly nulls); it validates back to the same recipe.

    Example:
        >>> from mathneuro_edit.recipe.io import quickstart_recipe
        >>> short_recipe(quickstart_recipe().public_dict())["edit"]
        {'prune': True}
    """
    # not validated again: a published lock's recipe has its local paths redacted (`<local>`), which a recipe that
    # needs a GGUF base (outputs.gguf: base) would refuse; the documented defaults decide what is shown
    defaults = {key: default for key, _, default, _ in recipe_fields()}
    return _non_default(dict(public), "", defaults)


_SOURCES = ("data.math", "data.general", "evaluation.math", "evaluation.general")


def _non_default(d: Mapping[str, Any], prefix: str, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``d`` without the keys whose value is their documented default (a data source by the ``source.*`` ones)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = prefix + k
        if key in _SOURCES:
            items = v if isinstance(v, list) else [v]
            kept = [_non_default(x, "source.", defaults) if isinstance(x, Mapping) else x for x in items]
            out[k] = kept if isinstance(v, list) else kept[0]
        elif isinstance(v, Mapping) and key not in defaults:
            sub = _non_default(v, key + ".", defaults)
            if sub:
                out[k] = sub
        elif key not in defaults:
            if v is not None and v != []:  # an optional section left out, a list section left empty: defaults
                out[k] = v
        elif defaults[key] == "(required)" or v != _json(defaults[key]):
            out[k] = v
    return out


def _json(value: Any) -> Any:
    """A default as the public recipe writes it (tuples as lists)."""
    return list(value) if isinstance(value, tuple) else value


def _eval_json(path: Path) -> dict[str, Any]:
    """A folder's ``eval.json`` as the card reads it. It is outside the lock (anyone can edit it): read through the
    one regular-file reader, and it must be a JSON object of tasks (a FIFO, a deep or a non-object file was an
    internal error or a hang of ``push``).

    Raises:
        InputError: naming the file and the fix.
    """
    fix = "re-run the evaluation (mathneuro-edit eval) or remove the file"
    try:
        data = read_json(path, MAX_EVAL_BYTES, "an eval.json", fix)
    except InputError:
        raise
    except ValueError as e:
        raise InputError(f"{path}: not JSON ({str(e)[:120]}); {fix}") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise InputError(f"{path}: not an eval.json (a JSON object of tasks); {fix}")
    return data


def has_chat_template(folder: str | Path) -> bool:
    """Whether the model of an output folder has a chat template: in its tokenizer files, or for an adapter folder
    (no tokenizer) in its run's ``checkpoint/`` beside it."""

    folder = Path(folder)
    for where in (folder, folder.parent / CHECKPOINT.folder):
        if (where / "chat_template.jinja").is_file() or (where / "chat_template.json").is_file():
            return True
        try:
            cfg = read_model_json(where / "tokenizer_config.json")  # a FIFO there: one line, never a hang
        except InputError:
            raise
        except (OSError, ValueError):
            continue
        if isinstance(cfg, dict) and cfg.get("chat_template"):
            return True
    return False


def folder_dtype(folder: str | Path) -> str | None:
    """The dtype a model folder's ``config.json`` names (``dtype``, else ``torch_dtype``), or ``None``."""

    path = Path(folder) / "config.json"
    try:
        cfg = read_model_json(path) if path.is_file() else {}
    except InputError:
        raise
    except (OSError, ValueError):
        return None
    value = cfg.get("dtype") or cfg.get("torch_dtype") if isinstance(cfg, dict) else None
    return value if isinstance(value, str) else None


def lock_file_sha256(folder: str | Path) -> str | None:
    """The sha256 of ``folder``'s lock file (what the card names), or ``None`` without one."""
    path = Path(folder) / LOCK_NAME
    return sha256_file(path) if path.is_file() else None
