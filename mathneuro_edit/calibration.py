"""Calibration: forward passes with hooks that accumulate MathNeuro's per-input-feature statistics.

For every target weight and input feature j we accumulate, in float32 whatever the model's dtype:

- ``norm_sum[j] = sum over samples s of ||X_s[:, j]||_2`` (L2 norm over that sample's tokens; the paper's),
- ``sq_sum[j] = sum over all tokens of X[t, j]**2`` (Wanda's statistic),

where X is the weight's input. Batches are right-padded and padding tokens are masked out, so with a causal
model the result equals the batch-size-1 computation up to float32 rounding. Memory is O(d_in) per weight.

The forward stops once the last scored input has been recorded (:mod:`~mathneuro_edit.forward_stop`): no
logits are computed, and nothing after the last scored layer runs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from . import __version__
from .errors import InputError
from .forward_stop import ForwardStop, StopForward
from .stats import ActivationStats
from .targets import Target, find_targets, model_fingerprint

__all__ = ["calibrate", "texts_sha256"]


def texts_sha256(texts: Sequence[str]) -> str:
    """sha256 fingerprint of a list of texts, order included.

    Example:
        >>> texts_sha256(["a", "b"]) != texts_sha256(["b", "a"])
        True
    """
    return hashlib.sha256(json.dumps(list(texts), ensure_ascii=False).encode()).hexdigest()


class _Accumulator:
    """Running sums for one target: ``(groups, d_in)`` float32 plus token counts."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.norm: torch.Tensor | None = None  # allocated on the device of the first input seen
        self.sq: torch.Tensor | None = None
        self.count = torch.zeros(target.groups, dtype=torch.int64)

    def check(self, d_in: int) -> None:
        if d_in != self.target.d_in:
            raise InputError(
                f"{self.target.name}: its module received inputs with {d_in} features but the "
                f"weight expects {self.target.d_in}; this module is used in a way mathneuro-edit cannot score: "
                "exclude it"
            )

    def add(self, group: int, per_sample_sq: torch.Tensor, n_tokens: int) -> None:
        """``per_sample_sq``: ``(samples, d_in)`` float32 sums of squares over each sample's tokens."""
        self.check(per_sample_sq.shape[-1])
        # sum over samples of per-sample L2 norms; sum of squares over all tokens
        self.add_sums(group, per_sample_sq.sqrt().sum(0), per_sample_sq.sum(0), n_tokens)

    def add_sums(self, group: int, norm: torch.Tensor, sq: torch.Tensor, n_tokens: int) -> None:
        """Add already reduced sums: ``norm``, ``sq``: ``(d_in,)`` float32."""
        if self.norm is None:
            shape = self.target.stat_shape
            self.norm = torch.zeros(shape, dtype=torch.float32, device=norm.device)
            self.sq = torch.zeros(shape, dtype=torch.float32, device=norm.device)
        assert self.sq is not None
        dev = self.norm.device
        self.norm[group] += norm.to(dev)
        self.sq[group] += sq.to(dev)
        self.count[group] += n_tokens


# Distinct call layouts (which inputs a forward records, in which order) kept as flat running sums. One for a
# static graph; a few when the scored modules that run vary between batches (per-expert modules that run only
# when routed to); past this, a batch's sums go to the targets directly (memory stays O(this x inputs)).
_MAX_LAYOUTS = 8


class _Layout:
    """Flat running sums for one call layout: per device, every recorded input's features side by side.

    Why flat: a forward records one ``(batch, d_in)`` tensor per distinct scored input (4 per Llama layer); the
    per-sample square roots and the sums over samples of all of them are then a handful of operations per batch
    instead of several per target (about 1,700 small operations per batch on a 30-layer model, whose fixed costs
    showed as calibration overhead). Each column is reduced over the batch's samples exactly as the per-target
    code did, and batches are added in the same order, so the float32 results are the same.
    """

    def __init__(self, pending: list[tuple[torch.Tensor, list[int]]]) -> None:
        # device -> [(index in pending, offset, d_in)]
        self.slots: dict[torch.device, list[tuple[int, int, int]]] = {}
        width: dict[torch.device, int] = {}
        for i, (sq, _) in enumerate(pending):
            off = width.get(sq.device, 0)
            self.slots.setdefault(sq.device, []).append((i, off, sq.shape[-1]))
            width[sq.device] = off + sq.shape[-1]
        self.readers = [list(ix) for _, ix in pending]  # accumulator indices reading each input
        self.norm = {dev: torch.zeros(w, dtype=torch.float32, device=dev) for dev, w in width.items()}
        self.sq = {dev: torch.zeros(w, dtype=torch.float32, device=dev) for dev, w in width.items()}
        self.tokens = 0

    def add(self, pending: list[tuple[torch.Tensor, list[int]]], n_tokens: int) -> None:
        for dev, slots in self.slots.items():
            parts = [pending[i][0] for i, _, _ in slots]
            flat = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)  # (batch, sum of d_in)
            self.sq[dev] += flat.sum(0)  # sum of squares over all tokens, before the in-place sqrt below
            self.norm[dev] += flat.sqrt_().sum(0)  # sum over samples of per-sample L2 norms; the tensors are ours
        self.tokens += n_tokens

    def distribute(self, accs: list[_Accumulator]) -> None:
        for dev, slots in self.slots.items():
            for i, off, d in slots:
                for a in self.readers[i]:
                    accs[a].add_sums(0, self.norm[dev][off : off + d], self.sq[dev][off : off + d], self.tokens)


class _Recorder:
    """Installs the hooks and holds the current batch's token mask."""

    def __init__(self, model: nn.Module, targets: dict[str, Target]) -> None:
        self.acc = {name: _Accumulator(t) for name, t in targets.items()}
        self._accs = list(self.acc.values())
        self.token_mask: torch.Tensor | None = None  # (batch, tokens) float32, 1 = real token
        self._mask3: dict[torch.device, torch.Tensor] = {}  # (batch, 1, tokens) float32 per device, for bmm
        self.n_tokens = 0  # real tokens in the current batch
        self._sample_of: torch.Tensor | None = None
        # this batch's dense inputs in call order: (per-sample sums of squares (batch, d_in), readers' indices)
        self._pending: list[tuple[torch.Tensor, list[int]]] = []
        self._last_x: torch.Tensor | None = None  # q/k/v (gate/up) share one input: its sums are computed once
        self._layouts: dict[tuple[Any, ...], _Layout] = {}
        self.handles: list[torch.utils.hooks.RemovableHandle] = []
        modules = dict(model.named_modules(remove_duplicate=False))
        by_module: dict[str, list[Target]] = {}
        for t in targets.values():
            by_module.setdefault(t.module_name, []).append(t)
        index = {name: i for i, name in enumerate(self.acc)}
        for mod_name, ts in by_module.items():
            module = modules[mod_name]
            if ts[0].kind == "experts":
                self.handles.append(module.register_forward_pre_hook(self._experts_hook(ts), with_kwargs=True))
            else:
                self.handles.append(module.register_forward_pre_hook(self._dense_hook(ts[0], index[ts[0].name])))

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def set_batch(self, attention_mask: torch.Tensor) -> None:
        self.token_mask = attention_mask.to(torch.float32)
        self._mask3 = {self.token_mask.device: self.token_mask.unsqueeze(1)}
        self.n_tokens = int(attention_mask.sum())  # once per batch: one device sync, not one per hooked module
        self._sample_of = None
        self._pending = []
        self._last_x = None

    @property
    def sample_of(self) -> torch.Tensor:
        """``(batch * tokens,)`` sample index of each flat token (for experts; built on first use per batch)."""
        if self._sample_of is None:
            assert self.token_mask is not None
            b, t = self.token_mask.shape
            self._sample_of = torch.arange(b, device=self.token_mask.device).repeat_interleave(t)
        return self._sample_of

    def batch_done(self) -> None:
        """Add the batch's recorded inputs to the running sums (call after each forward)."""
        pending, self._pending, self._last_x = self._pending, [], None
        if not pending:
            return
        key = tuple((sq.device, tuple(ix)) for sq, ix in pending)
        layout = self._layouts.get(key)
        if layout is None and len(self._layouts) < _MAX_LAYOUTS:
            layout = self._layouts[key] = _Layout(pending)
        if layout is not None:
            layout.add(pending, self.n_tokens)
            return
        for sq, ix in pending:  # one more layout than kept: straight to the targets
            norm, total = sq.sqrt().sum(0), sq.sum(0)
            for a in ix:
                self._accs[a].add_sums(0, norm, total, self.n_tokens)

    def finish(self) -> None:
        """Move the flat running sums into the per-target accumulators (call once, after the last batch)."""
        for layout in self._layouts.values():
            layout.distribute(self._accs)
        self._layouts.clear()

    def _per_sample_sq(self, x: torch.Tensor, name: str) -> torch.Tensor:
        """Sum of squares over each sample's real tokens: ``(batch, d_in)`` float32."""
        m = self.token_mask
        assert m is not None
        b, t = m.shape
        if x.dim() == 3 and tuple(x.shape[:2]) == (b, t):
            x3 = x
        elif x.numel() == b * t * x.shape[-1]:
            x3 = x.reshape(b, t, x.shape[-1])  # modules that flatten (batch * tokens, d_in) first
        else:
            raise InputError(
                f"{name}: input of shape {tuple(x.shape)} does not map to the batch's {b}x{t} tokens; "
                "this module cannot be scored per token: exclude it"
            )
        xf = x3.to(torch.float32)  # (batch, tokens, d_in); float32 whatever the model dtype
        squares = xf.square_() if xf is not x3 else xf.square()  # in place on our own float32 copy only
        m3 = self._mask3.get(x.device)
        if m3 is None:
            m3 = self._mask3[x.device] = m.to(x.device).unsqueeze(1)
        # (batch, 1, tokens) @ (batch, tokens, d_in): padding weighted 0, float32 accumulation; the same kernel
        # (and bits) as einsum("bt,btd->bd"), without its reshapes; with or without padding, so that a batch's
        # sums do not depend on whether it happens to be padded
        return torch.bmm(m3, squares).squeeze(1)  # (batch, d_in)

    def _dense_hook(self, target: Target, index: int):
        acc = self.acc[target.name]

        def hook(module: nn.Module, args: tuple[Any, ...]) -> None:
            x = args[0]
            acc.check(x.shape[-1])
            if x is self._last_x:  # the same tensor as the previous scored input (q/k/v, gate/up): share its sums
                self._pending[-1][1].append(index)
                return
            self._pending.append((self._per_sample_sq(x, target.name), [index]))
            self._last_x = x

        return hook

    def _experts_hook(self, targets: list[Target]):
        accs = {t.role: self.acc[t.name] for t in targets}

        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            hidden = args[0] if args else kwargs["hidden_states"]  # (batch * tokens, hidden)
            top_k_index = args[1] if len(args) > 1 else kwargs["top_k_index"]  # (batch * tokens, k)
            assert self.token_mask is not None and self.sample_of is not None
            b, t = self.token_mask.shape
            if hidden.shape[0] != b * t:
                raise InputError(
                    f"{targets[0].module_name}: experts received {hidden.shape[0]} tokens, not the batch's {b * t}; "
                    "this MoE layout is not supported: exclude its experts"
                )
            valid = self.token_mask.reshape(-1).to(hidden.device) > 0
            sample_of = self.sample_of.to(hidden.device)
            up_name = "gate_up_proj" if module.has_gate else "up_proj"
            if "down" in accs:  # the down_proj input needs the up weights: real tensors, also when offloaded
                w_up = _live_param(module, up_name)
                b_up = _live_param(module, f"{up_name}_bias") if module.has_bias else None
            for e in range(module.num_experts):
                # only the tokens routed to expert e (and not padding): each expert is scored like its own Linear
                rows = (((top_k_index == e).any(dim=-1)) & valid).nonzero().squeeze(1)  # (n_e,)
                if rows.numel() == 0:
                    continue
                x = hidden[rows]  # (n_e, hidden)
                if "up" in accs:
                    accs["up"].add(e, self._grouped_sq(x, sample_of[rows], b), rows.numel())
                if "down" in accs:
                    w = w_up[e].to(x.device)
                    h = x @ w if module.is_transposed else nn.functional.linear(x, w)  # (n_e, inter[*2])
                    if b_up is not None:
                        h = h + b_up[e].to(x.device)
                    h = module._apply_gate(h) if module.has_gate else module.act_fn(h)  # the down_proj input
                    accs["down"].add(e, self._grouped_sq(h, sample_of[rows], b), rows.numel())

        return hook

    @staticmethod
    def _grouped_sq(x: torch.Tensor, sample_ids: torch.Tensor, batch: int) -> torch.Tensor:
        """Per-sample sums of squares of flat tokens: ``(batch, d)`` float32."""
        xf = x.to(torch.float32).square()  # (n, d)
        return torch.zeros(batch, x.shape[-1], dtype=torch.float32, device=x.device).index_add_(0, sample_ids, xf)


def _accelerate_hooks(module: nn.Module) -> list[Any]:
    """The accelerate hooks on ``module`` (a ``SequentialHook`` chains several), outermost first."""
    hook = getattr(module, "_hf_hook", None)
    return [] if hook is None else list(getattr(hook, "hooks", None) or [hook])


def _live_param(module: nn.Module, name: str) -> torch.Tensor:
    """``module``'s own parameter ``name`` as a real tensor.

    Why: with accelerate's offload (``device_map`` with "cpu"/"disk"), an offloaded module holds meta tensors
    until its own ``AlignDevicesHook`` loads them inside its forward, which runs after our pre-hook; the hook's
    ``weights_map`` holds the real values (in RAM, or read from the offload files).
    """
    p = getattr(module, name)
    if p.device.type != "meta":
        return p
    for hook in _accelerate_hooks(module):
        weights = getattr(hook, "weights_map", None)
        if weights is not None:
            try:
                return weights[name]
            except KeyError:
                continue
    raise InputError(
        f"{type(module).__name__}.{name}: weight is on the meta device and no accelerate offload hook holds it; "
        "load the model with from_pretrained(device_map=...) rather than on the meta device"
    )


def _input_device(model: nn.Module) -> torch.device:
    """Where ``input_ids`` go: the input embedding's device, or accelerate's execution device when it is offloaded."""
    emb = getattr(model, "get_input_embeddings", lambda: None)()
    if emb is not None and emb.weight.device.type != "meta":
        return emb.weight.device
    for module in (emb, model):  # offloaded embedding: accelerate computes it on the hook's execution device
        for hook in _accelerate_hooks(module) if module is not None else []:
            dev = getattr(hook, "execution_device", None)
            if isinstance(dev, int):  # accelerate's accelerator index (cuda:N on NVIDIA)
                found = torch.accelerator.current_accelerator()
                return torch.device(found.type if found is not None else "cuda", dev)
            if dev is not None:
                return torch.device(dev)
    real = [p.device for p in model.parameters() if p.device.type != "meta"]
    return real[0] if real else torch.device("cpu")


def _tokenize(tokenizer: Any, texts: list[str], max_length: int) -> tuple[list[list[int]], int]:
    ids = tokenizer(texts, add_special_tokens=True, truncation=False)["input_ids"]
    truncated = sum(len(x) > max_length for x in ids)
    ids = [list(x[:max_length]) for x in ids]
    for i, x in enumerate(ids):
        if not x:
            raise InputError(f"texts[{i}]: tokenizes to no tokens; remove empty texts from the calibration data")
    return ids, truncated


def calibrate(
    model: nn.Module,
    tokenizer: Any,
    texts: Sequence[str],
    *,
    max_length: int = 512,
    batch_size: int = 8,
    progress: bool = True,
    include: Sequence[str] | None = None,
    exclude: Sequence[str] | None = None,
    include_tied_lm_head: bool = False,
) -> ActivationStats:
    """Run the calibration texts through the model and accumulate MathNeuro statistics for every target.

    Args:
        model: a causal LM (transformers); left in the train/eval mode it came in.
        tokenizer: its tokenizer (not modified; one without a pad token works).
        texts: calibration samples (one sample = one text).
        max_length: tokens kept per sample; longer samples are truncated and counted in ``meta``.
        batch_size: samples per forward pass (right-padded; padding does not count).
        progress: show a tqdm progress bar over batches.
        include: regular expressions selecting target parameter names.
        exclude: regular expressions removing target parameter names.
        include_tied_lm_head: also score an ``lm_head`` tied to the input embedding.

    Returns:
        :class:`~mathneuro_edit.stats.ActivationStats`.

    Raises:
        InputError: empty or non-text input, bad sizes, unsupported parameters.

    Example:
        >>> stats = calibrate(model, tokenizer, ["Question: 2+3?\\nAnswer: 5"], progress=False)  # doctest: +SKIP
    """
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise InputError("texts: must be a list of strings, got a single string or non-sequence; wrap it in a list")
    texts = list(texts)
    if not texts:
        raise InputError("texts: the calibration set is empty; give at least one sample")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise InputError(f"texts[{i}]: must be a string, got {type(t).__name__}")
    if max_length < 1 or batch_size < 1:
        raise InputError(f"max_length and batch_size must be >= 1 (got {max_length}, {batch_size})")

    targets = find_targets(model, include=include, exclude=exclude, include_tied_lm_head=include_tied_lm_head)
    ids, truncated = _tokenize(tokenizer, texts, max_length)
    # Longest first: batches of similar lengths waste little compute on padding; sums do not depend on order
    # beyond float32 rounding.
    order = sorted(range(len(ids)), key=lambda i: (-len(ids[i]), i))
    pad_id = next((v for v in (tokenizer.pad_token_id, tokenizer.eos_token_id) if v is not None), 0)
    device = _input_device(model)

    recorder = _Recorder(model, targets)
    # after the recorder: hooks run in registration order, the inputs are recorded before the stop
    stop = ForwardStop(model, list(dict.fromkeys(t.module_name for t in targets.values())))
    was_training = model.training
    model.eval()  # dropout off: statistics must be deterministic
    n_tokens = 0
    try:
        with torch.no_grad():
            batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
            for batch in tqdm(batches, desc="calibrate", unit="batch", disable=not progress, leave=False):
                width = max(len(ids[i]) for i in batch)
                input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)  # (batch, tokens)
                attention = torch.zeros((len(batch), width), dtype=torch.long)
                for row, i in enumerate(batch):  # right padding: real tokens keep positions 0..n-1
                    input_ids[row, : len(ids[i])] = torch.tensor(ids[i])
                    attention[row, : len(ids[i])] = 1
                input_ids, attention = input_ids.to(device), attention.to(device)
                recorder.set_batch(attention)
                stop.new_batch()
                try:
                    model(input_ids=input_ids, attention_mask=attention, use_cache=False)
                except StopForward:
                    pass  # every scored input of this batch is recorded: the rest of the forward is not needed
                stop.batch_done()
                recorder.batch_done()
                n_tokens += recorder.n_tokens
        recorder.finish()
    finally:
        stop.remove()
        recorder.remove()  # hooks never outlive the call, also on error
        model.train(was_training)

    norm, sq, count = {}, {}, {}
    for name, acc in recorder.acc.items():
        shape = acc.target.stat_shape
        # a target that saw no token (an expert no token was routed to) has zero statistics
        norm[name] = (acc.norm if acc.norm is not None else torch.zeros(shape)).cpu()
        sq[name] = (acc.sq if acc.sq is not None else torch.zeros(shape)).cpu()
        count[name] = acc.count
    first = next(p for p in model.parameters() if p.dtype.is_floating_point)
    import transformers

    meta = {
        "num_samples": len(texts),
        "num_tokens": n_tokens,
        "truncated_samples": truncated,
        "max_length": max_length,
        "texts_sha256": texts_sha256(texts),
        "model_fingerprint": model_fingerprint(model),
        "model_name": _public_name(getattr(getattr(model, "config", None), "_name_or_path", "") or ""),
        "dtype": str(first.dtype).removeprefix("torch."),
        "versions": {"mathneuro_edit": __version__, "torch": torch.__version__, "transformers": transformers.__version__},
    }
    return ActivationStats(norm, sq, count, dict(targets), meta)


def _public_name(name: str) -> str:
    """A Hub id as is; a local folder as ``<local>``: the same model in another folder gives the same statistics
    (and no personal path ends up in a file that may be shared)."""
    from .recipe import LOCAL, is_local_path

    return LOCAL if name and (is_local_path(str(name)) or Path(str(name)).is_absolute()) else str(name)
