"""What the CLI prints while it works: numbered stage lines, and the libraries kept quiet around our own calls.

By default a command prints one line per stage (``[2/6] calibrate math (100 texts)``) on stderr, and a transient
progress bar under it when stderr is a terminal; when it is not (a log file, a pipe), a line every 30 s instead while
a stage runs (``      ... [2/6] calibrate math (100 texts): 1 min 30 s so far``; :func:`progress_lines`,
``MATHNEURO_EDIT_PROGRESS_EVERY`` seconds, 0 for none), so a log shows the command is alive. The libraries' own
bars (transformers' ``Loading weights``, Hub downloads), the warnings listed in :data:`KNOWN_WARNINGS` and the log
lines listed in :data:`KNOWN_LOG_LINES` (understood and harmless) are silenced only inside :func:`quiet_libraries`,
which restores every setting on exit: a Python caller's own code is never affected after we return.
``-v/--verbose`` keeps the libraries' bars and every warning.

Example:
    >>> lines = []
    >>> stages = Stages(2, lines.append)
    >>> stages.start("calibrate math (100 texts)"); stages.note("18,761 weights")
    >>> lines
    ['[1/2] calibrate math (100 texts)', '      18,761 weights']
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext

from ..errors import InputError

__all__ = [
    "KNOWN_WARNINGS",
    "KNOWN_LOG_LINES",
    "Stages",
    "quiet_libraries",
    "known_warnings_silenced",
    "bars_wanted",
    "PROGRESS_ENV",
    "progress_lines",
    "progress_every",
    "elapsed_line",
    "table",
    "markdown_table_text",
    "terminal_safe",
    "document_safe",
    "HeldLog",
    "library_log_held",
]

# what a terminal (or a rendered card) would act on rather than show: C0 and C1 controls (ESC starts a colour,
# cursor or title sequence), DEL, and the bidi marks, embeddings, overrides and isolates that reorder a line
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def terminal_safe(text: str) -> str:
    r"""``text`` with every character a terminal would act on shown escaped (``\x1b``, ``\u202e``), so a value
    from a file or the command line is printed, never obeyed.

    Example:
        >>> terminal_safe("a\x1b[2Jb\u202ec")
        'a\\x1b[2Jb\\u202ec'
    """
    return _UNSAFE.sub(
        lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text
    )


def document_safe(text: str) -> str:
    r"""``text`` (a Markdown document: a model card) with the same characters escaped as :func:`terminal_safe`
    but its line breaks and tabs kept: a data file's name holding a right-to-left override or an ESC sequence is
    shown, never reorders or colours what the reader of the card sees.

    Example:
        >>> document_safe("a\u202eb\x1b[31m\n\tc")
        'a\\u202eb\\x1b[31m\n\tc'
    """
    return _UNSAFE.sub(lambda m: m.group() if m.group() in "\t\n" else terminal_safe(m.group()), text)


_SAFE_TEXT = threading.local()  # re-entry guard: scrubbing a record must not scrub the records it logs


def _library_text(text: str, one_line: bool = False) -> str:
    """A library's log line or warning as the CLI shows it: the Hub token and URL credentials ``***``
    (:func:`~mathneuro_edit.util.scrub.scrub_token`), control and bidi characters escaped, line breaks kept
    unless ``one_line`` (a value from data, a warning: a newline there would forge a line of its own)."""
    from .scrub import scrub_token

    safe = terminal_safe if one_line else document_safe
    if getattr(_SAFE_TEXT, "busy", False):
        return safe(text)
    _SAFE_TEXT.busy = True
    try:
        return safe(scrub_token(text))
    finally:
        _SAFE_TEXT.busy = False


@contextmanager
def library_output_safe() -> Iterator[None]:
    r"""Inside the block (a CLI command), every log record and warning a library prints reads as our own lines
    do: the token and URL credentials replaced by ``***``, ``\x1b`` and bidi characters escaped.

    Why: huggingface_hub logs its retries itself ("HTTP Error 500 thrown while requesting GET
    http://alice:s3cret@hub.example/...") before our redacted error line, and matplotlib warns about a glyph
    missing for a tensor name's raw ESC; both went to the terminal as they were (issue 48). A log record is made
    safe when it is created (every logger, every handler), a warning when it is shown.

    Example:
        >>> import logging
        >>> with library_output_safe():
        ...     logging.getLogger("x").makeRecord("x", 30, "f", 1, "at %s", ("http://a:pw@h/\x1b",), None).getMessage()
        'at http://***@h/\\x1b'
    """
    make_record, show = logging.getLogRecordFactory(), warnings.showwarning

    def safe_record(*args: object, **kwargs: object) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        try:  # the library's template keeps its line breaks; the values put into it (names, URLs) do not
            if isinstance(record.args, tuple):
                record.args = tuple(_library_text(a, one_line=True) if isinstance(a, str) else a for a in record.args)
            record.msg, record.args = _library_text(record.getMessage()), ()
        except Exception:  # noqa: BLE001 - a record whose own formatting fails is left to logging to report
            pass
        return record

    def safe_warning(message: object, *args: object, **kwargs: object) -> None:
        show(_library_text(str(message), one_line=True), *args, **kwargs)  # type: ignore[arg-type]

    logging.setLogRecordFactory(safe_record)
    warnings.showwarning = safe_warning
    try:
        yield
    finally:
        logging.setLogRecordFactory(make_record)
        warnings.showwarning = show


# (category, start of the message, why it is harmless). Each is filtered by both, never by module alone.
KNOWN_WARNINGS: tuple[tuple[type[Warning], str, str], ...] = (
    # PEFT's SHiRA layer builds its sparse delta with torch.sparse_coo_tensor without saying whether to check the
    # indices; torch asks callers to opt in or out. Our adapters' indices are checked when written and by `verify`
    # (check_invariants=True in weights/adapter.py / weights/audit.py).
    (UserWarning, "Sparse invariant checks are implicitly disabled", "PEFT SHiRA merge; indices checked by us"),
    # transformers 5 deprecates an attribute PEFT 0.21 still reads when it wraps a model; nothing to change on our side.
    (FutureWarning, "`is_gradient_checkpointing` is deprecated", "PEFT reads a deprecated transformers attribute"),
)


# (logger, start of the message, why it is harmless): a library's log line dropped inside quiet_libraries, filtered
# on that logger by both. Both come from a base's own generation_config.json (common on the Hub) and name settings
# evaluation replaces: it decodes greedily (do_sample=False) for evaluation.max_new_tokens tokens.
KNOWN_LOG_LINES: tuple[tuple[str, str, str], ...] = (
    (
        "transformers.generation.configuration_utils",
        "The following generation flags are not valid and may be ignored",
        "sampling flags (temperature, top_p) without do_sample; evaluation never samples",
    ),
    ("transformers.generation.utils", "Both `max_new_tokens`", "max_length as well; evaluation.max_new_tokens decides"),
)


class _KnownLines(logging.Filter):
    """Drops the record of one :data:`KNOWN_LOG_LINES` row: its logger's, starting with its message."""

    def __init__(self, start: str) -> None:
        super().__init__()
        self.start = start

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.start)


@contextmanager
def known_warnings_silenced() -> Iterator[None]:
    """Ignore only :data:`KNOWN_WARNINGS` (message start + category) inside the block; the caller's filters are
    restored on exit (``warnings.catch_warnings``)."""
    with warnings.catch_warnings():
        for category, message, _why in KNOWN_WARNINGS:
            warnings.filterwarnings("ignore", message=re.escape(message), category=category)
        yield


@contextmanager
def quiet_libraries(verbose: bool = False) -> Iterator[None]:
    """Silence the libraries' progress bars, :data:`KNOWN_WARNINGS` and :data:`KNOWN_LOG_LINES` inside the block
    (nothing when ``verbose``).

    transformers reads the Hub's switch once, when it is imported (possibly inside the block), so its own switch
    is restored explicitly on exit to what it was (or would have been) before.
    """
    if verbose:
        yield
        return
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    hub_was_disabled = are_progress_bars_disabled()
    tf_log = sys.modules.get("transformers.utils.logging")
    tf_was_enabled = tf_log.is_progress_bar_enabled() if tf_log is not None else not hub_was_disabled
    global _HOLDING
    _HOLDING += 1  # library_log_held: the libraries' log records held back while a load may still fail
    if not hub_was_disabled:
        with warnings.catch_warnings():  # the env var HF_HUB_DISABLE_PROGRESS_BARS=0 has priority: keep it
            warnings.simplefilter("ignore")
            disable_progress_bars()
    if tf_log is not None:
        tf_log.disable_progress_bar()
    known_lines = [(logging.getLogger(name), _KnownLines(start)) for name, start, _why in KNOWN_LOG_LINES]
    for logger, known in known_lines:
        logger.addFilter(known)
    try:
        with known_warnings_silenced():
            yield
    finally:
        _HOLDING -= 1
        for logger, known in known_lines:
            logger.removeFilter(known)
        if not hub_was_disabled and are_progress_bars_disabled():
            enable_progress_bars()
        tf_log = sys.modules.get("transformers.utils.logging")
        if tf_log is not None:
            (tf_log.enable_progress_bar if tf_was_enabled else tf_log.disable_progress_bar)()


_HOLDING = 0  # > 0 inside quiet_libraries (the CLI without --verbose)
_REPORT_ROW = re.compile(r"^\s*([^|\s][^|]*?)\s*\|\s*(MISSING|MISMATCH|UNEXPECTED|CONVERSION|ERROR)\s*\|\s*(.*?)\s*$")


class HeldLog(logging.Handler):
    """What transformers logged inside :func:`library_log_held` (its ``LOAD REPORT`` and warnings)."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def gist(self) -> str:
        """The load report in a few words (its first row by key, and how many more), or ``""`` when there is
        none; transformers' own row order varies from run to run. A row is ``(key, status, details)``, e.g.
        ``model.norm.weight | MISMATCH | Reinit due to size mismatch - ckpt: torch.Size([64]) vs ...``."""
        lines = (line for record in self.records for line in record.getMessage().splitlines())
        rows = sorted(m.groups() for m in map(_REPORT_ROW.match, lines) if m)
        if not rows:
            return ""
        key, status, details = rows[0]
        more = f" and {len(rows) - 1} more" if len(rows) > 1 else ""
        return f"{key}: {status}{f' ({details})' if details else ''}{more}"


@contextmanager
def library_log_held() -> Iterator[HeldLog]:
    """Hold what transformers logs inside the block (its 15-line ``LOAD REPORT``, its warnings) while the CLI keeps
    the libraries quiet (:func:`quiet_libraries`): shown when the block ends normally, dropped when it raises, so
    a failed load is the error's one line, the last one. The records stay readable in the yielded
    :class:`HeldLog` (an error message can name the report's first row). ``--verbose`` and
    ``MATHNEURO_EDIT_DEBUG`` show everything as it comes; a Python caller outside the CLI is not affected.

    Example:
        >>> with library_log_held() as held:
        ...     pass
        >>> held.gist()
        ''
    """
    held = HeldLog()
    logger = logging.getLogger("transformers")
    hold = _HOLDING > 0 and not os.environ.get("MATHNEURO_EDIT_DEBUG")
    handlers, propagate = list(logger.handlers), logger.propagate
    if hold:
        for h in handlers:
            logger.removeHandler(h)
        logger.propagate = False
    logger.addHandler(held)
    try:
        with warnings.catch_warnings(record=True) if hold else nullcontext([]) as shown:
            yield held
    finally:
        logger.removeHandler(held)
        if hold:
            for h in handlers:
                logger.addHandler(h)
            logger.propagate = propagate
    if hold:  # reached only when the block ended normally: what the libraries said is shown, as it would have been
        for record in held.records:
            logger.handle(record)
        for w in shown:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno, w.file, w.line)


def bars_wanted(quiet: bool) -> bool:
    """Our own progress bars: on a terminal only (a log or a pipe gets the stage lines, not bar redraws)."""
    return not quiet and sys.stderr.isatty()


PROGRESS_ENV = "MATHNEURO_EDIT_PROGRESS_EVERY"  # seconds between progress lines off a terminal; 0: none
_PROGRESS_EVERY: float | None = None  # set by the CLI (progress_lines) for the length of a command


def progress_every(quiet: bool) -> float | None:
    """Seconds between the lines that say a stage is still running, for a command whose stderr is not a terminal
    (a terminal has the bars); ``None`` under ``--quiet``, on a terminal, or with ``MATHNEURO_EDIT_PROGRESS_EVERY=0``
    (any other value that is not a number of seconds >= 0 is an :class:`InputError`)."""
    if quiet or sys.stderr.isatty():
        return None
    text = os.environ.get(PROGRESS_ENV, "30")
    try:
        every = float(text)
    except ValueError:
        every = -1.0
    if not every >= 0 or every == float("inf"):
        raise InputError(f"{PROGRESS_ENV}={text!r}: a number of seconds >= 0 (0: no progress lines), e.g. 30")
    return every or None


@contextmanager
def progress_lines(every: float | None) -> Iterator[None]:
    """Inside the block, every :class:`Stages` says every ``every`` seconds that its current stage is still running
    (:func:`elapsed_line`); ``None``: no such lines. The CLI opens it for a command's length (a Python caller's
    stages stay as they are)."""
    global _PROGRESS_EVERY
    before, _PROGRESS_EVERY = _PROGRESS_EVERY, every
    try:
        yield
    finally:
        _PROGRESS_EVERY = before


def elapsed_line(stage: str, seconds: float) -> str:
    """The line a log gets while a stage runs on.

    Example:
        >>> elapsed_line("[2/8] calibrate math (100 texts)", 90.4)
        '      ... [2/8] calibrate math (100 texts): 1 min 30 s so far'
        >>> elapsed_line("[5/8] evaluate", 30.0)
        '      ... [5/8] evaluate: 30 s so far'
    """
    minutes, secs = divmod(int(seconds), 60)
    return f"      ... {stage}: {f'{minutes} min ' if minutes else ''}{secs} s so far"


class Stages:
    """Numbered stage lines: ``[i/n] label``, and indented result notes under them; inside :func:`progress_lines`,
    a line every so many seconds while a stage runs. ``echo`` receives each line (the CLI prints to stderr; a no-op
    under ``--quiet``).
    """

    def __init__(self, total: int, echo: Callable[[str], None] = lambda s: None) -> None:
        self.total, self.echo, self.done = total, echo, 0
        self._stop: threading.Event | None = None

    def start(self, label: str) -> None:
        """Announce the next stage."""
        self.done += 1
        line = f"[{self.done}/{self.total}] {label}"
        self.echo(line)
        if self._stop is not None:  # the previous stage's progress lines end with it
            self._stop.set()
            self._stop = None
        if _PROGRESS_EVERY:
            self._stop = threading.Event()
            args = (line, _PROGRESS_EVERY, self._stop)
            threading.Thread(target=self._tick, args=args, daemon=True, name="stage-progress").start()

    def _tick(self, line: str, every: float, stop: threading.Event) -> None:
        """Until the next stage starts or the command ends: every ``every`` seconds, how long this one has run."""
        t0 = time.monotonic()
        while not stop.wait(every) and _PROGRESS_EVERY:
            self.echo(elapsed_line(line, time.monotonic() - t0))

    def note(self, text: str) -> None:
        """A result line under the current stage (each line of ``text`` indented)."""
        for line in text.splitlines():
            self.echo(f"      {line}")


def table(header: list[str], rows: list[list[str]], right: set[int] | None = None) -> str:
    """Rows as aligned columns for a terminal (``right``: indices of right-aligned columns, e.g. numbers).

    Example:
        >>> print(table(["k", "acc"], [["0.01", "50.0%"]], right={1}))
        k       acc
        0.01  50.0%
    """
    right = right or set()
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(
            str(c).rjust(w) if i in right else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths))
        ).rstrip()
        for r in [header, *rows]
    )


def markdown_table_text(markdown: str) -> str:
    """A markdown table (``| a | b |`` rows and a ``|---|`` rule) as aligned columns; other lines unchanged."""
    out: list[str] = []
    for is_table, lines in itertools.groupby(markdown.splitlines(), lambda s: s.startswith("|") and s.endswith("|")):
        if not is_table:
            out += lines
            continue
        rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
        rows = [cells for cells in rows if not all(set(c) <= set("-:") and c for c in cells)]  # not the |---| rule
        if rows:
            out.append(table(rows[0], rows[1:]))
    return "\n".join(out)
