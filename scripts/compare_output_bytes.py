"""Compare two records of the test suite's output bytes: same behaviour means the same files, byte for byte.

Record each side with the suite's own hook (tests/conftest.py), e.g. before and after a restructuring::

    MATHNEURO_EDIT_RECORD_BYTES=/tmp/before python -m pytest -q -n 2 --dist loadfile
    MATHNEURO_EDIT_RECORD_BYTES=/tmp/after  python -m pytest -q -n 2 --dist loadfile
    python scripts/compare_output_bytes.py /tmp/before /tmp/after

A file is named by its path under its pytest process's temporary folder; pytest numbers a folder per test name in
the order the tests of that process ran, and which process gets which test file varies between runs, so the
comparison is made on the path with those numbers taken out (``test_x0/`` -> ``test_x/``) and, for each such
path, on the multiset of contents. Files whose bytes vary from run to run by design (timings, the process id,
the temporary folder's own name) are listed apart by the patterns in ``VOLATILE``; everything else must match.
Exit status 0 when every stable file matches, 1 otherwise (each differing path is printed).
"""

from __future__ import annotations

import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

# what a run writes that is not a product of the recipe: wall times, process ids, tracebacks of injected faults
VOLATILE = (
    re.compile(r"(^|/)runs\.jsonl$"),
    re.compile(r"(^|/)progress(\.\w+)?\.json$"),
    re.compile(r"\.log$"),
)
ROW = re.compile(r"[0-9a-f]{64}")
NUMBERED = re.compile(r"(?<=[A-Za-z_])\d+(?=/)")


def read(folder: Path) -> dict[str, Counter]:
    """Path with pytest's numbers taken out -> Counter of sha256 over every process's record in ``folder``."""
    files: dict[str, Counter] = defaultdict(Counter)
    tsvs = sorted(folder.glob("*.tsv"))
    if any(t.stem.startswith("gw") for t in tsvs):  # a controller's record repeats its workers' folders
        tsvs = [t for t in tsvs if t.stem.startswith("gw")]
    for tsv in tsvs:
        rows: list[list[str]] = []
        for line in tsv.read_text(encoding="utf-8", errors="surrogateescape").split("\n"):
            head = line.split("\t", 2)
            if len(head) == 3 and ROW.fullmatch(head[0]):
                rows.append(head)
            elif rows:  # a file name with a line break in it (the hostile-input tests make them)
                rows[-1][2] += "\n" + line
        for sha, _size, path in rows:
            files[NUMBERED.sub("", path)][sha] += 1
    return files


def main(before: Path, after: Path) -> int:
    a, b = read(before), read(after)
    same = differ = volatile = 0
    missing = sorted(set(a) - set(b))
    new = sorted(set(b) - set(a))
    for path in sorted(set(a) & set(b)):
        if a[path] == b[path]:
            same += sum(a[path].values())
        elif any(p.search(path) for p in VOLATILE):
            volatile += 1
        else:
            differ += 1
            print(f"differs: {path}")
    for path in missing:
        print(f"only before: {path}")
    for path in new:
        print(f"only after: {path}")
    print(
        f"{same} files byte-identical; {differ} paths differ; {volatile} volatile paths differ (timings, pids); "
        f"{len(missing)} only before, {len(new)} only after"
    )
    return 1 if differ or missing or new else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python scripts/compare_output_bytes.py BEFORE_DIR AFTER_DIR")
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
