from .consistency import run_consistency as run_consistency
from .pipeline import RunResult as RunResult
from .pipeline import export_recipe as export_recipe
from .pipeline import run_recipe as run_recipe
from .plan import plan_from_config as plan_from_config
from .plan import plan_recipe as plan_recipe
from .sweep.result import SweepResult as SweepResult
from .sweep.search import run_sweep as run_sweep
