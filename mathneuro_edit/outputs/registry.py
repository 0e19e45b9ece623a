"""The registry of outputs: one :class:`Output` per kind a run can write, registered by its own module.

Everything that differs between outputs lives in their entry (its files, folder, Hub repo, card and run step):
the card, the push, the release, the plan and the CLI read this one table instead of naming a kind. A new output
calls :func:`register_output` (like PEFT's ``register_peft_method``; docs/extending.md). Nothing here imports
torch: ``plan`` reads the registry.

Example:
    >>> [(o.name, o.repo_suffix, o.library) for o in OUTPUTS.values()]
    [('checkpoint', '', 'transformers'), ('adapter', '-adapter', 'peft'), ('gguf', '-GGUF', 'gguf')]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..errors import InputError

__all__ = [
    "Output",
    "CardView",
    "BaseRecord",
    "RunView",
    "OUTPUTS",
    "register_output",
    "output",
    "output_of_folder",
    "output_dirs",
    "own_files",
    "repo_for",
    "output_support",
]


@dataclass(frozen=True)
class CardView:
    """What an output's card part (:attr:`Output.usage`) is built from.

    Attributes:
        repo: the Hub repo the card is published in; ``None`` for a card in a local folder (its snippets load
            ``"."``, that folder).
        lock: the lock as the card shows it (public form).
        files: the output's own files in the card's folder (``{name in the folder: sha256}``, :func:`own_files`).
        base_repo: the Hub repo of the output this one is made from (:attr:`Output.derived_from`), when known.
        chat: the model's tokenizer has a chat template (an instruct model): the snippet generates a chat reply.
        prompt: the prompt the card's math figures were measured under, for the snippet to prompt the same way
            (:func:`~.common.snippet_prompt`); ``None``: a chat turn.
        load_dtype: the dtype the card's figures were computed in, when a default load computes in another (the
            stored weights' dtype): the snippet loads in it.
    """

    repo: str | None
    lock: Mapping[str, Any]
    files: Mapping[str, str]
    base_repo: str | None = None
    chat: bool = False
    prompt: Mapping[str, Any] | None = None
    load_dtype: str | None = None
    gguf_survival: Mapping[str, Any] | None = None  # the folder's gguf_survival.json (the GGUF card's table)


@dataclass(frozen=True)
class BaseRecord:
    """What the exports, the lock and the cards record about the base: its resolved folder, revision (the adapter
    pins it), a GGUF base's entry and weights hash, its card's license fields and, for a local folder, its
    description (what a GGUF output's names fall back to)."""

    folder: Path
    revision: str | None
    gguf: dict | None
    weights: dict | None
    card_fields: Any
    description: dict | None = None


class RunView(Protocol):
    """What an output's step reads of the run: the one run record
    (:class:`~mathneuro_edit.runs.steps.record.RunRecord`) once the mask is made and the base recorded. A protocol,
    not the record itself: this layer sits below ``runs`` and an output reads nothing else of it. ``workers``:
    checkpoint shards written at once; ``stages``: the stage printer (``None``: silent); ``tasks``: the evaluation
    tasks (the GGUF files' own evaluation reruns the math one in llama.cpp).
    """

    recipe: Any
    base: BaseRecord
    mask: Any
    n_params: int
    progress: bool
    workers: int
    stages: Any
    tasks: list[Any]


@dataclass(frozen=True, kw_only=True)
class Output:
    """One published output (``name``: what recipes, the command line and cards call it).

    Attributes:
        folder: the run folder's subfolder that holds it: its name unless given (an output made from another is
            written into that output's folder).
        gguf_files: whether its files are the ``.gguf`` files of ``folder`` (True), every other file of it (False),
            or all of them (None).
        repo_suffix: its Hub repo is ``<hub.repo_id><repo_suffix>`` (one repo per output).
        library, relation, tags: its card's ``library_name``, ``base_model_relation`` to the base (and its
            ``base_model:<relation>:<id>`` tag) and its own tags (``gguf`` only on the repo of GGUF files).
        holds: the card's first sentence, "This <holds> a MathNeuro edit of ...".
        evaluated: whether its card carries the evaluation as Hub ``model-index`` results.
        usage: its card's "How to use", ``usage(output, view)``: the data of the template's own part for the
            output (``card_template.md``'s ``checkpoint_usage``, ``adapter_usage``, ``gguf_usage``), or for an
            output the template does not know, a Markdown snippet.
        loaders: its card's "Where it loads" section for an output the template does not know: Markdown, a Jinja
            snippet rendered with the card's values (``run_repo``: the run's repo, ``hub.repo_id``, when the card's
            repo is known); empty for the template's own (the checkpoint's, the adapter's, the GGUF's).
        files_cell: its card's settings-table ``files`` cell, ``files_cell(weights dtype, its own files)``.
        on_gguf_base: what its files are when the base is a GGUF, ``on_gguf_base(cast, its own files)``.
        write: its run step, ``write(export, dest)``: its files into ``dest``; returns its size as a fraction of
            the checkpoint's when it reports one (the adapter).
        stage: its part of the export stage's line, ``stage(recipe)`` (an output made from another adds its part
            to that output's line).
        markers: files whose presence makes a folder this output (:meth:`detect`, :func:`output_of_folder`).
        deltas: it holds deltas to the base's weights, not weights (it applies only to the weights it was
            computed against): its card has no ``outputs.dtype`` sentence.
        derived_from: the output it is made from: its step runs after that output's, into that output's folder,
            and its card's ``base_model`` is that output's Hub repo (``push`` looks it up).
        repo_file_name: the name one of its files gets in its Hub repo, ``repo_file_name(lock, name in folder)``;
            ``None``: its name in the folder.
        beside: the data of the paragraph the card of the folder it lies in (another output's) gives its files
            (``card_template.md``'s ``gguf_beside``), ``beside(repo, its own files, lock)``; ``None``: no files.
        absent: what to do when a folder holds none of its files (said by ``push``).
        asked: what the recipe asks of it, ``asked(recipe)`` (falsy: not written); default its ``outputs.<name>``.
        prepare: its check from the recipe and the base's folder alone, before the model loads,
            ``prepare(recipe, folder)``.
        check: its model check, ``check(recipe, model)``: refuses a model it cannot express (on the meta device
            or loaded).
        refusal: what ``plan`` says of a family, ``refusal(model, targets, config)``: ``None`` when the family
            gets it, else one line (a meta-device model is enough).
        audit: what ``verify`` checks of its folder beyond the lock's sha256, ``audit(folder, base, mask, scale,
            trust_remote_code=..., progress=...)`` returning a report with ``ok`` and ``summary()``; ``None``: its
            files are checked against the lock only (an output written into another's folder is audited with it).
    """

    name: str
    folder: str = ""
    gguf_files: bool | None
    repo_suffix: str
    library: str
    relation: str
    tags: tuple[str, ...]
    holds: str
    evaluated: bool
    usage: Callable[[Output, CardView], Any]
    loaders: str = ""
    files_cell: Callable[[str | None, Mapping[str, str]], str]
    on_gguf_base: Callable[[str, Mapping[str, str]], str]
    write: Callable[[RunView, Path], float | None]
    stage: Callable[[Any], str]
    markers: tuple[str, ...] = ()
    deltas: bool = False
    derived_from: str | None = None
    repo_file_name: Callable[[Mapping[str, Any], str], str] | None = None
    beside: Callable[[str | None, Mapping[str, str], Mapping[str, Any]], Any] | None = None
    absent: str = ""
    asked: Callable[[Any], Any] | None = None
    prepare: Callable[[Any, Path], None] | None = None
    check: Callable[[Any, Any], None] | None = None
    refusal: Callable[[Any, Any, Mapping[str, Any]], str | None] | None = None
    audit: Callable[..., Any] | None = None

    def __post_init__(self) -> None:
        if not self.folder:
            object.__setattr__(self, "folder", self.name)

    def owns(self, path: str) -> bool:
        """Whether a run-relative file path (``checkpoint/model.safetensors``) is one of this output's files."""
        if not path.startswith(self.folder + "/"):
            return False
        return self.gguf_files is None or path.endswith(".gguf") == self.gguf_files

    def detect(self, folder: str | Path) -> bool:
        return any((Path(folder) / m).is_file() for m in self.markers)

    def name_in_repo(self, lock: Mapping[str, Any], name: str) -> str:
        return self.repo_file_name(lock, name) if self.repo_file_name is not None else name

    def is_asked(self, recipe: Any) -> bool:
        return bool(self.asked(recipe) if self.asked is not None else getattr(recipe.outputs, self.name, None))


OUTPUTS: dict[str, Output] = {}


def register_output(entry: Output) -> Output:
    """Add an output to :data:`OUTPUTS` (its name must be new; an output it is made from must be registered)."""
    if entry.name in OUTPUTS:
        raise ValueError(f"output {entry.name!r} is already registered")
    if entry.derived_from is not None and entry.derived_from not in OUTPUTS:
        raise ValueError(f"output {entry.name!r} is made from {entry.derived_from!r}, which is not registered")
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


def output_dirs() -> tuple[str, ...]:
    """The sub-folders a run folder may publish, in registration order (an output written into another's folder
    adds none).

    Example:
        >>> output_dirs()
        ('checkpoint', 'adapter')
    """
    return tuple(dict.fromkeys(o.folder for o in OUTPUTS.values()))


def own_files(out: Output, lock: Mapping[str, Any]) -> dict[str, str]:
    """The files of ``out`` the lock records, by their name in its folder (``{name: sha256}``, sorted)."""
    files = lock.get("outputs") or {}
    return {k.removeprefix(out.folder + "/"): v for k, v in sorted(files.items()) if out.owns(k)}


def repo_for(repo_id: str, name: str) -> str:
    """The Hub repo output ``name`` goes to from the recipe's ``hub.repo_id``.

    Example:
        >>> [repo_for("me/boost", k) for k in OUTPUTS]
        ['me/boost', 'me/boost-adapter', 'me/boost-GGUF']
    """
    return repo_id + output(name).repo_suffix


def output_support(
    model: Any, config: Mapping[str, Any], *, include: Any = None, exclude: Any = None
) -> dict[str, str | None]:
    """The outputs ``model`` (built from ``config``, on the meta device: no weights) gets: ``{name: None}`` for an
    output this family gets, else its one-line refusal (what, why, the recipe line), in registration order.

    Raises:
        InputError: from :func:`~mathneuro_edit.engine.targets.find_targets` (parameters this version cannot score).
    """
    from ..engine.targets import find_targets  # torch: the model is built already

    targets = find_targets(model, include=include, exclude=exclude)
    return {o.name: o.refusal(model, targets, config) if o.refusal else None for o in OUTPUTS.values()}
