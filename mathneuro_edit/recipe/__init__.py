"""The recipe: the single source of truth of a run (pydantic schema, YAML and ``--set`` overrides).

Contract: :class:`~.schema.Recipe` validates every key with one error that lists every problem; :mod:`.io`
reads YAML (duplicate keys refused) and applies overrides; :mod:`.types` holds the constrained value types;
:mod:`.lm_eval_keys` the ``evaluation.lm_eval`` section. Recipes never load a model or read data.
"""

from __future__ import annotations

from .io import load_recipe, quickstart_recipe, recipe_from_dict
from .schema import BaseConfig, Recipe, Source, recipe_sha256

__all__ = ["load_recipe", "quickstart_recipe", "recipe_from_dict", "BaseConfig", "Recipe", "Source", "recipe_sha256"]
