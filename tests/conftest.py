"""Session-wide test settings: tqdm's lock is per process and its monitor thread is off.

Why (found under mutation testing, docs/testing.md): mutmut (scripts/mutation.sh) forks one child per mutant
from a process that has already run the tests. tqdm's default lock pairs a thread lock with a multiprocessing
semaphore that every forked child shares, and ``tqdm.refresh`` does not release it when drawing the bar raises
(a mutant such as ``unit=None`` in ``find_math_params``'s bar does that): one such child leaves the semaphore
taken, and every later mutant whose tests create a bar waits for it until its timeout. A plain ``RLock`` is copied
per child instead, so a child can only block itself. The monitor thread (started by a process's first bar, even
a disabled one) takes the same lock every 10 s; off, no thread is running when mutmut forks. The monitor only
corrects the refresh rate of very slow bars and the lock only orders bars drawn by several processes: no test
looks at either.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import pytest
import tqdm.std
import yaml
from click.testing import CliRunner

from mathneuro_edit.cli.main import main
from mathneuro_edit.util.console import PROGRESS_ENV

# a command off a terminal prints a line every 30 s while a stage runs: on a loaded machine a stage can take that
# long, and transcripts and one-line checks would then vary; tests/cli/test_progress_lines.py sets it itself
os.environ.setdefault(PROGRESS_ENV, "0")

# the fixtures that tests in several folders use, in one place (pytest finds them here)
from tests._fakehub import fake_hub, out_dir  # noqa: F401
from tests._models import save_tiny
from tests._real_model import gemma3, smollm2  # noqa: F401
from tests._tiny import GENERAL, MATH

tqdm.std.tqdm.monitor_interval = 0
tqdm.std.tqdm.set_lock(threading.RLock())

# Under pytest-xdist (the README's `-n 2`), each worker gets its share of the cores: torch's default of one thread
# per core in every worker oversubscribes them (two threads in one process were slower than one on this 2-core
# machine: docs/performance.md "The boost search"); the CLI subprocesses tests start inherit the same limit.
if os.environ.get("PYTEST_XDIST_WORKER"):
    import torch

    _threads = max(1, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    os.environ["OMP_NUM_THREADS"] = str(_threads)
    torch.set_num_threads(_threads)


# ------------------------------------------------------------------------------------------- shared workspaces
# ws: one tiny run per test module that asks for it (tests/test_reliability.py, tests/test_untrusted_inputs.py and the
# tests of publish/ and weights/ that edit its outputs); evil: a base whose repository code must never run.

MARKER_ENV = "MATHNEURO_TEST_REMOTE_CODE_MARKER"


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    """A tiny llama base, data, a recipe, and a first run's outputs (stats, mask, run folder)."""
    root = tmp_path_factory.mktemp("rel")
    save_tiny(root / "base", "llama")
    (root / "math.txt").write_text("\n\n".join(MATH) + "\n")
    (root / "general.txt").write_text("\n\n".join(GENERAL) + "\n")
    with open(root / "eval.jsonl", "w") as f:
        for a in range(3):
            f.write(json.dumps({"question": f"{a} + 2?", "answer": f"{a} + 2 = {a + 2}\n#### {a + 2}"}) + "\n")
    recipe = {
        "base": {"model": str(root / "base"), "dtype": "float32", "device": "cpu"},
        "data": {
            "math": {"path": str(root / "math.txt")},
            "general": [{"path": str(root / "general.txt")}],
            "samples": 4,
            "seed": 0,
        },
        "calibration": {"max_length": 32, "batch_size": 4},
        "mask": {"top_k": 0.1},
        "edit": {"scale": 1.1},
        "outputs": {"checkpoint": True, "adapter": True},
        "evaluation": {
            "math": {"path": str(root / "eval.jsonl")},
            "general": [{"path": str(root / "general.txt")}],
            "samples": 2,
            "max_new_tokens": 4,
        },
    }
    (root / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    result = CliRunner().invoke(main, ["run", str(root / "recipe.yaml"), "--out", str(root / "run"), "--quiet"])
    assert result.exit_code == 0, result.output
    shutil.copytree(root / "run" / "stats", root / "stats")
    shutil.copy(root / "run" / "mask.safetensors", root / "mask.safetensors")
    return root


_EVIL = """
import os
from pathlib import Path
Path(os.environ["{env}"]).write_text("repository code ran")
from transformers import LlamaConfig, LlamaForCausalLM
class EvilConfig(LlamaConfig):
    model_type = "evil_llama"
class EvilModel(LlamaForCausalLM):
    config_class = EvilConfig
""".replace("{env}", MARKER_ENV)


@pytest.fixture()
def evil(ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A copy of the base whose config.json names its own code (auto_map); importing that code writes a marker."""
    base = tmp_path / "evil-base"
    shutil.copytree(ws / "base", base)
    (base / "evil.py").write_text(_EVIL)
    cfg = json.loads((base / "config.json").read_text())
    cfg["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}
    cfg.pop("tie_word_embeddings", None)  # the same default (False), but an export then builds the model class
    cfg["model_type"] = "evil_llama"  # unknown to transformers: only the repository's code can build it
    (base / "config.json").write_text(json.dumps(cfg))
    marker = tmp_path / "MARKER"
    monkeypatch.setenv(MARKER_ENV, str(marker))
    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "modules"))  # a cached copy must not hide a run
    return base, marker


# ------------------------------------------------------------------------------------------- slow files first
# Under `-n 2 --dist loadfile` each test file runs whole on one worker. pytest-xdist's default order puts the files
# with the most tests first, so the few-test, many-minute real-model files (the releasing guide on SmolLM2 alone is
# about a third of the suite's time) started last and one worker ran them alone at the end. Run in collection order
# instead, with these files first: one worker starts the longest while the other runs the rest. The list is the
# files `python -m pytest -n 2 --dist loadfile --durations=40` shows longest (docs/performance.md), longest first.
SLOW_FILES = (
    "tests/test_releasing_guide.py",
    "tests/weights/test_real_gguf.py",
    "tests/weights/test_real_gguf_export.py",
    "tests/evaluation/test_greedy_real.py",
    "tests/publish/test_hub_roundtrip.py",
    "tests/publish/test_push_keeps_tokenizers.py",
    "tests/weights/test_gguf.py",
    "tests/evaluation/test_eval_prompts.py",
)


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist is loaded
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(SLOW_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # stable: the rest in order


# ------------------------------------------------------------------------------------------- output byte record
# MATHNEURO_EDIT_RECORD_BYTES=DIR: at the end of the session each pytest process writes the sha256 of every file its
# tests left under its temporary folder (outputs, cards, locks, push dry runs) to DIR/<worker>.tsv. A restructuring
# records before and after and compares the two with scripts/compare_output_bytes.py: same behaviour = same bytes.
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    record = os.environ.get("MATHNEURO_EDIT_RECORD_BYTES")
    factory = getattr(session.config, "_tmp_path_factory", None)
    # under pytest-xdist the controller's folder holds the workers' folders: each worker records its own
    controller = not os.environ.get("PYTEST_XDIST_WORKER") and getattr(session.config.option, "numprocesses", None)
    if not record or factory is None or controller:
        return
    import hashlib

    base = factory.getbasetemp()
    rows = []
    for path in sorted(base.rglob("*")):
        if path.is_file() and not path.is_symlink():
            rows.append(
                f"{hashlib.sha256(path.read_bytes()).hexdigest()}\t{path.stat().st_size}\t{path.relative_to(base)}"
            )
    Path(record).mkdir(parents=True, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    (Path(record) / f"{worker}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
