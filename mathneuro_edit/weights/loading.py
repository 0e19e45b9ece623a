"""Loading a base model (one device, or placed by accelerate) and reading its weights when they are offloaded.

Plain transformers and accelerate do the work: :func:`load_model` hands ``device_map`` / ``max_memory`` /
``offload_folder`` to accelerate's big-model placement (nothing home-made), and offloaded parameters are read back
through transformers' ``load_offloaded_parameter``, the function ``save_pretrained`` uses. :func:`model_weights` and
:func:`weights_from_checkpoint` are lazy ``name -> tensor`` mappings that
:func:`~mathneuro_edit.engine.mask.find_math_params` takes in place of a model.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from ..engine.targets import find_targets
from ..errors import InputError
from ..recipe.input_sections import BaseConfig
from ..util.config_sizes import check_config_file_sizes
from ..util.console import library_log_held
from ..util.tensor_files import FLOAT_DTYPES
from .base import base_reference, resolve_base, resolve_model_path
from .checkpoint import check_config_shapes, open_checkpoint
from .edit_plan import meta_model, plan_edits
from .remote_code import check_remote_code, remote_code_error

__all__ = ["load_model", "model_weights", "weights_from_checkpoint", "CheckpointWeights"]


def _torch_dtype(dtype: str | torch.dtype | None) -> torch.dtype | str:
    """``"bfloat16"`` -> ``torch.bfloat16``; ``"auto"``/``None`` stay ``"auto"`` (the checkpoint's dtype)."""
    if dtype is None or dtype == "auto":
        return "auto"
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in FLOAT_DTYPES:
        raise InputError(f"dtype: must be float32, bfloat16, float16 or auto, got {dtype!r}")
    return FLOAT_DTYPES[dtype]


def _first_line(e: BaseException) -> str:
    """``e``'s text on one line (transformers' validation errors put the reason on their second line)."""
    text = " ".join(str(e).split())
    return text[:300] if text else type(e).__name__


def _config_errors() -> type[BaseException]:
    """What transformers 5 raises for a config.json field it validates (``num_attention_heads`` that does not
    divide ``hidden_size``, a string where a float goes): huggingface_hub's strict-dataclass error, which is not a
    ``ValueError`` (it ended as an internal error)."""
    from huggingface_hub.errors import StrictDataclassError  # here: huggingface_hub's errors import its HTTP client

    return StrictDataclassError


# what building a model from a config.json it does not fit raises inside transformers (a `text_config` mapping on
# a family without one: AttributeError; a value no layer takes: TypeError, KeyError, AssertionError)
_BUILD_ERRORS = (AttributeError, KeyError, TypeError, AssertionError, IndexError)


def _config_is_the_cause(path: str, kwargs: Mapping[str, Any], build: bool = False) -> bool:
    """Whether transformers cannot read the model's config.json as a causal LM's config (``build``: or cannot
    build its model on the meta device, no weights read).

    Why asked again after a failed load: only then is "check its config.json" the right advice; a failure
    elsewhere (Hub kernels, a weight, the network) named config.json once (issue 40) and sent users astray.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(path, **kwargs)  # cached by the failed load: no request
        if build:
            with torch.device("meta"):
                AutoModelForCausalLM.from_config(config, trust_remote_code=bool(kwargs.get("trust_remote_code")))
    except (ValueError, OSError, _config_errors(), *_BUILD_ERRORS):
        return True
    # a config transformers reads but has no causal-LM class for (T5's): the config is still the cause
    return getattr(config, "auto_map", None) is None and type(config) not in AutoModelForCausalLM._model_mapping


_KERNELS = re.compile(r"\bkernels?\b", re.IGNORECASE)


def _load_error(ref: str, e: BaseException, path: str, kwargs: Mapping[str, Any], use_kernels: bool) -> InputError:
    """A failed ``from_pretrained`` as one line naming its real cause, with the fix for that cause."""
    err = remote_code_error(ref, e)
    if err is not None:  # a Hub repo that needs its own code
        return err
    cause = _first_line(e)
    if _KERNELS.search(str(e)):
        fix = (
            "set base.use_kernels: false (transformers' own layers), or connect once with `kernels` installed so "
            "they are cached"
            if use_kernels
            else "base.use_kernels is false, so this is a transformers change: report it, and set USE_HUB_KERNELS=NO"
        )
        return InputError(f"base.model {ref!r}: cannot load it: Hub kernels are not available ({cause}); {fix}")
    if isinstance(e, (ValueError, _config_errors())) and _config_is_the_cause(path, kwargs):
        return InputError(
            f"base.model {ref!r}: cannot load it ({cause}); check its config.json (it needs model_type, or "
            "architectures transformers knows)"
        )
    if isinstance(e, _BUILD_ERRORS) and _config_is_the_cause(path, kwargs, build=True):
        return InputError(
            f"base.model {ref!r}: cannot load it ({type(e).__name__}: {cause}); transformers cannot build a model "
            "from its config.json; this config.json is corrupt or edited: use the model's own"
        )
    if isinstance(e, OSError):  # missing safetensors, unknown repo, no network
        return InputError(
            f"base.model {ref!r}: cannot load it ({cause}); check the id or folder, that it has *.safetensors "
            "weights, your network and HF_TOKEN"
        )
    return InputError(
        f"base.model {ref!r}: cannot load it ({cause}); its config.json reads fine, so the weights or this "
        "transformers version are the cause: re-save the base with save_pretrained, or use the transformers "
        "version it was saved with"
    )


def _auto_device(device: str | None) -> torch.device:
    """``"auto"`` -> the first accelerator present (cuda, then mps), else cpu."""
    if device in (None, "auto"):
        mps = torch.backends.mps.is_available()
        return torch.device("cuda" if torch.cuda.is_available() else "mps" if mps else "cpu")
    try:
        return torch.device(device)
    except RuntimeError:
        raise InputError(f"device: {device!r} is not a device; use cpu, cuda, cuda:N, mps or auto") from None


def load_model(
    base_cfg_or_path: Any,
    *,
    dtype: str | torch.dtype | None = None,
    device: str | None = None,
    device_map: str | dict[str, Any] | None = None,
    max_memory: dict[Any, str] | None = None,
    offload_folder: str | Path | None = None,
    trust_remote_code: bool | None = None,
    revision: str | None = None,
    use_kernels: bool | None = None,
) -> tuple[nn.Module, Any]:
    """Load a causal LM (in eval mode) and its tokenizer from a recipe's ``base`` section or a model reference.

    Args:
        base_cfg_or_path: a :class:`~mathneuro_edit.recipe.schema.BaseConfig`, or a model reference: ``"organism"``
            (the shipped model), a local folder, or a Hub id. With a ``BaseConfig``, its fields are the defaults
            of every argument below.
        dtype: ``"float32"``, ``"bfloat16"``, ``"float16"``, ``"auto"`` (the checkpoint's) or a ``torch.dtype``.
        device: ``cpu``, ``cuda``, ``cuda:N``, ``mps`` or ``auto`` (first accelerator, else cpu); ignored
            placement-wise when ``device_map`` is set.
        device_map: accelerate placement (``"auto"``, ``"balanced"``, or ``{module: device | "cpu" | "disk"}``).
        max_memory: per-device caps for ``device_map``, e.g. ``{0: "20GiB", "cpu": "60GiB"}``.
        offload_folder: folder for weights placed on ``"disk"`` that transformers must re-save (fused MoE).
        trust_remote_code: run the repository's own code (only when asked; default ``False``).
        use_kernels: let transformers swap layers for compiled kernels downloaded from the Hub (only when asked;
            default ``False``: transformers' own default would fetch and run them on an accelerator).

    Every refusal (a missing folder, an unknown dtype or device, a corrupt shard, a Hub id that cannot be fetched,
    missing weights or Hub kernels...) is one InputError naming its own cause.

    Example:
        >>> model, tok = load_model("organism", dtype="float32", device="cpu")  # doctest: +SKIP
        >>> big, tok = load_model("meta-llama/Llama-3.1-70B", dtype="bfloat16", device_map="auto",
        ...     max_memory={0: "70GiB", "cpu": "200GiB"}, offload_folder="/scratch/off")  # doctest: +SKIP
    """
    # the options by name (None: not given), which are the recipe's base keys: a base section gives the defaults
    given = {k: v for k, v in locals().items() if k != "base_cfg_or_path"}
    opts = SimpleNamespace(**given)
    if isinstance(base_cfg_or_path, BaseConfig):
        b = base_cfg_or_path
        opts = SimpleNamespace(**{k: getattr(b, k) if v is None else v for k, v in given.items()})
        base_cfg_or_path = base_reference(b)  # a GGUF base: its dequantized folder (docs/gguf.md)
        if b.is_gguf:  # the revision was the GGUF repo's; the folder is local
            opts.revision = None
    if opts.device_map is not None and opts.device not in (None, "auto"):
        raise InputError(f"base: set device or device_map, not both (got device={opts.device!r}); drop one of them")
    if (opts.max_memory is not None or opts.offload_folder is not None) and opts.device_map is None:
        raise InputError("base: max_memory and offload_folder need device_map (e.g. device_map: auto)")
    path = resolve_model_path(base_cfg_or_path)
    check_remote_code(path, bool(opts.trust_remote_code))  # one line instead of transformers' prompt
    local = Path(path)
    if local.is_dir():  # its JSON files regular, small and shallow, its sizes and values ones a model has
        check_config_file_sizes(local)
    if local.is_dir() and any(local.glob("*.safetensors")):
        ckpt = open_checkpoint(local)  # headers only: a truncated or corrupt shard is one line naming file and tensor
        # shapes against config.json (transformers would raise a RuntimeError, or re-initialise the tensor)
        check_config_shapes(ckpt, meta_model(local, trust_remote_code=bool(opts.trust_remote_code)))
    kwargs: dict[str, Any] = dict(revision=opts.revision, trust_remote_code=bool(opts.trust_remote_code))
    model = _load_weights(path, str(base_cfg_or_path), opts, kwargs)
    tokenizer = _load_tokenizer(path, base_cfg_or_path, kwargs)
    model.eval()
    return model, tokenizer


def _load_weights(path: str, ref: str, opts: SimpleNamespace, kwargs: dict[str, Any]) -> nn.Module:
    """The model through transformers, placed as asked; a failed load, or weights missing from the checkpoint,
    is one line naming the cause."""
    torch_dtype = _torch_dtype(opts.dtype)
    device_map = opts.device_map
    if device_map is None:
        target = _auto_device(opts.device)
        # why a one-device map for accelerators: the weights go straight to the device, no full copy in RAM first
        device_map = None if target.type == "cpu" else {"": str(target)}

    from transformers import AutoModelForCausalLM

    # transformers' load report (a table of MISSING keys) is held: a failed load is our one line, the last
    with library_log_held():
        try:
            model, info = AutoModelForCausalLM.from_pretrained(
                path,
                dtype=torch_dtype,
                use_safetensors=True,
                device_map=device_map,
                # a copy: accelerate rewrites the caps in place ("6GiB" -> 6442450944), which changed the recipe
                # itself (a pydantic warning when it was written to the lock)
                max_memory=None if opts.max_memory is None else dict(opts.max_memory),
                offload_folder=None if opts.offload_folder is None else str(opts.offload_folder),
                output_loading_info=True,
                # never transformers' default (None = fetch compiled kernels from the Hub and run them on an
                # accelerator): downloaded code runs only on the recipe's opt-in, and offline never needs it
                use_kernels=bool(opts.use_kernels),
                **kwargs,
            )
        except (ValueError, OSError, _config_errors(), *_BUILD_ERRORS) as e:  # one line naming the real cause
            raise _load_error(ref, e, path, kwargs, bool(opts.use_kernels)) from None
        missing = sorted(info.get("missing_keys") or [])
        if missing:  # transformers would only warn and initialise them randomly: an edit of that is meaningless
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            raise InputError(
                f"base.model {ref!r}: the checkpoint lacks {len(missing)} weight(s) "
                f"of the model ({', '.join(missing[:3])}{more}); re-download or re-save the base"
            )
    return model


def _load_tokenizer(path: str, base: Any, kwargs: dict[str, Any]) -> Any:
    """The model's tokenizer; files it cannot read are one line (or the remote-code refusal)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path, **kwargs)
    # its files are the model's: a chat_template list without "template" keys is a KeyError, a value of the wrong
    # type a TypeError or AttributeError inside transformers (an internal error before)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        err = remote_code_error(base, e)
        if err is not None:
            raise err from None
        raise InputError(
            f"base.model {str(base)!r}: cannot load its tokenizer ({type(e).__name__}: {_first_line(e)}); the folder "
            "needs the tokenizer files save_pretrained writes"
        ) from None


class _LazyWeights(Mapping[str, torch.Tensor]):
    """Base of the lazy weight mappings: values are read on access, never cached (one tensor in memory)."""

    _shapes: dict[str, tuple[int, ...]]

    def __iter__(self) -> Iterator[str]:
        return iter(self._shapes)

    def __len__(self) -> int:
        return len(self._shapes)

    def __contains__(self, name: object) -> bool:
        return name in self._shapes

    def shape_of(self, name: str) -> tuple[int, ...]:
        """The tensor's shape without reading it."""
        return self._shapes[name]


class _ModelWeights(_LazyWeights):
    def __init__(self, model: nn.Module) -> None:
        self._model = model
        self._params = dict(model.named_parameters(remove_duplicate=False))
        self._shapes = {n: tuple(p.shape) for n, p in self._params.items()}

    def __getitem__(self, name: str) -> torch.Tensor:
        p = self._params[name]
        if p.device.type != "meta":
            return p.detach()
        from transformers.integrations.accelerate import load_offloaded_parameter

        try:
            return load_offloaded_parameter(self._model, name)  # accelerate's offload map: RAM or disk
        except (ValueError, KeyError) as e:
            raise InputError(
                f"{name}: the parameter is on the meta device and no accelerate offload holds it ({e}); load the "
                "model with from_pretrained(device_map=...) or read the weights with weights_from_checkpoint"
            ) from None


def model_weights(model: nn.Module) -> Mapping[str, torch.Tensor]:
    """A model's parameters (``device_map`` may have offloaded some to CPU or disk) as a lazy read-only mapping
    ``named_parameters() name -> tensor``: resident parameters as they are, offloaded ones (meta tensors) read back
    from accelerate's offload on each access, in the model's dtype; ``.shape_of(name)`` costs nothing.
    """
    return _ModelWeights(model)


class CheckpointWeights(_LazyWeights):
    """Target weights of a checkpoint folder under their loaded (``named_parameters()``) names, read lazily (built
    by :func:`weights_from_checkpoint`; how a fused-experts weight stored per expert is assembled: docs/scaling.md),
    each assembled weight checked to cover every position exactly once."""

    def __init__(
        self, folder: Path, names: Iterable[str] | None, dtype: torch.dtype | None, trust_remote_code: bool = False
    ) -> None:
        self.folder = folder
        self.dtype = dtype
        self._ckpt = open_checkpoint(folder)
        self._model = meta_model(folder, trust_remote_code=trust_remote_code)
        if self._model is None:
            raise InputError(
                f"{folder}: transformers cannot build this model family from config.json; "
                "load the model and use model_weights(model) instead"
            )
        params = {n: tuple(p.shape) for n, p in self._model.named_parameters(remove_duplicate=False)}
        wanted = list(find_targets(self._model)) if names is None else list(names)
        unknown = [n for n in wanted if n not in params]
        if unknown:
            raise InputError(
                f"{unknown[0]!r} is not a parameter of the model in {folder}; "
                "the names come from another model: recalibrate on this one"
            )
        self._shapes = {n: params[n] for n in wanted}
        # plan_edits asks a mask for its names and shapes only: these weights' own
        self._plan = plan_edits(self._ckpt, self, self._model, trust_remote_code=trust_remote_code)

    def __getitem__(self, name: str) -> torch.Tensor:
        shape = self._shapes[name]
        direct = self._plan.direct.get(name)
        t = (self._ckpt.read(direct[0]) if direct else self._assemble(name, shape)).reshape(shape)
        return t if self.dtype is None else t.to(self.dtype)

    def _assemble(self, name: str, shape: tuple[int, ...]) -> torch.Tensor:
        from transformers.core_model_loading import revert_weight_conversion

        numel = int(torch.Size(shape).numel())
        # Why int32 when it fits: the position tensor is the largest temporary here (a fused MoE weight).
        pos_dtype = torch.int32 if numel < 2**31 else torch.int64
        positions = torch.arange(numel, dtype=pos_dtype).reshape(shape)
        pieces = revert_weight_conversion(self._model, {name: positions})  # converted name -> positions
        sources = self._plan.converted[name]
        out: torch.Tensor | None = None
        seen = torch.zeros(numel, dtype=torch.bool)
        for conv_name, pos in pieces.items():
            stored = self._ckpt.read(sources[conv_name])
            if out is None:
                out = torch.empty(numel, dtype=stored.dtype)
            idx = pos.reshape(-1).long()
            out[idx] = stored.reshape(-1).to(out.dtype)
            seen[idx] = True
        if out is None or not bool(seen.all()):
            raise InputError(f"{name}: the checkpoint pieces do not cover the whole fused weight; re-save the base")
        return out


def weights_from_checkpoint(
    model_dir: str | Path,
    *,
    names: Iterable[str] | None = None,
    dtype: str | torch.dtype | None = None,
    revision: str | None = None,
    trust_remote_code: bool = False,
) -> CheckpointWeights:
    """Target weights of a checkpoint's safetensors files, named as ``from_pretrained`` names them: a lazy
    :class:`CheckpointWeights` mapping (read on access, nothing cached).

    For models too big to hold: the mask step needs each weight once, so it can read them one at a time from
    disk instead of from a loaded (possibly offloaded) model. ``names``: the parameters to expose (default: every
    target of the model); ``dtype``: the one the model was calibrated in (``stats.meta["dtype"]``), so that scores
    equal those of the loaded model (``None``: the stored dtype). Refused: no safetensors weights, a name that is
    not a parameter, a weight that cannot be mapped.

    Example:
        >>> w = weights_from_checkpoint("/models/llama", names=math.targets, dtype=math.meta["dtype"])  # doctest: +SKIP
        >>> mask = find_math_params(w, math, general, top_k=0.05)  # doctest: +SKIP
    """
    cast = _torch_dtype(dtype)  # "auto" (and None): the stored dtype
    folder = resolve_base(resolve_model_path(model_dir), revision=revision)
    return CheckpointWeights(folder, names, cast if isinstance(cast, torch.dtype) else None, trust_remote_code)
