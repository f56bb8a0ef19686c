"""The regression gate: did a candidate run regress against a baseline on the same facts?

`regression_gate` pairs the two per-fact tables (`factprobe.metrics.comparison.compare_runs`: McNemar and
the paired bootstrap on the share of right facts) and returns a `GateDecision` that speaks the gated
headline metric in its direction (issue 42 item 2): `metric`, `direction`, `candidate_value`,
`baseline_value`, `diff` (candidate - baseline, in the metric's units) and the rule and reason in those
terms. Used by `factprobe regress`, the regression pipeline's gate step and the nightly comparison.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from .comparison import compare_runs

#: the two directions a gated headline may have (`GateDecision.direction`)
HIGHER_IS_BETTER = "higher is better"
LOWER_IS_BETTER = "lower is better"


@dataclass(frozen=True)
class GateDecision:
    """Outcome of `regression_gate`, in the terms of the gated headline `metric` (e.g. `accuracy`,
    `win_rate`, `miss_rate`) and its `direction` (`HIGHER_IS_BETTER` or `LOWER_IS_BETTER`).

    `candidate_value` / `baseline_value`: the metric of each run on the shared facts (the share of facts
    whose verdict is True); `diff` = candidate_value - baseline_value and `diff_ci` its paired bootstrap
    interval, in the metric's own units, so under a lower-is-better metric a rise (diff > 0) is the
    regression. gate.json (`factprobe regress --out`) writes these fields under the same names."""

    passed: bool  # False means: block the candidate
    reason: str  # one sentence a CI log can show as is
    diff: float  # candidate_value - baseline_value on the shared facts
    diff_ci: tuple[float, float]  # paired bootstrap (1 - alpha) interval of diff
    p_value: float  # McNemar p (exact or chi2 with continuity correction)
    n: int  # facts both runs answered
    metric: str = "accuracy"  # the gated headline
    direction: str = HIGHER_IS_BETTER
    candidate_value: float = float("nan")
    baseline_value: float = float("nan")
    max_drop: float = float("nan")  # tolerated change for the worse, absolute, in the metric's units
    alpha: float = float("nan")  # significance level of both tests
    mcnemar_method: str = ""
    b01: int = 0  # facts that got better (verdict right in the candidate only)
    b10: int = 0  # facts that got worse (verdict right in the baseline only)
    n_only_candidate: int = 0
    n_only_baseline: int = 0

    @property
    def higher_is_better(self) -> bool:
        return self.direction != LOWER_IS_BETTER

    def rule(self) -> str:
        """The FAIL rule in the metric's direction, e.g. `fail iff diff < -0.02 and p < 0.05 and CI upper < 0`."""
        if self.higher_is_better:
            return f"fail iff diff < -{self.max_drop:g} and p < {self.alpha:g} and CI upper < 0"
        return f"fail iff diff > +{self.max_drop:g} and p < {self.alpha:g} and CI lower > 0"

    def report(self) -> str:
        """Multi-line, human-readable summary for CI logs and MLflow text artifacts."""
        lo, hi = self.diff_ci
        ci_pct = round(100 * (1 - self.alpha)) if not math.isnan(self.alpha) else 95
        lines = [
            f"regression gate: {'PASS' if self.passed else 'FAIL'}",
            f"  shared facts      {self.n}"
            + (
                f"  (only candidate: {self.n_only_candidate}, only baseline: {self.n_only_baseline})"
                if self.n_only_candidate or self.n_only_baseline
                else ""
            ),
            f"  {self.metric:<17} candidate {self.candidate_value:.4f}  baseline {self.baseline_value:.4f}  ({self.direction})",
            f"  diff (cand-base)  {self.diff:+.4f}  {ci_pct}% CI [{lo:+.4f}, {hi:+.4f}] (paired bootstrap)",
            (
                f"  McNemar           p = {self.p_value:.4g} ({self.mcnemar_method}; "
                f"facts better in the candidate {self.b01}, worse {self.b10})"
            ),
            f"  rule              {self.rule()}",
            f"  reason            {self.reason}",
        ]
        return "\n".join(lines)


def _gate_reason(
    metric: str,
    higher: bool,
    diff: float,
    ci: tuple[float, float],
    p: float,
    max_drop: float,
    alpha: float,
    n: int,
    material: bool,
    significant: bool,
    ci_worse: bool,
    passed: bool,
) -> str:
    """The one-sentence reason of a gate decision, in the metric's terms (see `regression_gate`)."""
    worse = "drop" if higher else "rise"
    if not material:
        got_worse = diff < 0 if higher else diff > 0
        if got_worse:
            return f"{metric} changed by {diff:+.4f}, within the tolerated {worse} of {max_drop:g}"
        return f"no {worse}: {metric} changed by {diff:+.4f}"
    if passed:
        why = []
        if not significant:
            why.append(f"McNemar p = {p:.3g} >= {alpha:g}")
        if not ci_worse:
            bound, side = (ci[1], "below") if higher else (ci[0], "above")
            why.append(f"the CI {'upper' if higher else 'lower'} bound {bound:+.4f} is not {side} 0")
        return f"{worse} {diff:+.4f} of {metric} exceeds the tolerance {max_drop:g} but is not significant ({'; '.join(why)})"
    return (
        f"significant {worse} {diff:+.4f} of {metric} beyond the tolerance {max_drop:g} "
        f"(McNemar p = {p:.3g}, CI [{ci[0]:+.4f}, {ci[1]:+.4f}]) on {n} shared facts"
    )


def regression_gate(
    df_candidate: pd.DataFrame,
    df_baseline: pd.DataFrame,
    max_drop: float = 0.02,
    alpha: float = 0.05,
    n_boot: int = 2000,
    seed: int = 0,
    key: str = "fact_id",
    metric: str = "accuracy",
    higher_is_better: bool = True,
) -> GateDecision:
    """Decide whether a candidate run regressed against a baseline on the same facts.

    Both tables hold the per-fact "right" column `correct` (`factprobe.framework.verdict.verdict_table`:
    the probe's verdict, negated under a lower-is-better headline). `metric` names the gated headline
    and `higher_is_better` its direction: the decision is reported in that metric's terms (its value
    is the share of right facts when higher is better, else one minus it; see `GateDecision`).

    Rule, on the share of right facts: FAIL iff all three hold, else PASS:

    1. the change for the worse is larger than the tolerance: diff(right) < -max_drop (the metric
       falls by more than max_drop, or under a lower-is-better metric rises by more than it);
    2. McNemar's test on the shared facts rejects equal shares: p < alpha;
    3. the paired bootstrap (1 - alpha) interval of diff(right) lies entirely below 0.

    Why: (1) alone fails on noise (with 200 facts, a 2-point swing is a handful of flips);
    (2)+(3) alone fail on drops too small to matter once there are many facts. Requiring
    practical size AND significance blocks only real, material regressions. The two tests check
    the same question by different routes (exact/asymptotic test on discordant pairs vs.
    resampling the whole table); requiring both keeps the gate conservative, which suits a nightly
    gate where a false alarm costs a human investigation. Because (1) already fixes the
    direction, the two-sided p < alpha is in effect a one-sided test at alpha / 2.
    The tolerance is tested on the point estimate, not on the CI (CI upper < -max_drop would need
    several thousand facts before it could ever fire for drops just above the tolerance).

    Raises DataError (a ValueError) when the runs share no fact or repeat a fact.
    """
    if not 0.0 <= max_drop < 1.0:
        raise ValueError(f"max_drop must be in [0, 1), got {max_drop}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    cmp = compare_runs(df_baseline, df_candidate, key=key, n_boot=n_boot, seed=seed, alpha=alpha)
    diff = cmp["diff"]
    lo, hi = cmp["diff_ci"]
    mc = cmp["mcnemar"]
    p = mc["p_value"]

    material = diff < -max_drop
    significant = p < alpha
    ci_below_zero = hi < 0.0
    passed = not (material and significant and ci_below_zero)

    n = cmp["n_joined"]

    def value(share: float) -> float:
        """The metric from the share of right facts: itself, or the share of the other facts (counted, not 1 - x)."""
        return share if higher_is_better else (n - round(share * n)) / n

    m_diff = diff if higher_is_better else -diff
    m_ci = (lo, hi) if higher_is_better else (-hi, -lo)
    reason = _gate_reason(
        metric, higher_is_better, m_diff, m_ci, p, max_drop, alpha, cmp["n_joined"], material, significant, ci_below_zero, passed
    )
    return GateDecision(
        passed=passed,
        reason=reason,
        diff=m_diff + 0.0,  # no -0.0
        diff_ci=(m_ci[0] + 0.0, m_ci[1] + 0.0),
        p_value=p,
        n=cmp["n_joined"],
        metric=metric,
        direction=HIGHER_IS_BETTER if higher_is_better else LOWER_IS_BETTER,
        candidate_value=value(cmp["acc_b"]),
        baseline_value=value(cmp["acc_a"]),
        max_drop=float(max_drop),
        alpha=float(alpha),
        mcnemar_method=mc["method"],
        b01=mc["b01"],
        b10=mc["b10"],
        n_only_candidate=cmp["n_only_b"],
        n_only_baseline=cmp["n_only_a"],
    )


__all__ = ["HIGHER_IS_BETTER", "LOWER_IS_BETTER", "GateDecision", "regression_gate"]
