"""BELIEF metrics (factprobe.metrics.belief) against hand-computed examples."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from factprobe.errors import DataError
from factprobe.metrics import belief as bm
from factprobe.metrics.json_safe import json_safe


def table(rows, columns=("fact_id", "relation", "template_id", "correct")) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(columns))


# ------------------------------------------------------------------ Acc@K and MRR
def test_acc_at_k_and_mrr_by_hand() -> None:
    ranks = [1, 3, float("nan"), 10, 2]
    assert bm.acc_at_k(ranks, 1) == pytest.approx(1 / 5)
    assert bm.acc_at_k(ranks, 3) == pytest.approx(3 / 5)
    assert bm.acc_at_k(ranks, 10) == pytest.approx(4 / 5)
    assert bm.mrr(ranks) == pytest.approx((1 + 1 / 3 + 0 + 1 / 10 + 1 / 2) / 5)
    with pytest.raises(DataError, match="ranks start at 1"):
        bm.mrr([0, 1])


def test_metric_values_names() -> None:
    df = pd.DataFrame({"correct": [True, False], "rank": [1, 4]})
    assert bm.metric_values(df, "acc@1").tolist() == [1.0, 0.0]
    assert bm.metric_values(df, "acc@5").tolist() == [1.0, 1.0]
    assert bm.metric_values(df, "mrr").tolist() == [1.0, 0.25]
    with pytest.raises(DataError, match="unknown BELIEF metric 'acc@x'"):
        bm.metric_values(df, "acc@x")


# ------------------------------------------------------------------ draws and fluctuation
def two_relations() -> pd.DataFrame:
    """R1: template a right for both pairs, b wrong for both; R2: one template, one pair of two right.
    Per relation draws: (2 + 1) / 4 = 0.75 with a, (0 + 1) / 4 = 0.25 with b. A per-pair draw could
    give 0.5; the same-template-per-relation rule never does."""
    return table(
        [
            ("p1", "R1", "R1:a", True),
            ("p2", "R1", "R1:a", True),
            ("p1", "R1", "R1:b", False),
            ("p2", "R1", "R1:b", False),
            ("p3", "R2", "R2:c", True),
            ("p4", "R2", "R2:c", False),
        ]
    )


def test_draws_use_one_template_per_relation() -> None:
    v = bm.draw_values(two_relations(), "acc@1", n_draws=2000, seed=3)
    assert set(np.round(v, 12)) == {0.25, 0.75}
    f = bm.fluctuation(v)
    assert f["range"] == pytest.approx(0.5) and f["n_draws"] == 2000
    share = float(np.mean(v == 0.75))
    assert f["mean"] == pytest.approx(0.25 + 0.5 * share)
    assert f["stdev"] == pytest.approx(0.5 * math.sqrt(share * (1 - share)))  # two-point population stdev
    assert 0.4 < share < 0.6


def test_fluctuation_by_hand() -> None:
    f = bm.fluctuation([0.2, 0.4, 0.6])
    assert f["mean"] == pytest.approx(0.4) and f["range"] == pytest.approx(0.4)
    assert f["stdev"] == pytest.approx(math.sqrt(0.08 / 3))  # ddof = 0 (draft formula 4)
    assert (f["min"], f["max"]) == (pytest.approx(0.2), pytest.approx(0.6))


def test_draws_are_seeded_per_relation() -> None:
    df = two_relations()
    a = bm.draw_values(df, "acc@1", 500, seed=7)
    assert np.array_equal(a, bm.draw_values(df, "acc@1", 500, seed=7))
    assert not np.array_equal(a, bm.draw_values(df, "acc@1", 500, seed=8))
    # R1's template choices do not depend on which other relations are in the table
    alone = bm.draw_template_indices(bm.draw_cache(df[df.relation == "R1"], np.zeros(4)), 500, 7)[0]
    both = bm.draw_template_indices(bm.draw_cache(df, np.zeros(6)), 500, 7)[0]
    assert np.array_equal(alone, both)
    # nor on row order: templates are sorted by id
    shuffled = df.sample(frac=1.0, random_state=1)
    assert np.array_equal(a, bm.draw_values(shuffled, "acc@1", 500, seed=7))


def test_several_metrics_share_the_draws() -> None:
    df = two_relations().assign(rank=[1, 1, 5, 2, 1, 3])
    together = bm.belief_accuracies(df, ["acc@1", "acc@3", "mrr"], 300, seed=2)
    assert together == {m: bm.belief_accuracy(df, m, 300, seed=2) for m in ("acc@1", "acc@3", "mrr")}


def test_draws_with_a_missing_prediction_count_only_covered_pairs() -> None:
    df = table([("p1", "R1", "R1:a", True), ("p2", "R1", "R1:a", False), ("p1", "R1", "R1:b", True)])
    v = bm.draw_values(df, "acc@1", 200, seed=0)
    assert set(np.round(v, 12)) == {0.5, 1.0}  # a: 1/2; b: 1/1 (p2 has no row for b)


def test_mrr_draws() -> None:
    df = table(
        [("p1", "R", "R:a", True, 1), ("p2", "R", "R:a", False, 4)], ("fact_id", "relation", "template_id", "correct", "rank")
    )
    assert bm.belief_accuracy(df, "mrr", 10)["mean"] == pytest.approx((1 + 0.25) / 2)


# ------------------------------------------------------------------ consistency
def test_pair_consistency_by_hand() -> None:
    assert bm.pair_consistency(["a", "a", "b"]) == pytest.approx(1 / 3)
    assert bm.pair_consistency(["x", "x"]) == 1.0
    assert bm.pair_consistency([None, None, ""]) == 0.0  # empty predictions agree with nothing
    assert bm.pair_consistency(["a"]) is None
    contains = lambda a, b: a in b or b in a
    assert bm.pair_consistency(["guitar", "a guitar", "piano"], contains) == pytest.approx(1 / 3)


def test_consistency_with_singleton_template_sets() -> None:
    df = table(
        [
            ("p1", "R1", "R1:a", True, "a"),
            ("p1", "R1", "R1:b", True, "a"),
            ("p1", "R1", "R1:c", False, "b"),
            ("p2", "R1", "R1:a", True, "x"),
            ("p2", "R1", "R1:b", True, "x"),
            ("p3", "R2", "R2:a", True, "y"),
            ("p4", "R2", "R2:a", False, "z"),  # R2 has a single template
        ],
        ("fact_id", "relation", "template_id", "correct", "prediction"),
    )
    c = bm.consistency(df)
    assert c["consist"] == pytest.approx((1 / 3 + 1) / 2)
    assert c["per_relation"] == {"R1": pytest.approx(2 / 3), "R2": None}
    assert set(c["undefined"]) == {"R2"} and "single template" in c["undefined"]["R2"]
    assert c["n_pairs"] == 2 and c["n_single_template_pairs"] == 2
    slow = bm.consistency(df, match=lambda a, b: a == b)
    assert slow["per_relation"] == c["per_relation"]
    only = bm.consistency(df[df.relation == "R2"])
    assert only["consist"] is None and "undefined" in only["reason"]
    assert "NaN" not in str(json_safe(only))


# ------------------------------------------------------------------ overconfidence
CONF = [0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05]
OK = [1, 0, 1, 1, 0, 1, 0, 0, 1, 0, 0, 0]


def test_equal_size_bins_of_unequal_size() -> None:
    """12 prompts in 10 bins: the first two hold two prompts, the rest one (sorted by confidence)."""
    order = np.random.default_rng(0).permutation(12)
    bins = bm.calibration_bins(np.array(CONF)[order], np.array(OK)[order])
    assert bins["n"].tolist() == [2, 2, 1, 1, 1, 1, 1, 1, 1, 1]
    assert bins.loc[0, "confidence"] == pytest.approx(0.925) and bins.loc[0, "accuracy"] == 0.5
    assert bins.loc[1, "confidence"] == pytest.approx(0.825) and bins.loc[1, "accuracy"] == 1.0
    assert bins["accuracy"].tolist()[2:] == [0, 1, 0, 0, 1, 0, 0, 0]
    # sum_i n_i / 12 * (conf_i - acc_i), added up by hand
    hand = (2 * 0.425 + 2 * -0.175 + 0.7 - 0.4 + 0.5 + 0.4 - 0.7 + 0.2 + 0.1 + 0.05) / 12
    assert hand == pytest.approx(0.1125)
    assert bm.overconfidence(np.array(CONF)[order], np.array(OK)[order]) == pytest.approx(hand)


def test_fewer_prompts_than_bins() -> None:
    bins = bm.calibration_bins([0.9, 0.1, 0.5], [1, 0, 0])
    assert bins["n"].tolist() == [1, 1, 1] and bins["confidence"].tolist() == [0.9, 0.5, 0.1]
    assert bm.overconfidence([0.9, 0.1, 0.5], [1, 0, 0]) == pytest.approx((-0.1 + 0.5 + 0.1) / 3)


def test_overconf_at_10_uses_top10_mass_and_rank() -> None:
    df = pd.DataFrame({"correct": [False, False], "rank": [3, 20], "confidence": [0.2, 0.1], "confidence@10": [0.8, 0.6]})
    oc = bm.overconf_at_k(df, 10)
    assert oc["overconf"] == pytest.approx(((0.8 - 1) + (0.6 - 0)) / 2)
    assert [b["n"] for b in oc["bins"]] == [1, 1]
    with pytest.raises(DataError, match="confidence@5"):
        bm.overconf_at_k(df, 5)


# ------------------------------------------------------------------ coverage, tables, sharing
def coverage_table() -> pd.DataFrame:
    rows = [("p1", "R1", "R1:a", True), ("p2", "R1", "R1:a", False), ("p1", "R1", "R1:b", False), ("p2", "R1", "R1:b", False)]
    for f, c, d in [("p3", True, False), ("p4", True, False), ("p5", False, True), ("p6", False, False)]:
        rows += [(f, "R2", "R2:c", c), (f, "R2", "R2:d", d)]
    return table(rows)


def test_coverage_by_hand() -> None:
    cov = bm.coverage(coverage_table())
    # R1: template accs .5 and 0, oracle 1/2; R2: .5 and .25, oracle 3/4; weights 2 and 4 pairs
    assert cov["per_relation"]["R1"] == {
        "n_pairs": 2,
        "n_templates": 2,
        "average": 0.25,
        "maximum": 0.5,
        "oracle": 0.5,
        "best_template": "R1:a",
    }
    assert cov["per_relation"]["R2"]["average"] == pytest.approx(0.375)
    assert cov["per_relation"]["R2"]["oracle"] == pytest.approx(0.75)
    assert cov["average"] == pytest.approx((2 * 0.25 + 4 * 0.375) / 6)
    assert cov["maximum"] == pytest.approx(0.5)
    assert cov["oracle"] == pytest.approx((2 * 0.5 + 4 * 0.75) / 6)


def test_template_table() -> None:
    t = bm.template_table(coverage_table()).set_index("template_id")
    assert t.loc["R2:c", "n"] == 4 and t.loc["R2:c", "acc@1"] == 0.5 and t.loc["R2:d", "acc@1"] == 0.25


def test_knowledge_sharing_rate_by_hand() -> None:
    units = [(f, t) for f in ("f1", "f2", "f3") for t in ("t1", "t2")]
    cov_a = {("f1", "t1"), ("f2", "t1"), ("f3", "t2")}
    cov_b = {("f1", "t1"), ("f3", "t1")}
    a = table([(f, "R", t, (f, t) in cov_a) for f, t in units])
    b = table([(f, "R", t, (f, t) in cov_b) for f, t in units])
    assert bm.knowledge_sharing_rate(a, b) == pytest.approx(1 / 3)
    assert bm.knowledge_sharing_rate(b, a) == pytest.approx(1 / 2)
    assert bm.knowledge_sharing_rate(a, b, unit="fact") == pytest.approx(2 / 3)
    assert bm.knowledge_sharing_rate(b, a, unit="fact") == 1.0
    m = bm.sharing_matrix({"A": a, "B": b})
    assert m.loc["A", "B"] == pytest.approx(1 / 3) and m.loc["B", "A"] == pytest.approx(0.5)
    assert m.loc["A", "A"] == 1.0 and m.loc["B", "B"] == 1.0
    nothing = a.assign(correct=False)
    assert bm.knowledge_sharing_rate(nothing, b) is None
    with pytest.raises(DataError, match="share no"):
        bm.knowledge_sharing_rate(a, b.assign(template_id="other"))


# ------------------------------------------------------------------ prompt bias
def test_bias_level_by_hand() -> None:
    assert bm.bias_level([1, 0, 0, 0]) == pytest.approx(1.0)
    assert bm.bias_level([0.25] * 4) == pytest.approx(0.0)
    assert bm.bias_level([0.5, 0.5, 0, 0]) == pytest.approx(1 - math.log(2) / math.log(4))
    assert bm.bias_level([2, 2]) == pytest.approx(0.0)  # renormalised
    assert bm.bias_level([1.0]) is None


def test_prompt_bias_single_vs_multi() -> None:
    dist = pd.DataFrame(
        [
            ("R", "t1", "N/A", "A", 1.0),
            ("R", "t1", "N/A", "B", 0.0),
            ("R", "t1", "?", "A", 1.0),
            ("R", "t1", "?", "B", 0.0),
            ("R", "t2", "N/A", "A", 0.0),
            ("R", "t2", "N/A", "B", 1.0),
            ("R", "t2", "?", "A", 0.0),
            ("R", "t2", "?", "B", 1.0),
            ("S", "u1", "N/A", "A", 1.0),
            ("S", "u1", "N/A", "B", 0.0),
            ("S", "u1", "?", "A", 0.0),
            ("S", "u1", "?", "B", 1.0),  # the subjects disagree: averaged to uniform
        ],
        columns=["relation", "template_id", "content_free", "candidate", "prob"],
    )
    b = bm.prompt_bias(dist)
    assert b["per_relation"]["R"]["single"] == pytest.approx(1.0)  # each template is certain
    assert b["per_relation"]["R"]["multi"] == pytest.approx(0.0)  # their average is uniform
    assert b["per_relation"]["S"]["single"] == pytest.approx(0.0)
    assert b["bias_single"] == pytest.approx(0.5) and b["bias_multi"] == pytest.approx(0.0)


# ------------------------------------------------------------------ the table contract and the summary
def test_check_predictions_errors() -> None:
    with pytest.raises(DataError, match="lacks column"):
        bm.check_predictions(pd.DataFrame({"fact_id": ["a"]}))
    dup = table([("p", "R", "t", True), ("p", "R", "t", False)])
    with pytest.raises(DataError, match="repeats fact 'p' with template 't'"):
        bm.check_predictions(dup)
    bad = table([("p", "R", "t", "yes")])
    with pytest.raises(DataError, match="true/false"):
        bm.check_predictions(bad)
    conf = table([("p", "R", "t", True, 1.5)], ("fact_id", "relation", "template_id", "correct", "confidence"))
    with pytest.raises(DataError, match="'confidence' must be numbers in"):
        bm.check_predictions(conf)


def test_summarize_belief() -> None:
    df = coverage_table().assign(prediction=lambda d: np.where(d.correct, "x", "y"), confidence=0.5)
    df = pd.concat([df, table([("q1", "R3", "R3:a", True)]).assign(prediction="x", confidence=0.9)])
    m = bm.summarize_belief(df, n_draws=100, seed=1)
    assert set(m) >= {
        "acc@1",
        "acc@1_range",
        "acc@1_stdev",
        "consist",
        "overconf@1",
        "coverage_avg",
        "coverage_max",
        "coverage_oracle",
        "per_relation",
        "n_draws",
        "draw_seed",
        "calibration",
    }
    assert 0 <= m["acc@1"] <= 1 and m["acc@1_range"] >= 0 and m["n_draws"] == 100
    assert "R3" in m["consist_undefined"] and m["per_relation"]["R3"]["consist"] is None
    assert m["per_relation"]["R1"]["acc@1"] == pytest.approx(0.25)
    assert m["n_pairs"] == 7 and m["n_prompts"] == 13
    assert json_safe(m) == m  # nothing to replace: no NaN anywhere
    plain = bm.summarize_belief(df.drop(columns=["confidence"]), overconf={}, n_draws=10)
    assert "overconf@1" not in plain and plain["calibration"] == {}
