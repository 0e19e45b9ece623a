"""The options and helpers every command of the CLI shares, one home each (:func:`recipe_command` gives a recipe
command RECIPE, ``--set``, ``--quiet`` and ``--verbose`` as one :class:`RecipeJob`).

Nothing heavy (torch, transformers) is imported here: each helper imports what it needs when a command calls it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

__all__ = [
    "JSON_META",
    "json_requested",
    "recipe_arg",
    "set_opt",
    "verbose_opt",
    "quiet_opt",
    "json_option",
    "json_opt",
    "json_report_opt",
    "emit_json",
    "workers_opt",
    "read_recipe",
    "require_local",
    "check_out",
    "stage_echo",
    "RecipeJob",
    "recipe_command",
]

JSON_META = "mathneuro_edit.json"  # ctx.meta (shared by a command's context and the group's): --json was given


def json_requested(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    """``--json``'s callback: tells the CLI's error boundary to print an error as JSON on stdout too."""
    if value:
        ctx.meta[JSON_META] = True
    return value


def read_recipe(path: str | None, sets: tuple[str, ...]):
    """RECIPE with ``--set`` applied; without RECIPE, the embedded quickstart recipe."""
    from ..recipe.io import load_recipe, quickstart_recipe

    return load_recipe(path, sets) if path else quickstart_recipe(sets)


def require_local(value: str, label: str) -> None:
    """Refuse a local-looking path (``/x``, ``./x``, ``~/x``, ``dir/x`` when ``dir/`` exists) that does not exist, in
    one line, before anything heavy is imported (a Hub id or a special value passes: the command reads it)."""
    from pathlib import Path

    from ..util.paths import is_local_path, no_such_local_folder

    if is_local_path(value) and not Path(value).expanduser().exists():
        raise no_such_local_folder(value, label)


def check_out(out: str, recipe: Any, recipe_path: str | None, kind: str, **more: str | None) -> list:
    """The one output-claiming rule (:func:`~mathneuro_edit.util.outdir.check_output`): ``--out`` may not be,
    contain or lie inside any input (the recipe's base and data files, the recipe file, and ``more``: statistics,
    mask, ...), and must be a regular file or folder path. Returns the inputs (for the writer's own check)."""
    from ..util.outdir import check_output

    inputs = [
        *recipe.local_inputs(),
        *([("recipe", recipe_path)] if recipe_path else []),
        *[(what.replace("_", " "), p) for what, p in more.items() if p],
    ]
    check_output(out, inputs, kind=kind)
    return inputs


def stage_echo(quiet: bool, verbose: bool = False):
    """The stage printer's sink (stderr; nothing under ``--quiet``), with the libraries kept quiet for the rest of
    the command unless ``--verbose`` (their bars and the known-harmless warnings; restored when it ends), and, off a
    terminal, a line every 30 s while a stage runs (:func:`~mathneuro_edit.util.console.progress_every`)."""
    from ..util.console import progress_every, progress_lines, quiet_libraries

    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.with_resource(quiet_libraries(verbose and not quiet))  # closed when the command's context ends
        ctx.with_resource(progress_lines(progress_every(quiet)))  # off a terminal: a line every 30 s per stage
    return (lambda s: None) if quiet else (lambda s: click.echo(s, err=True))


recipe_arg = click.argument("recipe", required=False, type=click.Path(dir_okay=False))
set_opt = click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="override a recipe key, e.g. --set mask.top_k=0.01 (repeatable)",
)
verbose_opt = click.option(
    "--verbose", "-v", is_flag=True, help="also the libraries' own progress bars and every warning they print"
)


def quiet_opt(f: Any) -> Any:
    """``--quiet`` and ``--verbose`` (the command receives both)."""
    return click.option("--quiet", "-q", is_flag=True, help="no progress bars or stage lines")(verbose_opt(f))


def json_option(help_text: str) -> Any:
    """``--json`` with its help line: the command receives ``as_json``, and an error is printed as JSON on stdout
    too (:func:`json_requested`)."""
    return click.option("--json", "as_json", is_flag=True, callback=json_requested, help=help_text)


json_opt = json_option("print one JSON document on stdout (stage lines stay on stderr)")
json_report_opt = json_option("print one JSON document on stdout")  # push, verify, reproduce: the report is it


def emit_json(data: Any, scrub: bool = False) -> None:
    """One JSON document on stdout (``--json``); ``scrub``: a Hub token anywhere in it (a file name) is ``***``."""
    import json

    text = json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False, default=str)
    if scrub:
        from ..util.scrub import scrub_token

        text = scrub_token(text)
    click.echo(text)


workers_opt = click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="output shards written at once (threads; peak memory grows with N)",
)


@dataclass(frozen=True)
class RecipeJob:
    """What a recipe command is given by RECIPE, ``--set``, ``--quiet`` and ``--verbose`` (:func:`recipe_command`):
    the recipe file and its overrides, and how the command reports."""

    path: str | None
    sets: tuple[str, ...]
    quiet: bool
    verbose: bool

    def recipe(self, *more: str) -> Any:
        """The recipe with ``--set`` and then ``more`` overrides applied (:func:`read_recipe`)."""
        return read_recipe(self.path, (*self.sets, *more))

    def claim(self, out: str, recipe: Any, kind: str, **more: str | None) -> list:
        """``--out`` checked against the recipe's inputs, the recipe file and ``more`` (:func:`check_out`)."""
        return check_out(out, recipe, self.path, kind, **more)

    def stages(self) -> Callable[[str], None]:
        """The stage printer (:func:`stage_echo`)."""
        return stage_echo(self.quiet, self.verbose)

    @property
    def progress(self) -> bool:
        """Whether to draw progress bars (none under ``--quiet``, nor off a terminal)."""
        from ..util.console import bars_wanted

        return bars_wanted(self.quiet)


def recipe_command(f: Callable[..., Any]) -> Callable[..., Any]:
    """RECIPE, ``--set``, ``--quiet`` and ``--verbose`` for a command, which receives them as its first parameter,
    one :class:`RecipeJob` (put it below the command's own options: they are listed first in ``--help``)."""

    @functools.wraps(f)
    def command(recipe: str | None, sets: tuple[str, ...], quiet: bool, verbose: bool, **options: Any) -> Any:
        return f(RecipeJob(recipe, sets, quiet, verbose), **options)

    return recipe_arg(set_opt(quiet_opt(command)))
