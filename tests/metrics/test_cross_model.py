"""Cross-model maps (factprobe/metrics/cross_model.py) against hand-computed small cases."""

from __future__ import annotations

import math

import matplotlib.figure
import numpy as np
import pandas as pd
import pytest

from factprobe.errors import DataError
from factprobe.metrics.cross_model import (
    accuracy_matrix,
    eta_family_summary,
    eta_pairs,
    family_correlation,
    order_models,
    pearson_matrix,
    subsumption,
)
from factprobe.report.cross_model_plots import heatmap_figure, pearson_figure


def table(rows: list[tuple[str, str, bool]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["fact_id", "relation", "correct"])


# --- accuracy matrix --------------------------------------------------------------------------------


def test_accuracy_matrix_by_hand():
    tables = {
        "m1": table([("a", "P1", True), ("b", "P1", False), ("c", "P2", True)]),
        "m2": table([("a", "P1", 1), ("b", "P1", 1), ("d", "P3", 0)]),
    }
    m = accuracy_matrix(tables)
    assert list(m.index) == ["m1", "m2"] and list(m.columns) == ["P1", "P2", "P3"]
    # m1: P1 1/2, P2 1/1, no P3; m2: P1 2/2, no P2, P3 0/1
    assert m.loc["m1", "P1"] == 0.5 and m.loc["m1", "P2"] == 1.0 and math.isnan(m.loc["m1", "P3"])
    assert m.loc["m2", "P1"] == 1.0 and math.isnan(m.loc["m2", "P2"]) and m.loc["m2", "P3"] == 0.0


def test_accuracy_matrix_refuses_a_table_without_correct_naming_the_model():
    with pytest.raises(DataError, match="'m2'.*correct"):
        accuracy_matrix({"m1": table([("a", "P1", True)]), "m2": pd.DataFrame({"relation": ["P1"]})})
    with pytest.raises(DataError, match="'m1'"):
        accuracy_matrix({"m1": table([("a", "P1", "yes")])})


# --- ordering ---------------------------------------------------------------------------------------


def test_order_models_groups_families_and_sorts_by_size_unknown_last():
    models = ["g-7b", "l-13b", "x", "g-2b", "l-7b", "l-?", "g-?", "y"]
    families = {"g-7b": "gemma", "g-2b": "gemma", "g-?": "gemma", "l-13b": "llama", "l-7b": "llama", "l-?": "llama"}
    sizes = {"g-7b": 7e9, "g-2b": 2e9, "l-13b": 13e9, "l-7b": 7e9, "x": 1e9, "l-?": None, "g-?": float("nan")}
    # gemma appears first, then llama; sizes ascending; no size last in its family; no family at the end,
    # in input order (x before y although only x has a size)
    assert order_models(models, families, sizes) == ["g-2b", "g-7b", "g-?", "l-7b", "l-13b", "l-?", "x", "y"]


def test_order_models_is_stable_for_equal_sizes():
    fam = {"b": "f", "a": "f"}
    assert order_models(["b", "a"], fam, {"a": 1, "b": 1}) == ["b", "a"]


# --- Pearson ----------------------------------------------------------------------------------------


def test_pearson_matrix_by_hand():
    m = pd.DataFrame(
        {"P1": [0.2, 0.4, 0.5, 0.9], "P2": [0.4, 0.8, 0.5, np.nan], "P3": [0.6, 0.0, 0.5, 0.1]},
        index=["a", "b", "c", "d"],
    )
    p = pearson_matrix(m)
    # a = (.2,.4,.6), b = (.4,.8,0): means .4, .4; deviations a (-.2,0,.2), b (0,.4,-.4)
    # cov = 0 + 0 - .08 = -.08; |a| = sqrt(.08), |b| = sqrt(.32); r = -.08 / sqrt(.0256) = -.08/.16 = -0.5
    assert p.loc["a", "b"] == pytest.approx(-0.5) and p.loc["b", "a"] == pytest.approx(-0.5)
    assert p.loc["a", "a"] == pytest.approx(1.0)
    # c is constant (.5, .5, .5): r undefined, also on its own diagonal
    assert math.isnan(p.loc["a", "c"]) and math.isnan(p.loc["c", "c"])
    # d has P1 and P3 only: with a, (.2,.6) vs (.9,.1): two points, r = -1
    assert p.loc["a", "d"] == pytest.approx(-1.0)


def test_pearson_matrix_nan_with_fewer_than_two_shared_relations():
    m = pd.DataFrame({"P1": [0.2, np.nan], "P2": [0.4, 0.3], "P3": [np.nan, 0.1]}, index=["a", "b"])
    assert math.isnan(pearson_matrix(m).loc["a", "b"])  # only P2 is shared


def test_family_correlation_by_hand():
    models = ["f1", "f2", "f3", "g1", "g2", "u"]
    r = pd.DataFrame(np.eye(6), index=models, columns=models)

    def put(a, b, v):
        r.loc[a, b] = r.loc[b, a] = v

    put("f1", "f2", 0.9)
    put("f1", "f3", 0.7)
    put("f2", "f3", np.nan)
    put("g1", "g2", 0.5)
    put("f1", "g1", 0.1)
    put("f1", "g2", 0.2)
    put("f2", "g1", 0.3)
    put("f2", "g2", 0.4)
    put("f3", "g1", 0.0)
    put("f3", "g2", -0.4)
    put("u", "f1", 1.0)  # u has no family: left out
    fams = {"f1": "F", "f2": "F", "f3": "F", "g1": "G", "g2": "G"}
    out = family_correlation(r, fams)
    # within: F pairs .9, .7 (f2-f3 NaN, dropped), G pair .5 -> (.9 + .7 + .5) / 3 = .7; the diagonal never counts
    assert out["within"] == pytest.approx(0.7) and out["n_within"] == 3
    # across: .1 + .2 + .3 + .4 + 0 - .4 = .6 over 6 pairs = .1
    assert out["across"] == pytest.approx(0.1) and out["n_across"] == 6
    assert out["families"]["F"]["F"] == pytest.approx(0.8) and out["families"]["G"]["G"] == pytest.approx(0.5)
    assert out["families"]["F"]["G"] == pytest.approx(0.1) == out["families"]["G"]["F"]


def test_family_correlation_nan_without_pairs():
    r = pd.DataFrame([[1.0, 0.3], [0.3, 1.0]], index=["a", "b"], columns=["a", "b"])
    out = family_correlation(r, {"a": "A", "b": "B"})
    assert math.isnan(out["within"]) and out["n_within"] == 0
    assert out["across"] == pytest.approx(0.3) and out["n_across"] == 1
    assert math.isnan(out["families"]["A"]["A"])


# --- subsumption ------------------------------------------------------------------------------------

SMALL = table(
    [("a", "P1", True), ("b", "P1", True), ("c", "P1", False), ("d", "P2", True), ("e", "P2", False), ("s", "P2", True)]
)
LARGE = table([("a", "P1", True), ("b", "P1", False), ("c", "P1", True), ("d", "P2", True), ("e", "P2", True), ("x", "P2", True)])


def test_subsumption_by_hand():
    out = subsumption(SMALL, LARGE)
    # joined facts a..e ("s" only small, "x" only large). small knows a, b, d; large also knows a, d.
    # pooled eta = |{a, d}| / |{a, b, d}| = 2/3
    assert out["pooled"] == pytest.approx(2 / 3)
    # P1: small knows a, b; large a -> 1/2. P2: small knows d; large d -> 1/1. Table 1's mean: (.5 + 1) / 2
    assert out["per_relation"] == {"P1": pytest.approx(0.5), "P2": pytest.approx(1.0)}
    assert out["relation_mean"] == pytest.approx(0.75) and out["n_relations"] == 2
    assert (out["n_joined"], out["n_small_known"], out["n_large_known"], out["n_both_known"]) == (5, 3, 4, 2)
    assert out["acc_small"] == pytest.approx(3 / 5) and out["acc_large"] == pytest.approx(4 / 5)


def test_subsumption_nan_when_the_small_model_knows_nothing():
    nothing = SMALL.assign(correct=False)
    out = subsumption(nothing, LARGE)
    assert math.isnan(out["pooled"]) and math.isnan(out["relation_mean"]) and out["n_small_known"] == 0
    # a relation where small knows nothing is NaN and left out of the mean
    part = subsumption(SMALL.assign(correct=[True, False, False, False, False, True]), LARGE)
    assert part["per_relation"]["P1"] == 1.0 and math.isnan(part["per_relation"]["P2"])
    assert part["relation_mean"] == 1.0 and part["n_relations"] == 1


def test_subsumption_refuses_disjoint_runs():
    with pytest.raises(DataError, match="share no"):
        subsumption(SMALL, table([("z", "P1", True)]))


# --- eta pairs --------------------------------------------------------------------------------------


def test_eta_pairs_within_family_and_fine_tuned():
    mid = table([("a", "P1", False), ("b", "P1", True), ("c", "P1", True), ("d", "P2", True), ("e", "P2", True)])
    tables = {"big": LARGE, "small": SMALL, "mid": mid, "other": SMALL, "chat": mid}
    fams = {"big": "F", "small": "F", "mid": "F", "other": "G", "chat": "F"}
    sizes = {"big": 10, "small": 1, "mid": 5, "other": 1, "chat": None}
    pairs = eta_pairs(tables, fams, sizes, base_of={"chat": "mid"})
    # size pairs in Figure 5 order (small, mid, big); "other" is alone in G, "chat" has no size
    assert list(pairs) == ["small vs mid", "small vs big", "mid vs big", "chat vs mid"]
    assert pairs["small vs big"]["pooled"] == pytest.approx(2 / 3)  # = test_subsumption_by_hand
    # small knows a, b, d; mid knows b, c, d, e -> b, d: 2/3
    assert pairs["small vs mid"]["pooled"] == pytest.approx(2 / 3)
    # mid knows b, c, d, e; big knows a, c, d, e -> c, d, e: 3/4
    assert pairs["mid vs big"]["pooled"] == pytest.approx(3 / 4)
    assert pairs["mid vs big"]["kind"] == "size" and pairs["mid vs big"]["family"] == "F"
    assert pairs["chat vs mid"]["kind"] == "fine-tuned" and pairs["chat vs mid"]["pooled"] == 1.0
    summary = eta_family_summary(pairs)
    assert list(summary) == ["F"]  # the fine-tuned pair is not a size pair
    f = summary["F"]
    assert (f["small"], f["large"], f["n_pairs"]) == ("small", "big", 3)
    assert f["relation_mean"] == pytest.approx(0.75)
    # relation means: small|mid: P1 (b of a,b) 1/2, P2 (d) 1 -> .75; small|big .75; mid|big: P1 (c of b,c) 1/2,
    # P2 (d, e) 1 -> .75; mean .75
    assert f["mean_over_pairs"] == pytest.approx(0.75)


def test_eta_pairs_refuses_unknown_base_names():
    with pytest.raises(DataError, match="not in the runs: ghost"):
        eta_pairs({"a": SMALL}, {"a": "F"}, {"a": 1}, base_of={"a": "ghost"})


# --- figures ----------------------------------------------------------------------------------------


def test_figures_follow_the_order():
    m = pd.DataFrame({"P1": [0.2, 0.4, 0.9], "P2": [0.4, np.nan, 0.1], "P3": [0.6, 0.0, 0.5]}, index=["a", "b", "c"])
    fig = heatmap_figure(m, ["c", "a"])
    assert isinstance(fig, matplotlib.figure.Figure)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["c", "a", "b"]
    fig2 = pearson_figure(pearson_matrix(m), ["b", "c", "a"])
    assert [t.get_text() for t in fig2.axes[0].get_xticklabels()] == ["b", "c", "a"]
    with pytest.raises(ValueError, match="ghost"):
        heatmap_figure(m, ["ghost"])
