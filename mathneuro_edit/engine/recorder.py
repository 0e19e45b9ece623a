"""The statistics hooks of :func:`~mathneuro_edit.engine.calibration.calibrate`: per-input sums, accumulated flat.

Each scored module gets a forward pre-hook that reduces its input to per-sample sums of squares over the batch's
real tokens, ``(batch, d_in)`` float32 (one computation per distinct input tensor: q/k/v, gate/up share theirs).
At the end of the batch, :meth:`Recorder.batch_done` turns all of them into the running sums in a handful of
operations (:class:`_Layout`); :meth:`Recorder.finish` hands the sums to the per-target accumulators. MoE experts
fused into one module are scored per expert from the routed tokens.

On a GPU (:data:`FUSED_DEVICE_TYPES`) a dense input is reduced in ONE kernel instead of three: the per-sample L2
norm over the tokens, read once in the model's dtype and accumulated in float32 (``torch.linalg.vector_norm(x,
dim=1, dtype=float32)``), preceded by a ``masked_fill`` only when the batch is padded. Why only there: on the CPU
the statistics stay bit for bit what they were (float32 copy, square, masked ``bmm``; the golden hashes of
tests/engine); a GPU's float sums differ from a CPU's in the last bits anyway (issue 40: the mask and the weights
are what must agree), and there the cast, the square and the ``bmm`` of every input were three full passes over
a ``batch x tokens x d_in`` tensor, 1.21x a plain forward on an H200. The two paths agree to float32 rounding
(tests/engine/test_fused_statistics.py runs the GPU path on the CPU).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..errors import InputError
from .targets import Target, is_dense_dispatch_experts, is_parallel_experts

__all__ = ["Recorder", "accelerate_hooks", "FUSED_DEVICE_TYPES"]

# device types on the one-kernel path (module docstring); tests add "cpu" to run it here
FUSED_DEVICE_TYPES: tuple[str, ...] = ("cuda",)


def _fused(device: torch.device) -> bool:
    """Whether ``device``'s pending inputs are per-sample L2 norms (GPU path), not sums of squares (CPU's)."""
    return device.type in FUSED_DEVICE_TYPES


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
                f"{self.target.name}: its module received inputs with {d_in} features but the weight expects "
                f"{self.target.d_in}; this module is used in a way mathneuro-edit cannot score: exclude it"
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
    instead of several per target and batch: on a Llama layer, calibration adds 12 tensor operations per batch
    to the layer's forward instead of 153 (counted by ``tests/engine/test_calibration_speed.py``). Each operation has a
    fixed cost (dispatch, and with several threads an OpenMP fork/join), which on a narrow, deep model such as
    SmolLM2-135M was a visible share of the forward. Each column is reduced over the batch's samples exactly as
    the per-target code did, and batches are added in the same order, so the float32 results are bit for bit the
    same as before (checked on every test family, float32 and bf16, batch sizes 1, 3 and 8).

    Memory: the batch's per-sample sums, ``batch x (sum of the distinct inputs' d_in)`` float32, until the end
    of the batch (SmolLM2-135M, batch 8: 3 MB), plus two such rows per layout.

    ``pending``: the first batch of this layout, ``(per-sample sums of squares (batch, d_in), readers)`` in call
    order, ``readers`` the indices of the accumulators fed by that input.
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
        """Add one batch of this layout (``n_tokens`` real tokens); the pending tensors are consumed."""
        for dev, slots in self.slots.items():
            parts = [pending[i][0] for i, _, _ in slots]
            flat = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)  # (batch, sum of d_in)
            if _fused(dev):  # per-sample L2 norms already (GPU path)
                self.norm[dev] += flat.sum(0)
                self.sq[dev] += flat.square_().sum(0)
                continue
            self.sq[dev] += flat.sum(0)  # sum of squares over all tokens, before the in-place sqrt below
            self.norm[dev] += flat.sqrt_().sum(0)  # sum over samples of per-sample L2 norms; the tensors are ours
        self.tokens += n_tokens

    def distribute(self, accs: list[_Accumulator]) -> None:
        """Add the running sums to the accumulators that read each input (``accs``: by index)."""
        for dev, slots in self.slots.items():
            for i, off, d in slots:
                for a in self.readers[i]:
                    accs[a].add_sums(0, self.norm[dev][off : off + d], self.sq[dev][off : off + d], self.tokens)


class Recorder:
    """Installs the statistics hooks and holds the current batch's token mask and recorded inputs.

    Use: ``set_batch(attention_mask)``, the forward, ``batch_done()`` per batch; ``finish()`` once; ``remove()``.
    ``targets``: from :func:`~mathneuro_edit.engine.targets.find_targets`; ``acc``: each target's running sums.
    """

    def __init__(self, model: nn.Module, targets: dict[str, Target]) -> None:
        self.acc = {name: _Accumulator(t) for name, t in targets.items()}
        self._accs = list(self.acc.values())
        self.token_mask = torch.zeros(0, 0)  # (batch, tokens) float32, 1 = real token (set per batch)
        self._mask3: dict[torch.device, torch.Tensor] = {}  # (batch, 1, tokens) float32 per device, for bmm
        self._pad3: dict[torch.device, torch.Tensor] = {}  # (batch, tokens, 1) bool, True = padding (GPU path)
        self._padded = False  # whether the current batch has padding
        self.n_tokens = 0  # real tokens in the current batch
        self._sample_of: torch.Tensor | None = None
        # this batch's dense inputs in call order: (per-sample sums of squares (batch, d_in), readers' indices)
        self._pending: list[tuple[torch.Tensor, list[int]]] = []
        self._last_x: torch.Tensor | None = None  # q/k/v (gate/up) share one input: its sums are computed once
        self._layouts: dict[tuple[Any, ...], _Layout] = {}
        self.handles: list[torch.utils.hooks.RemovableHandle] = []
        self._routed: dict[str, torch.Tensor | None] = {}  # JetMoE: the last batch_index of each MoE block's router
        modules = dict(model.named_modules(remove_duplicate=False))
        by_module: dict[str, list[Target]] = {}
        for t in targets.values():
            by_module.setdefault(t.module_name, []).append(t)
        index = {name: i for i, name in enumerate(self.acc)}
        for mod_name, ts in by_module.items():
            module = modules[mod_name]
            if ts[0].kind != "experts":
                self.handles.append(module.register_forward_pre_hook(self._dense_hook(ts[0], index[ts[0].name])))
                continue
            layout = "dense" if is_dense_dispatch_experts(module) else "routed"
            parent = mod_name.rpartition(".")[0]
            if is_parallel_experts(module):
                layout, router = "parallel", modules.get(f"{parent}.router" if parent else "router")
                if router is None:
                    raise _unsupported(mod_name, "experts without a sibling router")
                if parent not in self._routed:
                    self._routed[parent] = None
                    self.handles.append(router.register_forward_hook(self._router_hook(parent)))
            hook = self._experts_hook(ts, layout, parent)
            self.handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def set_batch(self, attention_mask: torch.Tensor, n_tokens: int | None = None) -> None:
        """Start a batch: its ``(batch, tokens)`` attention mask and, when the caller knows it (from the CPU copy:
        no device sync), its count of real tokens."""
        self.token_mask = attention_mask.to(torch.float32)
        self._mask3 = {self.token_mask.device: self.token_mask.unsqueeze(1)}
        self._pad3 = {}
        # once per batch: one device sync at most, not one per hooked module
        self.n_tokens = int(attention_mask.sum()) if n_tokens is None else n_tokens
        self._padded = self.n_tokens < attention_mask.numel()
        self._sample_of = None
        self._pending = []
        self._last_x = None

    @property
    def sample_of(self) -> torch.Tensor:
        """``(batch * tokens,)`` sample index of each flat token (for experts; built on first use per batch)."""
        if self._sample_of is None:
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
            norm, total = (sq.sum(0), sq.square().sum(0)) if _fused(sq.device) else (sq.sqrt().sum(0), sq.sum(0))
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
        if _fused(x.device):
            return self._per_sample_norm(x3)
        xf = x3.to(torch.float32)  # (batch, tokens, d_in); float32 whatever the model dtype
        squares = xf.square_() if xf is not x3 else xf.square()  # in place on our own float32 copy only
        m3 = self._mask3.get(x.device)
        if m3 is None:
            m3 = self._mask3[x.device] = m.to(x.device).unsqueeze(1)
        # (batch, 1, tokens) @ (batch, tokens, d_in): padding weighted 0, float32 accumulation; the same kernel
        # (and bits) as einsum("bt,btd->bd"), without its reshapes; with or without padding, so that a batch's
        # sums do not depend on whether it happens to be padded
        return torch.bmm(m3, squares).squeeze(1)  # (batch, d_in)

    def _per_sample_norm(self, x3: torch.Tensor) -> torch.Tensor:
        """The GPU path: per-sample L2 norm over each sample's real tokens, ``(batch, d_in)`` float32, in one
        reduction that reads ``x3`` in its own dtype (plus one ``masked_fill`` when the batch is padded)."""
        if self._padded:
            pad = self._pad3.get(x3.device)
            if pad is None:
                pad = self._pad3[x3.device] = (self.token_mask.to(x3.device) == 0).unsqueeze(2)
            x3 = x3.masked_fill(pad, 0)  # padding contributes exactly 0
        return torch.linalg.vector_norm(x3, ord=2, dim=1, dtype=torch.float32)

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

    def _router_hook(self, parent: str):
        def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            self._routed[parent] = output[1]  # (index_sorted_experts, batch_index, gates, expert_size, logits)

        return hook

    def _experts_hook(self, targets: list[Target], layout: str, parent: str = ""):
        """MoE experts fused into one module: each expert is scored like its own Linear, on the tokens routed to it
        (padding left out) and the input it really multiplies; its ``down_proj`` on the gated intermediate, computed
        from the up weights (real tensors, also when offloaded). ``layout`` says which input rows expert ``e`` gets:

        - ``"routed"`` (transformers' fused experts): input ``(batch * tokens, hidden)``, the rows whose
          ``top_k_index`` names ``e``;
        - ``"dense"`` (Llama 4): input ``(E * tokens, d_in)``, expert ``e``'s block holds every token times its
          router score (exactly 0 when not routed): the block's non-zero rows;
        - ``"parallel"`` (JetMoE, one target per module, scored on its own input): rows sorted by expert
          (``expert_size`` of them each), row ``i`` is token ``batch_index[i]`` of the sibling router's output.
        """
        accs = {t.role or "up": self.acc[t.name] for t in targets}
        name = targets[0].module_name

        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            x = args[0] if args else kwargs["inputs" if layout == "parallel" else "hidden_states"]
            b, t = self.token_mask.shape
            valid = self.token_mask.reshape(-1).to(x.device) > 0
            sample_of = self.sample_of.to(x.device)
            blocks = None  # Llama 4: each expert's own rows
            if layout == "parallel":
                tokens = self._routed.get(parent)
                if tokens is None or tokens.shape[0] != x.shape[0]:
                    raise _unsupported(name, "its rows do not match its router's tokens")
                tokens = tokens.to(x.device)
                valid, sample_of = valid[tokens], sample_of[tokens]
                sizes = [int(n) for n in (args[1] if len(args) > 1 else kwargs["expert_size"])]
                expert_of_row = torch.repeat_interleave(torch.tensor(sizes, device=x.device))
                n_exp, routed = len(sizes), lambda e, xe: expert_of_row == e
            elif layout == "dense":
                n_exp = module.num_experts
                if x.shape[0] != n_exp * b * t:
                    raise _unsupported(
                        name,
                        f"experts received {x.shape[0]} rows, not experts x the batch's tokens ({n_exp} x {b * t})",
                    )
                blocks = x.reshape(n_exp, b * t, -1)
                routed = lambda e, xe: (xe != 0).any(dim=-1)  # noqa: E731
                w_up = _live_param(module, "gate_up_proj") if "down" in accs else None
            else:
                top_k_index = args[1] if len(args) > 1 else kwargs["top_k_index"]  # (batch * tokens, k)
                if x.shape[0] != b * t:
                    raise _unsupported(name, f"experts received {x.shape[0]} tokens, not the batch's {b * t}")
                n_exp, routed = module.num_experts, lambda e, xe: (top_k_index == e).any(dim=-1)
                up_name = "gate_up_proj" if module.has_gate else "up_proj"
                if "down" in accs:
                    w_up = _live_param(module, up_name)
                    b_up = _live_param(module, f"{up_name}_bias") if module.has_bias else None
            for e in range(n_exp):
                xe = x if blocks is None else blocks[e]
                rows = (routed(e, xe) & valid).nonzero().squeeze(1)  # (n_e,)
                if rows.numel() == 0:
                    continue
                xr, samples = xe[rows], sample_of[rows]
                if "up" in accs:
                    accs["up"].add(e, self._grouped_sq(xr, samples, b), rows.numel())
                if "down" not in accs:
                    continue
                w = w_up[e].to(xr.device)
                if layout == "dense":
                    gate, up = (xr @ w).chunk(2, dim=-1)  # the module's own order and math
                    h = up * module.act_fn(gate)
                else:
                    h = xr @ w if module.is_transposed else nn.functional.linear(xr, w)  # (n_e, inter[*2])
                    if b_up is not None:
                        h = h + b_up[e].to(xr.device)
                    h = module._apply_gate(h) if module.has_gate else module.act_fn(h)  # the down_proj input
                accs["down"].add(e, self._grouped_sq(h, samples, b), rows.numel())

        return hook

    @staticmethod
    def _grouped_sq(x: torch.Tensor, sample_ids: torch.Tensor, batch: int) -> torch.Tensor:
        """Per-sample sums of squares of flat tokens: ``(batch, d)`` float32."""
        xf = x.to(torch.float32).square()  # (n, d)
        return torch.zeros(batch, x.shape[-1], dtype=torch.float32, device=x.device).index_add_(0, sample_ids, xf)


def _unsupported(name: str, why: str) -> InputError:
    return InputError(f"{name}: {why}; this MoE layout is not supported: exclude its experts")


def accelerate_hooks(module: nn.Module) -> list[Any]:
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
    for hook in accelerate_hooks(module):
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
