"""The findings' verdict logic (factprobe/metrics/findings.py) on hand-computed cases: each claim
holds, does not hold, or is inconclusive exactly as its rule says."""
from __future__ import annotations

import math

import numpy as np
import pytest

from factprobe.metrics import findings as fm


# ------------------------------------------------------------------ the rule
@pytest.mark.parametrize("lo,hi,n,direction,threshold,expected", [
    (0.01, 0.2, 50, "above", 0.0, fm.HOLDS),
    (-0.2, -0.01, 50, "above", 0.0, fm.NOT_HOLDS),
    (-0.1, 0.1, 50, "above", 0.0, fm.INCONCLUSIVE),
    (0.0, 0.1, 50, "above", 0.0, fm.INCONCLUSIVE),      # touching the threshold is not "above"
    (-0.2, -0.01, 50, "below", 0.0, fm.HOLDS),
    (0.01, 0.2, 50, "below", 0.0, fm.NOT_HOLDS),
    (0.11, 0.3, 50, "above", 0.10, fm.HOLDS),
    (0.05, 0.09, 50, "above", 0.10, fm.NOT_HOLDS),
    (0.05, 0.15, 50, "above", 0.10, fm.INCONCLUSIVE),
    (0.01, 0.2, 9, "above", 0.0, fm.INCONCLUSIVE),       # n below MIN_UNITS
    (float("nan"), 0.2, 50, "above", 0.0, fm.INCONCLUSIVE),
    (None, None, 50, "above", 0.0, fm.INCONCLUSIVE),
])
def test_verdict(lo, hi, n, direction, threshold, expected):
    assert fm.verdict(lo, hi, n, direction=direction, threshold=threshold) == expected


def test_verdict_refuses_a_reversed_interval_and_a_bad_direction():
    with pytest.raises(ValueError, match="reversed"):
        fm.verdict(0.2, 0.1, 50, direction="above")
    with pytest.raises(ValueError, match="direction"):
        fm.verdict(0.1, 0.2, 50, direction="up")  # type: ignore[arg-type]


# ------------------------------------------------------------------ IC-LKE vs HGP / MMP
def _mc(correct: list[bool], templates: int = 1) -> list[dict]:
    return [{"fact_id": f"f{i}", "correct": c, "template": f"t{t}"} for i, c in enumerate(correct) for t in range(templates)]


def test_ic_lke_beats_a_baseline_that_is_always_wrong():
    f = fm.mc_vs_baseline("m", "hgp", _mc([True] * 15 + [False] * 5), _mc([False] * 20, templates=2), n_boot=500)
    assert f.verdict == fm.HOLDS and f.n == 20 and f.value == pytest.approx(0.75)
    assert f.detail["acc_ic_lke"] == pytest.approx(0.75) and f.detail["acc_hgp"] == 0.0
    assert f.ci[0] > 0


def test_baseline_per_fact_value_is_its_share_of_correct_templates():
    icl = _mc([True] * 20)
    base = [{"fact_id": f"f{i}", "correct": t == 0, "template": f"t{t}"} for i in range(20) for t in range(4)]
    f = fm.mc_vs_baseline("m", "mmp", icl, base, n_boot=200)
    assert f.detail["acc_mmp"] == pytest.approx(0.25) and f.value == pytest.approx(0.75)
    assert f.verdict == fm.HOLDS and f.ci == (pytest.approx(0.75), pytest.approx(0.75))  # every fact differs by 0.75


def test_ic_lke_worse_than_the_baseline_does_not_hold_and_a_tie_is_inconclusive():
    assert fm.mc_vs_baseline("m", "hgp", _mc([False] * 20), _mc([True] * 20), n_boot=200).verdict == fm.NOT_HOLDS
    mixed = fm.mc_vs_baseline("m", "hgp", _mc([True, False] * 10), _mc([False, True] * 10), n_boot=500)
    assert mixed.value == 0.0 and mixed.verdict == fm.INCONCLUSIVE


def test_only_shared_facts_are_compared():
    icl = _mc([True] * 12) + [{"fact_id": "extra", "correct": False}]
    f = fm.mc_vs_baseline("m", "hgp", icl, _mc([False] * 12), n_boot=200)
    assert f.n == 12 and f.detail["facts_only_in_one"] == 1 and f.value == 1.0


# ------------------------------------------------------------------ saturation
def test_t_interval_by_hand():
    m, lo, hi = fm.t_interval([1.0, 2.0, 3.0])
    # mean 2, sd 1, se 1/sqrt(3), t(0.975, 2) = 4.302653
    assert m == 2.0 and hi - m == pytest.approx(4.302653 / math.sqrt(3), rel=1e-5) and m - lo == pytest.approx(hi - m)
    assert math.isnan(fm.t_interval([1.0])[1])


def _curve(acc: dict[int, list[float]]) -> list[dict]:
    return [{"n": n, "mean": float(np.mean(v)), "draws": v} for n, v in acc.items()]


def test_saturation_holds_when_the_early_gain_exceeds_the_late_gain_in_every_draw():
    # grid 0,1,5,20 -> n_mid = 5 (index 2), n_max = 20
    curve = _curve({0: [0.2], 1: [0.3, 0.32, 0.31], 5: [0.5, 0.52, 0.55], 20: [0.52, 0.55, 0.56]})
    f = fm.saturation("m", curve)
    d = [(0.5 - 0.2) - (0.52 - 0.5), (0.52 - 0.2) - (0.55 - 0.52), (0.55 - 0.2) - (0.56 - 0.55)]
    assert f.detail["n_mid"] == 5 and f.detail["n_max"] == 20 and f.n == 3
    assert f.value == pytest.approx(np.mean(d)) and f.verdict == fm.HOLDS


def test_saturation_does_not_hold_for_a_curve_still_climbing():
    curve = _curve({0: [0.1, 0.1], 2: [0.12, 0.13], 5: [0.15, 0.14], 50: [0.6, 0.62]})
    f = fm.saturation("m", curve)
    assert f.value < 0 and f.verdict == fm.NOT_HOLDS


def test_saturation_with_one_draw_or_noisy_draws_is_inconclusive():
    assert fm.saturation("m", _curve({0: [0.1], 5: [0.5], 10: [0.55]})).verdict == fm.INCONCLUSIVE  # one draw
    noisy = _curve({0: [0.2, 0.2, 0.2], 5: [0.5, 0.3, 0.4], 10: [0.6, 0.35, 0.7]})
    assert fm.saturation("m", noisy).verdict == fm.INCONCLUSIVE


def test_saturation_needs_n0_and_two_more():
    f = fm.saturation("m", _curve({1: [0.1, 0.2], 5: [0.3, 0.3], 10: [0.4, 0.4]}))
    assert f.verdict == fm.INCONCLUSIVE and f.n == 0 and "n grid" in f.detail["not_measured"]


# ------------------------------------------------------------------ incorrect vs unknown
def _seq(replaced: set[int], probs: dict[int, float], length: int = 40, relation: str = "P1") -> list[dict]:
    return [{"relation": relation, "position": i, "subject": f"s{i}", "object": f"o{i}", "replaced": i in replaced,
             "prob": probs.get(i, 0.5)} for i in range(length)]


def test_incorrect_hurts_more_paired_by_position():
    rep = {2 * i for i in range(1, 19)}  # 2, 4, ..., 36: the positions after them are 3, 5, ..., 37
    unk = _seq(rep, {p + 1: 0.6 for p in rep})
    inc = _seq(rep, {p + 1: 0.2 + 0.01 * (p % 3) for p in rep})
    f = fm.incorrect_vs_unknown("m", unk, inc, n_boot=500)
    assert f.n == 18 and "paired" in f.detail["pairing"] and f.verdict == fm.HOLDS
    assert f.value == pytest.approx(0.6 - np.mean([0.2 + 0.01 * (p % 3) for p in rep]))
    assert f.detail["prob_after_unknown"] == pytest.approx(0.6)


def test_unknown_hurting_more_does_not_hold_and_equal_is_inconclusive():
    rep = {3 * i for i in range(1, 12)}
    assert fm.incorrect_vs_unknown("m", _seq(rep, {p + 1: 0.1 for p in rep}), _seq(rep, {p + 1: 0.7 for p in rep}),
                                   n_boot=200).verdict == fm.NOT_HOLDS
    same = fm.incorrect_vs_unknown("m", _seq(rep, {}), _seq(rep, {}), n_boot=200)
    assert same.value == 0.0 and same.verdict == fm.INCONCLUSIVE


def test_after_replaced_is_per_relation_and_other_positions_fall_back_to_two_samples():
    rows = _seq({0, 1}, {}, length=4, relation="A") + _seq({3}, {}, length=4, relation="B")
    assert fm.after_replaced(rows) == {("A", 2): 0.5}  # B's last position is replaced: nothing follows it
    unk = _seq({2 * i for i in range(1, 15)}, {2 * i + 1: 0.8 for i in range(1, 15)})
    inc = _seq({2 * i + 1 for i in range(1, 15)}, {2 * i + 2: 0.1 for i in range(1, 15)})
    f = fm.incorrect_vs_unknown("m", unk, inc, n_boot=300)
    assert "independent" in f.detail["pairing"] and f.value == pytest.approx(0.7) and f.verdict == fm.HOLDS


def test_two_sample_diff_by_hand():
    v, lo, hi = fm.two_sample_diff([1.0, 1.0, 1.0], [0.0, 0.0, 0.0])
    assert (v, lo, hi) == (1.0, 1.0, 1.0)
    v, lo, hi = fm.two_sample_diff([0.0, 1.0] * 20, [0.0, 1.0] * 20, n_boot=500)
    assert v == 0.0 and lo < 0 < hi


# ------------------------------------------------------------------ counterfactual (Figure 7)
def _cf(em: dict[str, list[float]], k: int = 10) -> list[dict]:
    return [{"split": "eval", "setting": s, "shots_asked": k, "fact_id": f"q{i}", "em": v}
            for s, vs in em.items() for i, v in enumerate(vs)]


def test_counterfactual_known_drop_larger_holds():
    n = 20
    rows = _cf({"known-unshuffle": [1.0] * n, "known-shuffle": [0.0] * 15 + [1.0] * 5,
                "unknown-unshuffle": [1.0] * n, "unknown-shuffle": [1.0] * n})
    rows.append({"split": "train", "setting": "known-shuffle", "shots_asked": 10, "fact_id": "q0", "em": 1.0})  # ignored
    f = fm.counterfactual_known_vs_unknown("m", rows, 10, n_boot=500)
    assert f.n == n and f.value == pytest.approx(0.75) and f.verdict == fm.HOLDS
    assert f.detail["em_known-shuffle"] == pytest.approx(0.25)


def test_counterfactual_other_k_and_unknown_drop_larger():
    n = 20
    rows = _cf({"known-unshuffle": [1.0] * n, "known-shuffle": [1.0] * n,
                "unknown-unshuffle": [1.0] * n, "unknown-shuffle": [0.0] * n})
    assert fm.counterfactual_known_vs_unknown("m", rows, 10, n_boot=200).verdict == fm.NOT_HOLDS
    f = fm.counterfactual_known_vs_unknown("m", rows, 15, n_boot=200)
    assert f.verdict == fm.INCONCLUSIVE and f.n == 0


def test_counterfactual_with_no_known_exemplars_is_not_measured():
    rows = _cf({s: [1.0] * 20 for s in fm.FIGURE7})
    f = fm.counterfactual_known_vs_unknown("m", rows, 10, shots_used={"known-unshuffle": 0, "known-shuffle": 0,
                                                                      "unknown-unshuffle": 10, "unknown-shuffle": 10})
    assert f.verdict == fm.INCONCLUSIVE and "no exemplar" in f.detail["not_measured"]


# ------------------------------------------------------------------ coherency
def _coh(r1_correct: list[bool], r2_coherent: list[bool]) -> list[dict]:
    rows = [{"fact_id": f"i{i}", "round": 1, "first_correct": c, "coherent": False} for i, c in enumerate(r1_correct)]
    return rows + [{"fact_id": f"i{i}", "round": 2, "first_correct": True, "coherent": c} for i, c in enumerate(r2_coherent)]


def test_round2_coherency_below_round1_correctness():
    f = fm.coherency_vs_correctness("m", _coh([True] * 16 + [False] * 4, [False] * 18 + [True] * 2), n_boot=500)
    assert f.value == pytest.approx(0.1 - 0.8) and f.verdict == fm.HOLDS and f.n == 20
    assert f.detail["coherency_round2"] == pytest.approx(0.1) and f.detail["correct_round1"] == pytest.approx(0.8)
    assert fm.coherency_vs_correctness("m", _coh([False] * 20, [True] * 20), n_boot=200).verdict == fm.NOT_HOLDS
    assert fm.coherency_vs_correctness("m", _coh([True] * 5, [False] * 5), n_boot=200).verdict == fm.INCONCLUSIVE  # n < 10


# ------------------------------------------------------------------ prompt fluctuation
def _belief(per_template: dict[str, list[bool]], relations: tuple[str, ...] = ("R1",)) -> list[dict]:
    return [{"relation": rel, "fact_id": f"{rel}-p{i}", "template_id": t, "correct": c}
            for rel in relations for t, cs in per_template.items() for i, c in enumerate(cs)]


def test_fluctuation_range_by_hand_and_verdicts():
    n = 40
    # one relation, templates with accuracy 0.9 and 0.1: every draw is one of them, range 0.8
    wide = fm.prompt_fluctuation("m", _belief({"a": [True] * 36 + [False] * 4, "b": [True] * 4 + [False] * 36}),
                                 n_draws=200, n_boot=200)
    assert wide.value == pytest.approx(0.8) and wide.verdict == fm.HOLDS and wide.n == n
    same = fm.prompt_fluctuation("m", _belief({"a": [True, False] * 20, "b": [True, False] * 20}), n_draws=200, n_boot=200)
    assert same.value == 0.0 and same.verdict == fm.NOT_HOLDS  # every pair answers both templates alike
    # two relations: the draw means over 80 pairs; a 0.1 template gap in one relation gives range 0.05 < 0.10
    small = fm.prompt_fluctuation("m", _belief({"a": [True] * 24 + [False] * 16, "b": [True] * 20 + [False] * 20},
                                               relations=("R1", "R2")), n_draws=500, n_boot=200)
    assert small.value == pytest.approx(0.1)  # both relations differ by 0.1 in the same direction: max - min = 0.1
    assert small.verdict in (fm.INCONCLUSIVE, fm.HOLDS, fm.NOT_HOLDS) and small.ci[0] <= small.value <= small.ci[1] + 1e-9


def test_fluctuation_needs_two_templates():
    f = fm.prompt_fluctuation("m", _belief({"a": [True] * 20}), n_draws=50, n_boot=50)
    assert f.verdict == fm.INCONCLUSIVE and "two templates" in f.detail["not_measured"]


# ------------------------------------------------------------------ records and table
def test_finding_record_and_markdown():
    f = fm.Finding("saturation", "m", fm.HOLDS, 0.1, (0.05, float("nan")), 3, {"x": 1})
    d = f.to_dict()
    assert d["source"] == "wu2024 Figure 1" and d["ci"] == [0.05, None] and d["verdict"] == "holds"
    table = fm.markdown_table([d])
    assert "| **holds** | +0.100 | n/a | 3 |" not in table and "[+0.050, n/a]" in table
    with pytest.raises(ValueError, match="unknown claim"):
        fm.Finding("nope", "m", fm.HOLDS, 0.0, (0.0, 0.0), 1)
    with pytest.raises(ValueError, match="verdict"):
        fm.Finding("saturation", "m", "maybe", 0.0, (0.0, 0.0), 1)
