"""GGUF bases: a ``.gguf`` file dequantized once into a plain safetensors Hugging Face folder, then used as any base.

Every stage reads a safetensors folder, so a GGUF base is materialised first (:func:`dequantize_gguf`):
transformers dequantizes every tensor to float32, a plain model of the same config takes the state dict (a model
transformers marks quantized cannot be ``save_pretrained``), and the model, its generation config and tokenizer
are saved into ``<cache>/gguf/<sha256 of the .gguf>/`` (:func:`cache_root`): once per file, the same bytes on every
run and machine. docs/gguf.md tells the whole story (why float32, the cache, PEFT users of such a base).

Example:
    >>> folder = dequantize_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")  # doctest: +SKIP
    >>> AutoModelForCausalLM.from_pretrained(folder)  # a plain float32 model  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..util.console import library_log_held
from ..util.hashing import sha256_file
from ..util.hub_online import require_hub
from ..util.outdir import check_output
from . import gguf_writer
from .gguf_header import check_gguf_header
from .gguf_tensors import GGUF_TYPES

__all__ = [
    "is_gguf",
    "cache_root",
    "gguf_source",
    "dequantize_gguf",
    "base_folder",
    "gguf_lock_entry",
    "gguf_identity",
    "gguf_source_dtype",
]

_MEMO: dict[tuple[str, int, int], str] = {}  # (resolved path, size, mtime_ns) -> sha256: hash a file once


def is_gguf(model: str | Path | None) -> bool:
    """Whether a model reference names a GGUF file (by its ``.gguf`` extension).

    Example:
        >>> is_gguf("models/SmolLM2.Q4_1.gguf"), is_gguf("meta-llama/Llama-3.2-1B")
        (True, False)
    """
    return model is not None and str(model).lower().endswith(".gguf")


def cache_root() -> Path:
    """The cache root: ``$MATHNEURO_EDIT_CACHE``, else ``$XDG_CACHE_HOME/mathneuro_edit``, else ``~/.cache/...``."""
    if os.environ.get("MATHNEURO_EDIT_CACHE"):
        return Path(os.environ["MATHNEURO_EDIT_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "mathneuro_edit"


def _sha256(path: Path) -> str:
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _MEMO:
        _MEMO[key] = sha256_file(path)
    return _MEMO[key]


def gguf_source(model: str, gguf_file: str | None = None, revision: str | None = None) -> tuple[Path, str | None]:
    """The local path of a GGUF base, and the Hub commit it came from (``None`` for a local file): ``model`` a local
    ``.gguf`` file; or a Hub repo id or a local folder holding ``gguf_file`` (the recipe's ``base.gguf_file``).
    A missing file, or a Hub file that cannot be downloaded, is one line.
    """
    if gguf_file is None:
        path = Path(model).expanduser()
        if not path.is_file():
            raise InputError(
                f"base.model: no such GGUF file {model!r}; check the path (or give a Hub repo and base.gguf_file)"
            )
        return path, None
    local = Path(model).expanduser()
    if local.is_dir():
        path = local / gguf_file
        if not path.is_file():
            raise InputError(f"base.gguf_file: {gguf_file!r} is not in the folder {model!r}; check the file name")
        return path, None
    from huggingface_hub import hf_hub_download

    require_hub(model, what="base.model", filename=gguf_file, revision=revision)  # offline: one line, at once
    try:
        path = Path(hf_hub_download(model, gguf_file, revision=revision))
    except Exception as e:  # network, auth, missing repo or file: one clear line
        why = " ".join(f"{type(e).__name__}: {e}".split())[:300]
        raise InputError(
            f"base: cannot get {gguf_file!r} from the Hub repo {model!r} ({why}); check the repo, the "
            "file name, your network and HF_TOKEN, or pass a local .gguf file"
        ) from None
    commit = path.parent.name if path.parent.parent.name == "snapshots" else None
    return path, commit


def dequantize_gguf(gguf: str | Path, *, cache_dir: str | Path | None = None) -> Path:
    """The dequantized safetensors folder ``<cache_dir>/gguf/<sha256>`` of a local ``.gguf`` file (cache_dir default:
    :func:`cache_root`), created the first time: config.json, generation_config.json, model.safetensors, tokenizer
    files with the chat template, README.md naming the source. Refused in one line: a missing file, a missing
    ``gguf`` package, a GGUF transformers cannot read.
    """
    path = Path(gguf).expanduser()
    if not path.is_file():
        raise InputError(f"base.model: no such GGUF file {str(gguf)!r}; check the path")
    check_gguf_header(path)  # before hashing and loading: a damaged or hostile header is one line, not a hang
    sha = _sha256(path)
    root = Path(cache_dir).expanduser() if cache_dir is not None else cache_root()
    dest = root / "gguf" / sha
    if (dest / "config.json").is_file():
        return dest
    check_output(dest, [("GGUF file", path)], label="the dequantized folder")  # never onto its own input
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{sha[:12]}.tmp-", dir=dest.parent))
    try:
        _materialise(path, sha, tmp)
        os.chmod(tmp, 0o755)
        try:
            tmp.rename(dest)
        except OSError:  # another process finished the same folder first: keep theirs (same bytes)
            if not (dest / "config.json").is_file():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


@contextlib.contextmanager
def _libraries_bar_switch() -> Iterator[None]:
    """transformers' GGUF loader draws its own tqdm bar (one update per tensor: 272 for SmolLM2) whatever the
    libraries' progress-bar switch says; inside the block it follows that switch (huggingface_hub's, which the CLI
    turns off unless ``--verbose``), so a run's first line on stderr is its first stage line."""
    from huggingface_hub.utils import are_progress_bars_disabled
    from transformers import modeling_gguf_pytorch_utils as loader

    original = getattr(loader, "tqdm", None)
    if original is None or not are_progress_bars_disabled():
        yield
        return
    loader.tqdm = functools.partial(original, disable=True)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        loader.tqdm = original  # type: ignore[attr-defined]


def _materialise(path: Path, sha: str, out: Path) -> None:
    """Dequantize ``path`` with transformers and save it as a plain float32 safetensors folder in ``out``."""
    import importlib.util

    if importlib.util.find_spec("gguf") is None:
        raise InputError("base.model: a .gguf base needs the gguf package; pip install 'gguf>=0.17' (the gguf extra)")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(path.parent), path.name
    # transformers' load report (15 lines for a GGUF short of a block) is held: a failed load is our one line
    with library_log_held() as held:
        try:
            with _libraries_bar_switch():  # transformers' "de-quantizing GGUF tensors" bar: quiet unless --verbose
                # why float32: GGUF blocks dequantize to float32 values (scale * q + min); a narrower dtype rounds
                quantized, info = AutoModelForCausalLM.from_pretrained(
                    folder, gguf_file=name, dtype=torch.float32, output_loading_info=True, use_kernels=False
                )  # use_kernels: never Hub kernels (downloaded code) to dequantize a file
                tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        except Exception as e:  # noqa: BLE001 - any parse failure of a foreign file is bad input: one line
            text = " ".join(str(e).split())[:300] or type(e).__name__
            if "above report" in text and held.gist():  # the report is not shown: its first row, in the line
                raise InputError(
                    f"base.model {name!r}: the GGUF file's tensors do not fit the sizes its header "
                    f"gives ({held.gist()[:300]}); re-download or re-convert it"
                ) from None
            raise InputError(
                f"base.model {name!r}: transformers cannot read this GGUF file ({text}); check that "
                "its architecture is one transformers' GGUF support lists"
            ) from None
        missing = sorted(info.get("missing_keys") or [])
        if missing:  # transformers would initialise them randomly ("newly initialized"): never acceptable
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            raise InputError(
                f"base.model {name!r}: the GGUF file lacks {len(missing)} tensor(s) its architecture "
                f"needs ({', '.join(missing[:3])}{more}; e.g. its header promises more blocks than it "
                "holds); re-download or re-convert it"
            )
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # a plain model: saveable, and loaded without the gguf package
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(quantized.state_dict(), strict=True)
    plain.generation_config = quantized.generation_config
    del quantized
    plain.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    for f in out.iterdir():  # save_pretrained may leave a private mode; a model folder is shared-readable
        os.chmod(f, 0o644)
    from importlib.metadata import version

    lic = _gguf_license(path)
    front = f"---\nlicense: {lic}\n---\n" if lic else ""  # read by base_card.base_card_fields for the edit's card
    (out / "README.md").write_text(
        front + f"# Dequantized GGUF base (written by mathneuro-edit)\n\nSource: `{name}`, sha256 `{sha}`.\n"
        f"Dequantized to float32 by transformers {version('transformers')} (gguf {version('gguf')}); "
        "re-create it with `mathneuro-edit dequantize FILE.gguf`.\n"
    )


def _fields(path: str | Path) -> dict[str, Any]:
    """A GGUF file's metadata fields, read once its header is checked (:func:`check_gguf_header`)."""
    from gguf import GGUFReader

    check_gguf_header(path)
    return GGUFReader(str(path)).fields


def _gguf_license(path: Path) -> str | None:
    """The GGUF's ``general.license`` metadata when it is a plain license id (``apache-2.0``), else ``None``."""
    field = _fields(path).get("general.license")
    value = str(field.contents()) if field is not None else ""
    return value if re.fullmatch(r"[\w.+-]{1,64}", value) else None


def base_folder(base_cfg: Any) -> Path:
    """The dequantized folder of a recipe's GGUF ``base`` section (a local file or Hub repo + ``gguf_file``)."""
    path, _ = gguf_source(base_cfg.model, base_cfg.gguf_file, base_cfg.revision)
    return dequantize_gguf(path)


def gguf_lock_entry(base_cfg: Any) -> tuple[dict[str, Any], str | None]:
    """``({"file": NAME, "sha256": ..., "general": {...}}, hub commit or None)`` of a recipe's GGUF base, for the
    lock; ``general`` is :func:`gguf_identity` (absent when the file names nothing)."""
    path, commit = gguf_source(base_cfg.model, base_cfg.gguf_file, base_cfg.revision)
    general = gguf_identity(path)
    return {"file": path.name, "sha256": _sha256(path), **({"general": general} if general else {})}, commit


_IDENTITY = ("name", "organization", "basename", "size_label", "finetune", "languages")
_ID_VALUE = re.compile(r"^[\w .+-]{1,80}$")


def gguf_identity(path: str | Path) -> dict[str, Any]:
    """What a GGUF file's own ``general.*`` metadata says the model is: ``name``, ``organization``, ``basename``,
    ``size_label``, ``finetune`` and ``languages``, as llama.cpp's converter wrote them (SmolLM2's Q4_1:
    ``smollm2`` / ``135M`` / ``HuggingFaceTB`` / ``["en"]``). Plain short values only: a value with a ``/`` (a
    path) or control characters is dropped, never published.
    """
    fields = _fields(path)
    found: dict[str, Any] = {}
    for key in _IDENTITY:
        field = fields.get(f"general.{key}")
        try:
            value = field.contents() if field is not None else None
        except Exception:  # noqa: BLE001 - a malformed field is dropped, not guessed
            continue
        if key == "languages":
            value = [str(v) for v in value if _ID_VALUE.match(str(v))] if isinstance(value, list) else []
        elif not (isinstance(value, str) and _ID_VALUE.match(value)):
            continue
        if value:
            found[key] = value
    return found


def gguf_source_dtype(base_cfg: Any) -> str:
    """The dtype a GGUF base's checkpoint is written in by default (``outputs.dtype: auto``): the GGUF's own when
    it holds unquantized weights (``F32``, ``F16``, ``BF16`` file types: the converter's output type), else
    ``bfloat16`` (why: docs/gguf.md)."""
    path, _ = gguf_source(base_cfg.model, base_cfg.gguf_file, base_cfg.revision)
    own = gguf_writer.gguf_file_type(path)
    return {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}.get(own, "bfloat16")


def gguf_output(base_cfg: Any, requested: str | None) -> tuple[str | None, str | None]:
    """The GGUF type to write and the ``tokenizer.ggml.pre`` to keep, for a recipe's ``outputs.gguf`` (a type,
    ``"base"`` or ``None``).

    ``requested="base"`` becomes the GGUF base's own type (:func:`~.gguf_writer.gguf_file_type`), refused when the
    gguf package cannot write it (e.g. ``Q4_K_M``). ``pre`` is the GGUF base's own (why: ``write_gguf``'s ``pre``),
    ``None`` for a base that is not a GGUF: ``gguf_output(recipe.base, "base")`` gives ``('Q4_1', 'smollm')`` for
    SmolLM2's Q4_1.
    """
    if requested is None or not getattr(base_cfg, "is_gguf", False):
        return requested, None
    path, _ = gguf_source(base_cfg.model, base_cfg.gguf_file, base_cfg.revision)
    field = _fields(path).get("tokenizer.ggml.pre")
    pre = str(field.contents()) if field is not None else None
    if requested != "base":
        return requested, pre
    own = gguf_writer.gguf_file_type(path)  # looked up at call time (tests replace it)
    if own not in GGUF_TYPES:
        raise InputError(
            f"outputs.gguf: base: the base {path.name} is {own}, which the gguf package cannot write; "
            f"choose one of {', '.join(GGUF_TYPES)}"
        )
    return own, pre
