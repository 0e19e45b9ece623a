"""A Hub id while offline is refused at once, in one line: huggingface_hub alone retries five times with
backoff (six "Retrying" lines, ~40 s) before transformers says it "couldn't connect".

- ``HF_HUB_OFFLINE`` set and the repo not in the local Hub cache: exit 2, one line naming the setting.
- The Hub endpoint refusing connections (here: a closed local port): exit 3 (the environment, not the input), one
  line, no retry, well under the first retry's wait.
- A repo already in the local Hub cache passes the check without any connection (transformers reads the cache).
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from huggingface_hub import constants

from mathneuro_edit.cli.main import main
from mathneuro_edit.util import hub_online

REPO = "some-org/some-model"


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "hub-cache"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    return cache


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once closed


def _plan(*sets: str) -> tuple[int, str, float]:
    start = time.monotonic()
    result = CliRunner().invoke(main, ["plan", *[a for s in sets for a in ("--set", s)]])
    return result.exit_code, result.output, time.monotonic() - start


def test_hf_hub_offline_refuses_an_uncached_hub_id_in_one_line(
    empty_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    code, text, seconds = _plan(f"base.model={REPO}")
    assert code == 2, text
    assert len(text.strip().splitlines()) == 1 and "HF_HUB_OFFLINE is set" in text and REPO in text
    assert seconds < 5, seconds


def test_an_unreachable_hub_refuses_an_uncached_hub_id_at_once(
    empty_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *a, **k: pytest.fail("a download was tried"))
    code, text, seconds = _plan(f"base.model={REPO}")
    assert code == 3, text
    lines = text.strip().splitlines()
    assert len(lines) == 1 and "cannot reach the Hugging Face Hub" in lines[0] and "Retrying" not in text
    assert seconds < 4, seconds  # the first of huggingface_hub's retries alone waits 1 s, the sixth 8 s
    with pytest.raises(Exception, match="cannot reach the Hugging Face Hub"):  # the Python API says the same
        hub_online.require_hub(REPO, what="base.model", filename="model.gguf")


def test_a_cached_hub_id_needs_no_connection(empty_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = empty_cache / "models--some-org--some-model" / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (empty_cache / "models--some-org--some-model" / "refs").mkdir()
    (empty_cache / "models--some-org--some-model" / "refs" / "main").write_text("a" * 40)
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: pytest.fail("a connection was made"))
    for offline in (True, False):
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
        hub_online.require_hub(REPO, what="base.model")  # no exception, no connection
