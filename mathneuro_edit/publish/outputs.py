"""The outputs a run publishes, one registered :class:`Output` each: the edited checkpoint, the sparse PEFT adapter
and the GGUF files. Everything that differs between them lives in their entry (the run folder they are written
to, which of the lock's files are theirs, how a folder is recognised as one, their Hub repo's suffix and file
names, the output they are made from, their model card's library, relation to the base, tags, first sentence,
usage snippet and loaders), so that the card, the push and the release read one table instead of switching on
a name. A new output is one :func:`register_output` call (like PEFT's ``register_peft_method``) plus its writer
in :mod:`mathneuro_edit.weights` and its run step in :mod:`mathneuro_edit.runs.step_export` (``EXPORTERS``).

Example:
    >>> [(o.name, o.repo_suffix, o.library) for o in OUTPUTS.values()]
    [('checkpoint', '', 'transformers'), ('adapter', '-adapter', 'peft'), ('gguf', '-GGUF', 'gguf')]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..layout import ADAPTER_DIR, CHECKPOINT_DIR
from ..weights.adapter import MATHNEURO_CONFIG
from . import card_sections as sections
from .gguf_naming import gguf_repo_name

__all__ = [
    "Output",
    "CardView",
    "OUTPUTS",
    "CHECKPOINT",
    "ADAPTER",
    "GGUF",
    "register_output",
    "output",
    "output_of_folder",
    "repo_for",
]


@dataclass(frozen=True)
class CardView:
    """What an output's card snippets (:attr:`Output.usage`, :attr:`Output.loaders`) are built from.

    Attributes:
        repo: the Hub repo the card is published in; ``None`` for a card in a local folder (its snippets load
            ``"."``, that folder).
        lock: the lock as the card shows it (public form).
        ggufs: the GGUF files of the card's folder (``{name in the folder: sha256}``).
        base_repo: the Hub repo of the output this one is made from (:attr:`Output.derived_from`), when known.
        chat: the model's tokenizer has a chat template (an instruct model): the snippet generates a chat reply.
    """

    repo: str | None
    lock: Mapping[str, Any]
    ggufs: Mapping[str, str]
    base_repo: str | None = None
    chat: bool = False


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
        relation: the card's ``base_model_relation`` to the base (and its ``base_model:<relation>:<id>`` tag).
        tags: tags its card adds (what its repo holds: ``gguf`` only on the repo of GGUF files).
        holds: the card's first sentence, "This <holds> a MathNeuro edit of ...".
        evaluated: whether its card carries the evaluation as Hub ``model-index`` results.
        usage: its card's "How to use" snippet, ``usage(output, view)``.
        loaders: its card's "Where it loads" section, ``loaders(output, view)``.
        markers: files whose presence makes a folder this output (:meth:`detect`, :func:`output_of_folder`).
        deltas: it holds deltas to the base's weights, not weights: it applies only to the weights it was
            computed against (a GGUF base's dequantized folder, not the Hub model named as its origin), its card
            carries the ``base_model:<relation>:<id>`` tag and no ``outputs.dtype`` sentence.
        derived_from: the output it is made from: its step writes it into that output's folder, and its card's
            ``base_model`` is that output's Hub repo (``push`` looks it up).
        repo_file_name: the name one of its files gets in its Hub repo, ``repo_file_name(lock, name in folder)``;
            ``None``: its name in the folder. An output with names of its own is published as those files beside
            the lock (its card is rendered for the repo).
        absent: what to do when a folder holds none of its files (said by ``push``).
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
    usage: Callable[[Output, CardView], str]
    loaders: Callable[[Output, CardView], str]
    markers: tuple[str, ...] = ()
    deltas: bool = False
    derived_from: str | None = None
    repo_file_name: Callable[[Mapping[str, Any], str], str] | None = None
    absent: str = ""

    def owns(self, path: str) -> bool:
        """Whether a run-relative file path (``checkpoint/model.safetensors``) is one of this output's files."""
        if not path.startswith(self.folder + "/"):
            return False
        return self.gguf_files is None or path.endswith(".gguf") == self.gguf_files

    def detect(self, folder: str | Path) -> bool:
        """Whether ``folder`` holds one of this output's :attr:`markers`."""
        return any((Path(folder) / m).is_file() for m in self.markers)

    def name_in_repo(self, lock: Mapping[str, Any], name: str) -> str:
        """The name file ``name`` of its folder gets in its Hub repo (:attr:`repo_file_name`)."""
        return self.repo_file_name(lock, name) if self.repo_file_name is not None else name

    def how_to_use(self, view: CardView) -> str:
        """Its card's "How to use" snippet (:attr:`usage`)."""
        return self.usage(self, view)

    def where_it_loads(self, view: CardView) -> str:
        """Its card's "Where it loads" section (:attr:`loaders`)."""
        return self.loaders(self, view)


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


def output_of_folder(folder: str | Path) -> Output:
    """The output a folder holds, from its files: the first registered output one of whose :attr:`~Output.markers`
    it holds, else the first registered output (the checkpoint: a plain model folder).

    Example:
        >>> output_of_folder("no/such/folder").name
        'checkpoint'
    """
    return next((o for o in OUTPUTS.values() if o.detect(folder)), next(iter(OUTPUTS.values())))


def repo_for(repo_id: str, name: str) -> str:
    """The Hub repo output ``name`` goes to from the recipe's ``hub.repo_id``.

    Example:
        >>> [repo_for("me/boost", k) for k in OUTPUTS]
        ['me/boost', 'me/boost-adapter', 'me/boost-GGUF']
    """
    return repo_id + output(name).repo_suffix


CHECKPOINT = register_output(
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
        usage=sections.transformers_usage,
        loaders=sections.transformers_loaders,
    )
)
ADAPTER = register_output(
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
        usage=sections.peft_usage,
        loaders=sections.peft_loaders,
        markers=("adapter_config.json", MATHNEURO_CONFIG),
        deltas=True,
    )
)
GGUF = register_output(
    Output(
        name="gguf",
        folder=CHECKPOINT_DIR,
        gguf_files=True,
        repo_suffix="-GGUF",
        library="gguf",
        relation="quantized",
        tags=("gguf", "llama.cpp"),
        holds="repo holds, as GGUF files for llama.cpp,",
        evaluated=False,
        usage=sections.llama_cpp_usage,
        loaders=sections.llama_cpp_loaders,
        derived_from="checkpoint",
        repo_file_name=gguf_repo_name,
        absent="no .gguf file here; write one with outputs.gguf: TYPE (or export --gguf TYPE), then push --gguf",
    )
)
