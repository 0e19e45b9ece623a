"""The outputs a run publishes, one registered :class:`Output` each: the edited checkpoint, the sparse PEFT adapter
and the GGUF files. Everything that differs between them lives in their entry (the run folder they are written
to, which of the lock's files are theirs, their Hub repo's suffix, their model card's library, relation to the
base, tags and first sentence), so that the card, the push and the release read one table instead of switching on
a name. A new output is one :func:`register_output` call (like PEFT's ``register_peft_method``) plus its writer
in :mod:`mathneuro_edit.weights` and its step in :func:`mathneuro_edit.runs.steps.export_step`.

Example:
    >>> [(o.name, o.repo_suffix, o.library) for o in OUTPUTS.values()]
    [('checkpoint', '', 'transformers'), ('adapter', '-adapter', 'peft'), ('gguf', '-GGUF', 'gguf')]
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError
from ..layout import ADAPTER_DIR, CHECKPOINT_DIR

__all__ = ["Output", "OUTPUTS", "register_output", "output", "repo_for"]


@dataclass(frozen=True)
class Output:
    """One published output.

    Attributes:
        name: what recipes, the command line and cards call it.
        folder: the run folder's subfolder that holds it (a GGUF file is written into the checkpoint's).
        gguf_files: whether its files are the ``.gguf`` files of ``folder`` (True), every other file of it (False),
            or all of them (None).
        repo_suffix: its Hub repo is ``<hub.repo_id><repo_suffix>`` (one repo per output).
        library: the card's ``library_name`` (what loads it).
        relation: the card's ``base_model_relation`` to the base.
        tags: tags its card adds.
        holds: the card's first sentence, "This <holds> a MathNeuro edit of ...".
        evaluated: whether its card carries the evaluation as Hub ``model-index`` results.
    """

    name: str
    folder: str
    gguf_files: bool | None
    repo_suffix: str
    library: str
    relation: str
    tags: tuple[str, ...]
    holds: str
    evaluated: bool

    def owns(self, path: str) -> bool:
        """Whether a run-relative file path (``checkpoint/model.safetensors``) is one of this output's files."""
        if not path.startswith(self.folder + "/"):
            return False
        return self.gguf_files is None or path.endswith(".gguf") == self.gguf_files


OUTPUTS: dict[str, Output] = {}


def register_output(entry: Output) -> Output:
    """Add an output to :data:`OUTPUTS` (its name must be new)."""
    if entry.name in OUTPUTS:
        raise ValueError(f"output {entry.name!r} is already registered")
    OUTPUTS[entry.name] = entry
    return entry


def output(name: str) -> Output:
    """The registered output ``name``, or one line naming the ones there are.

    Example:
        >>> output("adapter").repo_suffix
        '-adapter'
    """
    try:
        return OUTPUTS[name]
    except KeyError:
        names = [repr(k) for k in OUTPUTS]
        known = ", ".join(names[:-1]) + " or " + names[-1]
        raise InputError(f"kind: must be {known}, got {name!r}") from None


def repo_for(repo_id: str, name: str) -> str:
    """The Hub repo output ``name`` goes to from the recipe's ``hub.repo_id``.

    Example:
        >>> [repo_for("me/boost", k) for k in OUTPUTS]
        ['me/boost', 'me/boost-adapter', 'me/boost-GGUF']
    """
    return repo_id + output(name).repo_suffix


register_output(
    Output(
        name="checkpoint",
        folder=CHECKPOINT_DIR,
        gguf_files=False,
        repo_suffix="",
        library="transformers",
        relation="finetune",
        tags=(),
        holds="model is",
        evaluated=True,
    )
)
register_output(
    Output(
        name="adapter",
        folder=ADAPTER_DIR,
        gguf_files=None,
        repo_suffix="-adapter",
        library="peft",
        relation="adapter",
        tags=("peft", "shira", "transformers"),
        holds="PEFT adapter holds",
        evaluated=True,
    )
)
register_output(
    Output(
        name="gguf",
        folder=CHECKPOINT_DIR,
        gguf_files=True,
        repo_suffix="-GGUF",
        library="gguf",
        relation="quantized",
        tags=("llama.cpp",),
        holds="repo holds, as GGUF files for llama.cpp,",
        evaluated=False,
    )
)
