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

The rule, the intervals, the `Finding` record and its rendering are
`factprobe.metrics.findings_rule`; the claims about prompts are `factprobe.metrics.findings_prompts`; this
module holds the claims about in-context examples and is the one place to import any of them from.

The claims (one function each, taking plain rows or arrays, returning a `Finding`):

- `mc_vs_baseline` (wu2024 Figure 3, "mean accuracy across ... 12 relations", per relation Figure 12:
  IC-LKE >= HGP / MMP): per relation, IC-LKE accuracy minus the baseline's (per fact: its share of
  correct templates) over the facts both scored; the mean over relations with a t-interval over the
  relation means (`cluster_interval`: the facts of a relation share its examples and templates).
- `saturation` (wu2024 Figure 1): n95 = the smallest n of the grid whose mean accuracy reaches 95%
  of the mean accuracy at the largest n (the paper's dashed lines); its interval resamples the
  example draws. Holds when the interval lies below half the largest n (the second half of the
  grid adds less than 5%); a curve still rising (ln(1 + n) reaches 95% of ln(51) only at n = 41)
  does not hold.
- `incorrect_vs_unknown` (wu2024 Figures 2b-2e; one placement per call): the object's probability
  at the surrounding positions (the non-replaced ones after the first replaced one: every position
  whose context holds a replaced example) in the *unknown* sequence minus that in the *incorrect*
  sequence, i.e. the incorrect sequence's drop against the clean one minus the unknown's, per
  relation. The unit is the relation's sequence: the mean over relations with a t-interval over the
  relation means (`cluster_interval`; a percentile bootstrap over 11-12 relations under-covers).
  Holds when > 0.
- Every verdict over relations carries the per-relation sign count (`Finding.signs`, "7 of 12
  relations the claimed way") and its method (`Finding.method`).
- `block_vs_random` (wu2024 section 3's summary, "particularly when they appear in a continuous
  sequence", Figures 2d/2e, 40 incorrect examples in both): the incorrect examples' drop (clean -
  variant) at positions with the same exposure on both sides (at least `MATCHED_SHARE` of the
  replaced examples in context, 35 of 40: after the block, late in the random sequence), block minus
  random per relation; t-interval over the relation means.
- `counterfactual_known_vs_unknown` (yuan2024 4.2, Figure 7; `findings_counterfactual`): EM
  unknown-shuffle - EM known-shuffle at one k, the paper's comparison, with known-unshuffle -
  unknown-unshuffle beside it (the paper's premise: comparable); the interval covers the questions
  and the exemplar draws (a crossed t-interval). `counterfactual_over_k` judges the largest k of the
  paper's 10, 15, 20, 32 that was run (the paper's gap grows with k) and lists every k; below
  `PAPER_NO_EFFECT_PARAMS` the detail and the table say that the paper reports no effect at that scale.
- `coherency_poor` (youssef2024 section 4, "PLMs show poor coherency"): per item the mean of
  `coherent` over its two rounds; holds when the interval lies below `POOR_COHERENCY`.
- `c1_above_c2` (youssef2024 appendix A, Table 4): per item first-step correctness of round 1 (c1)
  minus that of round 2 (c2); paired bootstrap; holds when > 0.
- `prompt_fluctuation` (zhao2024 Table 3): the range of Acc@1 over draws of one template per
  relation, relative to the mean Acc@1 of the draws: a point, as in the paper (no interval). Judged
  twice (issue 37 item 4): against `FLUCTUATION_THRESHOLD` and against a permutation null from the
  run itself (template labels permuted within each pair: the range this run's size gives with no
  prompt effect). Holds when the relative range exceeds the threshold and p < 0.05; does not hold
  at or below the threshold; inconclusive otherwise, and near the floor (fewer than
  `FLUCTUATION_MIN_CORRECT` correct answers per draw), where one answer moves the accuracy by more
  than the threshold.

`Finding.to_dict()` is one record of `metrics.json`'s `findings`; `markdown_table` renders them.
NaN never reaches a verdict other than inconclusive.

Over 500 lines: one job, the claims as verdicts, one function per claim with the paper's sentence; the rule and the
prompt parts are already in findings_rule and findings_prompts.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .cluster_interval import METHOD, RelationDiff, relation_mean_diff
from .findings_counterfactual import (
    FIGURE7,
    PAPER_NO_EFFECT_PARAMS,
    PAPER_SHOTS,
    counterfactual_known_vs_unknown,
    counterfactual_over_k,
    crossed_t_interval,
    paper_scale_note,
)
from .findings_prompts import (
    FLUCTUATION_MIN_CORRECT,
    FLUCTUATION_THRESHOLD,
    POOR_COHERENCY,
    c1_above_c2,
    coherency_poor,
    prompt_fluctuation,
)
from .findings_rule import (
    CLAIMS,
    HOLDS,
    INCONCLUSIVE,
    MIN_DRAWS,
    MULTIPLICITY_NOTE,
    NOT_HOLDS,
    SHARED_DATA,
    VERDICTS,
    Finding,
    cluster_bootstrap_diff,
    markdown_table,
    not_measured,
    num_or_none,
    t_interval,
    two_sample_diff,
    verdict,
    verdict_text,
)

#: wu2024 Figure 1's criterion: the smallest n reaching this share of the accuracy at the largest n
SATURATION_SHARE = 0.95
#: saturation holds when that n lies below this fraction of the largest n (the grid's second half adds < 5%)
SATURATION_BY = 0.5


# ------------------------------------------------------------------ IC-LKE vs HGP / MMP
def per_fact_correct(rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """{fact_id: mean correctness over the fact's rows} (one row per fact for IC-LKE, one per
    (fact, template) for HGP/MMP, whose per-fact value is then the share of templates it got right)."""
    acc: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        acc[str(r["fact_id"])].append(float(bool(r["correct"])))
    return {f: float(np.mean(v)) for f, v in acc.items()}


def relation_of(rows: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """{fact_id: relation} of probe rows (a row without `relation` belongs to the relation "")."""
    return {str(r["fact_id"]): str(r.get("relation", "")) for r in rows}


def mc_vs_baseline(
    model: str,
    baseline: str,
    icl_rows: Iterable[Mapping[str, Any]],
    baseline_rows: Iterable[Mapping[str, Any]],
    *,
    n_boot: int = 2000,
    seed: int = 0,
) -> Finding:
    """IC-LKE >= `baseline` ("hgp" or "mmp") over relations (issue 37 item 2): per relation, IC-LKE accuracy
    minus the baseline's accuracy over the facts both scored (the baseline's per-fact value is its share of
    correct templates); value = the mean of those relation differences, 95% t-interval over the relation
    means, n = relations (the facts of a relation share its examples and templates). `n_boot` and `seed`
    are unused (the interval is analytic); kept so every claim takes the same arguments."""
    del n_boot, seed
    claim = f"ic-lke>={baseline}"
    icl_rows, baseline_rows = list(icl_rows), list(baseline_rows)
    icl, base = per_fact_correct(icl_rows), per_fact_correct(baseline_rows)
    rel_of = relation_of(icl_rows)
    shared = sorted(set(icl) & set(base))
    detail: dict[str, Any] = {
        "rule": f"per relation acc(ic-lke) - acc({baseline}) over the facts both scored; mean over relations with a "
        "95% t-interval over the relation means; holds when the interval > 0",
        "unit": "relations",
        "unit_note": "the facts of a relation share its in-context examples and its templates",
        "facts": len(shared),
        "facts_only_in_one": len(set(icl) ^ set(base)),
        "baseline": baseline,
    }
    if not shared:
        return Finding(claim, model, INCONCLUSIVE, None, (None, None), 0, {**detail, "not_measured": "no facts in both"})
    a: dict[str, list[float]] = defaultdict(list)
    b: dict[str, list[float]] = defaultdict(list)
    for x in shared:
        a[rel_of[x]].append(icl[x])
        b[rel_of[x]].append(base[x])
    r = relation_mean_diff(a, b, direction="above")
    detail.update(
        acc_ic_lke=float(np.mean([icl[x] for x in shared])),
        **{f"acc_{baseline}": float(np.mean([base[x] for x in shared]))},
        pooled_over_facts=float(np.mean([icl[x] - base[x] for x in shared])),
        per_relation=r.per_relation,
    )
    return relation_finding(claim, model, r, detail)


def relation_finding(claim: str, model: str, r: RelationDiff, detail: dict[str, Any]) -> Finding:
    """The `Finding` of a claim "the per-relation difference is above 0" from its `RelationDiff`."""
    return Finding(
        claim,
        model,
        verdict(r.lo, r.hi, r.n, direction="above"),
        num_or_none(r.value),
        (num_or_none(r.lo), num_or_none(r.hi)),
        r.n,
        detail,
        unit="relations",
        n_units=r.n,
        method=METHOD,
        signs=r.signs,
    )


# ------------------------------------------------------------------ saturation with n
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


def saturation(
    model: str, curve: Sequence[Mapping[str, Any]], n_facts: int | None = None, *, n_boot: int = 2000, seed: int = 0
) -> Finding:
    """Accuracy saturates with n (module docstring). `curve`: the icl-examples records `{n, mean,
    draws}` (`draws`: one accuracy per example draw, draw i the same draw at every n). value = n95 of
    the mean curve over the draws; the interval is the 2.5th-97.5th percentile of n95 over `n_boot`
    resamples of the draws (with replacement); holds when it lies below `SATURATION_BY` x the largest n,
    does not hold when above."""
    rule = (
        f"n95 = smallest n whose mean accuracy >= {SATURATION_SHARE:.0%} of the mean accuracy at the largest n; "
        f"95% interval by resampling the example draws; holds when the interval < {SATURATION_BY} x the largest n"
    )
    got = _draw_matrix(curve)
    if isinstance(got, str):
        return not_measured("saturation", model, got)
    grid, acc = got
    k, n_max = acc.shape[0], grid[-1]
    mean = acc.mean(axis=0)
    threshold = SATURATION_BY * n_max
    detail: dict[str, Any] = {
        "rule": rule,
        "threshold": threshold,
        "n_max": n_max,
        "draws": k,
        "acc_by_n": {str(n): float(a) for n, a in zip(grid, mean)},
        "unit": "draws",
        "unit_note": "example draws (the interval does not cover the choice of facts)",
    }
    if n_facts is not None:
        detail["facts"] = int(n_facts)
    value = n_to_share(grid, mean)
    if value is None:
        return Finding(
            "saturation",
            model,
            INCONCLUSIVE,
            None,
            (None, None),
            k,
            {**detail, "not_measured": f"the accuracy at n = {n_max} is 0: there is nothing to reach"},
        )
    if value == grid[0] and mean[0] >= mean.max():
        detail["note"] = f"the curve does not rise: n = {grid[0]} already has its highest accuracy"
    rng = np.random.default_rng(seed)
    boots = [n_to_share(grid, acc[rng.integers(0, k, size=k)].mean(axis=0)) for _ in range(n_boot)] if k > 1 else []
    boots = [b for b in boots if b is not None]
    lo, hi = (
        (float(np.quantile(boots, 0.025, method="inverted_cdf")), float(np.quantile(boots, 0.975, method="inverted_cdf")))
        if boots
        else (None, None)
    )
    return Finding(
        "saturation",
        model,
        verdict(lo, hi, k, direction="below", threshold=threshold, min_n=MIN_DRAWS),
        float(value),
        (lo, hi),
        k,
        detail,
    )


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


def surrounding(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """{relation: rows} of the surrounding positions: the non-replaced positions after the first
    replaced one of the relation's sequence (the positions whose context holds a replaced example;
    before it the sequence is the clean one)."""
    out = {}
    for rel, ordered in sequences(rows).items():
        first = next((i for i, r in enumerate(ordered) if r["replaced"]), None)
        if first is not None:
            out[rel] = [r for r in ordered[first + 1 :] if not r["replaced"]]
    return out


def _by_rel(found: Mapping[tuple[str, int], float]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = defaultdict(list)
    for (rel, _), v in sorted(found.items()):
        out[rel].append(v)
    return out


def _drop(r: Mapping[str, Any]) -> float:
    return float(r["prob_clean"]) - float(r["prob"])


def _pooled(values: Mapping[str, Sequence[float]], keys: Iterable[str]) -> float:
    """The mean of every value of the relations `keys` (the pre-issue-37 pooled statistic, kept in the detail)."""
    return float(np.mean([v for k in keys for v in values[k]]))


def incorrect_vs_unknown(
    model: str,
    unknown_rows: Sequence[Mapping[str, Any]],
    incorrect_rows: Sequence[Mapping[str, Any]],
    *,
    placement: str = "random",
    n_boot: int = 2000,
    seed: int = 0,
) -> Finding:
    """Incorrect examples hurt more than unknown ones (module docstring), over relations (issue 37 item 2):
    per relation, the mean object probability at the surrounding positions of its unknown sequence minus
    the same in its incorrect sequence; value = the mean of those relation differences, 95% t-interval over
    the relation means, n = relations (the positions of one sequence share one context). Rows: the
    icl-sequence study's positions.jsonl (`relation`, `position`, `replaced`, `prob`, optionally
    `prob_clean`) of one placement. `n_boot`, `seed`: unused (the interval is analytic), kept so every
    claim takes the same arguments."""
    del n_boot, seed
    claim = "incorrect>unknown" if placement == "random" else "incorrect>unknown-block"
    unk, inc = surrounding(unknown_rows), surrounding(incorrect_rows)
    detail: dict[str, Any] = {
        "rule": "object probability at the surrounding positions (non-replaced, after the first replaced one): unknown "
        "sequence minus incorrect sequence per relation; mean over relations with a 95% t-interval over the relation "
        "means; holds when the interval > 0",
        "placement": placement,
        "unit": "relations",
        "unit_note": "one sequence per relation; positions are not resampled",
    }
    a = {rel: [float(r["prob"]) for r in rs] for rel, rs in unk.items()}
    b = {rel: [float(r["prob"]) for r in rs] for rel, rs in inc.items()}
    r = relation_mean_diff(a, b, direction="above")
    if r.n == 0:
        return Finding(
            claim,
            model,
            INCONCLUSIVE,
            None,
            (None, None),
            0,
            {**detail, "not_measured": "no relation has surrounding positions in both sequences"},
        )
    detail.update(
        positions_unknown=sum(len(a[k]) for k in a),
        positions_incorrect=sum(len(b[k]) for k in b),
        prob_unknown=float(np.mean([v for vs in a.values() for v in vs])),
        prob_incorrect=float(np.mean([v for vs in b.values() for v in vs])),
        pooled_over_positions=_pooled(a, r.per_relation) - _pooled(b, r.per_relation),
        per_relation=r.per_relation,
    )
    if all("prob_clean" in r for rs in (*unk.values(), *inc.values()) for r in rs):
        detail["drop_unknown"] = float(np.mean([_drop(r) for rs in unk.values() for r in rs]))
        detail["drop_incorrect"] = float(np.mean([_drop(r) for rs in inc.values() for r in rs]))
    after_a, after_b = _by_rel(after_replaced(unknown_rows)), _by_rel(after_replaced(incorrect_rows))
    after = relation_mean_diff(after_a, after_b, direction="above")
    detail["right_after_replaced"] = {
        "value": num_or_none(after.value),
        "ci": [num_or_none(after.lo), num_or_none(after.hi)],
        "relations": after.n,
        "positions": sum(len(v) for v in after_a.values()),
        "signs": after.signs,
    }
    return relation_finding(claim, model, r, detail)


def replaced_before(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[tuple[Mapping[str, Any], int]]]:
    """{relation: [(row, number of replaced examples before its position)]} in sequence order: the
    exposure of each position (how many replaced examples its context holds)."""
    out: dict[str, list[tuple[Mapping[str, Any], int]]] = {}
    for rel, ordered in sequences(rows).items():
        seen, pairs = 0, []
        for r in ordered:
            pairs.append((r, seen))
            seen += bool(r["replaced"])
        out[rel] = pairs
    return out


def exposed(rows: Sequence[Mapping[str, Any]], min_exposure: int) -> dict[str, list[tuple[Mapping[str, Any], int]]]:
    """{relation: [(row, exposure)]} of the non-replaced positions whose context holds at least
    `min_exposure` replaced examples (relations with none are left out)."""
    out = {}
    for rel, pairs in replaced_before(rows).items():
        kept = [(r, e) for r, e in pairs if not r["replaced"] and e >= min_exposure]
        if kept:
            out[rel] = kept
    return out


#: block vs random compares positions whose context holds at least this share of the replaced examples
#: (wu2024 Figures 2d/2e hold the number fixed, 40 in both; 35 of 40 on the random side)
MATCHED_SHARE = 0.875


def block_vs_random(
    model: str,
    block_rows: Sequence[Mapping[str, Any]],
    random_rows: Sequence[Mapping[str, Any]],
    *,
    min_exposure: int | None = None,
    n_boot: int = 2000,
    seed: int = 0,
) -> Finding:
    """Incorrect examples hurt more in one block than at random positions, at the same number of
    incorrect examples in context (wu2024 Figures 2d/2e: 40 in both; issue 37 item 3). Only the
    non-replaced positions whose context holds at least `min_exposure` replaced examples count, on both
    sides (default: `MATCHED_SHARE` of the replaced examples, rounded up: 35 of 40); on the block side
    these are the positions after the block. Per relation, the mean drop (clean - variant) at those
    positions of the block sequence minus that of the random sequence; value = the mean over the
    relations with such positions on both sides, 95% t-interval over the relation means, n = relations.
    `detail["unmatched"]` keeps the statistic before issue 37 (every position after the first replaced
    one), for comparison. Needs `prob_clean`. `n_boot`, `seed`: unused (the interval is analytic)."""
    del n_boot, seed
    claim = "incorrect-block>random"
    replaced = max((sum(bool(r["replaced"]) for r in rs) for rs in sequences(block_rows).values()), default=0)
    m = int(min_exposure) if min_exposure is not None else math.ceil(MATCHED_SHARE * replaced)
    blk, rnd = exposed(block_rows, max(m, 1)), exposed(random_rows, max(m, 1))
    detail: dict[str, Any] = {
        "rule": f"incorrect examples' drop (clean - variant) at the non-replaced positions with at least {m} of the "
        f"{replaced} incorrect examples in context: block minus random per relation; mean over relations with a 95% "
        "t-interval over the relation means; holds when the interval > 0",
        "unit": "relations",
        "unit_note": "one sequence per relation; positions are not resampled",
        "min_exposure": m,
        "replaced": replaced,
    }
    rows = [r for side in (blk, rnd) for pairs in side.values() for r, _ in pairs]
    if not rows or not all("prob_clean" in r for r in rows):
        why = f"no positions with at least {m} incorrect examples in context and the clean sequence's probability"
        return Finding(claim, model, INCONCLUSIVE, None, (None, None), 0, {**detail, "not_measured": why})
    a = {rel: [_drop(r) for r, _ in pairs] for rel, pairs in blk.items()}
    b = {rel: [_drop(r) for r, _ in pairs] for rel, pairs in rnd.items()}
    res = relation_mean_diff(a, b, direction="above")
    both = sorted(res.per_relation)
    detail.update(
        drop_block=_pooled(a, both) if both else None,
        drop_random=_pooled(b, both) if both else None,
        exposure_block=float(np.mean([e for k in both for _, e in blk[k]])) if both else None,
        exposure_random=float(np.mean([e for k in both for _, e in rnd[k]])) if both else None,
        mean_position_block=float(np.mean([int(r["position"]) for k in both for r, _ in blk[k]])) if both else None,
        mean_position_random=float(np.mean([int(r["position"]) for k in both for r, _ in rnd[k]])) if both else None,
        positions_block=sum(len(blk[k]) for k in both),
        positions_random=sum(len(rnd[k]) for k in both),
        relations_without_matched_positions=sorted(set(sequences(block_rows)) - set(both)),
        per_relation=res.per_relation,
    )
    old = {side: surrounding(rs) for side, rs in (("block", block_rows), ("random", random_rows))}
    if all("prob_clean" in r for rs in (*old["block"].values(), *old["random"].values()) for r in rs):
        un = relation_mean_diff(
            {k: [_drop(r) for r in v] for k, v in old["block"].items()},
            {k: [_drop(r) for r in v] for k, v in old["random"].items()},
            direction="above",
        )
        detail["unmatched"] = {
            "rule": "every surrounding position (after the first replaced one) on both sides: exposure not matched",
            "value": num_or_none(un.value),
            "ci": [num_or_none(un.lo), num_or_none(un.hi)],
            "relations": un.n,
        }
    if res.n == 0:
        return Finding(
            claim,
            model,
            INCONCLUSIVE,
            None,
            (None, None),
            0,
            {
                **detail,
                "not_measured": f"no relation has positions with at least {m} incorrect examples in context in both sequences",
            },
        )
    return relation_finding(claim, model, res, detail)


__all__ = [
    "FIGURE7",
    "PAPER_NO_EFFECT_PARAMS",
    "crossed_t_interval",
    "exposed",
    "replaced_before",
    "HOLDS",
    "INCONCLUSIVE",
    "NOT_HOLDS",
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
