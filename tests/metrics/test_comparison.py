"""Run-vs-run comparison: subsumption rate (Wu et al. 2024, section 4.2.2), McNemar, Pearson r,
compare_runs and the regression gate, each against a hand computation."""

import math

import numpy as np
import pandas as pd
import pytest

from factprobe.errors import DataError
from factprobe.metrics import (
    GateDecision,
    compare_runs,
    mcnemar,
    pearson_per_relation,
    regression_gate,
    subsumption_by_relation,
    subsumption_rate,
)


@pytest.fixture
def scipy_stats():
    """scipy is only a cross-check here (factprobe.metrics does not use it)."""
    return pytest.importorskip("scipy.stats")


def _pairs(b01: int, b10: int, both_right: int = 0, both_wrong: int = 0) -> tuple[list[int], list[int]]:
    """Aligned 0/1 vectors with the given McNemar table (b01: a wrong & b right; b10: a right & b wrong)."""
    a = [0] * b01 + [1] * b10 + [1] * both_right + [0] * both_wrong
    b = [1] * b01 + [0] * b10 + [1] * both_right + [0] * both_wrong
    return a, b


# --- subsumption rate -------------------------------------------------------------------------


def test_subsumption_rate_four_facts():
    # facts:         f1 f2 f3 f4
    # model 1 right:  1  1  0  0   -> phi1 = {f1, f2}
    # model 2 right:  1  0  1  1   -> phi2 = {f1, f3, f4}
    # eta(1|2) = |{f1}| / |phi1| = 1/2;  eta(2|1) = |{f1}| / |phi2| = 1/3
    c1 = [True, True, False, False]
    c2 = [True, False, True, True]
    assert subsumption_rate(c1, c2) == pytest.approx(1 / 2)
    assert subsumption_rate(c2, c1) == pytest.approx(1 / 3)


def test_subsumption_by_relation_hand_computed():
    # relation  model 1  model 2
    # r1        1 1 1 0  1 0 0 1   eta(1|2) on r1 = 1/3 (of f1, f2, f3 model 2 knows f1)
    # r2        1 0      1 1       eta = 1/1
    # r3        0 0      1 1       model 1 knows nothing: undefined, left out of the mean
    c1 = [1, 1, 1, 0, 1, 0, 0, 0]
    c2 = [1, 0, 0, 1, 1, 1, 1, 1]
    rel = ["r1"] * 4 + ["r2"] * 2 + ["r3"] * 2
    out = subsumption_by_relation(c1, c2, rel)
    assert out["eta_pooled"] == pytest.approx(2 / 4)  # known by 1: f1, f2, f3, f5; by both: f1, f5
    assert out["eta_relation_mean"] == pytest.approx((1 / 3 + 1.0) / 2)
    assert out["n_relations"] == 2
    assert out["per_relation"]["r1"] == pytest.approx(1 / 3) and out["per_relation"]["r2"] == 1.0
    assert math.isnan(out["per_relation"]["r3"])
    nothing = subsumption_by_relation([0, 0], [1, 1], ["r", "q"])
    assert math.isnan(nothing["eta_pooled"]) and math.isnan(nothing["eta_relation_mean"]) and nothing["n_relations"] == 0
    with pytest.raises(ValueError, match="aligned"):
        subsumption_by_relation([1, 0], [1, 1], ["r"])


def test_subsumption_rate_edge_cases():
    assert math.isnan(subsumption_rate([0, 0, 0], [1, 1, 1]))  # model 1 knows nothing
    assert subsumption_rate([1, 1], [1, 1]) == 1.0
    with pytest.raises(ValueError):
        subsumption_rate([1, 0], [1])
    with pytest.raises(ValueError):
        subsumption_rate([1, 0.5], [1, 1])


# --- McNemar ----------------------------------------------------------------------------------


def test_mcnemar_exact_hand_case():
    # b01 = 1, b10 = 7, n = 8 discordant facts (< 25 -> exact):
    # P(X <= 1; 8, 1/2) = (C(8,0) + C(8,1)) / 2^8 = 9/256; two-sided p = 2 * 9/256 = 0.0703125
    a, b = _pairs(b01=1, b10=7, both_right=5, both_wrong=3)
    out = mcnemar(a, b)
    assert out["b01"] == 1 and out["b10"] == 7
    assert out["method"] == "exact"
    assert out["p_value"] == pytest.approx(0.0703125, abs=1e-12)
    assert out["statistic"] == 1.0


@pytest.mark.parametrize(
    "b01,b10,hand_p",
    [
        (0, 5, 2 * 1 / 32),  # 2 * P(X <= 0; 5) = 2/32 = 0.0625
        (3, 3, 1.0),  # balanced: 2 * P(X <= 3; 6) = 2 * 42/64 > 1 -> capped at 1
        (0, 0, 1.0),  # no discordant facts
        (2, 10, 2 * (1 + 12 + 66) / 4096),  # 2 * (C(12,0)+C(12,1)+C(12,2)) / 2^12 = 0.0385742
    ],
)
def test_mcnemar_exact_hand_table(b01, b10, hand_p):
    out = mcnemar(*_pairs(b01, b10, both_right=4))
    assert out["method"] == "exact"
    assert out["p_value"] == pytest.approx(hand_p, abs=1e-12)


@pytest.mark.parametrize("b01,b10", [(1, 7), (7, 1), (0, 5), (3, 3), (2, 10), (11, 13), (0, 24)])
def test_mcnemar_exact_matches_scipy_binomtest(scipy_stats, b01, b10):
    out = mcnemar(*_pairs(b01, b10, both_right=4))
    assert out["method"] == "exact"
    assert out["p_value"] == pytest.approx(scipy_stats.binomtest(b01, b01 + b10, 0.5).pvalue, abs=1e-12)


@pytest.mark.parametrize("b01,b10", [(10, 25), (30, 45), (0, 40), (100, 60)])
def test_mcnemar_chi2_matches_scipy(scipy_stats, b01, b10):
    out = mcnemar(*_pairs(b01, b10))
    stat = (abs(b01 - b10) - 1) ** 2 / (b01 + b10)
    assert out["p_value"] == pytest.approx(scipy_stats.chi2.sf(stat, df=1), rel=1e-9)


def test_mcnemar_chi_square_with_continuity_correction():
    # b01 = 10, b10 = 25, n = 35 >= 25 -> chi2 with continuity correction:
    # stat = (|10 - 25| - 1)^2 / 35 = 196 / 35 = 5.6;  p = P(chi2_1 > 5.6) = erfc(sqrt(2.8)) = 0.017960
    out = mcnemar(*_pairs(10, 25, both_right=50, both_wrong=15))
    assert out["method"] == "chi2_cc"
    assert out["statistic"] == pytest.approx(5.6)
    assert out["p_value"] == pytest.approx(0.0179604, abs=1e-6)


def test_mcnemar_switches_method_at_25_discordant():
    assert mcnemar(*_pairs(10, 14))["method"] == "exact"  # 24
    assert mcnemar(*_pairs(10, 15))["method"] == "chi2_cc"  # 25
    assert mcnemar(*_pairs(15, 15))["p_value"] == 1.0  # (|0| - 1) clipped to 0 -> stat 0 -> p 1


# --- Pearson per relation ---------------------------------------------------------------------


def test_pearson_per_relation_hand_case():
    # shared relations P1, P2, P3 (P4 only in a, ignored)
    # x = [.2, .5, .8] -> centred [-.3, 0, .3];  y = [.3, .4, .9] -> mean .5333, centred [-.2333, -.1333, .3667]
    # sum xy = .07 + 0 + .11 = .18;  sum x^2 = .18;  sum y^2 = .206667
    # r = .18 / sqrt(.18 * .206667) = sqrt(.18 / .206667) = 0.933257
    acc_a = {"P1": 0.2, "P2": 0.5, "P3": 0.8, "P4": 0.1}
    acc_b = {"P3": 0.9, "P1": 0.3, "P2": 0.4}
    r = pearson_per_relation(acc_a, acc_b)
    assert r == pytest.approx(0.933257, abs=1e-6)
    assert r == pytest.approx(np.corrcoef([0.2, 0.5, 0.8], [0.3, 0.4, 0.9])[0, 1])


def test_pearson_per_relation_degenerate():
    assert math.isnan(pearson_per_relation({"P1": 0.5}, {"P1": 0.7}))  # one shared relation
    assert math.isnan(pearson_per_relation({"P1": 0.5, "P2": 0.5}, {"P1": 0.1, "P2": 0.9}))  # constant


# --- compare_runs -----------------------------------------------------------------------------


def _runs() -> tuple[pd.DataFrame, pd.DataFrame]:
    # fact  relation  a  b
    # f1    P1        1  1
    # f2    P1        1  0
    # f3    P1        0  1
    # f4    P2        1  1
    # f5    P2        0  1
    # f6    P2        1  -   (only in a)
    # f7,f8 P1        -  1,0 (only in b)
    a = pd.DataFrame(
        {
            "fact_id": ["f1", "f2", "f3", "f4", "f5", "f6"],
            "relation": ["P1"] * 3 + ["P2"] * 3,
            "correct": [True, True, False, True, False, True],
        }
    )
    b = pd.DataFrame(
        {
            "fact_id": ["f5", "f4", "f3", "f2", "f1", "f7", "f8"],
            "relation": ["P2", "P2", "P1", "P1", "P1", "P1", "P1"],
            "correct": [1, 1, 1, 0, 1, 1, 0],
        }
    )
    return a, b


def test_compare_runs_hand_case():
    a, b = _runs()
    out = compare_runs(a, b, n_boot=500, seed=0)
    # joined f1..f5: acc_a = 3/5 = 0.6, acc_b = 4/5 = 0.8, diff = b - a = 0.2
    assert out["acc_a"] == pytest.approx(0.6)
    assert out["acc_b"] == pytest.approx(0.8)
    assert out["diff"] == pytest.approx(0.2)
    lo, hi = out["diff_ci"]
    assert lo <= 0.2 <= hi
    # discordant: a wrong & b right = f3, f5 -> b01 = 2; a right & b wrong = f2 -> b10 = 1
    # exact p = min(1, 2 * P(X <= 1; 3)) = min(1, 2 * 4/8) = 1
    assert out["mcnemar"] == {"b01": 2, "b10": 1, "statistic": 1.0, "p_value": 1.0, "method": "exact"}
    # phi_a = {f1, f2, f4}, phi_b = {f1, f3, f4, f5}, both = {f1, f4}
    # eta(a|b) = 2/3 (of what a knows, b knows 2 of 3); eta(b|a) = 2/4
    assert out["subsumption_a_given_b"] == pytest.approx(2 / 3)
    assert out["subsumption_b_given_a"] == pytest.approx(0.5)
    assert (out["n_joined"], out["n_only_a"], out["n_only_b"]) == (5, 1, 2)
    # P1: a = f1,f2,f3 -> 2/3; b -> 2/3; P2: a = f4,f5 -> 1/2; b -> 2/2
    # eta per relation: P1 a knows {f1, f2}, b knows {f1, f3} -> 1/2 both ways;
    # P2 a knows {f4}, b knows {f4, f5} -> eta(a|b) = 1, eta(b|a) = 1/2
    assert out["per_relation"]["P1"] == {
        "acc_a": pytest.approx(2 / 3),
        "acc_b": pytest.approx(2 / 3),
        "diff": pytest.approx(0.0),
        "n": 3,
        "eta_a_given_b": 0.5,
        "eta_b_given_a": 0.5,
    }
    assert out["per_relation"]["P2"] == {
        "acc_a": 0.5,
        "acc_b": 1.0,
        "diff": 0.5,
        "n": 2,
        "eta_a_given_b": 1.0,
        "eta_b_given_a": 0.5,
    }
    # pooled 2/3 vs the paper's average over relations (1/2 + 1) / 2 = 3/4
    assert out["eta_pooled_a_given_b"] == out["subsumption_a_given_b"] == pytest.approx(2 / 3)
    assert out["eta_relation_mean_a_given_b"] == pytest.approx(0.75)
    assert out["eta_pooled_b_given_a"] == out["eta_relation_mean_b_given_a"] == pytest.approx(0.5)
    # two relations, a goes down (2/3 -> 1/2) while b goes up (2/3 -> 1): r = -1
    assert out["pearson_per_relation"] == pytest.approx(-1.0)


def test_compare_runs_ignores_row_order_and_is_deterministic():
    a, b = _runs()
    first = compare_runs(a, b, n_boot=300, seed=1)
    second = compare_runs(a.iloc[::-1], b.sample(frac=1.0, random_state=0), n_boot=300, seed=1)
    assert first["diff"] == second["diff"] and first["mcnemar"] == second["mcnemar"]
    assert first == compare_runs(a, b, n_boot=300, seed=1)


def test_compare_runs_errors():
    a, b = _runs()
    with pytest.raises(ValueError, match="share no 'fact_id'"):
        compare_runs(a, b.assign(fact_id=["x1", "x2", "x3", "x4", "x5", "x6", "x7"]))
    with pytest.raises(ValueError, match="duplicate 'fact_id'"):
        compare_runs(pd.concat([a, a.iloc[:1]]), b)
    with pytest.raises(ValueError, match="lacks column"):
        compare_runs(a.drop(columns="relation"), b)
    with pytest.raises(ValueError, match="different relation"):
        compare_runs(a, b.assign(relation="P9"))
    with pytest.raises(DataError):  # DataError is a ValueError the CLI prints without a traceback
        compare_runs(a.iloc[:0], b)


# --- regression gate --------------------------------------------------------------------------


def _table(correct) -> pd.DataFrame:
    n = len(correct)
    return pd.DataFrame(
        {
            "fact_id": [f"f{i}" for i in range(n)],
            "relation": ["P1" if i % 2 else "P2" for i in range(n)],
            "correct": list(correct),
        }
    )


def _baseline_and_candidate(n: int, base_right: int, lost: int, gained: int = 0):
    """Baseline right on the first `base_right` facts; candidate loses `lost` of those and gains `gained` others."""
    base = np.zeros(n, dtype=bool)
    base[:base_right] = True
    cand = base.copy()
    cand[:lost] = False
    cand[base_right : base_right + gained] = True
    return _table(cand), _table(base)


def test_gate_fails_on_a_significant_material_drop():
    # 400 facts; baseline 320 right (0.80); candidate loses 40 -> 0.70, diff = -0.10 < -0.02.
    # McNemar: b01 = 0, b10 = 40 (>= 25 -> chi2): stat = (40 - 1)^2 / 40 = 38.025, p = erfc(sqrt(19.0125)) ~ 5e-10.
    cand, base = _baseline_and_candidate(400, 320, lost=40)
    gate = regression_gate(cand, base, n_boot=500)
    assert isinstance(gate, GateDecision)
    assert gate.passed is False
    assert gate.diff == pytest.approx(-0.10)
    assert gate.n == 400
    assert gate.p_value == pytest.approx(math.erfc(math.sqrt(38.025 / 2)))
    assert gate.diff_ci[1] < 0
    assert "significant drop" in gate.reason


def test_gate_passes_a_drop_within_tolerance():
    # candidate loses 4 of 400 -> diff = -0.01, smaller than max_drop = 0.02 (p = 2/16 = 0.125 anyway).
    cand, base = _baseline_and_candidate(400, 320, lost=4)
    gate = regression_gate(cand, base, n_boot=500)
    assert gate.passed is True
    assert gate.diff == pytest.approx(-0.01)
    assert "within the tolerated drop" in gate.reason


def test_gate_passes_a_large_but_insignificant_drop():
    # 20 facts; candidate loses 1 of 10 right -> diff = -0.05 (beyond tolerance), but b10 = 1, b01 = 0:
    # exact p = min(1, 2 * P(X <= 0; 1)) = min(1, 2 * 1/2) = 1 -> not significant -> PASS.
    cand, base = _baseline_and_candidate(20, 10, lost=1)
    gate = regression_gate(cand, base, n_boot=500)
    assert gate.passed is True
    assert gate.diff == pytest.approx(-0.05)
    assert gate.p_value == 1.0
    assert "not significant" in gate.reason


def test_gate_uses_the_pairing_not_just_the_accuracies():
    # 500 facts; 45 facts lost, 30 gained: diff = -15/500 = -0.03 (beyond tolerance), but the flips go
    # both ways: chi2 = (|30 - 45| - 1)^2 / 75 = 196 / 75 = 2.6133, p = erfc(sqrt(1.30667)) = 0.1060 > 0.05
    # -> PASS, although the two accuracies alone (0.60 vs 0.57) look like a 3-point regression.
    cand, base = _baseline_and_candidate(500, 300, lost=45, gained=30)
    gate = regression_gate(cand, base, n_boot=500)
    assert gate.diff == pytest.approx(-0.03)
    assert gate.p_value == pytest.approx(0.10600, abs=1e-4)
    assert gate.passed is True


def test_gate_passes_improvements_and_identical_runs():
    cand, base = _baseline_and_candidate(400, 320, lost=0, gained=40)
    gate = regression_gate(cand, base, n_boot=200)
    assert gate.passed is True and gate.diff == pytest.approx(0.10)
    same = regression_gate(base, base, n_boot=200)
    assert same.passed is True and same.diff == 0.0 and same.diff_ci == (0.0, 0.0) and same.p_value == 1.0


def test_gate_report_is_readable():
    cand, base = _baseline_and_candidate(400, 320, lost=40)
    text = regression_gate(cand, base, n_boot=200).report()
    lines = text.splitlines()
    assert lines[0] == "regression gate: FAIL"
    assert len(lines) >= 5
    assert "-0.1000" in text and "0.7000" in text and "0.8000" in text and "400" in text
    assert "McNemar" in text and "chi2_cc" in text
    assert "PASS" in regression_gate(base, base, n_boot=50).report()


def test_gate_rejects_bad_input():
    cand, base = _baseline_and_candidate(20, 10, lost=1)
    with pytest.raises(ValueError):
        regression_gate(cand.assign(fact_id="x" + cand["fact_id"]), base)
    with pytest.raises(ValueError):
        regression_gate(cand, base, max_drop=-0.1)
