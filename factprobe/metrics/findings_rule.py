"""The rule of `factprobe.metrics.findings`: how a measured number gets its interval (`t_interval`,
`two_sample_diff`, `cluster_bootstrap_diff`, paired bootstraps; over relations:
`cluster_interval`) and its verdict on a paper's claim, the
`Finding` record, and its rendering.

Every claim is reduced to ONE number (`value`) whose sign or distance to a threshold is the claim,
with a 95% interval (`ci`) and a sample size `n` in the unit that was resampled (facts, items,
relations' sequences, example draws, subject-relation pairs):

- `verdict(lo, hi, n, direction=..., threshold=..., min_n=...)`: the claim says the value lies
  `above` (or `below`) the threshold. It *holds* when the whole interval lies strictly on the
  claimed side, *does not hold* when the whole interval lies strictly on the other side, and is
  *inconclusive* when the interval contains the threshold, when an end is NaN, or when
  `n < min_n`. Nothing else is ever concluded. Each verdict is at 95% on its own: no correction
  for the number of claims (`MULTIPLICITY_NOTE`); `SHARED_DATA` lists the claims that read the
  same rows.

`Finding.to_dict()` is one record of `metrics.json`'s `findings`; `markdown_table` renders them.
NaN never reaches a verdict other than inconclusive.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from .bootstrap import paired_bootstrap_diff

HOLDS, NOT_HOLDS, INCONCLUSIVE = "holds", "does not hold", "inconclusive"
VERDICTS = (HOLDS, NOT_HOLDS, INCONCLUSIVE)
Direction = Literal["above", "below"]

#: the fewest units (facts, items, relations' sequences, pairs) a bootstrap verdict is drawn from
MIN_UNITS = 10
#: the fewest example draws a saturation verdict is drawn from (an interval over draws needs two)
MIN_DRAWS = 2

CLAIMS: dict[str, tuple[str, str]] = {
    "ic-lke>=hgp": ("IC-LKE accuracy >= HGP accuracy on the same facts", "wu2024 Figure 3 (per relation: Figure 12)"),
    "ic-lke>=mmp": ("IC-LKE accuracy >= MMP accuracy on the same facts", "wu2024 Figure 3 (per relation: Figure 12)"),
    "saturation": (
        "IC-LKE accuracy reaches 95% of its accuracy at the largest n within the first half of the n grid",
        "wu2024 Figure 1",
    ),
    "incorrect>unknown": (
        "incorrect examples lower the surrounding examples' probability more than unknown ones (random)",
        "wu2024 Figures 2b, 2d",
    ),
    "incorrect>unknown-block": (
        "incorrect examples lower the surrounding examples' probability more than unknown ones (block)",
        "wu2024 Figures 2c, 2e",
    ),
    "incorrect-block>random": (
        "incorrect examples hurt the surrounding examples more in one block than at random positions",
        "wu2024 section 3 (Summary), Figures 2d, 2e",
    ),
    "counterfactual-known": (
        "shuffled (counterfactual) exemplars lower EM more when they are known facts (largest k)",
        "yuan2024 Figure 7",
    ),
    "coherency-poor": ("coherency is poor (below 0.5)", "youssef2024 section 4, Tables 1, 2"),
    "c1>c2": ("round-1 first-step correctness (c1) is above round-2 (c2)", "youssef2024 appendix A, Table 4"),
    "fluctuation": ("prompt fluctuation is large (Acc@1 range over template draws > 10% of the accuracy)", "zhao2024 Table 3"),
}

#: claims computed from the same rows (their verdicts are not independent evidence)
SHARED_DATA: dict[str, tuple[str, ...]] = {
    "ic-lke>=hgp": ("ic-lke>=mmp",),
    "ic-lke>=mmp": ("ic-lke>=hgp",),
    "incorrect>unknown": ("incorrect-block>random",),
    "incorrect>unknown-block": ("incorrect-block>random",),
    "incorrect-block>random": ("incorrect>unknown", "incorrect>unknown-block"),
    "coherency-poor": ("c1>c2",),
    "c1>c2": ("coherency-poor",),
}
MULTIPLICITY_NOTE = (
    "Each verdict is at 95% on its own, with no correction for the number of claims: with 10 claims per model, "
    "about one verdict in two models may be decided by chance alone. Claims that read the same rows: "
    "IC-LKE >= HGP and >= MMP (the IC-LKE answers); the three sequence claims (the incorrect sequences, random and "
    "block); coherency and c1 > c2 (the coherency rows)."
)


@dataclass
class Finding:
    """One claim on one model: the measured number, its 95% interval, n, the verdict and a detail dict
    (the numbers the value is made of, the rule applied, caveats).

    What every verdict line shows (issue 37 item 5): `unit` (what the interval treats as independent:
    "relations", "questions", "pairs"; default `detail["unit"]`), `n_units` (n in that unit; default `n`),
    `method` (how the interval or null was made, e.g. "t-interval over relation means"; default
    `detail["method"]`) and `signs` (the per-relation sign count, e.g. "9 of 12 relations the claimed
    way"; None where the unit is not relations)."""

    claim: str
    model: str
    verdict: str
    value: float | None
    ci: tuple[float | None, float | None]
    n: int
    detail: dict[str, Any] = field(default_factory=dict)
    unit: str | None = None
    n_units: int | None = None
    method: str | None = None
    signs: str | None = None

    def __post_init__(self) -> None:
        if self.unit is None:
            self.unit = self.detail.get("unit")
        if self.n_units is None:
            self.n_units = int(self.n)
        if self.method is None:
            self.method = self.detail.get("method")
        if self.claim not in CLAIMS:
            raise ValueError(f"unknown claim {self.claim!r}; known: {', '.join(CLAIMS)}")
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")

    @property
    def source(self) -> str:
        return CLAIMS[self.claim][1]

    def to_dict(self) -> dict[str, Any]:
        return {
            "claim": self.claim,
            "statement": CLAIMS[self.claim][0],
            "source": self.source,
            "model": self.model,
            "verdict": self.verdict,
            "value": num_or_none(self.value),
            "ci": [num_or_none(self.ci[0]), num_or_none(self.ci[1])],
            "n": int(self.n),
            "unit": self.unit,
            "n_units": int(self.n_units) if self.n_units is not None else None,
            "method": self.method,
            "signs": self.signs,
            "detail": {
                **self.detail,
                **({"shares_data_with": list(SHARED_DATA[self.claim])} if self.claim in SHARED_DATA else {}),
            },
        }


def num_or_none(v: Any) -> float | None:
    if v is None:
        return None
    v = float(v)
    return None if math.isnan(v) else v


def _finite(*vs: Any) -> bool:
    return all(v is not None and math.isfinite(float(v)) for v in vs)


# ------------------------------------------------------------------ the rule
def verdict(
    lo: float | None, hi: float | None, n: int, *, direction: Direction, threshold: float = 0.0, min_n: int = MIN_UNITS
) -> str:
    """holds / does not hold / inconclusive for "the value lies `direction` `threshold`" (module
    docstring): strict comparisons, so an interval touching the threshold is inconclusive."""
    if direction not in ("above", "below"):
        raise ValueError(f"direction must be 'above' or 'below', got {direction!r}")
    if n < min_n or not _finite(lo, hi):
        return INCONCLUSIVE
    lo, hi = float(lo), float(hi)  # type: ignore[arg-type]
    if lo > hi:
        raise ValueError(f"interval [{lo}, {hi}] is reversed")
    above, below = lo > threshold, hi < threshold
    if direction == "above":
        return HOLDS if above else NOT_HOLDS if below else INCONCLUSIVE
    return HOLDS if below else NOT_HOLDS if above else INCONCLUSIVE


def not_measured(claim: str, model: str, why: str) -> Finding:
    """A claim that could not be measured (a study not installed, no rows): inconclusive, n = 0."""
    return Finding(claim, model, INCONCLUSIVE, None, (None, None), 0, {"not_measured": why})


def paired_finding(
    claim: str, model: str, a: Sequence[float], b: Sequence[float], direction: Direction, detail: dict, n_boot: int, seed: int
) -> Finding:
    """mean(a - b) with a paired bootstrap interval, judged against 0 (`detail["unit"]` names the unit of a, b)."""
    a_arr, b_arr = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a_arr.size == 0:
        return Finding(claim, model, INCONCLUSIVE, None, (None, None), 0, {**detail, "not_measured": "no paired units"})
    value, lo, hi = paired_bootstrap_diff(b_arr, a_arr, n_boot=n_boot, seed=seed)  # mean(a) - mean(b)
    v = verdict(lo, hi, a_arr.size, direction=direction)
    return Finding(
        claim,
        model,
        v,
        value,
        (lo, hi),
        int(a_arr.size),
        {**detail, "mean_a": float(a_arr.mean()), "mean_b": float(b_arr.mean())},
    )


# ------------------------------------------------------------------ intervals
def t_interval(values: Sequence[float], alpha: float = 0.05) -> tuple[float, float, float]:
    """(mean, lo, hi): Student-t interval of the mean; NaN ends for fewer than 2 values, (m, m)
    when every value is equal."""
    from scipy import stats

    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return (float("nan"),) * 3
    m = float(v.mean())
    if v.size < 2:
        return m, float("nan"), float("nan")
    se = float(v.std(ddof=1)) / math.sqrt(v.size)
    if se == 0.0:
        return m, m, m
    h = float(stats.t.ppf(1 - alpha / 2, v.size - 1)) * se
    return m, m - h, m + h


def two_sample_diff(a: Sequence[float], b: Sequence[float], *, n_boot: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """(mean(a) - mean(b), lo, hi): percentile bootstrap resampling a and b independently."""
    from scipy.stats import bootstrap

    a_arr, b_arr = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a_arr.size == 0 or b_arr.size == 0:
        return (float("nan"),) * 3
    value = float(a_arr.mean() - b_arr.mean())
    if a_arr.size < 2 or b_arr.size < 2 or (np.all(a_arr == a_arr[0]) and np.all(b_arr == b_arr[0])):
        return value, value, value

    def stat(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.mean(x, axis=axis) - np.mean(y, axis=axis)

    res = bootstrap(
        (a_arr, b_arr),
        stat,
        n_resamples=n_boot,
        method="percentile",
        vectorized=True,
        paired=False,
        rng=np.random.default_rng(seed),
    )
    return value, float(res.confidence_interval.low), float(res.confidence_interval.high)


def cluster_bootstrap_diff(
    a: Mapping[str, Sequence[float]], b: Mapping[str, Sequence[float]], *, n_boot: int = 2000, seed: int = 0, alpha: float = 0.05
) -> tuple[float, float, float, int]:
    """(pooled mean of a - pooled mean of b, lo, hi, clusters), resampling CLUSTERS: the keys
    (relations) with values in both `a` and `b`. A replicate draws that many clusters with
    replacement and pools all values of the drawn clusters, in a and in b (a cluster drawn twice
    counts twice); the interval is the percentile interval of the replicates. Values within a
    cluster are never resampled on their own, so correlated positions of one sequence count as one
    unit. NaN ends for fewer than two clusters. With 11-12 clusters it under-covers (about 0.91 for a
    95% interval in tests/metrics/test_cluster_interval.py's simulation): the claims over relations
    use `cluster_interval.relation_mean_diff` (a t-interval over the relation means) instead."""
    keys = sorted(k for k in a if len(a[k]) and k in b and len(b[k]))
    if not keys:
        return float("nan"), float("nan"), float("nan"), 0
    sa = np.array([float(np.sum(a[k])) for k in keys])
    na = np.array([float(len(a[k])) for k in keys])
    sb = np.array([float(np.sum(b[k])) for k in keys])
    nb = np.array([float(len(b[k])) for k in keys])
    value = float(sa.sum() / na.sum() - sb.sum() / nb.sum())
    if len(keys) < 2:
        return value, float("nan"), float("nan"), len(keys)
    rng = np.random.default_rng(seed)
    w = rng.multinomial(len(keys), np.full(len(keys), 1.0 / len(keys)), size=n_boot).astype(float)
    reps = (w @ sa) / (w @ na) - (w @ sb) / (w @ nb)
    lo, hi = np.percentile(reps, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return value, float(lo), float(hi), len(keys)


# ------------------------------------------------------------------ rendering
def _fmt(v: Any) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{float(v):+.3f}"


def _n_in_unit(f: Mapping[str, Any]) -> str:
    """ "12 relations": n in the record's unit (older records: `detail["unit"]` and `n`)."""
    unit = f.get("unit") or (f.get("detail") or {}).get("unit")
    n = f.get("n_units") if f.get("n_units") is not None else f["n"]
    return f"{n} {unit}" if unit else f"{n}"


def verdict_text(f: Mapping[str, Any]) -> str:
    """The verdict with what it rests on: "holds (note; 12 relations; t-interval over relation means;
    9 of 12 relations the claimed way)", each part only where the record has it (note: e.g. the paper
    reports no effect at this scale)."""
    note = (f.get("detail") or {}).get("verdict_note")
    parts = [p for p in (note, _n_in_unit(f), f.get("method"), f.get("signs")) if p]
    return f"{f['verdict']} ({'; '.join(parts)})"


def markdown_table(findings: Sequence[Mapping[str, Any]]) -> str:
    """A markdown table of `Finding.to_dict()` records: claim, source, model, verdict, value, 95% CI, n
    (n in its unit), method, the per-relation sign count (n/a where the unit is not relations), then
    `MULTIPLICITY_NOTE`."""
    lines = [
        "| claim | source | model | verdict | value | 95% CI | n | method | relations the claimed way |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for f in findings:
        lo, hi = f["ci"]
        ci = "n/a" if lo is None and hi is None else f"[{_fmt(lo)}, {_fmt(hi)}]"
        note = (f.get("detail") or {}).get("verdict_note")
        v = f"**{f['verdict']}**" + (f" ({note})" if note else "")
        method, signs = f.get("method") or "n/a", f.get("signs") or "n/a"
        lines.append(
            f"| {f['statement']} | {f['source']} | {f['model']} | {v} | {_fmt(f['value'])} | {ci} | {_n_in_unit(f)} "
            f"| {method} | {signs} |"
        )
    return "\n".join(lines) + "\n\n" + MULTIPLICITY_NOTE + "\n"
