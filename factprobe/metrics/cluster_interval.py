"""Claims over relations tested over relations (issue 37 item 2): the per-relation mean difference, its
Student-t interval over the relation means, and the per-relation sign count.

In `a` and `b` (`{relation: values}`) the values of one relation share its examples, templates or one
context (one in-context sequence), so they are not independent: a relation is the unit. Each relation
gives one number, d_r = mean(a[r]) - mean(b[r]); the value is the mean of the d_r over the relations in
both (wu2024 Figure 3 reports "mean accuracy across ... 12 relations"); its 95% interval is the t-interval
of that mean (`findings_rule.t_interval`, n - 1 degrees of freedom), and n is the number of relations.

Why not the percentile cluster bootstrap (`findings_rule.cluster_bootstrap_diff`): with 11-12 clusters it
under-covers. The bootstrap's spread is the plug-in standard error (divisor n, not n - 1) and its percentiles
are normal, not t, quantiles: about 1.96 x sqrt(11/12) = 1.88 standard errors against t(11)'s 2.20. In
tests/metrics/test_cluster_interval.py (known-zero effect, 11 or 12 relations of 20-60 correlated positions,
4000 simulated runs) the t-interval covers 0.951 / 0.954 and the percentile cluster bootstrap 0.908 / 0.909.

`signs_text` is the line every verdict over relations prints beside it: "9 of 12 relations the claimed way".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .findings_rule import Direction, t_interval

#: the `Finding.method` of a verdict over relations
METHOD = "t-interval over relation means"


@dataclass(frozen=True)
class RelationDiff:
    """The per-relation mean difference: `value` (mean of the d_r), its 95% t-interval (`lo`, `hi`; NaN
    for fewer than two relations), `n` relations, `per_relation` {relation: d_r}, and how many relations
    lie on the claimed side (`claimed`, strictly) or exactly on 0 (`ties`)."""

    value: float
    lo: float
    hi: float
    n: int
    per_relation: dict[str, float]
    claimed: int
    ties: int

    @property
    def signs(self) -> str:
        return signs_text(self.claimed, self.n, self.ties)


def signs_text(claimed: int, n: int, ties: int = 0) -> str:
    """ "9 of 12 relations the claimed way" (", 1 tied" when relations have a difference of exactly 0)."""
    return f"{claimed} of {n} relations the claimed way" + (f", {ties} tied" if ties else "")


def relation_mean_diff(
    a: Mapping[str, Sequence[float]],
    b: Mapping[str, Sequence[float]],
    *,
    direction: Direction = "above",
    alpha: float = 0.05,
) -> RelationDiff:
    """mean over relations of (mean(a[r]) - mean(b[r])) with its t-interval (module docstring). Relations
    with no value in `a` or in `b` are left out; none left gives NaN and n = 0. `direction` is the claimed
    sign of the difference ("above": a > b), for the sign count."""
    if direction not in ("above", "below"):
        raise ValueError(f"direction must be 'above' or 'below', got {direction!r}")
    keys = sorted(k for k in a if len(a[k]) and k in b and len(b[k]))
    per = {k: float(np.mean(np.asarray(a[k], dtype=float)) - np.mean(np.asarray(b[k], dtype=float))) for k in keys}
    if not per:
        nan = float("nan")
        return RelationDiff(nan, nan, nan, 0, {}, 0, 0)
    value, lo, hi = t_interval(list(per.values()), alpha=alpha)
    d = np.array(list(per.values()))
    claimed = int(np.sum(d > 0) if direction == "above" else np.sum(d < 0))
    return RelationDiff(value, lo, hi, len(per), per, claimed, int(np.sum(d == 0)))


__all__ = ["METHOD", "RelationDiff", "relation_mean_diff", "signs_text"]
