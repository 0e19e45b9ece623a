"""The model card (README.md) of an edited model, built with huggingface_hub's ``ModelCard``.

Metadata: ``base_model`` (Hub ids only), ``base_model_relation`` (``finetune`` for a checkpoint, ``adapter`` for a
PEFT adapter), ``library_name`` (``transformers`` / ``peft``), ``tags``, ``datasets`` (Hub ids of the calibration
data), ``license``, ``pipeline_tag: text-generation``. Body: what was edited, the before/after evaluation, how to
load it, how to reproduce it (with the full lock file), the paper's citation, and limitations.

Privacy: a local base path never appears in the card (its lock is the public form, see :mod:`mathneuro_edit.lock`);
:func:`build_card` checks the finished text and refuses to build a card that would reveal one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from huggingface_hub import ModelCard, ModelCardData, try_to_load_from_cache
from huggingface_hub.utils import HFValidationError, validate_repo_id

from .errors import InputError
from .lock import check_private, write_text_atomic
from .recipe import LOCAL, ORGANISM, Recipe, is_local_path

__all__ = ["build_card", "write_card", "summarize_edit", "license_from_base", "CITATION"]

CITATION = """@article{christ2024mathneurosurgery,
  title   = {Math Neurosurgery: Isolating Language Models' Math Reasoning Abilities Using Only Forward Passes},
  author  = {Christ, Bryan R. and Gottesman, Zack and Kropko, Jonathan and Hartvigsen, Thomas},
  journal = {arXiv preprint arXiv:2410.16930},
  year    = {2024},
  url     = {https://arxiv.org/abs/2410.16930}
}"""

_METRICS = (("math_accuracy", "math accuracy", True), ("general_loss", "general loss", False),
            ("general_kl", "general KL to base", False))


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
    return {"selected": sum(r["selected"] for r in by_module.values()),
            "targeted": sum(r["total"] for r in by_module.values()), "matrices": len(counts),
            "model_params": int(model_params), "by_module": dict(sorted(by_module.items()))}


def license_from_base(base: str | Path, revision: str | None = None) -> str | None:
    """The ``license`` of a base model's card, read locally (a model folder, or the Hub cache): no network.

    Returns:
        The license id (e.g. ``"llama3.2"``), or ``None`` when there is no card or no license.

    Example:
        >>> license_from_base("/nonexistent/folder") is None
        True
    """
    folder = Path(base).expanduser()
    readme: Any = folder / "README.md" if folder.is_dir() else None
    if readme is None and not is_local_path(str(base)):
        try:
            readme = try_to_load_from_cache(repo_id=str(base), filename="README.md", revision=revision)
        except HFValidationError:
            return None
    if not isinstance(readme, (str, Path)) or not Path(readme).is_file():
        return None
    found = ModelCard.load(readme, ignore_metadata_errors=True).data.license
    return found if isinstance(found, str) else None


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return "" if value is None else str(value)


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.3g}%" if whole else "n/a"


def _eval_table(eval_results: Mapping[str, Mapping[str, Mapping[str, float]]]) -> str:
    rows = ["| task | metric | base | edited | change |", "|---|---|---|---|---|"]
    for task, result in eval_results.items():
        base, edited = result.get("base") or {}, result.get("edited") or {}
        for key, label, higher_better in _METRICS:
            if key not in base and key not in edited:
                continue
            b, e = base.get(key), edited.get(key)
            change = ""
            if isinstance(b, (int, float)) and isinstance(e, (int, float)):
                arrow = "" if e == b else (" (better)" if (e > b) == higher_better else " (worse)")
                change = f"{e - b:+.4g}{arrow}"
            rows.append(f"| {task} | {label} | {_fmt(b)} | {_fmt(e)} | {change} |")
        rows += _lm_eval_rows(task, base, edited)
    return "\n".join(rows)


def _lm_eval_rows(task: str, base: Mapping[str, Any], edited: Mapping[str, Any]) -> list[str]:
    """lm-eval metrics (``"{lm task}/{metric,filter}"``), each with its n; stderr and the counts themselves skipped."""
    rows = []
    for key in sorted((set(base) | set(edited))):
        lm_task, _, metric = key.partition("/")
        if not metric or metric == "n" or "_stderr" in metric:
            continue
        n = base.get(f"{lm_task}/n", edited.get(f"{lm_task}/n"))
        b, e = base.get(key), edited.get(key)
        # lm-eval's metrics do not say which direction is better: the change is shown without a verdict
        change = f"{e - b:+.4g}" if isinstance(b, (int, float)) and isinstance(e, (int, float)) else ""
        rows.append(f"| {task}: {lm_task} | {metric} (n={_fmt(n)}) | {_fmt(b)} | {_fmt(e)} | {change} |")
    return rows


def _usage(kind: str, repo: str, base: str | None) -> str:
    """Loading snippet; ``base`` is the base's Hub id, ``"organism"``, or ``None`` (a local base)."""
    if kind != "adapter":
        return f"""```python
from transformers import AutoModelForCausalLM, AutoTokenizer

model = AutoModelForCausalLM.from_pretrained("{repo}")
tokenizer = AutoTokenizer.from_pretrained("{repo}")
```"""
    imports, base_expr = "", '"PATH/TO/THE/BASE/MODEL"'
    if base == ORGANISM:
        imports, base_expr = "from mathneuro_edit.organism import organism_path\n", "organism_path()"
    elif base is not None:
        base_expr = f'"{base}"'
    return f"""```python
{imports}from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

base = AutoModelForCausalLM.from_pretrained({base_expr})
model = PeftModel.from_pretrained(base, "{repo}")
model = model.merge_and_unload()  # optional: a plain transformers model with the edit applied
tokenizer = AutoTokenizer.from_pretrained({base_expr})
```"""


def build_card(
    *,
    recipe: Recipe,
    lock: Mapping[str, Any],
    base_model_id: str | None,
    kind: Literal["checkpoint", "adapter"],
    edit_summary: Mapping[str, Any],
    eval_results: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None,
    license: str | None = None,
) -> ModelCard:
    """Build the model card of an edited model.

    Args:
        recipe: the recipe that ran.
        lock: the run's lock (:func:`mathneuro_edit.lock.build_lock`), embedded in full.
        base_model_id: the base's Hub id, or ``None`` for a local base (then no ``base_model`` metadata).
        kind: ``"checkpoint"`` (full model) or ``"adapter"`` (PEFT).
        edit_summary: :func:`summarize_edit` output.
        eval_results: ``{task: {"base": {"math_accuracy", "general_loss", "general_kl"}, "edited": {...}}}``;
            any key may be missing.
        license: license id for the metadata (see :func:`license_from_base`).

    Returns:
        The card; save it with :func:`write_card`.

    Raises:
        InputError: ``kind`` unknown, or ``base_model_id`` not a Hub repo id.
        MathNeuroEditError: the card would contain a local path of the recipe.

    Example:
        >>> card = build_card(recipe=r, lock=lock, base_model_id=None, kind="checkpoint",
        ...                   edit_summary=summarize_edit(mask.counts(), model_params=n))  # doctest: +SKIP
    """
    if kind not in ("checkpoint", "adapter"):
        raise InputError(f"kind: must be 'checkpoint' or 'adapter', got {kind!r}")
    if base_model_id is not None:
        try:
            validate_repo_id(base_model_id)
        except HFValidationError:
            raise InputError(f"base_model_id: {base_model_id!r} is not a Hub repo id; "
                             "pass None for a local base") from None
        if is_local_path(base_model_id):
            raise InputError(f"base_model_id: {base_model_id!r} is a local path; pass None for a local base")
    datasets = sorted({s.hub_id for s in (recipe.data.math, *recipe.data.general) if s.hub_id})
    tags = ["mathneuro", "mathneuro-edit", "model-editing", "math"] + (["pruning"] if recipe.edit.prune else [])
    extra: dict[str, Any] = {}
    if base_model_id is not None:
        extra["base_model_relation"] = "adapter" if kind == "adapter" else "finetune"
    data = ModelCardData(
        base_model=base_model_id, library_name="peft" if kind == "adapter" else "transformers", tags=tags,
        datasets=datasets or None, license=license, pipeline_tag="text-generation", **extra,
    )
    repo = recipe.hub.repo_id if recipe.hub else "PATH/TO/THIS/MODEL"
    local_base = lock.get("recipe", {}).get("base", {}).get("model") == LOCAL
    base_text = f"[{base_model_id}](https://huggingface.co/{base_model_id})" if base_model_id else (
        "the model organism shipped with mathneuro-edit" if recipe.base.model == ORGANISM else
        "a local model (not published; its safetensors sha256 are in the lock file below)")
    edit, mask, s = recipe.edit, recipe.mask, edit_summary
    action = "pruned (set to 0)" if edit.prune else f"scaled by {edit.effective_scale:g}"
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
        for k, r in s["by_module"].items())
    n, k = recipe.data.samples, len(recipe.data.general)
    data_rows = "\n".join(
        f"| {name} | `{src.public_path()}` | {src.split or ''} | {count} |"
        for name, src, count in [("math", recipe.data.math, n), *[
            ("general", g, n // k + (1 if i < n % k else 0)) for i, g in enumerate(recipe.data.general)]])
    evaluation = (f"## Evaluation\n\nBase vs edited model (math accuracy: higher is better; loss and KL: lower "
                  f"is better).\n\n{_eval_table(eval_results)}\n" if eval_results else
                  "## Evaluation\n\nNo evaluation was run for this model.\n")
    lock_yaml = yaml.safe_dump(dict(lock), sort_keys=False, allow_unicode=True).rstrip()
    edited = (f"{s['selected']:,} of {s['targeted']:,} scored ({_pct(s['selected'], s['targeted'])}); "
              f"{_pct(s['selected'], s['model_params'])} of the model's {s['model_params']:,} parameters")
    base_name = "local model" if local_base else (base_model_id or recipe.base.model).split("/")[-1]
    title = repo.split("/")[-1] if recipe.hub else f"{base_name} (MathNeuro edit: {action})"
    body = f"""
# {title}

This {"PEFT adapter holds" if kind == "adapter" else "model is"} a MathNeuro edit of {base_text}: the weights that \
[MathNeuro](https://arxiv.org/abs/2410.16930) finds math-specific, using only forward passes, were **{action}**. \
Made with [mathneuro-edit](https://pypi.org/project/mathneuro-edit/).

## What was edited

{method}

| setting | value |
|---|---|
| method | {mask.method} |
| top_k | {mask.top_k:g} (per {mask.granularity}) |
| edit | {action} |
| weights edited | {edited} |
| matrices scored | {s["matrices"]} |
| recipe sha256 | `{lock.get("recipe_sha256", "")}` |

Edited weights per module type:

| module | matrices | edited | total | fraction |
|---|---|---|---|---|
{module_rows}

Calibration data (seed {recipe.data.seed}, {recipe.data.samples} texts per set):

| set | source | split | texts |
|---|---|---|---|
{data_rows}

{evaluation}
## How to use

{_usage(kind, repo, base_model_id or (ORGANISM if recipe.base.model == ORGANISM else None))}

## How to reproduce

```bash
pip install mathneuro-edit
mathneuro-edit reproduce {repo}{" --base PATH/TO/THE/BASE/MODEL" if local_base else ""}
```

`reproduce` re-runs the recipe below and checks every hash. The lock file (`mathneuro_recipe.lock.yaml`):

```yaml
{lock_yaml}
```

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
    card = ModelCard(f"---\n{data.to_yaml()}\n---\n{body}")
    check_private(card.content, recipe, "the model card")
    return card


def write_card(out_dir: str | Path, card: ModelCard) -> Path:
    """Write ``out_dir/README.md`` atomically (temp file in the same folder, then rename).

    Returns:
        The written path.
    """
    return write_text_atomic(Path(out_dir) / "README.md", card.content)
