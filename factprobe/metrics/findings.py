"""The papers' qualitative claims as verdicts: pure functions from measured numbers to holds / does
not hold / inconclusive (`factprobe study findings`, docs/findings.md, which quotes the sentence of
the paper each claim tests).

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

The claims (one function each, taking plain rows or arrays, returning a `Finding`):

- `mc_vs_baseline` (wu2024 Figure 3, per relation Figure 12: IC-LKE >= HGP / MMP): per fact,
  IC-LKE correctness (0/1) minus the baseline's correctness averaged over its templates; paired
  bootstrap of the mean over facts.
- `saturation` (wu2024 Figure 1): n95 = the smallest n of the grid whose mean accuracy reaches 95%
  of the mean accuracy at the largest n (the paper's dashed lines); its interval resamples the
  example draws. Holds when the interval lies below half the largest n (the second half of the
  grid adds less than 5%); a curve still rising (ln(1 + n) reaches 95% of ln(51) only at n = 41)
  does not hold.
- `incorrect_vs_unknown` (wu2024 Figures 2b-2e; one placement per call): the object's probability
  at the surrounding positions (the non-replaced ones after the first replaced one: every position
  whose context holds a replaced example) in the *unknown* sequence minus that in the *incorrect*
  sequence, i.e. the incorrect sequence's drop against the clean one minus the unknown's. The unit
  is the relation's sequence: a cluster bootstrap (`cluster_bootstrap_diff`) resamples relations,
  never positions. Holds when > 0.
- `block_vs_random` (wu2024 section 3's summary, "particularly when they appear in a continuous
  sequence", Figures 2d/2e): the incorrect examples' drop (clean - variant) at the surrounding
  positions with block placement minus with random placement; cluster bootstrap over relations.
- `counterfactual_known_vs_unknown` (yuan2024 Figure 7): per evaluation question at one k,
  (EM known-unshuffle - EM known-shuffle) - (EM unknown-unshuffle - EM unknown-shuffle); paired
  bootstrap. `counterfactual_over_k` judges the largest k of the paper's 10, 15, 20, 32 that was
  run (the paper's gap grows with k) and lists every k; below `PAPER_NO_EFFECT_PARAMS` the detail
  and the table say that the paper reports no effect at that scale.
- `coherency_poor` (youssef2024 section 4, "PLMs show poor coherency"): per item the mean of
  `coherent` over its two rounds; holds when the interval lies below `POOR_COHERENCY`.
- `c1_above_c2` (youssef2024 appendix A, Table 4): per item first-step correctness of round 1 (c1)
  minus that of round 2 (c2); paired bootstrap; holds when > 0.
- `prompt_fluctuation` (zhao2024 Table 3): the range of Acc@1 over draws of one template per
  relation, relative to the mean Acc@1 of the draws; the interval is a bootstrap over
  subject-relation pairs resampled within each relation. Holds when the relative range exceeds
  `FLUCTUATION_THRESHOLD`; inconclusive near the floor (fewer than `FLUCTUATION_MIN_CORRECT`
  correct answers per draw), where one answer moves the accuracy by more than the threshold.

`Finding.to_dict()` is one record of `metrics.json`'s `findings`; `markdown_table` renders them.
NaN never reaches a verdict other than inconclusive.
"""
from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from .bootstrap import bootstrap_ci, paired_bootstrap_diff

HOLDS, NOT_HOLDS, INCONCLUSIVE = "holds", "does not hold", "inconclusive"
VERDICTS = (HOLDS, NOT_HOLDS, INCONCLUSIVE)
Direction = Literal["above", "below"]

#: the fewest units (facts, items, relations' sequences, pairs) a bootstrap verdict is drawn from
MIN_UNITS = 10
#: the fewest example draws a saturation verdict is drawn from (an interval over draws needs two)
MIN_DRAWS = 2
#: wu2024 Figure 1's criterion: the smallest n reaching this share of the accuracy at the largest n
SATURATION_SHARE = 0.95
#: saturation holds when that n lies below this fraction of the largest n (the grid's second half adds < 5%)
SATURATION_BY = 0.5
#: zhao2024 Table 3 (range / MyriadLAMA Acc@1): BERT-base .1534/.1095 = 1.40, BERT-large .1574/.1102 = 1.43,
#: BERT-wwm .1517/.1364 = 1.11 (absolute ranges 0.152-0.157); Llama3-8B zero-shot .2864/.3427 = 0.84,
#: 4-random .2033/.5205 = 0.39, 4-relation .1236/.6871 = 0.18, all reported as fluctuations; 4-template
#: (the probed template among the demonstrations) .0220/.7268 = 0.03. 0.10 lies below every relative range
#: the paper calls a fluctuation and 3.3x above the 4-template one. Relative, so that a model that answers
#: almost nothing cannot "not hold" merely because its accuracy has no room to move.
FLUCTUATION_THRESHOLD = 0.10
#: below this many correct answers per template draw (mean Acc@1 x pairs) one answer more or less moves the
#: accuracy by more than FLUCTUATION_THRESHOLD of itself: the relative range cannot be read (inconclusive)
FLUCTUATION_MIN_CORRECT = 10
#: youssef2024: "PLMs show poor coherency" for coherency scores of 3.98-24.23% per round (Tables 1, 2); even
#: with evidence paragraphs (at most 49.85% on average) "coherency is not high". Poor = below one half.
POOR_COHERENCY = 0.5
#: yuan2024 Figure 7's k (shots)
PAPER_SHOTS = (10, 15, 20, 32)
#: yuan2024: for LLaMA-7B "its performances stay flat across different settings" (Figure 7); "the performance of
#: smaller models remains flat and unaffected" (Figure 6). At most this many parameters: the paper reports no effect.
PAPER_NO_EFFECT_PARAMS = 7.5e9

CLAIMS: dict[str, tuple[str, str]] = {
    "ic-lke>=hgp": ("IC-LKE accuracy >= HGP accuracy on the same facts", "wu2024 Figure 3 (per relation: Figure 12)"),
    "ic-lke>=mmp": ("IC-LKE accuracy >= MMP accuracy on the same facts", "wu2024 Figure 3 (per relation: Figure 12)"),
    "saturation": ("IC-LKE accuracy reaches 95% of its accuracy at the largest n within the first half of the n grid",
                   "wu2024 Figure 1"),
    "incorrect>unknown": ("incorrect examples lower the surrounding examples' probability more than unknown ones (random)",
                          "wu2024 Figures 2b, 2d"),
    "incorrect>unknown-block": ("incorrect examples lower the surrounding examples' probability more than unknown ones (block)",
                                "wu2024 Figures 2c, 2e"),
    "incorrect-block>random": ("incorrect examples hurt the surrounding examples more in one block than at random positions",
                               "wu2024 section 3 (Summary), Figures 2d, 2e"),
    "counterfactual-known": ("shuffled (counterfactual) exemplars lower EM more when they are known facts (largest k)",
                             "yuan2024 Figure 7"),
    "coherency-poor": ("coherency is poor (below 0.5)", "youssef2024 section 4, Tables 1, 2"),
    "c1>c2": ("round-1 first-step correctness (c1) is above round-2 (c2)", "youssef2024 appendix A, Table 4"),
    "fluctuation": ("prompt fluctuation is large (Acc@1 range over template draws > 10% of the accuracy)",
                    "zhao2024 Table 3"),
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
    "block); coherency and c1 > c2 (the coherency rows).")


@dataclass
class Finding:
    """One claim on one model: the measured number, its 95% interval, n, the verdict and a detail dict
    (the numbers the value is made of, the rule applied, caveats)."""

    claim: str
    model: str
    verdict: str
    value: float | None
    ci: tuple[float | None, float | None]
    n: int
    detail: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.claim not in CLAIMS:
            raise ValueError(f"unknown claim {self.claim!r}; known: {', '.join(CLAIMS)}")
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")

    @property
    def source(self) -> str:
        return CLAIMS[self.claim][1]

    def to_dict(self) -> dict[str, Any]:
        return {"claim": self.claim, "statement": CLAIMS[self.claim][0], "source": self.source, "model": self.model,
                "verdict": self.verdict, "value": _num(self.value), "ci": [_num(self.ci[0]), _num(self.ci[1])],
                "n": int(self.n), "detail": {**self.detail, **({"shares_data_with": list(SHARED_DATA[self.claim])}
                                                               if self.claim in SHARED_DATA else {})}}


def _num(v: Any) -> float | None:
    if v is None:
        return None
    v = float(v)
    return None if math.isnan(v) else v


def _finite(*vs: Any) -> bool:
    return all(v is not None and math.isfinite(float(v)) for v in vs)


# ------------------------------------------------------------------ the rule
def verdict(lo: float | None, hi: float | None, n: int, *, direction: Direction, threshold: float = 0.0,
            min_n: int = MIN_UNITS) -> str:
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


def _paired(claim: str, model: str, a: Sequence[float], b: Sequence[float], direction: Direction, detail: dict,
            n_boot: int, seed: int) -> Finding:
    """mean(a - b) with a paired bootstrap interval, judged against 0 (`detail["unit"]` names the unit of a, b)."""
    a_arr, b_arr = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a_arr.size == 0:
        return Finding(claim, model, INCONCLUSIVE, None, (None, None), 0, {**detail, "not_measured": "no paired units"})
    value, lo, hi = paired_bootstrap_diff(b_arr, a_arr, n_boot=n_boot, seed=seed)  # mean(a) - mean(b)
    v = verdict(lo, hi, a_arr.size, direction=direction)
    return Finding(claim, model, v, value, (lo, hi), int(a_arr.size),
                   {**detail, "mean_a": float(a_arr.mean()), "mean_b": float(b_arr.mean())})


# ------------------------------------------------------------------ IC-LKE vs HGP / MMP
def per_fact_correct(rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """{fact_id: mean correctness over the fact's rows} (one row per fact for IC-LKE, one per
    (fact, template) for HGP/MMP, whose per-fact value is then the share of templates it got right)."""
    acc: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        acc[str(r["fact_id"])].append(float(bool(r["correct"])))
    return {f: float(np.mean(v)) for f, v in acc.items()}


def mc_vs_baseline(model: str, baseline: str, icl_rows: Iterable[Mapping[str, Any]],
                   baseline_rows: Iterable[Mapping[str, Any]], *, n_boot: int = 2000, seed: int = 0) -> Finding:
    """IC-LKE >= `baseline` ("hgp" or "mmp"): value = IC-LKE accuracy - baseline accuracy over the
    facts both scored (the baseline's per-fact value is its share of correct templates)."""
    claim = f"ic-lke>={baseline}"
    icl, base = per_fact_correct(icl_rows), per_fact_correct(baseline_rows)
    shared = sorted(set(icl) & set(base))
    detail = {"rule": f"paired bootstrap of acc(ic-lke) - acc({baseline}) per fact; holds when the 95% interval > 0",
              "unit": "facts",
              "facts_only_in_one": len(set(icl) ^ set(base)), "baseline": baseline}
    f = _paired(claim, model, [icl[x] for x in shared], [base[x] for x in shared], "above", detail, n_boot, seed)
    f.detail["acc_ic_lke"] = f.detail.pop("mean_a", None)
    f.detail[f"acc_{baseline}"] = f.detail.pop("mean_b", None)
    return f


# ------------------------------------------------------------------ saturation with n
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


def n_to_share(grid: Sequence[int], acc: Sequence[float], share: float = SATURATION_SHARE) -> int | None:
    """wu2024 Figure 1's dashed line: the smallest n of `grid` (ascending) whose accuracy `acc` reaches
    `share` of the accuracy at the largest n. None when that accuracy is not positive (nothing to reach)."""
    top = float(acc[-1])
    if not top > 0:
        return None
    return next(int(n) for n, a in zip(grid, acc) if float(a) >= share * top)


def _draw_matrix(curve: Sequence[Mapping[str, Any]]) -> tuple[list[int], np.ndarray] | str:
    """(grid, [draws, grid] accuracies) of the icl-examples records, or why not: an n with one
    accuracy (n = 0 has one context) repeats it in every draw; draw i is the same draw at every n."""
    by_n = {int(r["n"]): [float(x) for x in r["draws"]] for r in curve}
    grid = sorted(by_n)
    if len(grid) < 2:
        return f"the n grid {grid} needs at least two values"
    k = min(len(v) for n, v in by_n.items() if len(v) > 1) if any(len(v) > 1 for v in by_n.values()) else 1
    cols = [(v * k if len(v) == 1 else v[:k]) for v in (by_n[n] for n in grid)]
    return grid, np.array(cols, dtype=float).T


def saturation(model: str, curve: Sequence[Mapping[str, Any]], n_facts: int | None = None, *, n_boot: int = 2000,
               seed: int = 0) -> Finding:
    """Accuracy saturates with n (module docstring). `curve`: the icl-examples records `{n, mean,
    draws}` (`draws`: one accuracy per example draw, draw i the same draw at every n). value = n95 of
    the mean curve over the draws; the interval is the 2.5th-97.5th percentile of n95 over `n_boot`
    resamples of the draws (with replacement); holds when it lies below `SATURATION_BY` x the largest n,
    does not hold when above."""
    rule = (f"n95 = smallest n whose mean accuracy >= {SATURATION_SHARE:.0%} of the mean accuracy at the largest n; "
            f"95% interval by resampling the example draws; holds when the interval < {SATURATION_BY} x the largest n")
    got = _draw_matrix(curve)
    if isinstance(got, str):
        return not_measured("saturation", model, got)
    grid, acc = got
    k, n_max = acc.shape[0], grid[-1]
    mean = acc.mean(axis=0)
    threshold = SATURATION_BY * n_max
    detail: dict[str, Any] = {"rule": rule, "threshold": threshold, "n_max": n_max, "draws": k,
                              "acc_by_n": {str(n): float(a) for n, a in zip(grid, mean)},
                              "unit": "draws", "unit_note": "example draws (the interval does not cover the choice of facts)"}
    if n_facts is not None:
        detail["facts"] = int(n_facts)
    value = n_to_share(grid, mean)
    if value is None:
        return Finding("saturation", model, INCONCLUSIVE, None, (None, None), k,
                       {**detail, "not_measured": f"the accuracy at n = {n_max} is 0: there is nothing to reach"})
    if value == grid[0] and mean[0] >= mean.max():
        detail["note"] = f"the curve does not rise: n = {grid[0]} already has its highest accuracy"
    rng = np.random.default_rng(seed)
    boots = [n_to_share(grid, acc[rng.integers(0, k, size=k)].mean(axis=0)) for _ in range(n_boot)] if k > 1 else []
    boots = [b for b in boots if b is not None]
    lo, hi = ((float(np.quantile(boots, 0.025, method="inverted_cdf")), float(np.quantile(boots, 0.975, method="inverted_cdf")))
              if boots else (None, None))
    return Finding("saturation", model, verdict(lo, hi, k, direction="below", threshold=threshold, min_n=MIN_DRAWS),
                   float(value), (lo, hi), k, detail)

# ------------------------------------------------------------------ incorrect vs unknown examples
def sequences(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """{relation: its rows in sequence order (by `position`)}: one relation's rows are one sequence."""
    by_rel: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        by_rel[str(r.get("relation", ""))].append(r)
    return {rel: sorted(rs, key=lambda r: int(r["position"])) for rel, rs in by_rel.items()}


def after_replaced(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, int], float]:
    """{(relation, position): prob} of the non-replaced positions that directly follow a replaced one
    in the same relation's sequence."""
    out = {}
    for rel, ordered in sequences(rows).items():
        for prev, cur in itertools.pairwise(ordered):
            if prev["replaced"] and not cur["replaced"]:
                out[(rel, int(cur["position"]))] = float(cur["prob"])
    return out


def two_sample_diff(a: Sequence[float], b: Sequence[float], *, n_boot: int = 2000, seed: int = 0
                    ) -> tuple[float, float, float]:
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

    res = bootstrap((a_arr, b_arr), stat, n_resamples=n_boot, method="percentile", vectorized=True, paired=False,
                    rng=np.random.default_rng(seed))
    return value, float(res.confidence_interval.low), float(res.confidence_interval.high)


def cluster_bootstrap_diff(a: Mapping[str, Sequence[float]], b: Mapping[str, Sequence[float]], *, n_boot: int = 2000,
                           seed: int = 0, alpha: float = 0.05) -> tuple[float, float, float, int]:
    """(pooled mean of a - pooled mean of b, lo, hi, clusters), resampling CLUSTERS: the keys
    (relations) with values in both `a` and `b`. A replicate draws that many clusters with
    replacement and pools all values of the drawn clusters, in a and in b (a cluster drawn twice
    counts twice); the interval is the percentile interval of the replicates. Values within a
    cluster are never resampled on their own, so correlated positions of one sequence count as one
    unit. NaN ends for fewer than two clusters."""
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


def surrounding(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """{relation: rows} of the surrounding positions: the non-replaced positions after the first
    replaced one of the relation's sequence (the positions whose context holds a replaced example;
    before it the sequence is the clean one)."""
    out = {}
    for rel, ordered in sequences(rows).items():
        first = next((i for i, r in enumerate(ordered) if r["replaced"]), None)
        if first is not None:
            out[rel] = [r for r in ordered[first + 1:] if not r["replaced"]]
    return out


def _by_rel(found: Mapping[tuple[str, int], float]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = defaultdict(list)
    for (rel, _), v in sorted(found.items()):
        out[rel].append(v)
    return out


def _drop(r: Mapping[str, Any]) -> float:
    return float(r["prob_clean"]) - float(r["prob"])


def incorrect_vs_unknown(model: str, unknown_rows: Sequence[Mapping[str, Any]],
                         incorrect_rows: Sequence[Mapping[str, Any]], *, placement: str = "random", n_boot: int = 2000,
                         seed: int = 0) -> Finding:
    """Incorrect examples hurt more than unknown ones (module docstring): value = mean object
    probability at the surrounding positions in the unknown sequence - the same in the incorrect
    sequence (pooled over relations); cluster bootstrap over relations; n = relations. Rows: the
    icl-sequence study's positions.jsonl (`relation`, `position`, `replaced`, `prob`, optionally
    `prob_clean`) of one placement."""
    claim = "incorrect>unknown" if placement == "random" else "incorrect>unknown-block"
    unk, inc = surrounding(unknown_rows), surrounding(incorrect_rows)
    detail: dict[str, Any] = {
        "rule": "object probability at the surrounding positions (non-replaced, after the first replaced one): unknown "
                "sequence minus incorrect sequence; 95% cluster bootstrap over relations; holds when > 0",
        "placement": placement, "unit": "relations", "unit_note": "one sequence per relation; positions are not resampled"}
    a = {rel: [float(r["prob"]) for r in rs] for rel, rs in unk.items()}
    b = {rel: [float(r["prob"]) for r in rs] for rel, rs in inc.items()}
    value, lo, hi, n = cluster_bootstrap_diff(a, b, n_boot=n_boot, seed=seed)
    if n == 0:
        return Finding(claim, model, INCONCLUSIVE, None, (None, None), 0,
                       {**detail, "not_measured": "no relation has surrounding positions in both sequences"})
    detail.update(positions_unknown=sum(len(a[k]) for k in a), positions_incorrect=sum(len(b[k]) for k in b),
                  prob_unknown=float(np.mean([v for vs in a.values() for v in vs])),
                  prob_incorrect=float(np.mean([v for vs in b.values() for v in vs])))
    if all("prob_clean" in r for rs in (*unk.values(), *inc.values()) for r in rs):
        detail["drop_unknown"] = float(np.mean([_drop(r) for rs in unk.values() for r in rs]))
        detail["drop_incorrect"] = float(np.mean([_drop(r) for rs in inc.values() for r in rs]))
    after_a, after_b = _by_rel(after_replaced(unknown_rows)), _by_rel(after_replaced(incorrect_rows))
    av, alo, ahi, an = cluster_bootstrap_diff(after_a, after_b, n_boot=n_boot, seed=seed)
    detail["right_after_replaced"] = {"value": _num(av), "ci": [_num(alo), _num(ahi)], "relations": an,
                                      "positions": sum(len(v) for v in after_a.values())}
    detail["positive_relations"] = sum(float(np.mean(a[k])) > float(np.mean(b[k])) for k in a if k in b and a[k] and b[k])
    return Finding(claim, model, verdict(lo, hi, n, direction="above"), value, (lo, hi), n, detail)


def block_vs_random(model: str, block_rows: Sequence[Mapping[str, Any]], random_rows: Sequence[Mapping[str, Any]], *,
                    n_boot: int = 2000, seed: int = 0) -> Finding:
    """Incorrect examples hurt more in one block than at random positions: value = the drop (clean -
    variant) at the surrounding positions of the incorrect block sequence minus that of the incorrect
    random one, pooled; cluster bootstrap over relations; n = relations. Needs `prob_clean`."""
    claim = "incorrect-block>random"
    blk, rnd = surrounding(block_rows), surrounding(random_rows)
    detail: dict[str, Any] = {
        "rule": "incorrect examples' drop (clean - variant) at the surrounding positions: block placement minus random "
                "placement; 95% cluster bootstrap over relations; holds when > 0",
        "unit": "relations", "unit_note": "one sequence per relation; positions are not resampled"}
    rows = [r for rs in (*blk.values(), *rnd.values()) for r in rs]
    if not rows or not all("prob_clean" in r for r in rows):
        return Finding(claim, model, INCONCLUSIVE, None, (None, None), 0,
                       {**detail, "not_measured": "no surrounding positions with the clean sequence's probability"})
    a = {rel: [_drop(r) for r in rs] for rel, rs in blk.items()}
    b = {rel: [_drop(r) for r in rs] for rel, rs in rnd.items()}
    value, lo, hi, n = cluster_bootstrap_diff(a, b, n_boot=n_boot, seed=seed)
    detail.update(drop_block=float(np.mean([v for vs in a.values() for v in vs])) if a else None,
                  drop_random=float(np.mean([v for vs in b.values() for v in vs])) if b else None,
                  positions_block=sum(len(v) for v in a.values()), positions_random=sum(len(v) for v in b.values()))
    return Finding(claim, model, verdict(lo, hi, n, direction="above"), value, (lo, hi), n, detail)


# ------------------------------------------------------------------ counterfactual (yuan2024 Figure 7)
FIGURE7 = ("known-unshuffle", "known-shuffle", "unknown-unshuffle", "unknown-shuffle")


def counterfactual_known_vs_unknown(model: str, rows: Iterable[Mapping[str, Any]], k: int, *,
                                    shots_used: Mapping[str, int] | None = None, n_boot: int = 2000,
                                    seed: int = 0) -> Finding:
    """Shuffled exemplars lower EM more when known, at one k (module docstring). `rows`: the
    counterfactual probe's result rows (`split`, `setting`, `shots_asked`, `fact_id`, `em`)."""
    em: dict[str, dict[str, float]] = {s: {} for s in FIGURE7}
    for r in rows:
        if r.get("split", "eval") == "eval" and r["setting"] in em and int(r["shots_asked"]) == k:
            em[r["setting"]][str(r["fact_id"])] = float(r["em"])
    facts = sorted(set.intersection(*(set(v) for v in em.values())))
    d = [(em["known-unshuffle"][f] - em["known-shuffle"][f]) - (em["unknown-unshuffle"][f] - em["unknown-shuffle"][f])
         for f in facts]
    detail: dict[str, Any] = {
        "rule": "per question (EM known-unshuffle - known-shuffle) - (EM unknown-unshuffle - unknown-shuffle); holds "
                "when the 95% interval > 0", "k": k, "unit": "questions",
        **{f"em_{s}": (float(np.mean([em[s][f] for f in facts])) if facts else None) for s in FIGURE7}}
    if shots_used:
        detail["shots_used"] = dict(shots_used)
        if len({int(v or 0) for v in shots_used.values()}) > 1:
            detail["caveat"] = "the settings used different k (too few known or unknown train facts)"
        empty = sorted(s for s, v in shots_used.items() if not v)
        if empty:
            return Finding("counterfactual-known", model, INCONCLUSIVE, None, (None, None), 0,
                           {**detail, "not_measured": f"no exemplar in {', '.join(empty)} (the model knows too few "
                                                      "or too many of the train facts)"})
    if not facts:
        return Finding("counterfactual-known", model, INCONCLUSIVE, None, (None, None), 0,
                       {**detail, "not_measured": f"no question has all four Figure-7 settings at k={k}"})
    value, lo, hi = paired_bootstrap_diff(np.zeros(len(d)), d, n_boot=n_boot, seed=seed)
    return Finding("counterfactual-known", model, verdict(lo, hi, len(d), direction="above"), value, (lo, hi), len(d),
                   detail)


def paper_scale_note(n_params: float | None) -> str | None:
    """The note a counterfactual verdict carries for a model at a scale where yuan2024 reports no
    effect (at most `PAPER_NO_EFFECT_PARAMS` parameters); None for a larger or unknown size."""
    if n_params is None or not n_params <= PAPER_NO_EFFECT_PARAMS:
        return None
    return (f"the paper reports no effect at this scale ({n_params / 1e9:.2g}B parameters): for LLaMA-7B \"its "
            "performances stay flat across different settings\" (yuan2024 Figure 7); with 10 counterfactual shots \"the "
            "performance of smaller models remains flat and unaffected\" (Figure 6)")


def counterfactual_over_k(model: str, rows: Iterable[Mapping[str, Any]], ks: Sequence[int], *,
                          shots_used: Mapping[int, Mapping[str, int]] | None = None, n_params: float | None = None,
                          n_boot: int = 2000, seed: int = 0) -> Finding:
    """yuan2024 Figure 7 over the k values run (`ks`, the paper's are `PAPER_SHOTS`): the finding at
    the largest k with a measured value (the paper's gap grows with k), with every k's value,
    interval, n and verdict in `detail["per_k"]`; `detail["verdict_note"]` says when the paper reports
    no effect at the model's scale (`paper_scale_note`)."""
    rows = list(rows)
    per = [counterfactual_known_vs_unknown(model, rows, int(k), shots_used=(shots_used or {}).get(int(k)), n_boot=n_boot,
                                           seed=seed) for k in sorted({int(k) for k in ks})]
    if not per:
        return not_measured("counterfactual-known", model, "no k was run")
    measured = [f for f in per if f.value is not None]
    main = measured[-1] if measured else per[-1]
    main.detail["per_k"] = [{"k": f.detail["k"], "value": _num(f.value), "ci": [_num(f.ci[0]), _num(f.ci[1])], "n": f.n,
                             "verdict": f.verdict} for f in per]
    main.detail["judged_at"] = "the largest k measured (the paper's gap grows with k)"
    missing = sorted(set(PAPER_SHOTS) - {int(k) for k in ks})
    if missing:
        main.detail["paper_k_not_run"] = missing
    note = paper_scale_note(n_params)
    if n_params is not None:
        main.detail["n_params"] = float(n_params)
    if note:
        main.detail["verdict_note"] = note
    return main


# ------------------------------------------------------------------ coherency (youssef2024)
def _coherency_items(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[int, Mapping[str, Any]]]:
    items: dict[str, dict[int, Mapping[str, Any]]] = defaultdict(dict)
    for r in rows:
        items[str(r["fact_id"])][int(r["round"])] = r
    return {i: rs for i, rs in items.items() if 1 in rs and 2 in rs}


def coherency_poor(model: str, rows: Iterable[Mapping[str, Any]], *, n_boot: int = 2000, seed: int = 0,
                   threshold: float = POOR_COHERENCY) -> Finding:
    """"PLMs show poor coherency" (youssef2024 section 4): per item (`fact_id`, both rounds) the mean
    of `coherent` over its two rounds; value = the mean over items (micro; the probe's metrics.json
    has the paper's macro over relations); bootstrap over items; holds when the interval < `threshold`."""
    items = _coherency_items(rows)
    per = [float(np.mean([bool(rs[1]["coherent"]), bool(rs[2]["coherent"])])) for _, rs in sorted(items.items())]
    detail: dict[str, Any] = {"rule": f"per item mean of coherent over rounds 1 and 2, micro over items; holds when the 95% "
                                      f"interval < {threshold}", "threshold": threshold, "unit": "items",
                              "threshold_why": "youssef2024 calls 3.98-24.23% poor (Tables 1, 2) and even 49.85% "
                                               "'not high'; poor = below one half"}
    if not per:
        return Finding("coherency-poor", model, INCONCLUSIVE, None, (None, None), 0,
                       {**detail, "not_measured": "no item has both rounds"})
    value = float(np.mean(per))
    lo, hi = bootstrap_ci(per, n_boot=n_boot, seed=seed)
    detail.update(coherency_round1=float(np.mean([bool(rs[1]["coherent"]) for rs in items.values()])),
                  coherency_round2=float(np.mean([bool(rs[2]["coherent"]) for rs in items.values()])))
    return Finding("coherency-poor", model, verdict(lo, hi, len(per), direction="below", threshold=threshold), value,
                   (float(lo), float(hi)), len(per), detail)


def c1_above_c2(model: str, rows: Iterable[Mapping[str, Any]], *, n_boot: int = 2000, seed: int = 0) -> Finding:
    """"For all models the c1 scores are higher than the c2 scores" (youssef2024 appendix A): per item
    round 1's `first_correct` (c1) minus round 2's (c2); paired bootstrap; holds when > 0."""
    items = _coherency_items(rows)
    keys = sorted(items)
    detail = {"rule": "per item first_correct(round 1) - first_correct(round 2), micro over items; holds when the 95% "
                      "interval > 0", "unit": "items"}
    f = _paired("c1>c2", model, [float(bool(items[i][1]["first_correct"])) for i in keys],
                [float(bool(items[i][2]["first_correct"])) for i in keys], "above", detail, n_boot, seed)
    f.detail["c1"] = f.detail.pop("mean_a", None)
    f.detail["c2"] = f.detail.pop("mean_b", None)
    return f


# ------------------------------------------------------------------ prompt fluctuation (zhao2024)
def _pair_tables(rows: Sequence[Mapping[str, Any]]):
    """Per relation (sorted): its template ids (sorted), and per pair x template the sum and count
    of `correct`."""
    rels: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        cell = rels[str(r["relation"])][str(r["fact_id"])].setdefault(str(r["template_id"]), [0.0, 0.0])
        cell[0] += float(bool(r["correct"]))
        cell[1] += 1.0
    out = []
    for rel in sorted(rels):
        pairs = rels[rel]
        tids = sorted({t for p in pairs.values() for t in p})
        s = np.array([[pairs[p].get(t, [0.0, 0.0])[0] for t in tids] for p in sorted(pairs)])
        c = np.array([[pairs[p].get(t, [0.0, 0.0])[1] for t in tids] for p in sorted(pairs)])
        out.append((rel, tids, s, c))
    return out


def _draw_ranges(tables, weights: list[np.ndarray], n_draws: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(range, mean) of the draw accuracies for each row of the pair weights ([B, pairs] per relation)."""
    rng = np.random.default_rng(seed)
    b = weights[0].shape[0]
    num = np.zeros((b, n_draws))
    den = np.zeros((b, n_draws))
    for (_, tids, s, c), w in zip(tables, weights):
        idx = rng.integers(0, len(tids), size=n_draws)
        num += (w @ s)[:, idx]
        den += (w @ c)[:, idx]
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = num / den
    return np.nanmax(acc, axis=1) - np.nanmin(acc, axis=1), np.nanmean(acc, axis=1)


def prompt_fluctuation(model: str, rows: Sequence[Mapping[str, Any]], *, n_draws: int = 2000, n_boot: int = 500,
                       seed: int = 0, threshold: float = FLUCTUATION_THRESHOLD,
                       min_correct: float = FLUCTUATION_MIN_CORRECT, setting: str | None = None) -> Finding:
    """Prompt fluctuation is large (module docstring). `rows`: BELIEF-ICL rows (`relation`,
    `fact_id`, `template_id`, `correct`); value = (max - min of Acc@1 over `n_draws` draws of one
    template per relation) / the mean Acc@1 of the draws; inconclusive when a draw has fewer than
    `min_correct` correct answers on average (the floor)."""
    rows = list(rows)
    tables = _pair_tables(rows)
    detail: dict[str, Any] = {
        "rule": f"(max - min) / mean of Acc@1 over {n_draws} draws of one template per relation; 95% interval by "
                f"resampling subject-relation pairs within each relation; holds when the interval > {threshold}; "
                f"inconclusive below {min_correct} correct answers per draw",
        "threshold": threshold, "unit": "pairs",
        "threshold_why": "zhao2024 Table 3: range / Acc@1 is 1.11-1.43 (BERT) and 0.18-0.84 (Llama3-8B zero-shot, "
                         "4-random, 4-relation) where it reports fluctuation, 0.03 with 4-template demonstrations",
        "caveat": "fewer relations and pairs than the paper widen the range (sampling noise adds to prompt effects)",
    }
    if setting:
        detail["setting"] = setting
    n_pairs = sum(s.shape[0] for _, _, s, _ in tables)
    usable = [t for t in tables if len(t[1]) >= 2]
    detail.update(relations=len(tables), relations_with_2_templates=len(usable), pairs=n_pairs)
    if not rows or not usable:
        return Finding("fluctuation", model, INCONCLUSIVE, None, (None, None), n_pairs,
                       {**detail, "not_measured": "no relation with two templates"})
    detail["mean_acc"] = float(np.mean([float(bool(r["correct"])) for r in rows]))
    rng_obs, mean_obs = _draw_ranges(tables, [np.ones((1, s.shape[0])) for _, _, s, _ in tables], n_draws, seed)
    detail["acc_range"], detail["draw_mean_acc"] = float(rng_obs[0]), float(mean_obs[0])
    detail["correct_per_draw"] = float(mean_obs[0]) * n_pairs
    if not detail["correct_per_draw"] >= min_correct:
        return Finding("fluctuation", model, INCONCLUSIVE, None, (None, None), n_pairs,
                       {**detail, "not_measured": f"accuracy at the floor: {detail['correct_per_draw']:.1f} correct "
                                                  f"answers per draw (< {min_correct}); one answer moves Acc@1 by more "
                                                  f"than {threshold:.0%} of itself"})
    observed = float(rng_obs[0] / mean_obs[0])
    gen = np.random.default_rng([seed, 1])
    weights = [gen.multinomial(s.shape[0], np.full(s.shape[0], 1.0 / s.shape[0]), size=n_boot).astype(float)
               for _, _, s, _ in tables]
    b_range, b_mean = _draw_ranges(tables, weights, n_draws, seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        boot = b_range / b_mean
    boot = boot[np.isfinite(boot)]
    lo, hi = (float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))) if boot.size else (None, None)
    return Finding("fluctuation", model, verdict(lo, hi, n_pairs, direction="above", threshold=threshold), observed,
                   (lo, hi), n_pairs, detail)


# ------------------------------------------------------------------ rendering
def _fmt(v: Any) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{float(v):+.3f}"


def verdict_text(f: Mapping[str, Any]) -> str:
    """The verdict with its note, if any (e.g. the paper reports no effect at this scale)."""
    note = (f.get("detail") or {}).get("verdict_note")
    return f"{f['verdict']} ({note})" if note else f["verdict"]


def markdown_table(findings: Sequence[Mapping[str, Any]]) -> str:
    """A markdown table of `Finding.to_dict()` records: claim, source, model, verdict, value, 95% CI, n
    (n in the resampled unit), then `MULTIPLICITY_NOTE`."""
    lines = ["| claim | source | model | verdict | value | 95% CI | n |", "|---|---|---|---|---|---|---|"]
    for f in findings:
        lo, hi = f["ci"]
        ci = "n/a" if lo is None and hi is None else f"[{_fmt(lo)}, {_fmt(hi)}]"
        note = (f.get("detail") or {}).get("verdict_note")
        v = f"**{f['verdict']}**" + (f" ({note})" if note else "")
        unit = (f.get("detail") or {}).get("unit")
        n = f"{f['n']} {unit}" if unit else f"{f['n']}"
        lines.append(f"| {f['statement']} | {f['source']} | {f['model']} | {v} | {_fmt(f['value'])} | {ci} | {n} |")
    return "\n".join(lines) + "\n\n" + MULTIPLICITY_NOTE + "\n"


__all__ = [
    "CLAIMS",
    "FLUCTUATION_MIN_CORRECT",
    "FLUCTUATION_THRESHOLD",
    "MULTIPLICITY_NOTE",
    "PAPER_SHOTS",
    "POOR_COHERENCY",
    "SHARED_DATA",
    "VERDICTS",
    "Finding",
    "block_vs_random",
    "c1_above_c2",
    "cluster_bootstrap_diff",
    "coherency_poor",
    "counterfactual_known_vs_unknown",
    "counterfactual_over_k",
    "incorrect_vs_unknown",
    "markdown_table",
    "mc_vs_baseline",
    "n_to_share",
    "not_measured",
    "paper_scale_note",
    "prompt_fluctuation",
    "saturation",
    "surrounding",
    "t_interval",
    "two_sample_diff",
    "verdict",
    "verdict_text",
]
