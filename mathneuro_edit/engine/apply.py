"""Applying a mask: scale (or prune) the selected weights.

The single definition of an edited value lives here (:func:`edited_values`); the in-memory edit, the baked
checkpoint and the adapter all call it, which is what makes them agree bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import torch
from torch import nn

from ..errors import InputError
from .edit_map import Setting, check_map, unmatched_keys, value_for

if TYPE_CHECKING:
    from .mask import Mask

__all__ = ["check_scale", "scale_of", "edited_values", "scale_masked", "apply_mask", "ReversibleEdit", "round_weights_"]

_FLOAT32_MAX = float(torch.finfo(torch.float32).max)


def check_scale(scale: Setting, names: Iterable[str] | None = None) -> Setting:
    """Validate an edit's scale: a finite number >= 0 (0 prunes), or a map of them per layer band and component
    (:mod:`.edit_map`), returned as a plain dict; with ``names`` (the edited matrices), a key of the map that
    matches none of them is refused (a typo would leave those matrices at the default without a word).

    Example:
        >>> check_scale(1.1), check_scale({"default": 1.0, "mlp": 1.1})
        (1.1, {'default': 1.0, 'mlp': 1.1})
    """
    if isinstance(scale, Mapping):
        try:
            check_map(scale)
        except ValueError as e:
            raise InputError(f"scale: {e}") from None
        listed = list(names) if names is not None else []
        unused = unmatched_keys(scale, listed) if listed else []  # no names (or no matrix): nothing to match
        if unused:
            raise InputError(
                f"scale: {', '.join(repr(k) for k in unused)} matches none of the edited matrices "
                f"(named like {listed[0]!r}); check the key"
            )
        return {str(k): check_scale(v) for k, v in scale.items()}  # type: ignore[misc]
    try:
        value = float(scale)
    except (TypeError, ValueError):
        value = math.nan  # not a number: refused below as one
    if not math.isfinite(value) or value < 0:
        raise InputError(f"scale: must be a finite number >= 0, got {scale!r}; e.g. 1.1 to boost, 0 to prune")
    if value > _FLOAT32_MAX:  # the edit is computed in float32: there this scale is inf, every edited weight inf/NaN
        raise InputError(
            f"scale: {value:g} is inf in float32, the dtype the edit is computed in (largest "
            f"{_FLOAT32_MAX:.4g}); choose a smaller scale, e.g. 1.1"
        )
    return value


def scale_of(scale: Setting, name: str) -> float:
    """The scale of the matrix ``name``: the number itself, or its value under a map
    (:func:`~.edit_map.value_for`). Every output calls this, so they agree matrix by matrix.

    Example:
        >>> scale_of(1.1, "x.weight"), scale_of({"default": 1.0, "mlp": 1.2}, "model.layers.0.mlp.up_proj.weight")
        (1.1, 1.2)
    """
    return value_for(scale, name)


def edited_values(values: torch.Tensor, scale: float) -> torch.Tensor:
    """The edited version of selected weight values: ``dtype(float32(w) * float32(scale))``.

    Computed in float32 (float64 for float64 weights) and rounded once to the weight's dtype, so bf16/fp16
    weights are not rounded twice. ``scale == 0`` gives exact ``+0.0`` (not ``-0.0`` for negative weights), so
    a pruned weight has one bit pattern whichever way it is produced. Returns a new tensor of the same shape and
    dtype.

    Example:
        >>> edited_values(torch.tensor([1.0, -2.0], dtype=torch.bfloat16), 1.1)
        tensor([ 1.1016, -2.2031], dtype=torch.bfloat16)
    """
    if not values.dtype.is_floating_point:
        raise InputError(
            f"cannot scale weights of dtype {values.dtype}: only floating-point weights can be edited; "
            "dequantize the model first"
        )
    if scale == 0:
        return torch.zeros_like(values)
    compute = torch.float64 if values.dtype == torch.float64 else torch.float32
    factor = torch.tensor(scale, dtype=compute, device=values.device)
    out = (values.to(compute) * factor).to(values.dtype)
    if scale > 1 and not bool(torch.isfinite(out).all()) and bool(torch.isfinite(values).all()):
        biggest = float(values.abs().max())
        raise InputError(
            f"scale: {scale:g} makes weights overflow in {str(values.dtype).removeprefix('torch.')} "
            f"(|w| up to {biggest:.4g} x {scale:g} > {torch.finfo(values.dtype).max:.4g}); the edit would "
            "write inf: choose a smaller scale"
        )
    return out


def scale_masked(weight: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """A copy of ``weight`` whose entries under the bool ``mask`` are :func:`edited_values`; the rest unchanged.

    Example:
        >>> scale_masked(torch.ones(2, 2), torch.eye(2, dtype=torch.bool), 0.0)
        tensor([[0., 1.],
                [1., 0.]])
    """
    if mask.shape != weight.shape:
        raise InputError(f"mask of shape {tuple(mask.shape)} does not fit a weight of shape {tuple(weight.shape)}")
    out = weight.clone()
    out[mask] = edited_values(weight[mask], scale)
    return out


def _check_mask_fits(model: nn.Module, mask: Mask) -> dict[str, torch.Tensor]:
    params = dict(model.named_parameters(remove_duplicate=False))
    for name in mask:
        if name not in params:
            raise InputError(
                f"mask entry {name!r} is not a parameter of this model; the mask was computed for another "
                "model: recompute it with find_math_params on this one"
            )
        if tuple(params[name].shape) != mask.shape_of(name):
            raise InputError(
                f"mask entry {name!r} has shape {mask.shape_of(name)} but the model's parameter has "
                f"{tuple(params[name].shape)}; the mask was computed for another model: recompute it"
            )
    return params


@torch.no_grad()
def apply_mask(model: nn.Module, mask: Mask, scale: Setting) -> nn.Module:
    """Edit a model in place: ``W <- W * scale`` on the masked entries (scale 0 prunes; a map gives a scale per
    layer band and component, :mod:`.edit_map`); returns the model, for chaining."""
    scale = check_scale(scale, list(mask))
    params = _check_mask_fits(model, mask)
    for name in mask:
        p = params[name]
        m = mask[name].to(p.device)
        p.data[m] = edited_values(p.data[m], scale_of(scale, name))
    return model


class ReversibleEdit:
    """An edit that can be switched on and off on one model in memory (base vs edited without two copies).

    Keeps the original values of the masked entries only (O(masked entries) memory).

    With ``store_dtype`` (the release's ``outputs.dtype``, e.g. bfloat16, on a float32 model) both states are the
    weights as the release stores them: the edit writes ``store(edited_values(original))`` and the restore
    ``store(original)``, where ``store`` rounds to ``store_dtype`` and back. With :func:`round_weights_` applied
    to the rest of the model afterwards, base and edit are then exactly the two checkpoints a user loads (the
    base and the release, read into the model's dtype), which is what an evaluation of a release must measure.
    Create the edit before rounding the model: it keeps the unrounded originals the release computes from.
    ``store_dtype=None``: the model's own dtype, nothing rounded.

    Example:
        >>> with ReversibleEdit(model, mask, 0.0):  # doctest: +SKIP
        ...     edited_logits = model(ids).logits
        >>> base_logits = model(ids).logits  # restored  # doctest: +SKIP
    """

    def __init__(self, model: nn.Module, mask: Mask, scale: Setting, store_dtype: torch.dtype | None = None) -> None:
        self.scale = check_scale(scale, list(mask))
        params = _check_mask_fits(model, mask)
        # (param, flat indices of its masked entries, their original values, the matrix's scale)
        self._entries: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]] = []
        for name in mask:
            p = params[name]
            idx = mask[name].reshape(-1).nonzero().squeeze(1).to(p.device)  # (n_masked,)
            self._entries.append((p, idx, p.data.reshape(-1)[idx].clone(), scale_of(self.scale, name)))
        self.store_dtype = store_dtype
        self.applied = False

    def _stored(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` as the release stores them, read back into the model's dtype."""
        if self.store_dtype is None or self.store_dtype == values.dtype or not values.dtype.is_floating_point:
            return values
        return values.to(self.store_dtype).to(values.dtype)

    @torch.no_grad()
    def apply(self) -> None:
        """Write the edited values (idempotent)."""
        for p, idx, original, scale in self._entries:
            p.data.view(-1)[idx] = self._stored(edited_values(original, scale))
        self.applied = True

    @torch.no_grad()
    def restore(self) -> None:
        """Write the original values back (idempotent)."""
        for p, idx, original, _ in self._entries:
            p.data.view(-1)[idx] = self._stored(original)
        self.applied = False

    def __enter__(self) -> ReversibleEdit:
        self.apply()
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()


@torch.no_grad()
def round_weights_(model: nn.Module, dtype: torch.dtype | None) -> bool:
    """Round every floating-point parameter of ``model`` to ``dtype`` and back, in place (irreversible).

    Why: a release stores ``outputs.dtype`` (bfloat16 by default for a GGUF base) while the model in memory is
    float32; a number measured on the float32 weights is not a number of the files that ship. After this call
    the model holds exactly the values of a checkpoint cast to ``dtype`` (the export's rounding, round to nearest
    even), read back into the model's own dtype. Returns whether anything was rounded.

    Example:
        >>> m = nn.Linear(1, 1, bias=False); _ = m.weight.data.fill_(1 + 2**-10)
        >>> round_weights_(m, torch.bfloat16), m.weight.item()
        (True, 1.0)
    """
    changed = False
    for p in model.parameters():
        if dtype is not None and p.dtype.is_floating_point and p.dtype != dtype:
            p.data.copy_(p.data.to(dtype))
            changed = True
    return changed
