from .lm_eval_task import LmEvalTask as LmEvalTask
from .results import EvalResults as EvalResults
from .runner import evaluate as evaluate
from .significance import mcnemar_exact as mcnemar_exact
from .significance import wilson_interval as wilson_interval
from .tasks import GeneralTask as GeneralTask
from .tasks import MathTask as MathTask
