"""Calibration and evaluation data: read a source, sample it reproducibly, and record what was used.

The sources (organism sets, the built-in arithmetic problems, Hub datasets through the optional ``datasets``
library, local files), how a record becomes a text and the sampling algorithm are docs/recipes.md's "Sources"
(what a user writes and relies on). Why the sampling is a lazy Fisher-Yates shuffle: only the drawn records are
converted, so a large Hub split costs ``O(n)`` conversions, and a seed means the same texts on every machine.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import random
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import InputError
from ..organism.data import format_math, general_texts, math_problems, math_texts, parse_answer
from ..recipe.input_sections import Source
from ..util.hashing import sha256_file, texts_sha256
from .arithmetic import arithmetic_problems, shuffled

__all__ = ["LoadedTexts", "load_texts", "load_set", "load_math_problems", "problem_sha256"]


@dataclass(frozen=True)
class LoadedTexts:
    """Sampled texts, in sampled order, and the record of how they were obtained (for the lock file)."""

    texts: list[str]
    # source (public form: local paths redacted), n_requested, n_available (records in the file/split; for organism
    # sources the number generated), n_sampled, n_empty_skipped, seed, sha256 (texts_sha256 of texts, the
    # statistics' fingerprint) and file_sha256 (local files only)
    record: dict[str, Any]


def _as_source(source: Source | str | dict[str, Any]) -> Source:
    if isinstance(source, Source):
        return source
    try:
        return Source.model_validate(source)
    except ValidationError as e:
        problems = "; ".join(str(err["msg"]) for err in e.errors())
        raise InputError(f"data source {source!r}: {problems}") from None


Rows = Sequence[Any]
Locate = Callable[[int], str]
_BLANK_LINE = re.compile(r"\n[ \t\r]*\n")
_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv", ".parquet": "parquet", ".txt": "txt"}


def _read_local(path: Path, fmt: str | None) -> tuple[Rows, Locate]:
    """All records of a local file and a function naming record ``i``'s place (``line 7``) for errors."""
    fmt = fmt or _FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise InputError(
            f"{path}: unknown data format {path.suffix!r}; use .jsonl, .json, .csv, .parquet or .txt, or set format:"
        )
    if not path.is_file():
        raise InputError(f"{path}: data file not found; check the path (relative paths start at the working directory)")
    if fmt == "parquet":
        return _read_parquet(path), lambda i: f"row {i + 1}"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read the file as UTF-8 text ({e})") from None
    if fmt == "jsonl":
        rows, lines = [], []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise InputError(
                        f"{path}: line {number}: invalid JSON ({e.msg}); each line must be one JSON object"
                    ) from None
                except RecursionError:  # Python's parser stops near 1,000 levels
                    raise InputError(
                        f"{path}: line {number}: nested too deep to be a record; each line must be one JSON object "
                        "of text fields"
                    ) from None
                lines.append(number)
        return rows, lambda i: f"line {lines[i]}"
    if fmt == "json":
        try:
            rows = json.loads(text) if text.strip() else []
        except json.JSONDecodeError as e:
            raise InputError(f"{path}: invalid JSON at line {e.lineno}, column {e.colno} ({e.msg})") from None
        except RecursionError:
            raise InputError(
                f"{path}: nested too deep to be a list of records; it must be a JSON list of objects or strings"
            ) from None
        if not isinstance(rows, list):
            raise InputError(f"{path}: must be a JSON list of objects or strings (for one object per line use .jsonl)")
        return rows, lambda i: f"item {i + 1}"
    if fmt == "csv":
        reader = csv.DictReader(io.StringIO(text))  # a stream, so quoted fields keep their newlines
        rows, lines = [], []
        try:
            for row in reader:
                rows.append(row)
                lines.append(reader.line_num)
        except csv.Error as e:
            raise InputError(f"{path}: line {reader.line_num}: invalid CSV ({e})") from None
        return rows, lambda i: f"line {lines[i]}"
    # txt: blank-line-separated blocks if there is a blank line, else one sample per line
    blocks = _BLANK_LINE.search(text) is not None
    rows = [p.strip() for p in (_BLANK_LINE.split(text) if blocks else text.splitlines()) if p.strip()]
    unit = "block" if blocks else "line"
    return rows, lambda i: f"{unit} {i + 1}"


def _read_parquet(path: Path) -> Rows:
    try:
        import pyarrow.parquet as pq

        read = lambda: pq.read_table(path).to_pylist()  # noqa: E731
    except ImportError:
        try:
            import pandas as pd
        except ImportError:
            raise InputError(
                f"{path}: reading .parquet needs pyarrow or pandas; pip install 'datasets>=2.18' (the data extra)"
            ) from None
        read = lambda: pd.read_parquet(path).to_dict("records")  # noqa: E731
    try:
        return read()
    except Exception as e:  # pyarrow and pandas raise library-specific types (ArrowInvalid, OSError) for corrupt files
        raise InputError(f"{path}: cannot read the parquet file ({type(e).__name__}: {e})") from None


def _read_hub(source: Source) -> tuple[Rows, Locate]:
    """The rows of a Hub dataset split, through the optional ``datasets`` library."""
    try:
        import datasets
    except ImportError:
        raise InputError(
            f"{source.path}: Hub datasets need the datasets library; pip install 'datasets>=2.18' (the data extra), "
            "or save the data as a local .jsonl and use its path"
        ) from None
    split = source.split or "train"
    try:
        ds = datasets.load_dataset(source.hub_id, source.config, split=split, revision=source.revision)
    except Exception as e:  # datasets raises many types (ConnectionError, DatasetNotFoundError, ValueError, ...)
        reason = (str(e).strip().splitlines() or [""])[0][:300]
        raise InputError(
            f"{source.path} (config={source.config}, split={split}): cannot load: {type(e).__name__}: "
            f"{reason}; check the name, config and split, or your network (offline: set "
            "HF_DATASETS_OFFLINE=1 with a cached copy, or use a local file)"
        ) from None
    return ds, lambda i: f"row {i + 1}"


def _text_of(row: Any, source: Source, where: str) -> str:
    """The text of one record (template, field, GSM8K question/answer, or ``text``)."""
    if isinstance(row, str):
        if source.field is not None or source.template is not None:
            raise InputError(f"{where}: records are plain strings, so field/template do not apply; remove them")
        return row
    if not isinstance(row, dict):
        raise InputError(f"{where}: expected an object with fields, got {type(row).__name__}")
    fields = ", ".join(map(str, row)) or "none"
    if source.template is not None:
        try:
            return source.template.format_map(row)
        except (KeyError, IndexError, AttributeError, ValueError) as e:
            raise InputError(
                f"{where}: template {source.template!r} failed ({type(e).__name__}: {e}); record fields: {fields}"
            ) from None
    if source.field is not None:
        name = source.field
    elif "question" in row and "answer" in row:
        return format_math(str(row["question"]), str(row["answer"]))  # the one definition of the math prompt
    elif "text" in row:
        name = "text"
    else:
        raise InputError(f"{where}: no text field (fields: {fields}); set field: or template: in the source")
    if name not in row:
        raise InputError(f"{where}: no field {name!r} (fields: {fields}); set field: to one of them")
    value = row[name]
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InputError(f"{where}: field {name!r} is {type(value).__name__}, not text; use template: to format it")
    return value


def _sample(
    rows: Rows, locate: Locate, n: int, seed: int, label: str, convert: Callable[[Any, str], Any]
) -> tuple[list[Any], int]:
    """The first ``n`` non-empty converted records in shuffled order, and how many empty ones were skipped."""
    if len(rows) == 0:
        raise InputError(f"{label}: no records (the file or split is empty)")
    kept, empty = [], 0
    for i in shuffled(random.Random(seed), len(rows)):
        item = convert(rows[i], f"{label}: {locate(i)}")
        if item is None or (isinstance(item, str) and not item.strip()):
            empty += 1
            continue
        kept.append(item)
        if len(kept) == n:
            break
    if not kept:
        raise InputError(f"{label}: all {len(rows)} records are empty")
    if len(kept) < n:
        warnings.warn(
            f"{label}: {n} samples requested, only {len(kept)} non-empty records; using them all", stacklevel=3
        )
    return kept, empty


def _rows(source: Source) -> tuple[Rows, Locate, str | None]:
    """Rows, locator and (for local files) the file's sha256."""
    if source.kind == "hub":
        return (*_read_hub(source), None)
    path = Path(source.path).expanduser()
    rows, locate = _read_local(path, source.format)
    return rows, locate, sha256_file(path)


def _check_n(n: int, seed: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InputError(f"n: must be an integer >= 1, got {n!r}; e.g. data.samples: 100")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InputError(f"seed: must be an integer, got {seed!r}")


def load_texts(source: Source | str | dict[str, Any], n: int, seed: int) -> LoadedTexts:
    """Load ``n`` texts from one source, sampled reproducibly (see the module docstring).

    ``source``: a :class:`~mathneuro_edit.recipe.schema.Source`, a path string, or a source mapping; ``n``: texts
    wanted (fewer, with a warning, if the source has fewer non-empty records). Refused, naming file and line: a
    missing/unreadable/empty file, a bad JSON/CSV line, a missing field, a missing optional library, or a Hub
    dataset that cannot be loaded.

    Example:
        >>> loaded = load_texts("organism:general", 2, seed=0)
        >>> len(loaded.texts), loaded.record["n_sampled"]
        (2, 2)
    """
    src = _as_source(source)
    _check_n(n, seed)
    file_sha, available, empty = None, n, 0  # generated sources: n made, none empty
    if src.kind == "organism":
        generate = math_texts if src.path == "organism:math" else general_texts
        texts = generate(n, seed=seed, split=src.split or "train")
    elif src.kind == "arithmetic":
        texts = [format_math(p["question"], p["answer"]) for p in arithmetic_problems(n, seed)]
    else:
        rows, locate, file_sha = _rows(src)
        texts, empty = _sample(rows, locate, n, seed, src.path, lambda row, where: _text_of(row, src, where))
        available = len(rows)
    record = {
        "source": {**src.model_dump(mode="json"), "path": src.public_path()},
        "n_requested": n,
        "n_available": available,
        "n_sampled": len(texts),
        "n_empty_skipped": empty,
        "seed": seed,
        "sha256": texts_sha256(texts),
        "file_sha256": file_sha,
    }
    return LoadedTexts(texts=texts, record=record)


def load_set(
    sources: Sequence[Source | str | dict[str, Any]], n: int, seed: int
) -> tuple[list[str], list[dict[str, Any]]]:
    """Load ``n`` texts split evenly across several sources (e.g. ``evaluation.general``), concatenated in order.

    Source ``i`` of ``k`` gets ``n // k`` texts, plus one for the first ``n % k`` sources, all with the same seed.
    Returns ``(texts, records)``: all texts, and one :attr:`LoadedTexts.record` per source.

    Example:
        >>> texts, records = load_set(["organism:general", "organism:math"], 3, seed=0)
        >>> len(texts), [r["n_requested"] for r in records]
        (3, [2, 1])
    """
    k = len(sources)
    if k == 0 or n < k:
        raise InputError(f"samples: {n} is fewer than the {k} sources listed; raise samples or list fewer sources")
    parts = [load_texts(s, n // k + (1 if i < n % k else 0), seed) for i, s in enumerate(sources)]
    return [t for p in parts for t in p.texts], [p.record for p in parts]


def problem_sha256(problem: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of a math problem's prompt text, its ``question`` (UTF-8): the name by which a sweep's
    selection and confirmation sets, a lock and a card identify a problem.

    Example:
        >>> problem_sha256({"question": "What is 1 + 1?", "answer": "#### 2"})[:12]
        '72f8917549de'
    """
    return hashlib.sha256(str(problem["question"]).encode("utf-8")).hexdigest()


def load_math_problems(source: Source | str | dict[str, Any], n: int, seed: int) -> list[dict[str, Any]]:
    """Load ``n`` math problems for evaluation, in GSM8K format.

    ``source``'s records have ``question`` and ``answer`` (ending with ``#### <integer>``); ``organism:math`` uses
    the held-out ``test`` split unless ``split`` says otherwise; sampled as :func:`load_texts` samples. Each is
    ``{"question", "answer" (the full worked answer), "gold"}`` plus ``"prefill"`` where the record has one
    (``arithmetic`` always does); ``gold`` is the integer after ``#### `` with thousands commas stripped.

    Example:
        >>> p = load_math_problems("organism:math", 1, seed=0)[0]
        >>> sorted(p), isinstance(p["gold"], int)
        (['answer', 'gold', 'question'], True)
    """
    src = _as_source(source)
    _check_n(n, seed)
    if src.field is not None or src.template is not None:
        raise InputError(f"{src.path}: math problems are read from question/answer fields; remove field/template")

    def convert(row: Any, where: str) -> dict[str, Any]:
        if not (isinstance(row, dict) and "question" in row and "answer" in row):
            fields = ", ".join(map(str, row)) if isinstance(row, dict) else type(row).__name__
            raise InputError(f"{where}: math problems need question and answer fields (got {fields})")
        answer = str(row["answer"])
        gold = parse_answer(answer.replace(",", ""))
        if gold is None:
            raise InputError(f"{where}: the answer has no final '#### <integer>' (GSM8K format)")
        prefill = row.get("prefill")
        if prefill is not None and not isinstance(prefill, str):
            raise InputError(
                f"{where}: prefill must be text (what starts the model's answer), got {type(prefill).__name__}"
            )
        out = {"question": str(row["question"]), "answer": answer, "gold": gold}
        return {**out, "prefill": prefill} if prefill else out

    if src.kind == "arithmetic":
        return [convert(r, f"arithmetic: problem {i + 1}") for i, r in enumerate(arithmetic_problems(n, seed))]
    if src.kind == "organism":
        if src.path != "organism:math":
            raise InputError(f"{src.path}: has no math problems; use organism:math")
        rows = math_problems(n, seed=seed, split=src.split or "test")
        return [convert(r, f"{src.path}: problem {i + 1}") for i, r in enumerate(rows)]
    rows, locate, _ = _rows(src)
    return _sample(rows, locate, n, seed, src.path, convert)[0]
