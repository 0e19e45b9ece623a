"""The select-then-confirm procedure of a sweep, as pure functions of evaluated counts (no model, no files).

:func:`select_candidate` picks ONE setting from the selection problems (the largest gain within the general-KL
budget), :func:`confirm` tests it once on other problems (paired exact McNemar), :func:`recommend` says what the
two showed; :func:`with_holm` and :func:`pareto_front` describe the grid. :mod:`.search` evaluates the settings and
calls these; tests/runs/test_sweep_procedure.py simulates the procedure's false-recommendation rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from itertools import islice
from typing import Any

from ...engine.edit_map import show_setting
from ...evaluation.report import format_p
from ...evaluation.significance import detectable_gain, discordant_pairs, holm_adjust, mcnemar_exact, wilson_interval

__all__ = [
    "SweepPoint",
    "Confirmation",
    "ArmOutcome",
    "paired_test",
    "format_verdict",
    "VERDICTS",
    "with_holm",
    "pareto_front",
    "math_merit",
    "select_candidate",
    "confirm",
    "recommend",
    "evidence_text",
    "detectable_text",
    "halving_schedule",
    "promote",
]


@dataclass(frozen=True)
class SweepPoint:
    """One edit evaluated on the selection problems (the base is reported separately).

    ``mcnemar_p`` compares it with the base on the same problems (raw: one test of the grid), ``significant`` is
    ``mcnemar_p < 0.05`` as the evaluation reports it, ``holm_p`` the Holm-Bonferroni adjusted p over the grid. A
    point built without them (the defaults) has p = 1.
    """

    top_k: float
    scale: float
    selected: int
    math_accuracy: float
    general_loss: float
    general_kl: float
    math_correct: int = 0
    math_total: int = 0
    math_ci95_low: float = 0.0
    math_ci95_high: float = 1.0
    mcnemar_p: float = 1.0
    significant: bool = False
    # general loss: its standard error over texts, and the paired change vs the base with its standard error
    # (:func:`~mathneuro_edit.evaluation.results.compare`); nan in a point built without them
    general_loss_se: float = math.nan
    loss_change: float = math.nan
    loss_change_se: float = math.nan
    holm_p: float = 1.0
    # which calibration / target variant of the recipe the point belongs to ("" for the recipe itself), and the
    # round of the adaptive selection it reached (1: the first slice only; the finalists reached the last)
    variant: str = ""
    round: int = 1
    base_correct: int | None = None  # the base's count on the same math_total problems (None: not recorded)

    @property
    def gain_points(self) -> float:
        """Accuracy change over the base on the same problems, in percentage points (nan when not recorded)."""
        if self.base_correct is None or not self.math_total:
            return math.nan
        return 100 * (self.math_correct - self.base_correct) / self.math_total


@dataclass(frozen=True)
class Confirmation:
    """The one pre-registered test: the candidate and the base on the confirmation problems (``point``: the
    candidate's index among the selection points; ``variant_set``: its variant's recipe overrides)."""

    n: int
    problems_sha256: tuple[str, ...]
    top_k: float
    scale: float
    base_correct: int
    edited_correct: int
    base_only: int
    edited_only: int
    mcnemar_p: float
    confirmed: bool
    alpha: float
    point: int
    mask_sha256: str = ""
    variant: str = ""
    variant_set: tuple[str, ...] = ()
    # the controls and prompt formats (:func:`format_verdict`): ``verdict`` is the recipe's own format's, and
    # ``confirmed`` is ``verdict == "math-boost"``; ``formats`` holds every format's arms and paired tests,
    # ``controls`` the control edits (method, seed, mask sha256, weights), ``weights_dtype`` the dtype of the
    # weights every arm was measured on (the release's ``outputs.dtype``), ``general`` the candidate's cost on
    # the general texts (loss change and KL), ``compute_dtype`` the dtype the arms computed in (the model's: the
    # weights rounded to ``weights_dtype``, read back into it), what a user's load must ask for to get these numbers
    verdict: str = ""
    formats: tuple[dict[str, Any], ...] = ()
    controls: tuple[dict[str, Any], ...] = ()
    weights_dtype: str = ""
    general: dict[str, Any] | None = None
    compute_dtype: str = ""

    def to_dict(self) -> dict[str, Any]:
        """``sweep.json``'s ``confirmation``, in its order: the fields with each count's 95% Wilson interval."""
        head = "n problems_sha256 top_k scale base_correct edited_correct mcnemar_p confirmed alpha point base_only"
        tail = "mask_sha256 variant variant_set verdict weights_dtype compute_dtype controls formats general"
        d = {k: getattr(self, k) for k in [*head.split(), "edited_only"]}
        d |= {
            "base_ci95": wilson_interval(self.base_correct, self.n),
            "edited_ci95": wilson_interval(self.edited_correct, self.n),
        }
        d |= {k: getattr(self, k) for k in tail.split()}
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


VERDICTS = {
    "math-boost": "a math boost: beats the base, also among the problems both answer, and the magnitude-matched control",
    "format-effect": "a format effect, not a math boost: the gain is not there among the problems both answer",
    "not-specific": "not specific to the math-specific weights: it does not beat the magnitude-matched control",
    "no-gain": "no gain over the base",
}
"""The verdicts of :func:`format_verdict`, with what each means (the card and the recommendation say it)."""


@dataclass(frozen=True)
class ArmOutcome:
    """One model state (the base, the candidate or a control) on the confirmation problems of one prompt format:
    per problem, whether it is right, the form of its completion (:data:`~mathneuro_edit.evaluation.prompts.ANSWER_FORMS`)
    and its operation (``+``, ``-``, ``*``; ``""`` when not arithmetic)."""

    name: str
    correct: tuple[bool, ...]
    forms: tuple[str, ...]
    operations: tuple[str, ...]

    def summary(self) -> dict[str, Any]:
        """Counts and rates with their 95% Wilson intervals: accuracy, answer rate, accuracy among answers, and
        the same per operation.

        Example:
            >>> a = ArmOutcome("base", (True, False, False), ("answer", "answer", "restart"), ("+", "-", "+"))
            >>> s = a.summary(); s["answered"], s["accuracy_among_answers"], s["by_operation"]["+"]["correct"]
            (2, 0.5, 1)
        """
        by_operation = {}
        for op in sorted({o for o in self.operations if o}):
            pairs = [(c, f) for c, f, o in zip(self.correct, self.forms, self.operations) if o == op]
            by_operation[op] = _rates([c for c, _ in pairs], [f for _, f in pairs])
        return {"name": self.name, **_rates(self.correct, self.forms), "by_operation": by_operation}


def _rates(correct: Sequence[bool], forms: Sequence[str]) -> dict[str, Any]:
    n, k = len(correct), sum(correct)
    answered = sum(f == "answer" for f in forms)
    right = sum(c for c, f in zip(correct, forms) if f == "answer")
    return {
        "n": n,
        "correct": k,
        "accuracy": k / n if n else 0.0,
        "ci95": list(wilson_interval(k, n)),
        "answered": answered,
        "restarts": sum(f == "restart" for f in forms),
        "no_number": sum(f == "none" for f in forms),
        "answer_rate": answered / n if n else 0.0,
        "answer_rate_ci95": list(wilson_interval(answered, n)),
        "correct_among_answers": right,
        "accuracy_among_answers": right / answered if answered else 0.0,
        "accuracy_among_answers_ci95": list(wilson_interval(right, answered)),  # none answered: [0.0, 1.0]
    }


def paired_test(before: ArmOutcome, after: ArmOutcome, alpha: float, answered_only: bool = False) -> dict[str, Any]:
    """The exact McNemar test of ``after`` against ``before`` on the same problems (with ``answered_only``: only
    the problems where both gave a well-formed answer). ``passes``: ``after`` is right more often and ``p < alpha``.

    Example:
        >>> b = ArmOutcome("base", (False,) * 10, ("restart",) * 5 + ("answer",) * 5, ("+",) * 10)
        >>> e = ArmOutcome("edit", (True,) * 8 + (False,) * 2, ("answer",) * 10, ("+",) * 10)
        >>> paired_test(b, e, 0.05)["passes"], paired_test(b, e, 0.05, answered_only=True)["n"]
        (True, 5)
    """
    if len(before.correct) != len(after.correct):
        raise ValueError(f"paired_test: {len(before.correct)} vs {len(after.correct)} outcomes; pair the same problems")
    keep = [
        i
        for i in range(len(before.correct))
        if not answered_only or (before.forms[i] == "answer" and after.forms[i] == "answer")
    ]
    b, c = discordant_pairs([before.correct[i] for i in keep], [after.correct[i] for i in keep])
    p = mcnemar_exact(b, c)
    return {
        "before": before.name,
        "after": after.name,
        "answered_only": answered_only,
        "n": len(keep),
        "before_only": b,
        "after_only": c,
        "mcnemar_p": p,
        "passes": c > b and p < alpha,
    }


def format_verdict(
    base: ArmOutcome, candidate: ArmOutcome, control: ArmOutcome, alpha: float
) -> tuple[str, list[dict[str, Any]]]:
    """The verdict of one prompt format (a key of :data:`VERDICTS`) and the paired tests it rests on.

    A math boost needs all three, each at level ``alpha``: the candidate beats the base; it beats the base among
    the problems where both gave a well-formed answer (a gain that is only more answers, e.g. fewer restarts of
    the problem, is a format effect); it beats ``control``, the magnitude-matched control edit (the same count
    in every matrix, the same scale: a gain any edit of that size gives is not specific to the math-specific
    weights). Each extra condition can only lower the rate of false confirmations below the first test's level.

    Example:
        >>> ops = ("+",) * 20
        >>> base = ArmOutcome("base", (False,) * 20, ("restart",) * 10 + ("answer",) * 10, ops)
        >>> fmt = ArmOutcome("candidate", (True,) * 10 + (False,) * 10, ("answer",) * 20, ops)  # only answers more
        >>> format_verdict(base, fmt, base, 0.05)[0]
        'format-effect'
    """
    tests = [paired_test(base, candidate, alpha)]
    if not tests[0]["passes"]:
        return "no-gain", tests
    tests.append(paired_test(base, candidate, alpha, answered_only=True))
    if not tests[1]["passes"]:
        return "format-effect", tests
    tests.append(paired_test(control, candidate, alpha))
    if not tests[2]["passes"]:
        return "not-specific", tests
    return "math-boost", tests


def with_holm(points: Sequence[SweepPoint]) -> list[SweepPoint]:
    """The points with ``holm_p`` set: Holm-Bonferroni over the raw McNemar p of the whole grid."""
    return [replace(p, holm_p=h) for p, h in zip(points, holm_adjust([p.mcnemar_p for p in points]))]


def pareto_front(points: Sequence[SweepPoint]) -> list[int]:
    """Indices of points no other point beats (a higher or equal math merit with a lower or equal KL, one
    strictly); a point without a KL (the adaptive selection never needed it: :func:`promote`) is on no front.

    The merit is :func:`math_merit`: the gain over the base on each point's own problems, so that a point of an
    early, easier round is not ranked above a finalist measured on all the problems.

    Example:
        >>> P = lambda a, k: SweepPoint(0.1, 1.1, 1, a, 1.0, k)
        >>> pareto_front([P(0.5, 0.1), P(0.6, 0.2), P(0.4, 0.3)])
        [0, 1]
    """
    merit = math_merit(points)
    front = []
    for i, p in enumerate(points):
        if not math.isfinite(p.general_kl):
            continue
        dominated = any(
            merit[j] >= merit[i]
            and q.general_kl <= p.general_kl
            and (merit[j] > merit[i] or q.general_kl < p.general_kl)
            for j, q in enumerate(points)  # not itself (one comparison is strict), nor a point without a KL (nan)
        )
        if not dominated:
            front.append(i)
    return front


def math_merit(points: Sequence[SweepPoint]) -> list[float]:
    """What the front and the plot compare: each point's gain over the base on the same problems
    (:attr:`SweepPoint.gain_points`) when every point records it, else its accuracy in percent.

    Why the gain: successive halving measures points on different numbers of problems (the first rounds on the
    first, often easier, problems), so accuracies of different rounds are not comparable, and the gain over the
    base on the very same problems is.

    Example:
        >>> early = SweepPoint(0.1, 1.1, 1, 0.5, 1.0, 0.1, 20, 40, base_correct=19)   # +1 on 40: +2.5 points
        >>> final = SweepPoint(0.1, 1.2, 1, 0.3, 1.0, 0.1, 300, 1000, base_correct=250)  # +50 on 1000: +5
        >>> math_merit([early, final])
        [2.5, 5.0]
    """
    gains = [p.gain_points for p in points]
    if all(math.isfinite(g) for g in gains):
        return gains
    return [100 * p.math_accuracy for p in points]


def select_candidate(points: Sequence[SweepPoint], base_correct: int, kl_budget: float) -> int | None:
    """The one point to confirm: the largest selection gain (``math_correct - base_correct > 0``) among the points
    with ``general_kl <= kl_budget``; ties go to the lower KL, then the earlier point. ``None`` when no point
    within the budget gains at all.

    The p-values play no part: the confirmation test decides, and choosing by gain alone keeps the choice free of
    the test's level.

    Example:
        >>> P = lambda k, kl: SweepPoint(0.05, 1.1, 9, k / 100, 2.0, kl, math_correct=k, math_total=100)
        >>> select_candidate([P(40, 0.01), P(45, 0.2), P(43, 0.02), P(43, 0.01)], 35, 0.05)
        3
    """
    gains = [i for i, p in enumerate(points) if p.general_kl <= kl_budget and p.math_correct > base_correct]
    return max(gains, key=lambda i: (points[i].math_correct, -points[i].general_kl, -i), default=None)


def confirm(base: Sequence[bool], edited: Sequence[bool], alpha: float) -> tuple[int, int, float, bool]:
    """The confirmation test on paired outcomes of the same problems: ``(base_only, edited_only, p, confirmed)``,
    the discordant counts, the two-sided exact McNemar p and whether it shows a gain (``edited_only > base_only and
    p < alpha``).

    Example:
        >>> confirm([False] * 10, [True] * 8 + [False] * 2, 0.05)
        (0, 8, 0.0078125, True)
    """
    b, c = discordant_pairs(base, edited)  # a ValueError for outcomes of different lengths
    p = mcnemar_exact(b, c)
    return b, c, p, c > b and p < alpha


def recommend(
    points: Sequence[SweepPoint],
    base_correct: int,
    n_selection: int,
    candidate: int | None,
    confirmation: Confirmation | None,
    kl_budget: float,
) -> tuple[int | None, str]:
    """``(best, sentence)``: the confirmed point and what the selection and the confirmation showed, or ``None``
    and a sentence that starts ``nothing confirmed:``.

    Example:
        >>> recommend([SweepPoint(0.05, 1.1, 9, 0.3, 2.0, 0.0, 30, 100)], 35, 100, None, None, 0.05)[1][:18]
        'nothing confirmed:'
    """
    base_pct = 100 * base_correct / n_selection if n_selection else 0.0
    if candidate is None:
        return None, (
            f"nothing confirmed: no setting within the general-KL budget {kl_budget:g} raises math accuracy "
            f"over the base ({base_pct:.1f}% on {n_selection} selection problems), so none was tested on "
            "the confirmation problems; do not publish a boost from this sweep"
        )
    p = points[candidate]
    chosen = (
        f"top_k={show_setting(p.top_k)} scale={show_setting(p.scale)}, chosen among {len(points)} settings on {n_selection} selection "
        f"problems ({base_pct:.1f}% -> {100 * p.math_accuracy:.1f}%, {p.math_correct - base_correct:+d} "
        f"problem{'' if abs(p.math_correct - base_correct) == 1 else 's'}, "
        f"raw {format_p(p.mcnemar_p)}, Holm {format_p(p.holm_p)}, general KL {p.general_kl:.4g}, budget "
        f"{kl_budget:g})"
    )
    if confirmation is None:
        return None, f"nothing confirmed: the candidate {chosen} was not tested on confirmation problems"
    c = confirmation
    lo_b, hi_b = wilson_interval(c.base_correct, c.n)
    lo_e, hi_e = wilson_interval(c.edited_correct, c.n)
    measured = (
        f"on {c.n} other problems: base {100 * c.base_correct / c.n:.1f}% ({c.base_correct}/{c.n}, "
        f"{100 * lo_b:.1f}-{100 * hi_b:.1f}) -> {100 * c.edited_correct / c.n:.1f}% ({c.edited_correct}/"
        f"{c.n}, {100 * lo_e:.1f}-{100 * hi_e:.1f}), {100 * (c.edited_correct - c.base_correct) / c.n:+.1f} "
        f"points, {c.base_only} right only before and {c.edited_only} only after, exact McNemar "
        f"{format_p(c.mcnemar_p)}"
    )
    evidence = evidence_text(c)
    if c.confirmed:
        return candidate, f"recommended: {chosen}; confirmed {measured} (< {c.alpha:g}){evidence}"
    if c.verdict in ("format-effect", "not-specific"):
        return None, (
            f"nothing confirmed: the candidate {chosen} gained {measured}, but it is {VERDICTS[c.verdict]}"
            f"{evidence}; do not publish a boost from this sweep"
        )
    return None, (
        f"nothing confirmed: the candidate {chosen} did not confirm {measured} (a confirmed gain needs "
        f"p < {c.alpha:g}; {detectable_text(c.n, c.base_only, c.edited_only, c.alpha)}){evidence}; do not publish "
        "a boost from this sweep"
    )


def detectable_text(n: int, before_only: int, after_only: int, alpha: float) -> str:
    """What a test that did not show a gain can rule out: the smallest gain its ``n`` problems detect with 80% power
    at the share of them that changed (:func:`~mathneuro_edit.evaluation.significance.detectable_gain`). A "not
    confirmed" says this, so that a small sample is not read as "no effect".

    Example:
        >>> detectable_text(800, 5, 14, 0.05)
        'the smallest gain 800 problems detect at 80% power: +1.6 points (2.4% of them changed)'
        >>> detectable_text(1000, 1, 3, 0.05)
        'no gain is detectable at 80% power on 1000 problems of which 0.4% changed'
    """
    if before_only + after_only == 0:
        return f"no gain is detectable on {n} problems of which none changed"
    g = detectable_gain(n, before_only, after_only, alpha)
    share = f"{100 * (before_only + after_only) / n:.1f}%"
    if g is None:
        return f"no gain is detectable at 80% power on {n} problems of which {share} changed"
    return f"the smallest gain {n} problems detect at 80% power: +{100 * g:.1f} points ({share} of them changed)"


def _failed_test(f: dict[str, Any]) -> dict[str, Any] | None:
    """The paired test a format's verdict failed (:func:`format_verdict`'s order: the base, the base among the
    problems both answered, the first control), or ``None`` for a math boost or a record without it."""
    # the failed test of each verdict: (against the base, among the problems both answered)
    want = {"no-gain": (True, False), "format-effect": (True, True), "not-specific": (False, False)}.get(
        f.get("verdict")
    )
    tests = [t for t in f.get("tests", []) if isinstance(t, dict) and t.get("after") == "candidate"]
    return next((t for t in tests if (t.get("before") == "base", bool(t.get("answered_only"))) == want), None)


def evidence_text(c: Confirmation) -> str:
    """What the controls and the prompt formats showed, as a clause (empty for a confirmation without them).

    Example:
        >>> evidence_text(Confirmation(10, (), 0.1, 1.1, 1, 5, 0, 4, 0.12, False, 0.05, 0))
        ''
    """
    parts = []
    for f in c.formats:
        arms = f.get("arms", {})
        base, cand = arms.get("base", {}), arms.get("candidate", {})
        tests = {(t["before"], t["answered_only"]): t for t in f.get("tests", []) if t.get("after") == "candidate"}
        line = (
            f"{f.get('name', '?')} ({f.get('n', 0)} problems): {f.get('verdict', '?')}, base "
            f"{100 * base.get('accuracy', 0):.1f}% -> {100 * cand.get('accuracy', 0):.1f}%, answer rate "
            f"{100 * base.get('answer_rate', 0):.1f}% -> {100 * cand.get('answer_rate', 0):.1f}%, accuracy among "
            f"answers {100 * base.get('accuracy_among_answers', 0):.1f}% -> "
            f"{100 * cand.get('accuracy_among_answers', 0):.1f}%"
        )
        for name, arm in arms.items():
            t = tests.get((name, False))
            if name in ("base", "candidate") or t is None:
                continue
            line += (
                f"; vs the {name} control ({100 * arm.get('accuracy', 0):.1f}%): {t['after_only']} vs "
                f"{t['before_only']}, {format_p(t['mcnemar_p'])}"
            )
        failed = _failed_test(f)
        if failed is not None:
            line += "; " + detectable_text(failed["n"], failed["before_only"], failed["after_only"], c.alpha)
        parts.append(line)
    return "" if not parts else " [" + " | ".join(parts) + "]"


def halving_schedule(n_points: int, n_selection: int, first: int | None, eta: int) -> list[tuple[int, int]]:
    """The rounds of successive halving: ``(points evaluated, problems seen at the round's end)`` per round.

    Round 1 evaluates every point on the first ``first`` selection problems; each next round keeps the best
    ``ceil(points / eta)`` and extends them to ``eta`` times as many problems, until the last round, which ends
    on all ``n_selection``. ``first=None`` (or ``>= n_selection``) is one round: every point on every problem.

    Why this rule: most of a grid is clearly worse than the best after a few dozen problems (a scale of 2 or a
    large top_k breaks arithmetic), and the confirmation set, never used for choosing, keeps the final test
    valid whatever the rule did (tests/runs/test_sweep_procedure.py simulates it under the null).

    Example:
        >>> halving_schedule(72, 1000, 40, 3)
        [(72, 40), (24, 120), (8, 360), (3, 1000)]
        >>> halving_schedule(8, 300, None, 3)
        [(8, 300)]
    """
    rounds, points, end = [], n_points, n_selection if first is None else first
    while end < n_selection and points > 1:
        rounds.append((points, end))
        points, end = -(-points // eta), end * eta
    rounds.append((points, n_selection))
    return rounds


def promote(
    correct: Sequence[int | None],
    kl: Sequence[float] | Callable[[int], float],
    kl_budget: float,
    keep: int,
    size: Sequence[float] | None = None,
) -> list[int]:
    """The ``keep`` points that continue: most problems right on the problems every candidate has seen, then the
    smaller edit (``size``: weights edited x ``|scale - 1|``; none given: all equal), then the earlier point; a
    point over the KL budget (or not evaluated: ``None``) never continues, since it could not be chosen. Returned in
    grid order.

    ``kl`` is a sequence or a function of the point's index; a function is asked only for the points it needs:
    in rank order, until ``keep`` points within the budget are found. Why the smaller edit breaks ties and not the
    KL: on 40 problems most points tie (SmolLM2: 21 points at 20 right, 22 at 19), a point's KL costs as much as
    ~100-200 math problems, and ranking ties by KL would need the KL of every tied point; the smaller edit is known
    for free, and of two edits that solve the same problems it is the one that moves the model less.

    Example:
        >>> promote([30, 34, None, 34, 20], [0.01, 0.02, 0.0, 0.01, 0.09], 0.05, 2)
        [1, 3]
        >>> asked = []
        >>> promote([34, 34, 34, 30], lambda i: asked.append(i) or 0.01, 0.05, 2, size=[5.0, 1.0, 2.0, 0.1]), asked
        ([1, 2], [1, 2])
    """
    kl_of = kl if callable(kl) else kl.__getitem__
    order = sorted(
        (i for i, c in enumerate(correct) if c is not None),
        key=lambda i: (-int(correct[i] or 0), size[i] if size is not None else 0.0, i),
    )
    return sorted(islice((i for i in order if kl_of(i) <= kl_budget), keep))  # asks no KL past the keep-th
