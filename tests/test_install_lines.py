"""Every install line a user sees is one that works: mathneuro-edit is not on PyPI, so a line that names
it must install from its repository (``"mathneuro-edit[...] @ git+URL"``) or from a checkout (``-e ".[extra]"``),
and every extra it names exists in pyproject.toml; any other requirement parses as one. Read from the README,
docs/, the model cards' install block and every ``pip install`` hint in the package's messages.
(The wheel itself installing and running: tests/test_wheel_install.py.)
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import tomllib
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
# what follows `pip install` up to the end of the command: a backtick, `&&`, `;`, ` (`, `#`, a line end
LINE = re.compile(r"pip install ((?:(?!&&|`|;| \(|#|\n).)+)")


def install_lines() -> list[tuple[str, str]]:
    from mathneuro_edit.evaluation.lm_eval_index import _INSTALL_HINT
    from mathneuro_edit.publish.card import CardSource, build_card, summarize_edit
    from mathneuro_edit.publish.lock import build_lock
    from mathneuro_edit.recipe.io import quickstart_recipe

    recipe = quickstart_recipe()
    lock = build_lock(recipe, base_revision=None, data_records={}, stats_sha256="s", mask_sha256="m", output_files={})
    card = build_card(CardSource(recipe, lock, summarize_edit({}, model_params=1)), "checkpoint", base_model_id=None)

    sources = [
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "recipes").glob("*.yaml")),
        *sorted((ROOT / "mathneuro_edit").rglob("*.py")),
    ]
    found = []
    for path in sources:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".py":  # a comment may say what not to type; a string literal's closing quote is not part
            text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
        for args in LINE.findall(text):
            if "{" in args:  # an f-string's template: its rendered form is checked below
                continue
            args = args.rstrip()
            for quote in "\"'":
                if args.count(quote) % 2:
                    args = args.rstrip(quote).rstrip()
            found.append((str(path.relative_to(ROOT)), args))
    found += [("card install block", a) for a in LINE.findall(card.text)]  # the template's, rendered
    found += [("lm-eval hint", a) for a in LINE.findall(_INSTALL_HINT)]
    return found


# pip options whose next word is a value (a folder, a file), not a requirement
VALUED = {"--target", "-t", "--prefix", "--root", "-d", "--dest", "-w", "--wheel-dir", "-c", "--constraint"}


def check(args: str) -> None:
    words = shlex.split(args.strip().rstrip(".,:"))
    tokens = [t for i, t in enumerate(words) if not t.startswith("-") and (i == 0 or words[i - 1] not in VALUED)]
    assert tokens, args
    for token in tokens:
        if token.endswith(".whl"):  # a local wheel (or a glob of them): a file, named as one
            assert "/" in token, f"{args}: a wheel is installed by its path"
            continue
        if token.startswith(".[") or token == ".":
            extras = set(token[2:-1].split(",")) if token != "." else set()
            assert extras <= EXTRAS, (args, extras - EXTRAS)
            continue
        req = Requirement(token)
        if req.name == "mathneuro-edit":
            assert req.url and req.url.startswith("git+https://"), f"{args}: mathneuro-edit is not on PyPI"
            assert req.extras <= EXTRAS, (args, req.extras - EXTRAS)


def test_every_install_line_names_an_installable_requirement() -> None:
    lines = install_lines()
    assert len(lines) > 10 and any(where == "card install block" for where, _ in lines)
    bad = []
    for where, args in lines:
        try:
            check(args)
        except Exception as e:  # noqa: BLE001 - every bad line at once
            bad.append(f"{where}: pip install {args}  ({e})")
    assert not bad, "\n".join(bad)


def test_the_check_refuses_what_does_not_install() -> None:
    for args in (
        "mathneuro-edit[eval]",
        '-e ".[nosuchextra]"',
        '"mathneuro-edit[gguf] @ git+https://x/y"  ',
        "mathneuro-edit",
        "--target /tmp/site mathneuro-edit",
        "--target /tmp/site",
    ):
        try:
            check(args)
        except AssertionError:
            continue
        assert args.startswith('"mathneuro-edit[gguf] @'), f"{args} passed the check"
