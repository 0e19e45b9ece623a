"""Print how big the package's functions and modules are: a report to read, not a rule that fails (issue 49 item 5).

The structure rules that keep the pipeline visible stay tests (tests/test_layout.py: the import rule, no cycles,
private names, one address per name); a size is a prompt to look, not a verdict. A cap that fails the build
shapes the code instead (four functions sat at exactly the old cap of 80 lines). ``.ci/run`` prints it.

    python scripts/size_report.py            # functions over 80 lines or 8 parameters, the largest modules
    python scripts/size_report.py --lines 60 --params 6 --top 20

Lines of the package, counted as issue 49 counts them:
``find mathneuro_edit -name '*.py' -o -name '*.pyi' | xargs cat | wc -l``. Always exits 0.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "mathneuro_edit"


def report(lines: int, params: int, top: int) -> str:
    """The report's text: the package's lines, then each function over ``lines`` lines or ``params`` parameters
    (``self``/``cls`` aside; a click command's options count), longest first, then the ``top`` largest modules."""
    files = sorted([*PKG.rglob("*.py"), *PKG.rglob("*.pyi")])
    sizes = {f.relative_to(PKG.parent).as_posix(): len(f.read_text().splitlines()) for f in files}
    long, wide = [], []
    for f in files:
        if f.suffix != ".py":
            continue
        for fn in ast.walk(ast.parse(f.read_text())):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            where = f"{f.relative_to(PKG.parent).as_posix()}:{fn.lineno} {fn.name}"
            n = fn.end_lineno - fn.lineno + 1
            a = fn.args
            args = [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, [a.vararg, a.kwarg])]
            k = len([p for p in args if p.arg not in ("self", "cls")])
            long += [(n, where)] if n > lines else []
            wide += [(k, where)] if k > params else []
    out = [f"mathneuro_edit/: {sum(sizes.values()):,} lines in {len(sizes)} .py/.pyi files"]
    out += [f"functions over {lines} lines: {len(long)}"] + [f"  {n:4} lines  {w}" for n, w in sorted(long)[::-1]]
    out += [f"functions over {params} parameters: {len(wide)}"] + [f"  {k:4} params {w}" for k, w in sorted(wide)[::-1]]
    biggest = sorted(sizes.items(), key=lambda kv: -kv[1])[:top]
    out += [f"largest {len(biggest)} modules:"] + [f"  {n:5} lines  {p}" for p, n in biggest]
    return "\n".join(out)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=80, help="list functions longer than this (default 80)")
    ap.add_argument("--params", type=int, default=8, help="list functions with more parameters (default 8)")
    ap.add_argument("--top", type=int, default=10, help="how many of the largest modules to list (default 10)")
    ns = ap.parse_args()
    print(report(ns.lines, ns.params, ns.top))
