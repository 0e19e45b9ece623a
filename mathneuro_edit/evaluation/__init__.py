"""Evaluation: did the edit change math, and at what general cost? (n, intervals, paired tests).

Contract: :func:`~.runner.evaluate` runs tasks on a model as it is and as edited (math accuracy by greedy
generation, general-text loss and KL, lm-eval tasks through :mod:`.lm_eval_bridge`) and returns one
:class:`~.results.EvalResults`; :mod:`.significance` holds the statistics (Wilson intervals, exact McNemar);
:mod:`.report` turns results into the table and verdict that the console, eval.json, the card and sweeps share;
:mod:`.prompts` renders prompts (chat templates included) and reads answers. Named ``evaluation`` (not
``evaluate``) so that ``from mathneuro_edit import evaluate`` is always the function.
"""

import lazy_loader

# the face's names: __init__.pyi's imports, each loaded on first access (importing the face loads no torch)
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
