"""How fast the CLI answers what needs no model: ``run --help`` and a mistyped recipe path, against ``python -c pass``.

Each route is a fresh process (as a user's shell starts one), alternated with the others for ``--rounds`` rounds;
per route the median and minimum wall time, the median CPU time (user + system of the child) and the ratio of its
median wall time to ``python -c pass``'s are printed side by side, with the load average before and after (on a
shared machine wall times are upper bounds; the ratios and CPU times are what to compare). A route that imports
torch or transformers fails the run: each child reports whether either was loaded.

Routes:
- ``python -c pass``: the interpreter's own start, the floor.
- ``import click``: the CLI's one library, for scale.
- ``run --help``: ``mathneuro-edit run --help``.
- ``bad path``: ``mathneuro-edit run missing.yaml --out OUT`` (exit 2, one line).
- ``--version``.

Usage: ``python benchmarks/bench_cli_start.py [--rounds 15]``
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# each CLI route runs the entry point in-process, then says whether torch or transformers got imported
_CLI = (
    "import sys\n"
    "from mathneuro_edit.cli.main import main\n"
    "try:\n"
    "    main(sys.argv[1:], prog_name='mathneuro-edit')\n"
    "except SystemExit as e:\n"
    "    heavy = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
    "    print('HEAVY', *heavy, file=sys.stderr)\n"
    "    sys.exit(e.code)\n"
)


def _routes(tmp: Path) -> dict[str, tuple[list[str], int]]:
    """name -> (argv, the exit status it must end with)."""
    py = sys.executable
    return {
        "python -c pass": ([py, "-c", "pass"], 0),
        "import click": ([py, "-c", "import click"], 0),
        "--version": ([py, "-c", _CLI, "--version"], 0),
        "run --help": ([py, "-c", _CLI, "run", "--help"], 0),
        "bad path": ([py, "-c", _CLI, "run", str(tmp / "missing.yaml"), "--out", str(tmp / "out")], 2),
    }


def _once(argv: list[str], status: int) -> tuple[float, float]:
    """(wall s, CPU s of the child) of one fresh process; fails on a wrong exit status or a heavy import."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != status:
        raise SystemExit(f"{argv[-3:]}: exit {proc.returncode}, expected {status}: {proc.stderr[-500:]}")
    heavy = [line for line in proc.stderr.splitlines() if line.startswith("HEAVY")]
    if heavy and heavy[-1].split()[1:]:
        raise SystemExit(f"{argv[-3:]}: imported {heavy[-1].split()[1:]}")
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        routes = _routes(Path(tmp))
        for argv, status in routes.values():  # warm the file cache once, unmeasured
            _once(argv, status)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in routes}
        for _ in range(args.rounds):
            for name, (argv, status) in routes.items():
                times[name].append(_once(argv, status))
    load_after = os.getloadavg()
    floor = statistics.median(w for w, _ in times["python -c pass"])
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {args.rounds} rounds, load average (1 min) "
        f"{load_before[0]:.1f} before, {load_after[0]:.1f} after"
    )
    print(f"{'route':<16} {'median wall':>11} {'min wall':>9} {'median CPU':>10} {'x python -c pass':>17}")
    for name, rows in times.items():
        walls, cpus = [w for w, _ in rows], [c for _, c in rows]
        med = statistics.median(walls)
        print(f"{name:<16} {med:>10.3f}s {min(walls):>8.3f}s {statistics.median(cpus):>9.3f}s {med / floor:>16.1f}x")


if __name__ == "__main__":
    main()
