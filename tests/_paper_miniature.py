"""The paper's experiment in miniature, on the shipped organism, with the project's own API.

MathNeuro prune vs random prune of the same count vs Wanda-only prune (math top-K without subtracting general),
and the data-efficiency claim (one calibration sample per set). Used by ``tests/runs/test_paper_miniature.py`` (which
asserts the paper's qualitative claims) and ``scripts/paper_miniature.py`` (which writes ``docs/results.md``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from mathneuro_edit.engine.apply import ReversibleEdit
from mathneuro_edit.engine.calibration import calibrate
from mathneuro_edit.engine.mask import find_math_params
from mathneuro_edit.evaluation.runner import evaluate
from mathneuro_edit.evaluation.tasks import GeneralTask, MathTask
from mathneuro_edit.organism import format_math, general_texts, load_organism, math_problems
from mathneuro_edit.runs.consistency import jaccard

__all__ = ["MiniatureResult", "run_miniature"]


@dataclass
class MiniatureResult:
    """Accuracies are fractions; losses are mean token losses on held-out general text."""

    top_k: float
    n_eval: int
    base_accuracy: float
    base_general_loss: float
    edits: dict[str, dict[str, float]] = field(default_factory=dict)  # name -> accuracy, loss, kl, selected
    one_sample_overlap: float = 0.0

    def relative_loss_rise(self, name: str) -> float:
        return self.edits[name]["general_loss"] / self.base_general_loss - 1

    def relative_accuracy_drop(self, name: str) -> float:
        return 1 - self.edits[name]["math_accuracy"] / self.base_accuracy if self.base_accuracy else 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_markdown(self) -> str:
        rows = [
            f"| edit (top_k {self.top_k:g}) | weights pruned | math accuracy | general loss | general KL |",
            "|---|---|---|---|---|",
            f"| none (base) | 0 | {100 * self.base_accuracy:.1f}% | {self.base_general_loss:.4f} | 0 |",
        ]
        for name, e in self.edits.items():
            rows.append(
                f"| {name} | {int(e['selected']):,} | {100 * e['math_accuracy']:.1f}% | "
                f"{e['general_loss']:.4f} ({100 * (e['general_loss'] / self.base_general_loss - 1):+.1f}%) | "
                f"{e['general_kl']:.4f} |"
            )
        return "\n".join(rows)


def run_miniature(
    *, top_k: float = 0.05, n_calib: int = 100, n_eval: int = 100, seed: int = 0, progress: bool = False
) -> MiniatureResult:
    """Calibrate the organism, prune with MathNeuro / random / Wanda-only / one-sample MathNeuro, and evaluate.

    Args:
        top_k: fraction per matrix.
        n_calib: calibration samples per set (train split).
        n_eval: held-out math problems and general texts evaluated.
        seed: sampling and random-mask seed.
        progress: progress bars.

    Returns:
        :class:`MiniatureResult`.
    """
    model, tok = load_organism()
    math_train = [format_math(p["question"], p["answer"]) for p in math_problems(n_calib, seed=seed, split="train")]
    general_train = general_texts(n_calib, seed=seed, split="train")
    ms = calibrate(model, tok, math_train, progress=progress)
    gs = calibrate(model, tok, general_train, progress=progress)
    ms1 = calibrate(model, tok, math_train[:1], progress=progress)
    gs1 = calibrate(model, tok, general_train[:1], progress=progress)
    masks = {
        "MathNeuro prune": find_math_params(model, ms, gs, top_k=top_k),
        "random prune (same count)": find_math_params(model, ms, gs, top_k=top_k, method="random", seed=seed),
        "Wanda-only prune (math top-K)": find_math_params(model, ms, None, top_k=top_k, method="wanda"),
        "MathNeuro prune, 1 sample per set": find_math_params(model, ms1, gs1, top_k=top_k),
    }
    tasks = [
        MathTask("math", math_problems(n_eval, seed=seed + 1, split="test"), max_new_tokens=96),
        GeneralTask("general", general_texts(n_eval, seed=seed + 1, split="test")),
    ]
    base = evaluate(model, tok, tasks, progress=progress)
    base_d = base.to_dict()
    result = MiniatureResult(
        top_k, n_eval, base_d["math"]["base"]["math_accuracy"], base_d["general"]["base"]["general_loss"]
    )
    for name, mask in masks.items():
        res = evaluate(
            model, tok, tasks, edit=ReversibleEdit(model, mask, 0.0), base_results=base, progress=progress
        ).to_dict()
        result.edits[name] = {
            "math_accuracy": res["math"]["edited"]["math_accuracy"],
            "general_loss": res["general"]["edited"]["general_loss"],
            "general_kl": res["general"]["edited"]["general_kl"],
            "selected": float(mask.total()[0]),
        }
    result.one_sample_overlap = jaccard(masks["MathNeuro prune"], masks["MathNeuro prune, 1 sample per set"])
    return result
