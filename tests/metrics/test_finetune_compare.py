"""The before/after fine-tuning table (factprobe.metrics.finetune_compare) against hand computations."""

import math

import pandas as pd
import pytest

from factprobe.errors import DataError
from factprobe.metrics.finetune_compare import (
    VariantResults,
    comparison_table,
    flat_metrics,
    markdown_table,
    mc_per_fact,
    qa_per_fact,
)


def _qa(ids, em, f1, contains, relation="P36"):
    return pd.DataFrame({"fact_id": ids, "relation": relation, "em": em, "f1": f1, "contains": contains})


def _mc(ids, correct, relation="P36"):
    return pd.DataFrame({"fact_id": ids, "relation": relation, "correct": correct})


IDS = ["f1", "f2", "f3", "f4"]
BASE = VariantResults(_qa(IDS, [1, 0, 0, 1], [1.0, 0.5, 0.0, 1.0], [1, 1, 0, 1]), _mc(IDS, [True, False, False, False]))


def test_rows_match_the_per_fact_results_by_hand():
    # known: facts in another order, and one fact (f9) the base never answered (left out of the pairing)
    known = VariantResults(
        _qa(["f4", "f3", "f2", "f1", "f9"], [1, 0, 1, 1, 0], [1.0, 0.5, 1.0, 1.0, 0.0], [1, 1, 1, 1, 0]),
        _mc(["f2", "f1", "f3", "f4"], [True, True, True, True]),
    )
    # unknown: every F1 a quarter below the base's; EM and Contains unchanged
    unknown = VariantResults(_qa(IDS, [1, 0, 0, 1], [0.75, 0.25, -0.25, 0.75], [1, 1, 0, 1]), None)
    t = comparison_table({"unknown": unknown, "base": BASE, "known": known}, n_boot=2000, seed=0)
    assert t["setting"].tolist() == ["base", "known", "unknown"]  # base first, then yuan2024's order
    base, k, u = (t.iloc[i] for i in range(3))
    # base: means over its four facts
    assert (base["em"], base["f1"], base["contains"], base["iclke_acc"]) == (0.5, 0.625, 0.75, 0.25)
    assert base["qa_n"] == 4 and base["mc_n"] == 4 and math.isnan(base["em_diff"])
    # known: its own means over all five answered facts ...
    assert (k["em"], k["f1"], k["contains"]) == pytest.approx((3 / 5, 3.5 / 5, 4 / 5))
    assert k["iclke_acc"] == 1.0
    # ... and differences on the four shared facts: EM 0,1,0,0 -> +0.25; F1 0,.5,.5,0 -> +0.25;
    # Contains 0,0,1,0 -> +0.25; IC-LKE 0,1,1,1 -> +0.75
    assert k["qa_n_shared"] == 4 and k["mc_n_shared"] == 4
    assert (k["em_diff"], k["f1_diff"], k["contains_diff"], k["iclke_acc_diff"]) == pytest.approx((0.25, 0.25, 0.25, 0.75))
    # paired bootstrap of EM differences (0,1,0,0): a resample of 4 has mean 0 with P = .75^4 = .32
    # (> 2.5%), mean >= .75 with P = .051 (> 2.5%) and mean 1 with P = .004 (< 2.5%)
    assert (k["em_ci_low"], k["em_ci_high"]) == (0.0, 0.75)
    # McNemar on EM: one discordant fact (base wrong, known right): exact p = 1
    assert k["em_p"] == 1.0
    # unknown: a constant difference has a zero-width interval
    assert (u["f1_diff"], u["f1_ci_low"], u["f1_ci_high"]) == pytest.approx((-0.25, -0.25, -0.25))
    assert (u["em_diff"], u["em_ci_low"], u["em_ci_high"]) == (0.0, 0.0, 0.0)
    assert math.isnan(u["iclke_acc"]) and math.isnan(u["iclke_acc_diff"]) and u["mc_n"] == 0


def test_mcnemar_p_on_em_by_hand():
    ids = [f"f{i}" for i in range(8)]
    base = VariantResults(_qa(ids, [0] * 6 + [1, 1], [0.0] * 6 + [1.0, 1.0], [0] * 6 + [1, 1]))
    better = VariantResults(_qa(ids, [1] * 8, [1.0] * 8, [1] * 8))
    t = comparison_table({"base": base, "mixed": better})
    # six discordant facts, all one way: p = 2 * 0.5^6
    assert t.iloc[1]["em_p"] == pytest.approx(2 * 0.5**6)
    assert t.iloc[1]["em_diff"] == pytest.approx(6 / 8)


def test_refusals_name_the_setting():
    with pytest.raises(DataError, match="base"):
        comparison_table({"known": BASE})
    other = VariantResults(_qa(["x1", "x2"], [1, 0], [1.0, 0.0], [1, 0]))
    with pytest.raises(DataError, match="setting regular: QA results cannot be paired.*share no"):
        comparison_table({"base": BASE, "regular": other})
    moved = VariantResults(_qa(IDS, [1, 0, 0, 1], [1.0, 0.5, 0.0, 1.0], [1, 1, 0, 1], relation="P19"))
    with pytest.raises(DataError, match="different relation"):
        comparison_table({"base": BASE, "counterfactual": moved})


def test_qa_per_fact_keeps_the_zero_shot_eval_answers():
    rows = pd.DataFrame(
        {
            "fact_id": ["a", "a", "b", "c"],
            "relation": "P36",
            "split": ["eval", "eval", "eval", "train"],
            "shots_asked": [0, 10, 0, 0],
            "em": [1.0, 0.0, 0.0, 1.0],
            "f1": [1.0, 0.0, 0.5, 1.0],
            "contains": [1.0, 0.0, 1.0, 1.0],
        }
    )
    t = qa_per_fact(rows)
    assert t["fact_id"].tolist() == ["a", "b"] and t["correct"].tolist() == [True, False]
    with pytest.raises(DataError, match="no 5-shot answers"):
        qa_per_fact(rows, shots=5)
    with pytest.raises(DataError, match="lack column"):
        mc_per_fact(rows)


def test_markdown_and_flat_metrics_carry_the_table_numbers():
    known = VariantResults(_qa(IDS, [1, 1, 0, 1], [1.0, 1.0, 0.0, 1.0], [1, 1, 0, 1]), _mc(IDS, [True] * 4))
    t = comparison_table({"base": BASE, "known": known})
    md = markdown_table(t)
    assert "| base | 50.00 | 62.50 | 75.00 | 25.00 | 4 | 4 |" in md
    assert "| known | 75.00 (+25.00 [" in md
    flat = flat_metrics(t)
    assert flat["em/base"] == 0.5 and flat["em_diff/known"] == 0.25 and flat["iclke_acc/known"] == 1.0
    assert "em_diff/base" not in flat  # NaN is not logged
