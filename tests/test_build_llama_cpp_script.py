"""scripts/build_llama_cpp.sh: llama-cpp-python built once into .ci/run's wheel cache and installed from it.

The real build takes 8-25 minutes, so these run the script with a fake interpreter (``PYTHON``): it records each
call, answers the CPython tag and the import check, and its ``pip wheel`` leaves a stub wheel where pip would.
What is pinned: a cached wheel is installed without building; a missing one is built once, then reused; a wheel
for another CPython is not taken; ``--dry-run`` runs no pip; the version is the one .ci/run installs."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "build_llama_cpp.sh"
WHEEL = "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"  # the name pip gives the wheel it builds

FAKE_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$FAKE_LOG"
if [ "$1" = -c ]; then
  case "$2" in
    *version_info*) echo cp311 ;;
    *llama_cpp*) [ -n "${FAKE_IMPORT_FAILS:-}" ] && exit 1; echo "llama-cpp-python 0.3.36" ;;
  esac
  exit 0
fi
if [ "$1 $2 $3" = "-m pip wheel" ]; then
  touch "${@: -1}/{wheel}"  # -w DIR comes last
fi
""".replace("{wheel}", WHEEL)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "PYTHON": str(fake),
        "FAKE_LOG": str(tmp_path / "calls.log"),
        "MATHNEURO_EDIT_CI_CACHE": str(tmp_path / "cache"),
    }


def _script(env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    proc = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60)
    log = Path(env["FAKE_LOG"])
    calls = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return proc, calls


def _pip(calls: list[str], what: str) -> list[str]:
    return [c for c in calls if c.startswith(f"-m pip {what}")]


def test_a_cached_wheel_is_installed_without_building(env):
    wheels = Path(env["MATHNEURO_EDIT_CI_CACHE"]) / "wheels"
    wheels.mkdir(parents=True)
    (wheels / WHEEL).write_bytes(b"stub")
    proc, calls = _script(env)
    assert proc.returncode == 0, proc.stderr
    assert not _pip(calls, "wheel"), calls
    assert _pip(calls, "install") == [f"-m pip install --quiet {wheels / WHEEL}"], calls
    assert "llama-cpp-python 0.3.36" in proc.stdout  # the import check ran in a child


def test_a_missing_wheel_is_built_once_into_the_ci_cache_then_reused(env):
    wheels = Path(env["MATHNEURO_EDIT_CI_CACHE"]) / "wheels"
    wheels.mkdir(parents=True)
    (wheels / WHEEL.replace("py3-none", "cp310-cp310")).write_bytes(b"another Python's")  # not taken
    proc, calls = _script(env)
    assert proc.returncode == 0, proc.stderr
    assert _pip(calls, "wheel") == [f"-m pip wheel --no-deps llama-cpp-python==0.3.36 -w {wheels}"], calls
    assert _pip(calls, "install") == [f"-m pip install --quiet {wheels / WHEEL}"], calls
    assert "~8 min" in proc.stderr
    proc, calls = _script(env)  # the second call: no build
    assert proc.returncode == 0 and not _pip(calls, "wheel") and _pip(calls, "install"), (proc.stderr, calls)


def test_a_wheel_for_this_cpython_is_taken_too(env):
    wheels = Path(env["MATHNEURO_EDIT_CI_CACHE"]) / "wheels"
    wheels.mkdir(parents=True)
    own = wheels / WHEEL.replace("py3-none", "cp311-cp311")
    own.write_bytes(b"stub")
    proc, calls = _script(env)
    assert proc.returncode == 0 and not _pip(calls, "wheel"), (proc.stderr, calls)
    assert _pip(calls, "install") == [f"-m pip install --quiet {own}"], calls


def test_dry_run_says_it_would_build_and_runs_no_pip(env):
    proc, calls = _script(env, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert not _pip(calls, ""), calls
    assert "would run: " in proc.stdout and "pip wheel --no-deps llama-cpp-python==0.3.36" in proc.stdout
    assert not (Path(env["MATHNEURO_EDIT_CI_CACHE"]) / "wheels").exists()


def test_a_wheel_that_does_not_run_here_is_one_error_naming_it(env):
    wheels = Path(env["MATHNEURO_EDIT_CI_CACHE"]) / "wheels"
    wheels.mkdir(parents=True)
    (wheels / WHEEL).write_bytes(b"stub")
    proc, _ = _script({**env, "FAKE_IMPORT_FAILS": "1"})
    assert proc.returncode == 1 and f"delete {wheels / WHEEL}" in proc.stderr, proc.stderr


def test_the_script_installs_the_version_ci_installs():
    ci = re.search(r"^llama_version=(\S+)", (ROOT / ".ci" / "run").read_text(), re.M)
    ours = re.search(r"^version=(\S+)", SCRIPT.read_text(), re.M)
    assert ci and ours and ci.group(1) == ours.group(1) == "0.3.36"
