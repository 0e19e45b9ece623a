"""Stop a calibration forward pass once the last scored module's input has been recorded.

Calibration needs the inputs of the scored modules, never the model's output: everything a forward computes after
the last scored input (for a tied ``lm_head``, the whole head matmul and the ``(batch, tokens, vocab)`` logits)
is wasted. :class:`ForwardStop` installs a pre-hook that, after the statistics hooks have recorded their input,
raises the private :class:`StopForward`, which :meth:`ForwardStop.forward` catches.

Where to stop (why it is valid):

- **first batch**: at the output embedding's (``lm_head``'s) pre-hook. A causal LM computes its logits from the
  final hidden states, so the head is the last module its forward runs; an untied, scored head records its input
  first (its hook runs before the stop hook), a tied one costs nothing. While this batch runs, the order of the
  scored modules' calls is recorded.
- **later batches**: at the last scored call of that recorded order, ``(module, its c-th call)``, which stops
  earlier when ``include``/``exclude`` leave later layers unscored. Modules run in the same order for every batch
  (the graph does not depend on the values), with one exception, handled: per-expert modules of an MoE block that
  loops over its experts (``...experts.<i>...``) run only when a token is routed to them, so the last of them in one
  batch need not be the last in another; when the recorded last call is one of them, every batch stops at the head
  instead. Fused expert modules (one call per layer, what transformers 5 uses) and routers run once per layer and
  are ordinary modules here.

Accelerate offload: an offloaded module loads its weights in its ``_hf_hook.pre_forward`` and offloads them in its
``post_forward``; the exception skips the ``post_forward`` of the modules it unwinds through. An always-called
forward hook on every accelerate-hooked module runs that ``post_forward`` during the unwinding, so weights go back
to ``meta`` and accelerate's tied-parameter cache is emptied exactly as after a complete forward.
"""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import nn

__all__ = ["ForwardStop", "StopForward"]

# a per-expert module of an MoE block that loops over its experts: "...experts.3.w1", "...experts.3"
_PER_EXPERT = re.compile(r"(^|\.)[^.]*experts?[^.]*\.\d+(\.|$)")


class StopForward(Exception):
    """Raised inside the forward once every scored input of the batch has been recorded (caught by the stop)."""


def _head(model: nn.Module) -> tuple[str, nn.Module] | None:
    """``(name, module)`` of the output embedding when it is a distinct leaf module of ``model``, else None."""
    try:
        head = model.get_output_embeddings()
        emb = model.get_input_embeddings()
    except (AttributeError, NotImplementedError):  # not a transformers LM, or one without a head
        return None
    if not isinstance(head, nn.Module) or head is emb or any(True for _ in head.children()):
        return None  # no head, a head shared with the input embedding (its first call is the model's first), or nested
    name = next((n for n, m in model.named_modules(remove_duplicate=False) if m is head), None)
    return None if name is None else (name, head)


class ForwardStop:
    """Counts the scored modules' calls, raises :class:`StopForward` after the last one, cleans accelerate up.

    Install it AFTER the statistics hooks (hooks run in registration order: they must record first);
    ``module_names``: the modules whose inputs are scored.
    """

    def __init__(self, model: nn.Module, module_names: list[str]) -> None:
        self.handles: list[torch.utils.hooks.RemovableHandle] = []
        self.calls: dict[str, int] = {}  # module name -> calls in the current batch
        self.trace: list[str] | None = []  # scored calls of the first batch, in order; None once decided
        self.stop_at: tuple[str, int] | None = None  # (module name, call number) after which to stop
        self.stopped_in: nn.Module | None = None  # the module whose pre-hook raised, during the unwinding
        modules = dict(model.named_modules(remove_duplicate=False))
        head = _head(model)
        self.head_name = head[0] if head is not None else None
        self._head_scored = self.head_name in module_names  # an untied lm_head counts in the recorded order
        if head is not None:
            self.stop_at = (head[0], 1)  # the first batch: the head is the last module a causal LM runs
        for name in dict.fromkeys([*module_names, *([self.head_name] if self.head_name else [])]):
            self.handles.append(modules[name].register_forward_pre_hook(self._hook(name, modules[name])))
        for module in modules.values():
            if getattr(module, "_hf_hook", None) is not None:
                self.handles.append(module.register_forward_hook(self._cleanup, always_call=True))

    def forward(self, model: nn.Module, **inputs: Any) -> None:
        """One forward pass of ``model`` on ``inputs`` (no cache), stopped once its scored inputs are recorded."""
        self.calls, self.stopped_in = {}, None  # a new batch
        try:
            model(**inputs, use_cache=False)
        except StopForward:
            pass  # every scored input of this batch is recorded: the rest of the forward is not needed
        self.batch_done()

    def batch_done(self) -> None:
        """After the first batch: stop later batches at its last scored call (see the module docstring)."""
        if self.trace is None:
            return
        trace, self.trace = self.trace, None
        scored = [n for n in trace if n != self.head_name or self._head_scored]
        if not scored:
            return  # nothing scored ran: keep the head stop (or none)
        last = scored[-1]
        if _PER_EXPERT.search(last):
            return  # a per-expert module runs only when routed to: keep the head stop, valid for every batch
        self.stop_at = (last, scored.count(last))

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def _hook(self, name: str, module: nn.Module):
        def hook(_: nn.Module, args: Any) -> None:
            count = self.calls.get(name, 0) + 1
            self.calls[name] = count
            if self.trace is not None:
                self.trace.append(name)
            if self.stop_at == (name, count):
                self.stopped_in = module
                raise StopForward

        return hook

    def _cleanup(self, module: nn.Module, args: Any, output: Any) -> None:
        # always called, also while an exception unwinds; only our stop needs accelerate's post_forward, and not on
        # the module whose pre-hook raised (its pre_forward never ran)
        if self.stopped_in is not None and module is not self.stopped_in:
            module._hf_hook.post_forward(module, None)
