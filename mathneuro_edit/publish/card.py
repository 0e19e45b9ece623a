"""The model card (README.md) of an edited model: its text is one template, ``card_template.md`` (top to bottom,
rendered by huggingface_hub's ``ModelCard.from_template``); this module gives it the metadata and the data.

One kind per Hub repo, each a registered output (:mod:`mathneuro_edit.outputs`); its metadata is :func:`_metadata`'s
(the evaluation as ``model-index``: :mod:`.model_index`), the data drawn from the lock alone
:mod:`.card_sections`', the paragraphs on a GGUF base and a cast dtype :mod:`.card_weights`'. One card per folder,
rendered from the folder itself (:func:`card_for_folder`), so ``push`` renders it again for the target repo. No
placeholder, no timestamp, no local path: :func:`build_card` refuses a card that would reveal one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import jinja2
from huggingface_hub import ModelCard, ModelCardData
from huggingface_hub.utils import HFValidationError, validate_repo_id

from .._version import __version__
from ..engine.edit_map import show_setting
from ..errors import InputError
from ..evaluation.report import NOT_A_TEST, effect_sentence, eval_markdown
from ..layout import EVAL_NAME, LOCK_NAME
from ..outputs.common import card_fields, folder_dtype, hub_origin
from ..outputs.gguf import llama_cpp_facts, read_gguf_eval, read_survival
from ..outputs.registry import OUTPUTS, CardView, Output, output, output_dirs, output_of_folder, own_files, repo_for
from ..recipe.io import recipe_fields, recipe_from_dict
from ..recipe.safe_yaml import dump_yaml
from ..recipe.schema import Recipe
from ..util.config_sizes import model_json_object
from ..util.console import document_safe
from ..util.files import write_text_atomic
from ..util.hashing import sha256_file
from ..util.paths import LOCAL, is_local_path
from ..util.reading import read_json
from . import card_sections as sections
from .card_weights import cast_dtype, gguf_base, load_dtype
from .lock import check_private, read_lock
from .model_index import eval_results_metadata

# an eval.json holds a few tasks' metrics and completions: a 2,000-problem evaluation's is a few MB
MAX_EVAL_BYTES = 256 * 1024 * 1024

__all__ = [
    "CardSource",
    "build_card",
    "write_card",
    "card_for_folder",
    "summarize_edit",
    "lock_file_sha256",
    "has_chat_template",
    "short_recipe",
]
TEMPLATE = Path(__file__).with_name("card_template.md")  # the card's text, top to bottom (package data)


def summarize_edit(counts: Mapping[str, tuple[int, int]], *, model_params: int) -> dict[str, Any]:
    """Group a mask's ``counts()`` by module type, for the card's "what was edited" table.

    The module type is the parameter name's last part without ``.weight``/``.bias``
    (``model.layers.0.self_attn.q_proj.weight`` -> ``q_proj``; fused experts keep ``gate_up_proj``); ``counts`` is
    :meth:`Mask.counts`, ``model_params`` the whole model's parameter count (for "fraction of the model").

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


@dataclass(frozen=True)
class CardSource:
    """What a card is built from: the run (its recipe, lock, edit summary and evaluation) and what the output's
    folder says of itself.

    Attributes:
        eval_results: eval.json's dict (:meth:`~mathneuro_edit.evaluation.results.EvalResults.to_dict`); any part
            may be missing.
        license: license id for the metadata, or the base card's fields (:func:`~.base_card.base_card_fields`).
        lock_sha256: the sha256 of the folder's lock file (the card names the file and this hash instead of
            embedding the lock).
        weights_dtype, chat: :func:`folder_dtype`, :func:`has_chat_template` of the folder.
    """

    recipe: Recipe
    lock: Mapping[str, Any]
    edit_summary: Mapping[str, Any]
    eval_results: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None
    license: str | Mapping[str, Any] | None = None
    lock_sha256: str | None = None
    weights_dtype: str | None = None
    chat: bool = False
    gguf_survival: Mapping[str, Any] | None = None  # the folder's gguf_survival.json (outputs/gguf.py)
    gguf_eval: Mapping[str, Any] | None = None  # the folder's gguf_eval.json: each GGUF file in llama.cpp


def build_card(
    source: CardSource,
    kind: str,
    *,
    base_model_id: str | None,
    repo_id: str | None = None,
    base_repo: str | None = None,
) -> ModelCard:
    """Build the model card of the registered output ``kind`` (:mod:`mathneuro_edit.outputs`); save it with
    :func:`write_card`.

    Args:
        base_model_id: the base's Hub id, or ``None`` for a local base (then no ``base_model`` metadata).
        repo_id: the Hub repo the card is published in (``push`` passes it); default the recipe's
            ``hub.repo_id``; ``None`` for a card in a local folder (its snippets then load ``"."``).
        base_repo: for an output made from another (:attr:`~mathneuro_edit.outputs.registry.Output.derived_from`:
            the GGUF), that output's Hub repo (the GGUF's ``base_model``: the edited checkpoint's; default the
            original base).

    Raises:
        InputError: ``kind`` unknown, or ``base_model_id`` not a Hub repo id.
        MathNeuroEditError: the card would contain a local path of the recipe.
    """
    out = output(kind)  # InputError for a kind that is not registered
    _check_base_model_id(base_model_id)
    recipe, lock = source.recipe, source.lock
    # the model this repo's files are made from, for the Hub's model tree: the base (an adapter of a GGUF base
    # names the Hub model that GGUF is a conversion of, and its card says which weights its deltas are to), or
    # for the GGUF repo the edited checkpoint's repo it quantizes
    relation_base = (base_repo or base_model_id) if out.derived_from else base_model_id
    # a card rendered before the push names the repo its output is pushed to (one repo per output)
    repo = repo_id or (repo_for(recipe.hub.repo_id, out.name) if recipe.hub else None)
    title = (
        repo.split("/")[-1]
        if repo
        else f"{_base_name(lock, base_model_id, recipe)} (MathNeuro edit: {_action(recipe)})"
    )
    results = (
        eval_results_metadata(source.eval_results, recipe, lock.get("sweep"), source.chat) if out.evaluated else []
    )
    data = _metadata(source, out, relation_base, results, title)
    lock_view = {**lock, "edit_summary": lock.get("edit_summary") or dict(source.edit_summary)}
    if base_model_id is not None and base_model_id != hub_origin(lock)[0]:  # the caller's Hub id names the base
        lock_view["base"] = {**(lock.get("base") or {}), "model": base_model_id}  # (metadata and snippets agree)
    view = CardView(
        repo,
        lock_view,
        own_files(out, lock),
        base_repo,
        chat=source.chat,
        prompt=sections.figures_prompt(lock),
        load_dtype=load_dtype(lock, source.weights_dtype),
        gguf_survival=source.gguf_survival,
    )
    page = ModelCard.from_template(data, template_path=str(TEMPLATE), **_page(source, out, view, title))
    # every text the card shows from a file or a recipe (data file names, the recipe block, a base card's fields)
    # with its control and bidi characters escaped: the card shows them, a renderer never acts on them
    card = ModelCard(document_safe(page.content))
    check_private(card.content, recipe, "the model card")
    return card


def _check_base_model_id(base_model_id: str | None) -> None:
    """Refuse a ``base_model_id`` that is not a Hub repo id (a local base has none: ``None``)."""
    if base_model_id is None:
        return
    try:
        validate_repo_id(base_model_id)
    except HFValidationError:
        raise InputError(f"base_model_id: {base_model_id!r} is not a Hub repo id; pass None for a local base") from None
    if is_local_path(base_model_id):
        raise InputError(f"base_model_id: {base_model_id!r} is a local path; pass None for a local base")


def _action(recipe: Recipe) -> str:
    """What was done to the selected weights, for the title and the first paragraph."""
    if recipe.edit.prune:
        return "pruned (set to 0)"
    scale = recipe.edit.effective_scale
    # a scale per layer band and component: each matrix takes its most specific key (docs/recipes.md)
    return f"scaled by {show_setting(scale)}" + (" (per layer band and component)" if isinstance(scale, dict) else "")


def _base_name(lock: Mapping[str, Any], base_model_id: str | None, recipe: Recipe) -> str:
    """The base's short name in a local card's title: its Hub origin's, a GGUF base's file's, or "local model"."""
    origin, gguf = hub_origin(lock)[0], (lock.get("base") or {}).get("gguf")
    if origin:
        return origin.split("/")[-1]
    if lock.get("recipe", {}).get("base", {}).get("model") == LOCAL:
        return str(gguf.get("file", "local GGUF")).removesuffix(".gguf") if gguf else "local model"
    return (base_model_id or recipe.base.model).split("/")[-1]


def _metadata(
    source: CardSource, out: Output, relation_base: str | None, results: list[Any], title: str
) -> ModelCardData:
    """The card's metadata: the base and its relation, library, tags, datasets, the base card's fields (a GGUF
    base's own languages when it has none) and the evaluation as ``model-index`` results."""
    recipe, license, lock = source.recipe, source.license, source.lock
    fields = card_fields({"license": license} if isinstance(license, str) else dict(license or {}))
    datasets = sorted(
        {s.hub_id or s.hub_dataset for s in (recipe.data.math, *recipe.data.general) if s.hub_id or s.hub_dataset}
        | set(fields.pop("datasets", []))
    )
    tags = ["mathneuro", "mathneuro-edit", "model-editing", "math"] + (["pruning"] if recipe.edit.prune else [])
    tags += list(out.tags)  # each repo's own: `gguf` only on the repo that holds GGUF files
    extra: dict[str, Any] = {}
    if relation_base is not None:
        extra["base_model_relation"] = out.relation
        tags += [f"base_model:{out.relation}:{relation_base}"]  # the tag the Hub derives, written as PEFT does
    own_languages = (((lock.get("base") or {}).get("gguf") or {}).get("general") or {}).get("languages")
    if "language" not in fields and isinstance(own_languages, list) and own_languages:
        fields["language"] = [str(x) for x in own_languages]  # the GGUF base's own, as its GGUF output carries
    return ModelCardData(
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


def _run_repo(repo: str | None, out: Output) -> str | None:
    """The run's repo (``hub.repo_id``) from the repo of ``out``'s card, when it is named the registry's way."""
    return repo.removesuffix(out.repo_suffix) if repo and repo.endswith(out.repo_suffix) else None


def _page(source: CardSource, out: Output, view: CardView, title: str) -> dict[str, Any]:
    """What the card's template (``card_template.md``) shows, as data: every text taken from a file or the lock
    escaped (:func:`~.card_sections.card_text`); per output, a snippet its entry writes or the data of the
    template's own part for it (the GGUF's files, survival and llama.cpp figures)."""
    recipe, lock, s = source.recipe, source.lock, source.edit_summary
    share = partial(sections.pct, digits=".3g", none="n/a")  # the share of the weights edited: 3 digits
    # the files of the other outputs written into its folder (the checkpoint's card: the GGUF files beside it)
    beside = [o for o in OUTPUTS.values() if o is not out and o.folder == out.folder and o.beside is not None]
    sweep = sections.sweep_facts(lock, source.chat)
    overlap = (sweep or {}).get("overlap") or {}
    reused = isinstance(overlap.get("selection"), int) and overlap["selection"] > 0
    evaluation = None
    # files made from another output (the GGUF files) compute other numbers than it: their own, never its
    derived = out.derived_from is not None
    names = {f: out.name_in_repo(view.lock, f) if view.repo else f for f in view.files}
    run_repo = _run_repo(view.repo, out)  # the run's repo, for "Where it loads"
    if source.eval_results and not derived:
        untested = tuple(source.eval_results) if reused else ()
        evaluation = eval_markdown(source.eval_results, sections.card_text, untested=untested)
    return {
        "title": title,
        "holds": out.holds,
        "project_url": sections.PROJECT_URL,
        "action": _action(recipe),
        "tool_version": lock.get("versions", {}).get("tool", ""),
        "version": __version__,
        "effect": effect_sentence(source.eval_results, sections.card_text),  # eval.json's, without a sweep
        "llama_cpp": llama_cpp_facts(dict(view.files), source.gguf_eval, names) if derived else None,
        "derived": derived,
        "derived_from": view.base_repo,
        "gguf_base": gguf_base(lock, out, source.weights_dtype),
        "cast_to": cast_dtype(lock, out, source.weights_dtype),
        "method": recipe.mask.method,
        "top_share": None if isinstance(recipe.mask.top_k, dict) else f"{recipe.mask.top_k * 100:g}%",
        "top_k": show_setting(recipe.mask.top_k),
        "granularity": recipe.mask.granularity,
        "scale": show_setting(recipe.edit.effective_scale),
        "prune": recipe.edit.prune,
        "files_cell": out.files_cell(source.weights_dtype, view.files),
        "edited": {
            "selected": f"{s['selected']:,}",
            "targeted": f"{s['targeted']:,}",
            "of_scored": share(s["selected"], s["targeted"]),
            "of_model": share(s["selected"], s["model_params"]),
            "model_params": f"{s['model_params']:,}",
            "matrices": s["matrices"],
        },
        "recipe_sha256": lock.get("recipe_sha256", ""),
        "mask_sha256": lock.get("mask_sha256", ""),
        "modules": [
            {
                "name": k,
                "matrices": r["matrices"],
                "selected": f"{r['selected']:,}",
                "total": f"{r['total']:,}",
                "fraction": share(r["selected"], r["total"]),
            }
            for k, r in s["by_module"].items()
        ],
        "seed": recipe.data.seed,
        "samples": recipe.data.samples,
        "data": sections.data_rows(lock),
        "base": sections.base_facts(view.lock),
        "evaluation": evaluation,
        "sweep": sweep,
        "reused": reused,
        "overlap": overlap,
        "not_a_test": NOT_A_TEST,
        "kind": out.name,
        "usage": out.usage(out, view),
        "beside": [b for o in beside if (b := o.beside(view.repo, own_files(o, view.lock), view.lock))],  # type: ignore[misc]
        "run_repo": run_repo,
        "where_it_loads": jinja2.Template(out.loaders).render(run_repo=run_repo),
        "repo": view.repo,
        "reproduce_args": sections.reproduce_args(view.repo, view.lock),
        "local_files": sections.local_files(view.lock),
        "versions": sections.version_rows(lock),
        "recipe_yaml": dump_yaml(short_recipe(lock.get("recipe") or recipe.public_dict())).rstrip(),
        "lock_sha256": source.lock_sha256,
    }


def write_card(out_dir: str | Path, card: ModelCard) -> Path:
    """Write ``out_dir/README.md`` atomically (temp file in the same folder, then rename); returns its path."""
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
    folder alone: its lock (public recipe, hashes, ``edit_summary``) and ``eval.json``; with the folder's own values,
    the card ``run`` wrote.

    Args:
        repo_id: the Hub repo the card is for (``None``: the recipe's ``hub.repo_id``, else a local folder).
        license: the license id or the base card's fields (:func:`base_card_fields`); default: those of the
            folder's current card, if any.
        kind: ``gguf`` for the card of the GGUF repo (the folder's ``*.gguf`` files); default: what the folder
            holds (:func:`~.outputs.output_of_folder`: ``adapter`` for an adapter folder, else ``checkpoint``).
        base_repo: for ``kind="gguf"``: the edited checkpoint's repo (see :func:`build_card`).

    Raises:
        InputError: no lock, or a lock without ``edit_summary`` (written by an older version).
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
    hub_id = hub_origin(lock)[0] or (None if model in (LOCAL, "organism") or is_local_path(model) else model)
    source = CardSource(
        recipe,
        lock,
        summary,
        eval_dict,
        license,
        lock_sha256=lock_file_sha256(folder),
        weights_dtype=folder_dtype(folder),
        chat=has_chat_template(folder),
        gguf_survival=read_survival(folder),
        gguf_eval=read_gguf_eval(folder),
    )
    kind = kind or output_of_folder(folder).name
    return build_card(source, kind, base_model_id=hub_id, repo_id=repo_id, base_repo=base_repo)


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
        elif (d := defaults[key]) == "(required)" or v != (list(d) if isinstance(d, tuple) else d):  # tuples: lists
            out[k] = v
    return out


def _eval_json(path: Path) -> dict[str, Any]:
    """A folder's ``eval.json`` as the card reads it. It is outside the lock (anyone can edit it): read through the
    one regular-file reader, and it must be a JSON object of tasks (a FIFO, a deep or a non-object file was an
    internal error or a hang of ``push``): an :class:`InputError` names the file and the fix.
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
    (no tokenizer) in its run's other output folders beside it (``checkpoint/``)."""
    folder = Path(folder)
    for where in (folder, *(folder.parent / d for d in output_dirs())):
        if (where / "chat_template.jinja").is_file() or (where / "chat_template.json").is_file():
            return True
        cfg = model_json_object(where / "tokenizer_config.json")  # a FIFO there: one line, never a hang
        if cfg is not None and cfg.get("chat_template"):
            return True
    return False


def lock_file_sha256(folder: str | Path) -> str | None:
    """The sha256 of ``folder``'s lock file (what the card names), or ``None`` without one."""
    path = Path(folder) / LOCK_NAME
    return sha256_file(path) if path.is_file() else None
