"""Data loading: formats, text extraction, the fixed sampling algorithm, records, and clear errors."""

from __future__ import annotations

import builtins
import csv
import hashlib
import json
import random
import sys
import types
from pathlib import Path

import pytest

from mathneuro_edit.data.sources import load_math_problems, load_set, load_texts
from mathneuro_edit.errors import InputError
from mathneuro_edit.organism import data as organism


def _reference_sample(items: list, n: int, seed: int) -> list:
    """An independent, eager Fisher-Yates shuffle with the same random calls: the first n items."""
    rng = random.Random(seed)
    a = list(items)
    for i in range(len(a)):
        j = rng.randrange(i, len(a))
        a[i], a[j] = a[j], a[i]
    return a[:n]


def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_sampling_matches_an_eager_fisher_yates_and_is_recorded(tmp_path: Path) -> None:
    texts = [f"text number {i}" for i in range(50)]
    src = _jsonl(tmp_path / "t.jsonl", [{"text": t} for t in texts])
    loaded = load_texts(str(src), 7, seed=3)
    assert loaded.texts == _reference_sample(texts, 7, 3)
    assert load_texts(str(src), 7, seed=3).texts == loaded.texts
    assert load_texts(str(src), 7, seed=4).texts != loaded.texts
    record = loaded.record
    assert record["sha256"] == hashlib.sha256(json.dumps(loaded.texts).encode()).hexdigest()
    assert record["file_sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    assert (record["n_requested"], record["n_available"], record["n_sampled"], record["seed"]) == (7, 50, 7, 3)
    assert record["source"]["path"] == "<local>/t.jsonl"  # records go into the published lock: no local folder


def test_gsm8k_fields_field_and_template(tmp_path: Path) -> None:
    rows = [{"question": "What is 2+2?", "answer": "2+2=4\n#### 4", "id": 1}]
    src = str(_jsonl(tmp_path / "g.jsonl", rows))
    assert load_texts(src, 1, 0).texts == ["Question: What is 2+2?\nAnswer: 2+2=4\n#### 4"]
    assert load_texts(src, 1, 0).texts == [organism.format_math(rows[0]["question"], rows[0]["answer"])]
    assert load_texts({"path": src, "field": "question"}, 1, 0).texts == ["What is 2+2?"]
    assert load_texts({"path": src, "template": "Q{id}: {question}"}, 1, 0).texts == ["Q1: What is 2+2?"]


def test_csv_json_and_txt(tmp_path: Path) -> None:
    with open(tmp_path / "d.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["body", "label"])
        w.writerows([["first, with comma", "a"], ["second\nline", "b"]])
    got = load_texts({"path": str(tmp_path / "d.csv"), "field": "body"}, 2, 0).texts
    assert sorted(got) == ["first, with comma", "second\nline"]

    (tmp_path / "d.json").write_text(json.dumps(["alpha", "beta", "gamma"]))
    assert sorted(load_texts(str(tmp_path / "d.json"), 3, 0).texts) == ["alpha", "beta", "gamma"]

    (tmp_path / "blocks.txt").write_text("para one\nstill one\n\n  \npara two\n\n\npara three\n")
    blocks = load_texts(str(tmp_path / "blocks.txt"), 3, 0).texts
    assert sorted(blocks) == ["para one\nstill one", "para three", "para two"]
    (tmp_path / "lines.txt").write_text("line a\nline b\nline c\n")
    assert sorted(load_texts(str(tmp_path / "lines.txt"), 3, 0).texts) == ["line a", "line b", "line c"]
    (tmp_path / "data.dat").write_text('{"text": "x"}\n')
    assert load_texts({"path": str(tmp_path / "data.dat"), "format": "jsonl"}, 1, 0).texts == ["x"]


def test_parquet(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["p0", "p1", "p2"], "n": [0, 1, 2]}), tmp_path / "d.parquet")
    loaded = load_texts(str(tmp_path / "d.parquet"), 3, 1)
    assert loaded.texts == _reference_sample(["p0", "p1", "p2"], 3, 1)


def test_parquet_without_libraries_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "d.parquet").write_bytes(b"PAR1")
    real_import = builtins.__import__

    def no_arrow(name: str, *args: object, **kwargs: object) -> object:
        if name.split(".")[0] in ("pyarrow", "pandas"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_arrow)
    with pytest.raises(
        InputError,
        match=r"d\.parquet: reading \.parquet needs pyarrow or pandas; "
        r"pip install 'datasets>=2\.18' \(the data extra\)",
    ):
        load_texts(str(tmp_path / "d.parquet"), 1, 0)


def test_empty_records_are_skipped_and_short_sources_warn(tmp_path: Path) -> None:
    rows = [{"text": "a"}, {"text": ""}, {"text": "  "}, {"text": None}, {"text": "b"}]
    src = str(_jsonl(tmp_path / "e.jsonl", rows))
    with pytest.warns(UserWarning, match="10 samples requested, only 2 non-empty records"):
        loaded = load_texts(src, 10, 0)
    assert sorted(loaded.texts) == ["a", "b"]
    assert (loaded.record["n_sampled"], loaded.record["n_empty_skipped"], loaded.record["n_available"]) == (2, 3, 5)


@pytest.mark.parametrize(
    ("name", "content", "source_extra", "pattern"),
    [
        ("empty.jsonl", "", {}, r"empty\.jsonl: no records"),
        ("blank.jsonl", '{"text": ""}\n', {}, r"blank\.jsonl: all 1 records are empty"),
        ("bad.jsonl", '{"text": "ok"}\n\n{"text": oops}\n', {}, r"bad\.jsonl: line 3: invalid JSON"),
        (
            "nofield.jsonl",
            '{"body": "x"}\n',
            {},
            r"nofield\.jsonl: line 1: no text field \(fields: body\); set field: or template:",
        ),
        (
            "wrongfield.jsonl",
            '{"body": "x"}\n',
            {"field": "text2"},
            r"wrongfield\.jsonl: line 1: no field 'text2' \(fields: body\)",
        ),
        ("number.jsonl", '{"body": 3}\n', {"field": "body"}, r"number\.jsonl: line 1: field 'body' is int, not text"),
        ("tmpl.jsonl", '{"body": "x"}\n', {"template": "{title}"}, r"tmpl\.jsonl: line 1: template '\{title\}' failed"),
        ("strings.json", '["a"]', {"field": "x"}, r"strings\.json: item 1: records are plain strings"),
        ("obj.json", '{"a": 1}', {}, r"obj\.json: must be a JSON list"),
        ("badjson.json", "[1,", {}, r"badjson\.json: invalid JSON at line 1"),
        ("data.xml", "<a/>", {}, r"data\.xml: unknown data format '\.xml'"),
    ],
)
def test_errors_name_the_file_and_the_place(
    tmp_path: Path, name: str, content: str, source_extra: dict, pattern: str
) -> None:
    (tmp_path / name).write_text(content)
    with pytest.raises(InputError, match=pattern):
        load_texts({"path": str(tmp_path / name), **source_extra}, 1, 0)


def test_missing_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"nope\.jsonl: data file not found"):
        load_texts(str(tmp_path / "nope.jsonl"), 1, 0)
    (tmp_path / "latin.txt").write_bytes(b"caf\xe9\n")
    with pytest.raises(InputError, match=r"latin\.txt: cannot read the file as UTF-8"):
        load_texts(str(tmp_path / "latin.txt"), 1, 0)
    with pytest.raises(InputError, match="n: must be an integer >= 1"):
        load_texts("organism:math", 0, 0)


def test_organism_sources_match_the_organism_generators() -> None:
    assert load_texts("organism:math", 5, seed=2).texts == organism.math_texts(5, seed=2, split="train")
    held_out = load_texts({"path": "organism:general", "split": "test"}, 4, 1).texts
    assert held_out == organism.general_texts(4, seed=1, split="test")


def test_load_set_splits_samples_across_sources(tmp_path: Path) -> None:
    a = _jsonl(tmp_path / "a.jsonl", [{"text": f"a{i}"} for i in range(10)])
    texts, records = load_set([str(a), "organism:general"], 5, seed=0)
    assert [r["n_requested"] for r in records] == [3, 2]
    assert texts[:3] == _reference_sample([f"a{i}" for i in range(10)], 3, 0)
    assert texts[3:] == organism.general_texts(2, seed=0)
    with pytest.raises(InputError, match="samples: 1 is fewer than the 2 sources"):
        load_set([str(a), "organism:general"], 1, seed=0)


def test_math_problems_gold_and_errors(tmp_path: Path) -> None:
    src = _jsonl(
        tmp_path / "gsm.jsonl",
        [{"question": "q1", "answer": "big\n#### 1,234"}, {"question": "q2", "answer": "neg\n#### -5"}],
    )
    problems = load_math_problems(str(src), 2, seed=0)
    assert sorted(p["gold"] for p in problems) == [-5, 1234]
    assert {p["answer"] for p in problems} == {"big\n#### 1,234", "neg\n#### -5"}
    bad = _jsonl(tmp_path / "bad.jsonl", [{"question": "q", "answer": "no final answer"}])
    with pytest.raises(InputError, match=r"bad\.jsonl: line 1: the answer has no final '#### <integer>'"):
        load_math_problems(str(bad), 1, 0)
    nofields = _jsonl(tmp_path / "nf.jsonl", [{"text": "x"}])
    with pytest.raises(InputError, match=r"nf\.jsonl: line 1: math problems need question and answer fields"):
        load_math_problems(str(nofields), 1, 0)
    held_out = load_math_problems("organism:math", 3, seed=1)  # organism default: the held-out split
    expected = organism.math_problems(3, seed=1, split="test")
    assert [p["question"] for p in held_out] == [p["question"] for p in expected]
    assert [p["gold"] for p in held_out] == [int(p["answer"].rsplit("#### ", 1)[1]) for p in expected]
    with pytest.raises(InputError, match="organism:general: has no math problems"):
        load_math_problems("organism:general", 1, 0)


def test_hub_dataset_goes_through_datasets(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    rows = [{"question": f"q{i}", "answer": f"#### {i}"} for i in range(6)]

    def load_dataset(path: str, name: str | None = None, *, split: str, revision: str | None) -> list:
        calls.append((path, name, split, revision))
        return rows

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    src = {"path": "hf://datasets/openai/gsm8k", "config": "main", "split": "test", "revision": "r1"}
    loaded = load_texts(src, 2, seed=5)
    assert calls == [("openai/gsm8k", "main", "test", "r1")]
    assert loaded.texts == [organism.format_math(r["question"], r["answer"]) for r in _reference_sample(rows, 2, 5)]
    assert loaded.record["source"]["path"] == "hf://datasets/openai/gsm8k" and loaded.record["file_sha256"] is None
    assert [p["gold"] for p in load_math_problems({"path": "hf://datasets/a/b"}, 6, 0)] == [
        int(r["answer"][5:]) for r in _reference_sample(rows, 6, 0)
    ]
    assert calls[-1] == ("a/b", None, "train", None)


def test_hub_dataset_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` raise ImportError
    with pytest.raises(
        InputError, match=r"Hub datasets need the datasets library; pip install 'datasets>=2.18' \(the data extra\)"
    ):
        load_texts("hf://datasets/openai/gsm8k", 1, 0)

    def offline(*args: object, **kwargs: object) -> None:
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=offline))
    with pytest.raises(
        InputError,
        match=r"hf://datasets/openai/gsm8k \(config=main, split=train\): cannot load: "
        r"ConnectionError: Couldn't reach.*HF_DATASETS_OFFLINE=1",
    ):
        load_texts({"path": "hf://datasets/openai/gsm8k", "config": "main"}, 1, 0)
