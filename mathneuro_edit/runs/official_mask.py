"""``mask.reference: official`` in a recipe: the released MathNeuro script's mask, made by ``run`` only.

The official selection sums per-sample products in the model's dtype (:mod:`~mathneuro_edit.engine.official`), so
it cannot be derived from saved float32 statistics: ``run`` builds it with its own batch-1 pass over the recipe's
texts (the default statistics are still calibrated and written, for the lock), and the commands that derive masks
from statistics (``mask``, ``consistency``, ``sweep``) refuse such a recipe with :func:`refuse_official` instead
of silently making the default mask.
"""

from __future__ import annotations

from typing import Any

from ..data.sources import load_texts
from ..engine.mask import Mask
from ..engine.official import find_math_params_official
from ..errors import InputError
from ..recipe.schema import Recipe

__all__ = ["official_recipe_mask", "refuse_official"]


def refuse_official(recipe: Recipe, command: str) -> None:
    """Raise when the recipe asks for the official selection and ``command`` can only make the default one."""
    if recipe.mask.reference == "official":
        raise InputError(
            f"mask.reference: official: `{command}` derives masks from saved float32 statistics, which "
            "cannot reproduce the released script's per-sample sums in the model's dtype; make this mask "
            "with `mathneuro-edit run`, or set mask.reference: null"
        )


def official_recipe_mask(
    recipe: Recipe, model: Any, tokenizer: Any, *, progress: bool = True, stages: Any = None
) -> Mask:
    """The recipe's mask by the released script's rule: the recipe's texts (same sampling), ``top_k``, method, seed,
    targets and ``max_length``; one text per forward in sampled order (``calibration.batch_size`` does not apply).

    Args:
        stages: a :class:`~mathneuro_edit.util.console.Stages` to note on (a model not in bfloat16), or ``None``.
    """
    d, c, t, m = recipe.data, recipe.calibration, recipe.targets, recipe.mask
    dtype = str(next(p for p in model.parameters() if p.dtype.is_floating_point).dtype).removeprefix("torch.")
    if stages is not None and dtype != "bfloat16":
        stages.note(f"the model is in {dtype}; the released script loads bfloat16 (base.dtype: bfloat16 to match it)")
    math = load_texts(d.math, d.samples, d.seed).texts
    generals = [load_texts(source, d.samples, d.seed).texts for source in d.general]
    return find_math_params_official(
        model,
        tokenizer,
        math,
        generals,
        top_k=m.top_k,
        method=m.method,
        seed=m.seed,
        max_length=c.max_length,
        include=t.include or None,
        exclude=t.exclude or None,
        progress=progress,
    )
