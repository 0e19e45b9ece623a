"""A push meets a Hub that stalls or fails: SIGTERM ends it at once (exit 143, nothing committed), and a failing
Hub is one line, the last one, without a screen of progress bars. docs/reliability.md lists what each test
promises."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from tests._fakehub import TOKEN, FakeHub, relock


def _push_env(hub: FakeHub, tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    return {
        **env,
        "HF_ENDPOINT": hub.url,
        "HF_TOKEN": TOKEN,
        "HF_HUB_DISABLE_XET": "1",
        "NO_PROXY": "127.0.0.1",
        "HF_HOME": str(tmp_path / "hf-home"),
        "MATHNEURO_EDIT_DEBUG": "",
        "OMP_NUM_THREADS": "1",
        **extra,
    }


def test_sigterm_during_a_stalled_upload_exits_143_at_once(fake_hub: FakeHub, out_dir: Path, tmp_path: Path) -> None:
    for i in range(3):  # several LFS files: huggingface_hub uploads them from worker threads
        save_file({"w": torch.full((8, 8), float(i))}, str(out_dir / f"extra-{i}.safetensors"))
    relock(out_dir)
    fake_hub.delay["/lfs-upload/"] = 120.0  # the upload's answer never comes within the test
    p = subprocess.Popen(
        [sys.executable, "-m", "mathneuro_edit.cli", "push", str(out_dir), "--repo-id", "me/stall"],
        env=_push_env(fake_hub, tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 120
        while (
            time.time() < deadline
            and p.poll() is None
            and not any("/lfs-upload/" in r["path"] for r in list(fake_hub.requests))
        ):
            time.sleep(0.05)
        assert p.poll() is None, p.communicate()
        time.sleep(0.5)  # the client now waits for the upload's answer
        sent = time.monotonic()
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        p.kill()
    assert p.returncode == 143, err
    assert took < 5, f"{took:.1f} s after SIGTERM"
    assert err.strip().splitlines()[-1] == "error: terminated by SIGTERM; no output was left behind", err
    assert fake_hub.commits == []


def test_push_to_a_failing_hub_prints_no_progress_bars_and_the_error_last(
    fake_hub: FakeHub, out_dir: Path, monkeypatch
) -> None:
    import huggingface_hub.utils._http as client_http
    from click.testing import CliRunner

    import mathneuro_edit.publish.hub_requests as hub_module
    from mathneuro_edit.cli.main import main

    monkeypatch.setattr(hub_module, "_sleep", lambda s: None)
    monkeypatch.setattr(client_http.time, "sleep", lambda s: None)
    for i in range(3):
        save_file({"w": torch.full((8, 8), float(i))}, str(out_dir / f"extra-{i}.safetensors"))
    relock(out_dir)
    fake_hub.fail_times["/lfs-upload/"] = [(500, {})] * 400
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    result = CliRunner().invoke(main, ["push", str(out_dir), "--repo-id", "me/failing"])
    assert result.exit_code == 3, result.output  # the Hub's fault, not the input's
    lines = [ln for ln in result.output.replace("\r", "\n").splitlines() if ln.strip()]
    assert lines[-1].startswith("error: the Hub answered 500 for me/failing") and "retry later" in lines[-1], lines
    assert len(lines) == 1, lines  # no progress bar of the tries before it
    assert fake_hub.commits == []
