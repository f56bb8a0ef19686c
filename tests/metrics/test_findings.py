"""The findings' verdict logic (factprobe/metrics/findings.py) on hand-computed cases: each claim
holds, does not hold, or is inconclusive exactly as its rule says."""

from __future__ import annotations

import math

import numpy as np
import pytest

from factprobe.metrics import findings as fm
from factprobe.metrics.bootstrap import paired_bootstrap_diff


# ------------------------------------------------------------------ the rule
@pytest.mark.parametrize(
    "lo,hi,n,direction,threshold,expected",
    [
        (0.01, 0.2, 50, "above", 0.0, fm.HOLDS),
        (-0.2, -0.01, 50, "above", 0.0, fm.NOT_HOLDS),
        (-0.1, 0.1, 50, "above", 0.0, fm.INCONCLUSIVE),
        (0.0, 0.1, 50, "above", 0.0, fm.INCONCLUSIVE),  # touching the threshold is not "above"
        (-0.2, -0.01, 50, "below", 0.0, fm.HOLDS),
        (0.01, 0.2, 50, "below", 0.0, fm.NOT_HOLDS),
        (0.11, 0.3, 50, "above", 0.10, fm.HOLDS),
        (0.05, 0.09, 50, "above", 0.10, fm.NOT_HOLDS),
        (0.05, 0.15, 50, "above", 0.10, fm.INCONCLUSIVE),
        (0.01, 0.2, 9, "above", 0.0, fm.INCONCLUSIVE),  # n below MIN_UNITS
        (float("nan"), 0.2, 50, "above", 0.0, fm.INCONCLUSIVE),
        (None, None, 50, "above", 0.0, fm.INCONCLUSIVE),
    ],
)
def test_verdict(lo, hi, n, direction, threshold, expected):
    assert fm.verdict(lo, hi, n, direction=direction, threshold=threshold) == expected


def test_verdict_refuses_a_reversed_interval_and_a_bad_direction():
    with pytest.raises(ValueError, match="reversed"):
        fm.verdict(0.2, 0.1, 50, direction="above")
    with pytest.raises(ValueError, match="direction"):
        fm.verdict(0.1, 0.2, 50, direction="up")  # type: ignore[arg-type]


# ------------------------------------------------------------------ IC-LKE vs HGP / MMP
def _mc(correct: list[bool], templates: int = 1) -> list[dict]:
    """Fact i in relation P(i mod 12): 12 relations, the unit of the IC-LKE claims (issue 37 item 2)."""
    return [
        {"fact_id": f"f{i}", "relation": f"P{i % 12}", "correct": c, "template": f"t{t}"}
        for i, c in enumerate(correct)
        for t in range(templates)
    ]


def test_ic_lke_beats_a_baseline_that_is_always_wrong():
    f = fm.mc_vs_baseline("m", "hgp", _mc([True] * 15 + [False] * 5), _mc([False] * 20, templates=2), n_boot=500)
    # relations P0-P2 and P8-P11 all right (1.0), P3-P7 one of two facts (0.5): mean over relations 9.5 / 12
    assert f.verdict == fm.HOLDS and f.n == 12 and f.value == pytest.approx(9.5 / 12)
    assert f.detail["acc_ic_lke"] == pytest.approx(0.75) and f.detail["acc_hgp"] == 0.0 and f.detail["facts"] == 20
    assert f.ci[0] > 0


def test_baseline_per_fact_value_is_its_share_of_correct_templates():
    icl = _mc([True] * 20)
    base = [{"fact_id": f"f{i}", "correct": t == 0, "template": f"t{t}"} for i in range(20) for t in range(4)]
    f = fm.mc_vs_baseline("m", "mmp", icl, base, n_boot=200)
    assert f.detail["acc_mmp"] == pytest.approx(0.25) and f.value == pytest.approx(0.75)
    assert f.verdict == fm.HOLDS and f.ci == (pytest.approx(0.75), pytest.approx(0.75))  # every relation differs by 0.75


def test_ic_lke_worse_than_the_baseline_does_not_hold_and_a_tie_is_inconclusive():
    assert fm.mc_vs_baseline("m", "hgp", _mc([False] * 20), _mc([True] * 20), n_boot=200).verdict == fm.NOT_HOLDS
    mixed = fm.mc_vs_baseline("m", "hgp", _mc([True, False] * 10), _mc([False, True] * 10), n_boot=500)
    assert mixed.value == 0.0 and mixed.verdict == fm.INCONCLUSIVE  # +1 in the 6 even relations, -1 in the odd


def test_only_shared_facts_are_compared():
    icl = _mc([True] * 12) + [{"fact_id": "extra", "correct": False}]
    f = fm.mc_vs_baseline("m", "hgp", icl, _mc([False] * 12), n_boot=200)
    assert f.n == 12 and f.detail["facts_only_in_one"] == 1 and f.value == 1.0 and f.detail["facts"] == 12


# ------------------------------------------------------------------ saturation
def test_t_interval_by_hand():
    m, lo, hi = fm.t_interval([1.0, 2.0, 3.0])
    # mean 2, sd 1, se 1/sqrt(3), t(0.975, 2) = 4.302653
    assert m == 2.0 and hi - m == pytest.approx(4.302653 / math.sqrt(3), rel=1e-5) and m - lo == pytest.approx(hi - m)
    assert math.isnan(fm.t_interval([1.0])[1])


def _curve(acc: dict[int, list[float]]) -> list[dict]:
    return [{"n": n, "mean": float(np.mean(v)), "draws": v} for n, v in acc.items()]


PAPER_GRID = (0, 1, 2, 5, 10, 20, 30, 50)


def test_n_to_share_is_the_smallest_n_reaching_95_percent_of_the_largest_n():
    # 0.95 * 0.6 = 0.57: 0.56 at n = 2 falls short, 0.6 at n = 5 reaches it
    assert fm.n_to_share([0, 1, 2, 5, 10], [0.2, 0.5, 0.56, 0.6, 0.6]) == 5
    assert fm.n_to_share([0, 1, 2], [0.5, 0.4, 0.45]) == 0  # a falling curve is "reached" at once
    assert fm.n_to_share([0, 1], [0.0, 0.0]) is None


def test_a_curve_rising_like_log_forever_does_not_saturate():
    # acc = 0.1 ln(1 + n): 95% of 0.1 ln 51 = 0.3735 needs ln(1 + n) >= 3.735, n >= 40.9: on the paper's grid n95 = 50
    curve = _curve({n: [0.1 * math.log1p(n) + e for e in (0.0, 0.002, -0.002)] if n else [0.0] for n in PAPER_GRID})
    f = fm.saturation("m", curve, n_boot=300)
    assert f.value == 50 and f.ci == (50.0, 50.0) and f.detail["threshold"] == 25.0 and f.verdict == fm.NOT_HOLDS
    fine = _curve({n: [0.1 * math.log1p(n)] * 3 for n in range(51)})  # every n: n95 = 41, still above 25
    g = fm.saturation("m", fine, n_boot=100)
    assert g.value == 41 and g.verdict == fm.NOT_HOLDS


def test_a_curve_that_plateaus_early_saturates():
    acc = {0: [0.2], 1: [0.40, 0.42, 0.41], 2: [0.50, 0.52, 0.51], 5: [0.60, 0.61, 0.62]}
    acc.update({n: [0.61, 0.62, 0.62] for n in (10, 20, 30, 50)})
    f = fm.saturation("m", _curve(acc), n_boot=300)
    # mean at 50: 0.61667, 95% = 0.58583; mean at 2 = 0.51 < it, at 5 = 0.61 >= it; every resample of the draws too
    assert f.value == 5 and f.ci == (5.0, 5.0) and f.verdict == fm.HOLDS and f.n == 3
    assert f.detail["acc_by_n"]["5"] == pytest.approx(0.61)


def test_saturation_with_one_draw_or_noisy_draws_is_inconclusive():
    one = fm.saturation("m", _curve({0: [0.1], 5: [0.5], 10: [0.55], 50: [0.56]}), n_boot=100)
    assert one.verdict == fm.INCONCLUSIVE and one.value == 10 and one.ci == (None, None)  # 0.5 < 0.95 * 0.56; one draw
    # draw 1 plateaus at n = 5, draw 2 only at n = 50: resamples give n95 = 5 or 50 or between
    noisy = _curve({0: [0.2], 5: [0.6, 0.3], 10: [0.6, 0.35], 30: [0.6, 0.45], 50: [0.6, 0.6]})
    f = fm.saturation("m", noisy, n_boot=500)
    assert f.ci[0] <= 5 and f.ci[1] >= 30 and f.verdict == fm.INCONCLUSIVE


def test_saturation_needs_two_n_and_a_positive_accuracy():
    f = fm.saturation("m", _curve({5: [0.3, 0.3]}))
    assert f.verdict == fm.INCONCLUSIVE and f.n == 0 and "n grid" in f.detail["not_measured"]
    z = fm.saturation("m", _curve({0: [0.0], 5: [0.0, 0.0], 10: [0.0, 0.0]}))
    assert z.verdict == fm.INCONCLUSIVE and "nothing to reach" in z.detail["not_measured"]


# ------------------------------------------------------------------ incorrect vs unknown
def _seq(
    replaced: set[int], probs: dict[int, float], length: int = 40, relation: str = "P1", clean: float | None = None
) -> list[dict]:
    rows = [
        {
            "relation": relation,
            "position": i,
            "subject": f"s{i}",
            "object": f"o{i}",
            "replaced": i in replaced,
            "prob": probs.get(i, 0.5),
        }
        for i in range(length)
    ]
    if clean is not None:
        for r in rows:
            r["prob_clean"] = clean
    return rows


def test_surrounding_positions_follow_the_first_replaced_one():
    rows = _seq({2, 5}, {}, length=8, relation="A") + _seq(set(), {}, length=3, relation="B")
    assert {rel: [r["position"] for r in rs] for rel, rs in fm.surrounding(rows).items()} == {"A": [3, 4, 6, 7]}


def test_cluster_bootstrap_by_hand():
    v, lo, hi, n = fm.cluster_bootstrap_diff({"a": [1.0, 1.0, 1.0], "b": [0.0]}, {"a": [0.0], "b": [0.0], "c": [1.0]})
    assert n == 2 and v == pytest.approx(3 / 4 - 0.0)  # pooled: (1 + 1 + 1 + 0) / 4 - (0 + 0) / 2; "c" is in b only
    assert lo == pytest.approx(0.0) and hi == pytest.approx(1.0)  # replicates: {b,b} 0, {a,b} 0.75, {a,a} 1
    assert math.isnan(fm.cluster_bootstrap_diff({"a": [1.0]}, {"a": [0.0]})[1])  # one cluster: no interval


def _relations_with_effects(effects: list[float], clean: float | None = None) -> tuple[list[dict], list[dict]]:
    rep = {0, 10, 20, 30}  # the first position replaced: the 36 others are all surrounding positions
    unk, inc = [], []
    for i, e in enumerate(effects):
        unk += _seq(rep, {}, relation=f"R{i}", clean=clean)
        inc += _seq(rep, {p: 0.5 - e for p in range(40) if p not in rep}, relation=f"R{i}", clean=clean)
    return unk, inc


def test_relations_not_positions_are_the_unit():
    # 5 relations where incorrect examples lower the next probabilities by 0.10, 5 where they raise them by 0.06:
    # mean +0.02 over 360 positions. Positions resampled alone: a tight interval above 0 (36 copies of each
    # relation's effect look like 36 independent units); over the 10 relation means the interval holds 0.
    unk, inc = _relations_with_effects([0.1] * 5 + [-0.06] * 5)
    f = fm.incorrect_vs_unknown("m", unk, inc, n_boot=2000)
    assert f.value == pytest.approx(0.02) and f.n == 10 and f.verdict == fm.INCONCLUSIVE
    assert f.ci[0] < 0 < f.ci[1] and f.signs == "5 of 10 relations the claimed way"
    pos_u = [r["prob"] for rs in fm.surrounding(unk).values() for r in rs]
    pos_i = [r["prob"] for rs in fm.surrounding(inc).values() for r in rs]
    value, lo, _ = paired_bootstrap_diff(pos_i, pos_u, n_boot=2000, seed=0)
    assert value == pytest.approx(0.02) and lo > 0.0 and len(pos_u) == 360  # the position bootstrap would say "holds"


def test_incorrect_hurting_more_in_every_relation_holds_and_the_reverse_does_not():
    unk, inc = _relations_with_effects([0.1, 0.12, 0.08, 0.11, 0.09, 0.1, 0.13, 0.07, 0.1, 0.1, 0.12], clean=0.6)
    f = fm.incorrect_vs_unknown("m", unk, inc, n_boot=500)
    assert f.verdict == fm.HOLDS and f.n == 11 and f.detail["unit"] == "relations"
    assert f.detail["drop_unknown"] == pytest.approx(0.1) and f.detail["drop_incorrect"] == pytest.approx(0.1 + f.value)
    assert f.detail["right_after_replaced"]["relations"] == 11
    worse = fm.incorrect_vs_unknown("m", *_relations_with_effects([-0.1] * 12), placement="block", n_boot=300)
    assert worse.claim == "incorrect>unknown-block" and worse.verdict == fm.NOT_HOLDS
    few = fm.incorrect_vs_unknown("m", *_relations_with_effects([0.1] * 3), n_boot=300)
    assert few.verdict == fm.INCONCLUSIVE and few.n == 3  # 3 sequences are too few units


# block vs random at matched exposure (issue 37 item 3): tests/metrics/test_findings_block.py


def test_two_sample_diff_by_hand():
    v, lo, hi = fm.two_sample_diff([1.0, 1.0, 1.0], [0.0, 0.0, 0.0])
    assert (v, lo, hi) == (1.0, 1.0, 1.0)
    v, lo, hi = fm.two_sample_diff([0.0, 1.0] * 20, [0.0, 1.0] * 20, n_boot=500)
    assert v == 0.0 and lo < 0 < hi


# counterfactual (yuan2024 Figure 7, issue 37 item 1): tests/metrics/test_findings_counterfactual.py


# ------------------------------------------------------------------ coherency
def _coh(r1_correct: list[bool], r2_correct: list[bool], r1_coherent: list[bool], r2_coherent: list[bool]) -> list[dict]:
    rows = []
    for rnd, correct, coherent in ((1, r1_correct, r1_coherent), (2, r2_correct, r2_coherent)):
        rows += [
            {"fact_id": f"i{i}", "relation": "P1", "round": rnd, "first_correct": c, "coherent": h}
            for i, (c, h) in enumerate(zip(correct, coherent))
        ]
    return rows


def test_poor_coherency_by_hand():
    # 20 items: round 1 coherent for 4, round 2 for 2 -> per item means 0 / 0.5 / 1, mean (4 + 2) / 40 = 0.15
    rows = _coh([True] * 20, [True] * 20, [True] * 4 + [False] * 16, [False] * 18 + [True] * 2)
    f = fm.coherency_poor("m", rows, n_boot=500)
    assert f.value == pytest.approx(0.15) and f.verdict == fm.HOLDS and f.n == 20 and f.ci[1] < 0.5
    assert f.detail["coherency_round1"] == pytest.approx(0.2) and f.detail["coherency_round2"] == pytest.approx(0.1)
    good = fm.coherency_poor("m", _coh([True] * 20, [True] * 20, [True] * 20, [True] * 18 + [False] * 2), n_boot=300)
    assert good.value == pytest.approx(0.95) and good.verdict == fm.NOT_HOLDS
    assert fm.coherency_poor("m", rows[:20], n_boot=100).verdict == fm.INCONCLUSIVE  # round 1 only: no item


def test_c1_above_c2_by_hand():
    # youssef2024 appendix A: c1 (round 1's first step correct) above c2; coherency plays no part
    rows = _coh([True] * 16 + [False] * 4, [False] * 18 + [True] * 2, [False] * 20, [True] * 20)
    f = fm.c1_above_c2("m", rows, n_boot=500)
    assert f.value == pytest.approx(0.8 - 0.1) and f.verdict == fm.HOLDS and f.n == 20
    assert f.detail["c1"] == pytest.approx(0.8) and f.detail["c2"] == pytest.approx(0.1)
    flipped = _coh([False] * 20, [True] * 20, [False] * 20, [False] * 20)
    assert fm.c1_above_c2("m", flipped, n_boot=200).verdict == fm.NOT_HOLDS
    assert fm.c1_above_c2("m", _coh([True] * 5, [False] * 5, [False] * 5, [False] * 5)).verdict == fm.INCONCLUSIVE


# ------------------------------------------------------------------ prompt fluctuation
def _belief(per_template: dict[str, list[bool]], relations: tuple[str, ...] = ("R1",)) -> list[dict]:
    return [
        {"relation": rel, "fact_id": f"{rel}-p{i}", "template_id": t, "correct": c}
        for rel in relations
        for t, cs in per_template.items()
        for i, c in enumerate(cs)
    ]


def test_fluctuation_is_relative_to_the_accuracy():
    # one relation, templates with accuracy 0.9 and 0.1: every draw is one of them, range 0.8, mean near 0.5
    wide = fm.prompt_fluctuation(
        "m", _belief({"a": [True] * 36 + [False] * 4, "b": [True] * 4 + [False] * 36}), n_draws=200, n_boot=200
    )
    mean = wide.detail["draw_mean_acc"]
    assert wide.detail["acc_range"] == pytest.approx(0.8) and 0.4 < mean < 0.6
    assert wide.value == pytest.approx(0.8 / mean) and wide.verdict == fm.HOLDS and wide.n == 40
    same = fm.prompt_fluctuation("m", _belief({"a": [True, False] * 20, "b": [True, False] * 20}), n_draws=200, n_boot=200)
    assert same.value == 0.0 and same.verdict == fm.NOT_HOLDS  # 20 correct answers per draw, none moves
    # accuracy 0.33 / 0.27 on 400 pairs: an absolute range of 0.06 (below the old 0.10), 20% of the accuracy
    rel = fm.prompt_fluctuation(
        "m", _belief({"a": [True] * 132 + [False] * 268, "b": [True] * 108 + [False] * 292}), n_draws=200, n_boot=300
    )
    assert rel.detail["acc_range"] == pytest.approx(0.06) and rel.value == pytest.approx(0.06 / 0.3, rel=0.05)
    assert rel.verdict == fm.HOLDS and rel.detail["permutation_null"]["p"] < 0.05  # 24 more pairs right with a


def test_a_model_at_the_floor_is_inconclusive_not_does_not_hold():
    nothing = fm.prompt_fluctuation("m", _belief({"a": [False] * 140, "b": [False] * 140}), n_draws=100, n_boot=100)
    assert nothing.verdict == fm.INCONCLUSIVE and "floor" in nothing.detail["not_measured"]
    # 0.9% accuracy on 140 pairs (the README's SmolLM2): about 1.3 correct answers per draw
    rare = fm.prompt_fluctuation(
        "m", _belief({"a": [True] + [False] * 139, "b": [True] * 2 + [False] * 138}, relations=("R1",)), n_draws=100, n_boot=100
    )
    assert rare.verdict == fm.INCONCLUSIVE and rare.detail["correct_per_draw"] < fm.FLUCTUATION_MIN_CORRECT


def test_fluctuation_needs_two_templates():
    f = fm.prompt_fluctuation("m", _belief({"a": [True] * 20}), n_draws=50, n_boot=50)
    assert f.verdict == fm.INCONCLUSIVE and "two templates" in f.detail["not_measured"]


# ------------------------------------------------------------------ records and table
def test_finding_record_and_markdown():
    f = fm.Finding("saturation", "m", fm.HOLDS, 0.1, (0.05, float("nan")), 3, {"x": 1, "unit": "draws"})
    d = f.to_dict()
    assert d["source"] == "wu2024 Figure 1" and d["ci"] == [0.05, None] and d["verdict"] == "holds"
    table = fm.markdown_table([d])
    assert "[+0.050, n/a] | 3 draws |" in table and fm.MULTIPLICITY_NOTE in table
    with pytest.raises(ValueError, match="unknown claim"):
        fm.Finding("nope", "m", fm.HOLDS, 0.0, (0.0, 0.0), 1)
    with pytest.raises(ValueError, match="verdict"):
        fm.Finding("saturation", "m", "maybe", 0.0, (0.0, 0.0), 1)


def test_every_claim_cites_its_figure_and_shared_data_is_symmetric():
    assert fm.CLAIMS["ic-lke>=hgp"][1].startswith("wu2024 Figure 3") and "Table" not in fm.CLAIMS["ic-lke>=mmp"][1]
    assert "coherency<correctness" not in fm.CLAIMS and {"coherency-poor", "c1>c2"} <= set(fm.CLAIMS)
    assert fm.not_measured("c1>c2", "m", "x").to_dict()["detail"]["shares_data_with"] == ["coherency-poor"]
    assert "shares_data_with" not in fm.not_measured("saturation", "m", "x").to_dict()["detail"]
    for claim, others in fm.SHARED_DATA.items():
        assert claim in fm.CLAIMS and all(claim in fm.SHARED_DATA[o] for o in others)
