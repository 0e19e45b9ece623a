"""The recipe: the single source of truth of a run (pydantic schema, YAML and ``--set`` overrides).

Contract: :class:`~.schema.Recipe` validates every key with one error that lists every problem; :mod:`.io`
reads YAML (duplicate keys refused) and applies overrides; :mod:`.types` holds the constrained value types;
:mod:`.lm_eval_keys` the ``evaluation.lm_eval`` section. Recipes never load a model or read data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..util.lazy import lazy_face

# public name -> the module that defines it, imported on first access (importing one module of this package
# never imports its siblings: torch loads only where it is used)
_LAZY: dict[str, str] = {
    "load_recipe": "io",
    "quickstart_recipe": "io",
    "recipe_from_dict": "io",
    "BaseConfig": "input_sections",
    "Recipe": "schema",
    "Source": "input_sections",
    "recipe_sha256": "schema",
}

__all__ = [
    "load_recipe",
    "quickstart_recipe",
    "recipe_from_dict",
    "BaseConfig",
    "Recipe",
    "Source",
    "recipe_sha256",
]

if TYPE_CHECKING:
    from .input_sections import BaseConfig, Source
    from .io import load_recipe, quickstart_recipe, recipe_from_dict
    from .schema import Recipe, recipe_sha256

__getattr__, __dir__ = lazy_face(__name__, _LAZY)
