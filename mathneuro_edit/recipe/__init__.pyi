from .input_sections import BaseConfig as BaseConfig
from .input_sections import Source as Source
from .io import load_recipe as load_recipe
from .io import quickstart_recipe as quickstart_recipe
from .io import recipe_from_dict as recipe_from_dict
from .schema import Recipe as Recipe
from .schema import recipe_sha256 as recipe_sha256
