"""The released MathNeuro script's selection, reproduced exactly (``mask.reference: official``).

The default rule (:mod:`~mathneuro_edit.engine.mask`) ranks ``|W_ij| * sum_s ||X_s[:, j]||`` computed in float32.
The released script (bryanchrist/MathNeuro, ``MathNeuro.py``, GPLv3; read, not copied: this is an independent
implementation of its arithmetic) computes, for every ``nn.Linear`` of the model loaded in bfloat16, at batch 1:

- per sample ``s``: ``n_s = x.norm(p=2, dim=1)`` of the module's input ``x`` ``(1, tokens, d_in)`` (a norm over the
  tokens), cast to bfloat16;
- ``P_s = n_s * |W|``: one product per weight, rounded to the weight's dtype (bfloat16 there);
- ``A += P_s``: a running sum the size of the weight, in the weight's dtype, one rounding per sample, samples in
  the order given;
- top-k of each matrix: ``int(n * top_k)`` entries with the largest ``|A|`` (``torch.topk``; on CUDA, where the
  paper ran, entries tied with the k-th value are taken in increasing flat index; this module does the same on any
  device);
- skipped: every module that is not an ``nn.Linear`` (GPT-2's ``Conv1D``, fused MoE experts, routers that are not
  ``nn.Linear``), an ``lm_head`` tied to the input embedding (its weight is not under its own name in
  ``named_parameters()``), and any weight whose name contains ``embed`` (never selected there);
- MathNeuro: top-k on math AND NOT top-k on the general set (several general sets: not in the top-k of any).

Why a separate pass: with one rounding per product and per sample, ``A`` is not ``|W| * (a statistic of the
inputs)``: it cannot be recovered from O(d_in) statistics, so this mode keeps one accumulator the size of the
scored weights, in their dtype, per set being calibrated (SmolLM2-135M in bfloat16: 212 MB), and builds its mask
during calibration. Everything else (which texts, tokenization with special tokens, ``max_length`` truncation) is
as in :func:`~mathneuro_edit.engine.calibration.calibrate`.

Not reproduced, refused instead: a scored module that does not run in some sample's forward (the script re-adds
that module's product from an earlier sample; per-expert ``nn.Linear`` modules of MoE blocks that loop over
experts) and inputs that are not ``(1, tokens, d_in)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn
from tqdm.auto import tqdm

from ..errors import InputError
from ..util.hashing import texts_sha256
from .calibration import checked_texts, tokenize_texts
from .devices import model_device
from .forward_stop import ForwardStop
from .mask import Mask, check_mask_args, k_of, random_like
from .targets import Target, find_targets, model_fingerprint
from .topk import top_fraction_flat

__all__ = ["OfficialPass", "official_targets", "official_set_masks", "find_math_params_official"]

REFERENCE = "official"


def official_targets(
    model: nn.Module, *, include: Sequence[str] | None = None, exclude: Sequence[str] | None = None
) -> dict[str, Target]:
    """The weights the released script scores: ``nn.Linear`` weights, not a tied ``lm_head``, no ``embed`` in the name.

    ``include``/``exclude`` (regular expressions over parameter names) narrow them further, as for the default rule.

    Raises:
        InputError: no such weight is left (a model without ``nn.Linear`` modules, e.g. GPT-2's ``Conv1D``).
    """
    modules = dict(model.named_modules(remove_duplicate=False))
    found = {
        name: t
        for name, t in find_targets(model, include=include, exclude=exclude).items()
        if t.kind == "linear" and isinstance(modules[t.module_name], nn.Linear) and "embed" not in name
    }
    if not found:
        raise InputError(
            "mask.reference official: no nn.Linear weight to score (the released script scores "
            "nn.Linear modules only, not Conv1D, fused experts or an embedding-tied lm_head); "
            "use the default reference for this model"
        )
    return found


class _Sums:
    """The per-matrix running sums of one set, and the hooks that feed them (one sample per forward)."""

    def __init__(self, model: nn.Module, targets: dict[str, Target]) -> None:
        modules = dict(model.named_modules(remove_duplicate=False))
        self.weights: dict[str, torch.Tensor] = {}
        for name, t in targets.items():
            w = modules[t.module_name].weight
            if w.device.type == "meta":
                raise InputError(
                    f"{name}: weight is offloaded (meta device); mask.reference official needs every "
                    "scored weight in memory: load the model without offload (base.device_map)"
                )
            self.weights[name] = w
        # A in the weight's dtype and on its device (the script: zeros_like(param))
        self.sums = {n: torch.zeros_like(w, memory_format=torch.contiguous_format) for n, w in self.weights.items()}
        biggest: dict[tuple[torch.device, torch.dtype], int] = {}
        for w in self.weights.values():
            key = (w.device, w.dtype)
            biggest[key] = max(biggest.get(key, 0), w.numel())
        # one scratch buffer per (device, dtype) for the products: no weight-sized temporary per call
        self.scratch = {k: torch.empty(n, dtype=k[1], device=k[0]) for k, n in biggest.items()}
        self.norms: dict[str, torch.Tensor] = {}  # this sample's n_s per target (a later call replaces an earlier)
        self.handles = [modules[t.module_name].register_forward_pre_hook(self._hook(n)) for n, t in targets.items()]

    def _hook(self, name: str):
        def hook(module: nn.Module, args: tuple[Any, ...]) -> None:
            x = args[0]
            if x.dim() != 3 or x.shape[0] != 1:
                raise InputError(
                    f"{name}: input of shape {tuple(x.shape)}, not (1, tokens, d_in); "
                    "mask.reference official cannot score this module: exclude it"
                )
            # the script's norm, over dim 1 (the tokens), then bfloat16 whatever the model's dtype
            self.norms[name] = x.norm(p=2, dim=1).to(torch.bfloat16)  # (1, d_in)

        return hook

    def add_sample(self, index: int) -> None:
        """Add this sample's products ``n_s * |W|`` (rounded to the weight's dtype) to the sums (one rounding)."""
        missing = [n for n in self.sums if n not in self.norms]
        if missing:
            raise InputError(
                f"{missing[0]}: its module did not run on calibration text {index}; the released script "
                "would re-add an earlier sample's product there, which mask.reference official does not "
                "reproduce: exclude it (targets.exclude) or use the default reference"
            )
        for name, acc in self.sums.items():
            w = self.weights[name]
            tmp = self.scratch[(w.device, w.dtype)][: w.numel()].view(w.shape)
            torch.abs(w.detach(), out=tmp)
            tmp.mul_(self.norms[name].to(w.device))  # = n_s * |W|: one exact product, one rounding to W's dtype
            acc.add_(tmp)  # A += P_s in W's dtype: one rounding per sample
        self.norms = {}

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()


@dataclass(frozen=True)
class OfficialPass:
    """How the official forward passes run, the same for every set: tokens kept per text (longer texts are
    truncated), which weights are scored (regular expressions over parameter names), a progress bar."""

    max_length: int = 512
    include: Sequence[str] | None = None
    exclude: Sequence[str] | None = None
    progress: bool = False


def official_set_masks(
    model: nn.Module,
    tokenizer: Any,
    texts: Sequence[str],
    top_ks: Sequence[float],
    *,
    run: OfficialPass = OfficialPass(),
    label: str = "texts",
    keep_sums: dict[str, torch.Tensor] | None = None,
) -> tuple[list[Mask], dict[str, Any]]:
    """One set's top-k selections by the released script's arithmetic, one :class:`Mask` per ``top_k``.

    Args:
        texts: the set, in the order the sums are taken (one sample per forward, no padding).
        keep_sums: for analysis (scripts/official_jaccard.py): receives every weight's sums ``A`` (weight-sized).

    Returns:
        ``(masks, meta)``: ``masks[i][name]`` is the top-``top_ks[i]`` of ``|A|`` of that weight (ties to the
        lower flat index); ``meta`` counts samples, tokens and truncated samples.
    """
    texts = checked_texts(texts, label)
    max_length = run.max_length
    if max_length < 1:
        raise InputError(f"max_length must be >= 1 (got {max_length})")
    targets = official_targets(model, include=run.include, exclude=run.exclude)
    ids, truncated = tokenize_texts(tokenizer, texts, max_length)
    device = model_device(model)
    sums = _Sums(model, targets)
    # after the sums' hooks: hooks run in registration order, the inputs are recorded before the stop
    stop = ForwardStop(model, list(dict.fromkeys(t.module_name for t in targets.values())))
    was_training = model.training
    model.eval()
    n_tokens = 0
    try:
        with torch.no_grad():
            for i in tqdm(range(len(ids)), desc="official sums", unit="text", disable=not run.progress, leave=False):
                stop.forward(model, input_ids=torch.tensor([ids[i]], device=device))  # batch 1, no mask: the script's
                sums.add_sample(i)
                n_tokens += len(ids[i])
    finally:
        stop.remove()
        sums.remove()
        model.train(was_training)
    masks = [Mask({}, {}) for _ in top_ks]
    for name in list(sums.sums):
        acc = sums.sums.pop(name)  # freed as soon as its selections are taken
        if keep_sums is not None:
            keep_sums[name] = acc
        flat = acc.reshape(-1).abs().to(torch.float32)  # bf16 -> float32 is exact and keeps the order; abs: -0 -> +0
        if not torch.isfinite(flat.max()):
            raise InputError(f"{name}: non-finite sums (NaN/inf in the weights or activations); check the model")
        for mask, sel in zip(masks, top_fraction_flat(flat, [k_of(k, flat.numel()) for k in top_ks])):
            mask._add(name, sel.reshape(acc.shape))
        del acc, flat
    meta = {
        "num_samples": len(texts),
        "num_tokens": n_tokens,
        "truncated_samples": truncated,
        "max_length": max_length,
        "texts_sha256": texts_sha256(texts),
    }
    return masks, meta


def find_math_params_official(
    model: nn.Module,
    tokenizer: Any,
    math_texts: Sequence[str],
    general_texts: Sequence[Sequence[str]] | None,
    *,
    top_k: float | Sequence[float],
    method: Literal["mathneuro", "wanda", "random"] = "mathneuro",
    seed: int = 0,
    max_length: int = 512,
    include: Sequence[str] | None = None,
    exclude: Sequence[str] | None = None,
    progress: bool = False,
) -> Mask | list[Mask]:
    """The math-specific weights exactly as the released MathNeuro script selects them (see the module docstring).

    Why 11 parameters: the model, its tokenizer and the math and general texts, then seven keyword-only options,
    each one documented setting of the released script (``top_k`` required, the others with a default).

    Runs its own forward passes (one per text, batch 1) and needs no statistics.

    Args:
        model: a causal LM; load it in bfloat16 to match the script (which always does).
        general_texts: the non-math sets, each a list of texts (a weight in the top-k of any is excluded); ``None``
            for ``method="wanda"``.
        top_k: fraction of each matrix in (0, 1]; a sequence of them gives one mask each, in order, from one
            forward pass per text.
        method: ``"mathneuro"``, ``"wanda"`` (math top-k alone) or ``"random"`` (the same count per matrix).

    Returns:
        A :class:`Mask` (a list of them for a sequence of ``top_k``) over the script's scored weights,
        ``meta["reference"] == "official"``.

    Example:
        >>> mask = find_math_params_official(model, tok, math, [general], top_k=0.05)  # doctest: +SKIP
    """
    several = isinstance(top_k, Sequence) and not isinstance(top_k, (str, bytes))
    top_ks = list(top_k) if several else [top_k]
    check_mask_args(top_ks, method, "matrix", "l2")
    generals = [] if general_texts is None or method == "wanda" else list(general_texts)
    if general_texts is not None and (
        isinstance(general_texts, str) or (len(general_texts) and isinstance(general_texts[0], str))
    ):
        raise InputError("general_texts: a list of sets (each a list of strings), e.g. [general]")
    if method != "wanda" and not generals:
        raise InputError(f"method {method!r} needs general_texts (at least one non-math set)")
    run = OfficialPass(max_length, include, exclude, progress)
    math_sets, math_meta = official_set_masks(model, tokenizer, math_texts, top_ks, run=run, label="math_texts")
    general_sets, general_meta = [], []
    for i, texts in enumerate(generals):
        sets, meta = official_set_masks(model, tokenizer, texts, top_ks, run=run, label=f"general_texts[{i}]")
        general_sets.append(sets)
        general_meta.append(meta)
    first = next(p for p in model.parameters() if p.dtype.is_floating_point)
    out = []
    for i, value in enumerate(top_ks):
        mask = Mask({}, {})
        for name in math_sets[i]:
            sel = math_sets[i][name]
            for sets in general_sets:
                sel &= sets[i][name].logical_not()
            if method == "random":
                sel = random_like(sel, seed, name, 0)
            mask._add(name, sel)
        mask.meta = {
            "method": method,
            "top_k": value,
            "granularity": "matrix",
            "seed": seed,
            "statistic": "l2",
            "reference": REFERENCE,
            "dtype": str(first.dtype).removeprefix("torch."),
            "model_fingerprint": model_fingerprint(model),
            "math": math_meta,
            "general": general_meta,
        }
        out.append(mask)
    return out if several else out[0]
