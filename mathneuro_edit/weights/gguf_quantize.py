"""K-quants (and llama.cpp's other types) made by llama.cpp's own quantizer from the project's exact float GGUF.

The gguf package cannot write K-quants (:data:`~.gguf_tensors.GGUF_TYPES` are its types): the float GGUF that holds
the checkpoint exactly (:func:`source_type`, written by :func:`~.gguf_writer.write_gguf`) is quantized by
llama-cpp-python's ``llama_model_quantize`` when it is installed, else by a ``llama-quantize`` program
(:func:`find_quantizer`). docs/gguf.md says why the program is named by an environment variable and not a recipe
key, and why the quantizer's version is recorded beside the files (:func:`quantizer_version`): it decides the bytes,
which the thread count does not (tests/weights/test_gguf_kquants.py).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..util.files import TEMP_SUFFIX, file_mode

__all__ = [
    "LLAMA_CPP_TYPES",
    "source_type",
    "find_quantizer",
    "quantizer_version",
    "llama_quantize",
    "write_gguf_types",
    "audit_llama_cpp",
]

# llama.cpp's file types (llama.h's ``enum llama_ftype``, gguf's ``LlamaFileType.MOSTLY_<type>``) that only its
# quantizer writes, and that need no importance matrix: the K-quants and the two 4-bit non-linear types
LLAMA_CPP_TYPES = tuple("Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K IQ4_NL IQ4_XS".split())

_HOW = (
    "outputs.gguf: {qtype} is made by llama.cpp's quantizer, and none was found: pip install llama-cpp-python "
    "(or build llama.cpp and put llama-quantize on PATH, or set MATHNEURO_EDIT_LLAMA_QUANTIZE=PROGRAM)"
)


def source_type(dtype: str | None) -> str:
    """The float GGUF type a K-quant is made from: the one that holds the checkpoint's weights exactly.

    Example:
        >>> source_type("bfloat16"), source_type("float16"), source_type("float32"), source_type(None)
        ('BF16', 'F16', 'F32', 'F32')
    """
    return {"bfloat16": "BF16", "float16": "F16"}.get(str(dtype), "F32")


def find_quantizer(qtype: str) -> str:
    """``"llama_cpp"`` (llama-cpp-python importable) or the path of a ``llama-quantize`` program
    (``MATHNEURO_EDIT_LLAMA_QUANTIZE``, else on PATH).

    Raises:
        InputError: none found (one line saying how to get one), or the variable names no executable.
    """
    if program := os.environ.get("MATHNEURO_EDIT_LLAMA_QUANTIZE"):
        found = shutil.which(program)
        if found is None:
            raise InputError(f"MATHNEURO_EDIT_LLAMA_QUANTIZE: {program!r} is not an executable program")
        return found
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        found = shutil.which("llama-quantize")
        if found is None:
            raise InputError(_HOW.format(qtype=qtype)) from None
        return found
    return "llama_cpp"


def quantizer_version(how: str) -> str:
    """What made the files: ``llama-cpp-python X.Y.Z`` or the program's ``--version`` line."""
    if how == "llama_cpp":
        import llama_cpp

        return f"llama-cpp-python {llama_cpp.__version__}"
    try:
        done = subprocess.run([how, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except OSError:
        return "llama-quantize (version unknown)"
    line = next((ln for ln in (done.stdout + done.stderr).splitlines() if "version" in ln.lower()), "")
    return f"llama-quantize {line.strip()}".strip()


def llama_quantize(src: str | Path, dst: str | Path, qtype: str, *, how: str, nthread: int = 1) -> Path:
    """Quantize the float GGUF ``src`` into ``dst`` as ``qtype`` with llama.cpp (``how``: :func:`find_quantizer`),
    atomically (a temporary file renamed when complete).

    Raises:
        InputError: llama.cpp refused the file (its reason, in one line).
    """
    src, dst = Path(src), Path(dst)
    fd, name = tempfile.mkstemp(dir=dst.parent, prefix=f".{dst.name}-", suffix=TEMP_SUFFIX)  # exclusive, random
    os.close(fd)
    tmp = Path(name)
    try:  # llama.cpp writes by name into the temporary file; synced, then renamed onto dst
        if how == "llama_cpp":
            rc, why = _in_process(src, tmp, qtype, nthread), "llama_model_quantize failed"
        else:
            done = subprocess.run(
                [how, str(src), str(tmp), qtype, str(nthread)], capture_output=True, text=True, check=False
            )
            rc = done.returncode
            why = (done.stderr.strip().splitlines() or [f"exit {rc}"])[-1][:300]
        if rc != 0:
            raise InputError(f"outputs.gguf: llama.cpp could not quantize {src.name} to {qtype}: {why}")
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, file_mode())
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)
    return dst


def _in_process(src: Path, dst: Path, qtype: str, nthread: int) -> int:
    """llama-cpp-python's ``llama_model_quantize``, its log quiet unless it fails."""
    import ctypes

    import gguf
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = int(gguf.LlamaFileType[f"MOSTLY_{qtype}"])
    params.nthread = nthread
    log = logging.getLogger("llama-cpp-python")  # its log callback prints only at this logger's level and above
    level, saved = log.level, os.dup(2)
    log.setLevel(logging.ERROR)
    with tempfile.TemporaryFile() as err:  # what ggml prints itself (per-tensor fallbacks): not on our stderr
        os.dup2(err.fileno(), 2)
        try:
            return int(llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params)))
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            log.setLevel(level)


def write_gguf_types(checkpoint: str | Path, types: list[str], *, source: str, **how: Any) -> dict[str, Path]:
    """Write ``model-<TYPE>.gguf`` for each of ``types`` into the ``checkpoint`` folder: the gguf package's types
    with :func:`~.gguf_writer.write_gguf` (as a single type always was), llama.cpp's from the ``source`` float GGUF
    (``model-<source>.gguf``, kept when asked for, else written beside and removed).

    Args:
        how: ``name``, ``pre`` and ``meta`` of :func:`~.gguf_writer.write_gguf`.

    Returns:
        ``{type: path}`` in the order asked.
    """
    from .gguf_writer import gguf_filename, write_gguf

    folder = Path(checkpoint)
    done: dict[str, Path] = {}
    for t in [t for t in types if t not in LLAMA_CPP_TYPES]:
        done[t] = write_gguf(folder, folder / gguf_filename(t), t, **how)
    kquants = [t for t in types if t in LLAMA_CPP_TYPES]
    if kquants:
        quantizer = find_quantizer(kquants[0])
        src = done.get(source) or write_gguf(folder, folder / f".source-{gguf_filename(source)}", source, **how)
        try:
            for t in kquants:
                done[t] = llama_quantize(src, folder / gguf_filename(t), t, how=quantizer)
        finally:
            if source not in done:
                src.unlink(missing_ok=True)
    return {t: done[t] for t in types}


def audit_llama_cpp(path: str | Path, checkpoint: str | Path, ft: str) -> tuple[int, list[str]]:
    """A llama.cpp type (a K-quant): the checkpoint's float GGUF (:func:`~.gguf_quantize.source_type`) quantized
    again by llama.cpp, each tensor's bytes compared (the metadata aside); a mismatch names the quantizer, whose
    version decides the bytes."""
    import numpy as np

    from .gguf_keys import gguf_package, read_config
    from .gguf_writer import write_gguf

    gguf, folder = gguf_package(), Path(checkpoint)
    r = gguf.GGUFReader(str(path))
    cfg = read_config(folder)[0]
    how = find_quantizer(ft)
    with tempfile.TemporaryDirectory(dir=Path(path).parent, prefix=".gguf-audit-") as tmp:
        src = write_gguf(folder, Path(tmp) / "source.gguf", source_type(cfg.get("dtype") or cfg.get("torch_dtype")))
        again = {
            t.name: t for t in gguf.GGUFReader(str(llama_quantize(src, Path(tmp) / "q.gguf", ft, how=how))).tensors
        }
        got = {t.name: t for t in r.tensors}
        bad = [f"{n}: missing" for n in again if n not in got] + [f"{n}: extra" for n in got if n not in again]
        for name in [n for n in again if n in got]:
            a, b = again[name], got[name]
            if a.tensor_type != b.tensor_type or np.asarray(a.data).tobytes() != np.asarray(b.data).tobytes():
                bad.append(f"{name}: not {quantizer_version(how)}'s {ft} quantization of the checkpoint's tensor")
    return len(got), bad
