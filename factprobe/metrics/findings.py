"""The papers' qualitative claims as verdicts: pure functions from measured numbers to holds / does
not hold / inconclusive (`factprobe study findings`, docs/findings.md).

Every claim is reduced to ONE number (`value`) whose sign or distance to a threshold is the claim,
with a 95% interval (`ci`) and a sample size `n` (facts, positions or example draws):

- `verdict(lo, hi, n, direction=..., threshold=..., min_n=...)`: the claim says the value lies
  `above` (or `below`) the threshold. It *holds* when the whole interval lies strictly on the
  claimed side, *does not hold* when the whole interval lies strictly on the other side, and is
  *inconclusive* when the interval contains the threshold, when an end is NaN, or when
  `n < min_n`. Nothing else is ever concluded.

The claims (one function each, taking plain rows or arrays, returning a `Finding`):

- `mc_vs_baseline` (wu2024 Tables 2/3, IC-LKE >= HGP / MMP): per fact, IC-LKE correctness (0/1)
  minus the baseline's correctness averaged over its templates; paired bootstrap of the mean.
- `saturation` (wu2024 Figure 1): with n_mid the middle value of the n grid and n_max the
  largest, per example draw d = (acc(n_mid) - acc(0)) - (acc(n_max) - acc(n_mid)): the gain of the
  first half of the grid minus the gain of the second. Saturation holds when mean(d) > 0 by a
  t-interval over the draws (the same facts in every draw; the interval covers the choice of
  examples, not the choice of facts).
- `incorrect_vs_unknown` (wu2024 Figure 2): per position right after a replaced example, the
  object's probability in the *unknown* sequence minus that in the *incorrect* sequence (paired by
  position when both sequences replaced the same positions, else two independent samples). Holds
  when > 0: incorrect examples lower the next example's probability more.
- `counterfactual_known_vs_unknown` (yuan2024 Figure 7): per evaluation question at one k,
  (EM known-unshuffle - EM known-shuffle) - (EM unknown-unshuffle - EM unknown-shuffle); paired
  bootstrap of the mean. Holds when > 0: shuffled answers lower EM more when the exemplars are facts
  the model knows.
- `coherency_vs_correctness` (youssef2024 Tables 2/4): per item, round-2 coherent (0/1) minus
  round-1 first-step correct (0/1); paired bootstrap. Holds when < 0.
- `prompt_fluctuation` (zhao2024 Table 3): the range of Acc@1 over draws of one template per
  relation; the interval is a bootstrap over subject-relation pairs resampled within each
  relation (the same template draws in every replicate). Holds when the range exceeds
  `FLUCTUATION_THRESHOLD` (0.10, why: see its comment).

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

from .bootstrap import paired_bootstrap_diff

HOLDS, NOT_HOLDS, INCONCLUSIVE = "holds", "does not hold", "inconclusive"
VERDICTS = (HOLDS, NOT_HOLDS, INCONCLUSIVE)
Direction = Literal["above", "below"]

#: the fewest units (facts, items, positions) a bootstrap verdict is drawn from
MIN_UNITS = 10
#: the fewest example draws a saturation verdict is drawn from (a t-interval needs two)
MIN_DRAWS = 2
#: zhao2024 Table 3 reports Acc@1 ranges of 0.110-0.136 (BERT variants) and 0.124-0.286 (Llama3-8B
#: zero-shot, 4-random, 4-relation) and calls them fluctuations; with the probed template shown in
#: the demonstrations (4-template) the range falls to 0.022. 0.10 (ten accuracy points) lies below
#: every range the paper calls a fluctuation and 4.5x above the one it does not.
FLUCTUATION_THRESHOLD = 0.10

CLAIMS: dict[str, tuple[str, str]] = {
    "ic-lke>=hgp": ("IC-LKE accuracy >= HGP accuracy on the same facts", "wu2024 Tables 2/3"),
    "ic-lke>=mmp": ("IC-LKE accuracy >= MMP accuracy on the same facts", "wu2024 Tables 2/3"),
    "saturation": ("IC-LKE accuracy saturates with the number of examples n", "wu2024 Figure 1"),
    "incorrect>unknown": ("incorrect examples hurt the next example more than unknown ones", "wu2024 Figure 2"),
    "counterfactual-known": ("shuffled (counterfactual) exemplars lower EM more when they are known facts",
                             "yuan2024 Figure 7"),
    "coherency<correctness": ("round-2 coherency is below round-1 correctness", "youssef2024 Tables 2, 4"),
    "fluctuation": ("prompt fluctuation is large (Acc@1 range over template draws > 0.10)", "zhao2024 Table 3"),
}


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
                "n": int(self.n), "detail": self.detail}


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
    """mean(a - b) with a paired bootstrap interval, judged against 0."""
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


def saturation(model: str, curve: Sequence[Mapping[str, Any]], n_facts: int | None = None) -> Finding:
    """Accuracy saturates with n (module docstring). `curve`: the icl-examples records `{n, mean,
    draws}` (`draws`: one accuracy per example draw, draw i the same draw at every n); the grid
    must hold n = 0 and at least two other values."""
    by_n = {int(r["n"]): [float(x) for x in r["draws"]] for r in curve}
    grid = sorted(by_n)
    rule = ("per draw d = (acc(n_mid) - acc(0)) - (acc(n_max) - acc(n_mid)); holds when the 95% t-interval of "
            "mean(d) over the draws > 0")
    if 0 not in by_n or len(grid) < 3:
        return not_measured("saturation", model, f"the n grid {grid} needs 0 and two more values")
    n_mid, n_max = grid[len(grid) // 2], grid[-1]
    zero, mid, top = by_n[0], by_n[n_mid], by_n[n_max]
    k = min(len(mid), len(top))
    zero = zero * k if len(zero) == 1 else zero  # n = 0 has one context: the same accuracy in every draw
    if len(zero) < k:
        return not_measured("saturation", model, "fewer n=0 accuracies than draws")
    d = [(mid[i] - zero[i]) - (top[i] - mid[i]) for i in range(k)]
    value, lo, hi = t_interval(d)
    detail = {"rule": rule, "n_mid": n_mid, "n_max": n_max, "acc_0": float(np.mean(zero[:k])),
              "acc_mid": float(np.mean(mid[:k])), "acc_max": float(np.mean(top[:k])),
              "gain_0_to_mid": float(np.mean(mid[:k]) - np.mean(zero[:k])),
              "gain_mid_to_max": float(np.mean(top[:k]) - np.mean(mid[:k])), "draws": k,
              "unit": "example draws (the interval does not cover the choice of facts)"}
    if n_facts is not None:
        detail["facts"] = int(n_facts)
    return Finding("saturation", model, verdict(lo, hi, k, direction="above", min_n=MIN_DRAWS), value, (lo, hi), k,
                   detail)


# ------------------------------------------------------------------ incorrect vs unknown examples
def after_replaced(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, int], float]:
    """{(relation, position): prob} of the non-replaced positions that directly follow a replaced one
    in the same relation's sequence."""
    by_rel: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        by_rel[str(r.get("relation", ""))].append(r)
    out = {}
    for rel, rs in by_rel.items():
        ordered = sorted(rs, key=lambda r: int(r["position"]))
        for prev, cur in itertools.pairwise(ordered):
            if prev["replaced"] and not cur["replaced"]:
                out[(rel, int(cur["position"]))] = float(cur["prob"])
    return out


def _mean_where(rows: Sequence[Mapping[str, Any]], replaced: bool) -> float | None:
    v = [float(r["prob"]) for r in rows if bool(r["replaced"]) == replaced]
    return float(np.mean(v)) if v else None


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


def incorrect_vs_unknown(model: str, unknown_rows: Sequence[Mapping[str, Any]],
                         incorrect_rows: Sequence[Mapping[str, Any]], *, n_boot: int = 2000, seed: int = 0) -> Finding:
    """Incorrect examples hurt more than unknown ones: value = mean prob right after a replaced
    example in the unknown sequence - the same in the incorrect sequence (rows: positions.jsonl
    of the icl-sequence study, `position`, `replaced`, `prob`, `subject`, `object`)."""
    unk, inc = after_replaced(unknown_rows), after_replaced(incorrect_rows)
    detail: dict[str, Any] = {
        "rule": "mean object probability right after a replaced example: unknown minus incorrect; holds when the "
                "95% interval > 0",
        "prob_after_unknown": float(np.mean(list(unk.values()))) if unk else None,
        "prob_after_incorrect": float(np.mean(list(inc.values()))) if inc else None,
        "prob_correct_unknown": _mean_where(unknown_rows, False), "prob_correct_incorrect": _mean_where(incorrect_rows, False),
        "prob_replaced_unknown": _mean_where(unknown_rows, True), "prob_replaced_incorrect": _mean_where(incorrect_rows, True),
    }
    def example(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, int], tuple[Any, Any]]:
        return {(str(r.get("relation", "")), int(r["position"])): (r["subject"], r["object"]) for r in rows}

    same = set(unk) == set(inc) and all(example(unknown_rows)[p] == example(incorrect_rows)[p] for p in unk)
    if not unk or not inc:
        return Finding("incorrect>unknown", model, INCONCLUSIVE, None, (None, None), 0,
                       {**detail, "not_measured": "no position follows a replaced example"})
    if same:
        pos = sorted(unk)
        value, lo, hi = paired_bootstrap_diff([inc[p] for p in pos], [unk[p] for p in pos], n_boot=n_boot, seed=seed)
        n, detail["pairing"] = len(pos), "paired by position (both sequences replaced the same positions)"
    else:
        value, lo, hi = two_sample_diff(list(unk.values()), list(inc.values()), n_boot=n_boot, seed=seed)
        n, detail["pairing"] = min(len(unk), len(inc)), "independent samples (the replaced positions differ)"
    return Finding("incorrect>unknown", model, verdict(lo, hi, n, direction="above"), value, (lo, hi), n, detail)


# ------------------------------------------------------------------ counterfactual (yuan2024 Figure 7)
FIGURE7 = ("known-unshuffle", "known-shuffle", "unknown-unshuffle", "unknown-shuffle")


def counterfactual_known_vs_unknown(model: str, rows: Iterable[Mapping[str, Any]], k: int, *,
                                    shots_used: Mapping[str, int] | None = None, n_boot: int = 2000,
                                    seed: int = 0) -> Finding:
    """Shuffled exemplars lower EM more when known (module docstring). `rows`: the counterfactual
    probe's result rows (`split`, `setting`, `shots_asked`, `fact_id`, `em`); `k` the asked k."""
    em: dict[str, dict[str, float]] = {s: {} for s in FIGURE7}
    for r in rows:
        if r.get("split", "eval") == "eval" and r["setting"] in em and int(r["shots_asked"]) == k:
            em[r["setting"]][str(r["fact_id"])] = float(r["em"])
    facts = sorted(set.intersection(*(set(v) for v in em.values())))
    d = [(em["known-unshuffle"][f] - em["known-shuffle"][f]) - (em["unknown-unshuffle"][f] - em["unknown-shuffle"][f])
         for f in facts]
    detail: dict[str, Any] = {
        "rule": "per question (EM known-unshuffle - known-shuffle) - (EM unknown-unshuffle - unknown-shuffle); holds "
                "when the 95% interval > 0", "k": k,
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


# ------------------------------------------------------------------ coherency (youssef2024)
def coherency_vs_correctness(model: str, rows: Iterable[Mapping[str, Any]], *, n_boot: int = 2000,
                             seed: int = 0) -> Finding:
    """Round-2 coherency below round-1 correctness: per item (`fact_id`), round 2's `coherent` minus
    round 1's `first_correct` (rows: the coherency probe's, one per item and round)."""
    r1: dict[str, float] = {}
    r2: dict[str, float] = {}
    for r in rows:
        target = r1 if int(r["round"]) == 1 else r2
        target[str(r["fact_id"])] = float(bool(r["first_correct"] if int(r["round"]) == 1 else r["coherent"]))
    items = sorted(set(r1) & set(r2))
    detail = {"rule": "per item coherent(round 2) - first_correct(round 1), micro over items; holds when the 95% "
                      "interval < 0"}
    f = _paired("coherency<correctness", model, [r2[i] for i in items], [r1[i] for i in items], "below", detail,
                n_boot, seed)
    f.detail["coherency_round2"] = f.detail.pop("mean_a", None)
    f.detail["correct_round1"] = f.detail.pop("mean_b", None)
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


def _draw_ranges(tables, weights: list[np.ndarray], n_draws: int, seed: int) -> np.ndarray:
    """Range of the draw accuracies for each row of the pair weights ([B, pairs] per relation)."""
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
    return np.nanmax(acc, axis=1) - np.nanmin(acc, axis=1)


def prompt_fluctuation(model: str, rows: Sequence[Mapping[str, Any]], *, n_draws: int = 2000, n_boot: int = 500,
                       seed: int = 0, threshold: float = FLUCTUATION_THRESHOLD, setting: str | None = None) -> Finding:
    """Prompt fluctuation is large (module docstring). `rows`: BELIEF-ICL rows (`relation`,
    `fact_id`, `template_id`, `correct`); value = max - min of Acc@1 over `n_draws` draws of one
    template per relation."""
    rows = list(rows)
    tables = _pair_tables(rows)
    detail: dict[str, Any] = {
        "rule": f"range of Acc@1 over {n_draws} draws of one template per relation; 95% interval by resampling "
                f"subject-relation pairs within each relation; holds when the interval > {threshold}",
        "threshold": threshold,
        "threshold_why": "zhao2024 Table 3: ranges 0.110-0.286 where it reports fluctuation (BERT; Llama3-8B "
                         "zero-shot, 4-random, 4-relation), 0.022 with 4-template demonstrations",
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
    observed = float(_draw_ranges(tables, [np.ones((1, s.shape[0])) for _, _, s, _ in tables], n_draws, seed)[0])
    gen = np.random.default_rng([seed, 1])
    weights = [gen.multinomial(s.shape[0], np.full(s.shape[0], 1.0 / s.shape[0]), size=n_boot).astype(float)
               for _, _, s, _ in tables]
    boot = _draw_ranges(tables, weights, n_draws, seed)
    boot = boot[np.isfinite(boot)]
    lo, hi = (float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))) if boot.size else (None, None)
    return Finding("fluctuation", model, verdict(lo, hi, n_pairs, direction="above", threshold=threshold), observed,
                   (lo, hi), n_pairs, detail)


# ------------------------------------------------------------------ rendering
def _fmt(v: Any) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{float(v):+.3f}"


def markdown_table(findings: Sequence[Mapping[str, Any]]) -> str:
    """A markdown table of `Finding.to_dict()` records: claim, source, model, verdict, value, 95% CI, n."""
    lines = ["| claim | source | model | verdict | value | 95% CI | n |", "|---|---|---|---|---|---|---|"]
    for f in findings:
        lo, hi = f["ci"]
        ci = "n/a" if lo is None and hi is None else f"[{_fmt(lo)}, {_fmt(hi)}]"
        lines.append(f"| {f['statement']} | {f['source']} | {f['model']} | **{f['verdict']}** | {_fmt(f['value'])} | "
                     f"{ci} | {f['n']} |")
    return "\n".join(lines) + "\n"


__all__ = [
    "CLAIMS",
    "FLUCTUATION_THRESHOLD",
    "VERDICTS",
    "Finding",
    "coherency_vs_correctness",
    "counterfactual_known_vs_unknown",
    "incorrect_vs_unknown",
    "markdown_table",
    "mc_vs_baseline",
    "not_measured",
    "prompt_fluctuation",
    "saturation",
    "t_interval",
    "two_sample_diff",
    "verdict",
]
