"""The base-reference resolver: the one place that turns what a user names as a base into a folder or a Hub id.

A base is ``organism`` (the shipped model), a local folder, a local ``.gguf`` file (dequantized once into a cached
safetensors folder), or a Hub id (resolved through huggingface_hub's cache). A string that looks like a path never
falls back to a Hub lookup: a typo says "no such local folder".
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..organism import organism_path
from ..recipe.input_sections import BaseConfig
from ..util.hub_online import require_hub
from ..util.paths import ORGANISM, is_local_path, no_such_local_folder
from .checkpoint import SKIPPED_WEIGHT_PATTERNS
from .gguf_reader import base_folder, dequantize_gguf


def resolve_base(base: str | Path, *, revision: str | None = None, allow_pickle: bool = False) -> Path:
    """A local folder as is, or a Hub id resolved through huggingface_hub's cache (``snapshot_download``);
    ``organism`` is the shipped model's folder, a local ``.gguf`` file its dequantized safetensors folder
    (:func:`~mathneuro_edit.weights.gguf_reader.dequantize_gguf`). A path never falls back to the Hub.
    """
    if str(base) == ORGANISM:  # the shipped model, as everywhere a base is accepted
        return organism_path().resolve()
    path = Path(base).expanduser()
    if path.is_dir():
        return path.resolve()
    if path.is_file() and path.suffix.lower() == ".gguf":  # its dequantized safetensors folder (docs/gguf.md)
        return dequantize_gguf(path).resolve()
    if path.exists():
        raise InputError(f"base: {path} is a file; pass the model folder (with config.json) or a Hub id")
    if isinstance(base, Path) or is_local_path(str(base)):  # a path is never looked up on the Hub
        raise no_such_local_folder(str(base), "base")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(str(base))
    except HFValidationError:
        raise InputError(f"base: no such folder {str(base)!r} and not a valid Hub id; check the path") from None
    # Only what an edited export needs: not other frameworks' weights, nor duplicates like consolidated.*.
    ignore = [p for p in SKIPPED_WEIGHT_PATTERNS if allow_pickle is False or p not in ("*.bin", "*.pt")]
    require_hub(str(base), what="base", revision=revision)  # offline: one line now, not ~40 s of retries
    try:
        return Path(snapshot_download(str(base), revision=revision, ignore_patterns=[*ignore, "consolidated*"]))
    except Exception as e:  # network, auth, missing repo: one clear line
        raise _hub_failure(str(base), e) from None


def resolve_model_path(model: str | Path) -> str:
    """What ``from_pretrained`` gets: the organism's folder, a local folder (checked), a local ``.gguf`` file's
    dequantized folder, or a Hub id unchanged (in the local Hub cache or with the Hub reachable:
    :func:`~mathneuro_edit.util.hub_online.require_hub`). Refused: a local path that does not exist or is not a
    model folder (InputError); a Hub id not in the cache while ``HF_HUB_OFFLINE`` is set (InputError) or while
    the Hub cannot be reached (MathNeuroEditError).
    """
    if str(model) == ORGANISM:
        path = organism_path()
        if not (path / "config.json").is_file():
            raise InputError(
                f"base.model organism: {path} is missing; regenerate it with "
                "`python scripts/train_organism.py --threads 2`"
            )
        return str(path)
    text = str(model)
    if isinstance(model, Path) or is_local_path(text):
        path = Path(text).expanduser()
        if path.is_file() and path.suffix.lower() == ".gguf":  # its dequantized safetensors folder (docs/gguf.md)
            return str(dequantize_gguf(path))
        if not path.exists():
            raise no_such_local_folder(text)
        if not path.is_dir():
            raise InputError(
                f"base.model: {text!r} is a file, not a model folder; pass the folder save_pretrained "
                "wrote (or a .gguf file)"
            )
        if not (path / "config.json").is_file():
            raise InputError(f"base.model: {text!r} has no config.json; pass the folder save_pretrained wrote")
        return str(path)
    require_hub(text, what="base.model")  # offline: one line now, not ~40 s of retries
    return text


def base_reference(base: BaseConfig) -> str:
    """What export functions and :func:`~.loading.load_model` take as the model of a recipe's ``base`` section:
    the local folder (the organism's for ``organism``; a GGUF base's dequantized folder) or the Hub id. A local
    path (``./models/llama``) that does not exist is "no such local folder", never a Hub lookup.
    """
    if base.is_gguf:
        return str(base_folder(base))
    local = base.local_dir()
    if local is not None and not local.exists():  # checked here: str(Path("./x/y")) is "x/y", which reads as a Hub id
        raise no_such_local_folder(base.model)
    return str(local) if local is not None else base.model


def hub_commit(repo_id: str, revision: str | None = None) -> str:
    """The commit a Hub model's ``revision`` (default: main) resolves to, from its ``config.json`` alone (fetched
    or cached): the name of the snapshot folder :func:`resolve_base` gives, without downloading the weights; one
    line when offline and not cached, or when the Hub cannot give the file.
    """
    from huggingface_hub import hf_hub_download

    require_hub(repo_id, what="base", revision=revision)  # offline: one line now, not ~40 s of retries
    try:
        path = Path(hf_hub_download(repo_id, "config.json", revision=revision))
    except Exception as e:  # network, auth, missing repo: one clear line
        raise _hub_failure(repo_id, e) from None
    commit = resolved_revision(path.parent)
    if commit is None:
        raise InputError(f"base: {repo_id!r}: the Hub cache gave no commit for {revision or 'main'}; pass a commit")
    return commit


def resolved_revision(folder: Path) -> str | None:
    """The commit of a Hub snapshot folder (``.../snapshots/<sha>``), else ``None`` (a local base)."""
    return folder.name if folder.parent.name == "snapshots" else None


def _hub_failure(repo_id: str, e: Exception) -> InputError:
    """The one line a base the Hub could not give gets (the snapshot or, for its commit, its config.json)."""
    why = " ".join(f"{type(e).__name__}: {e}".split())[:300]
    return InputError(
        f"base: cannot get {repo_id!r} from the Hugging Face Hub ({why}); check the id, your "
        "network and HF_TOKEN, or pass a local folder"
    )
