"""IC-LKE multiple-choice metrics against hand computations from Wu et al. 2024.

Eq. 3: pred = argmax_y P(y | sigma); Eq. 4: accuracy = share of items with pred = gold.
Appendix C: option probabilities are normalised across the choices (softmax of log-probs).
Appendix D: Accuracy@K = accuracy over D_K = {items whose confidence >= K}.
"""

import json
import math

import numpy as np
import pandas as pd
import pytest

from factprobe.metrics import (
    DEFAULT_THRESHOLDS,
    accuracy,
    accuracy_at_k,
    confidence,
    gold_prob,
    is_correct,
    option_probs,
    predict,
    prob_mass,
    summarize,
    template_summary,
)


def test_option_probs_and_gold_prob_hand_case():
    # logprobs [-1, -2, -3]: S = e^-1 + e^-2 + e^-3 = 0.3678794 + 0.1353353 + 0.0497871 = 0.5530018
    # P = [0.3678794 / S, 0.1353353 / S, 0.0497871 / S] = [0.6652410, 0.2447285, 0.0900306]
    probs = option_probs([-1.0, -2.0, -3.0])
    assert probs == pytest.approx([0.6652409558, 0.2447284711, 0.0900305732], abs=1e-10)
    assert probs.sum() == pytest.approx(1.0)
    assert gold_prob([-1.0, -2.0, -3.0], 0) == pytest.approx(0.6652409558, abs=1e-10)
    assert gold_prob([-1.0, -2.0, -3.0], 2) == pytest.approx(0.0900305732, abs=1e-10)


def test_option_probs_is_stable_for_long_objects():
    # Softmax is shift invariant: [-1001, -1002, -1003] = [-1, -2, -3] - 1000, same probabilities.
    # A naive exp() would give 0/0 here.
    assert option_probs([-1001.0, -1002.0, -1003.0]) == pytest.approx(option_probs([-1.0, -2.0, -3.0]))
    # An option with probability 0 (log-prob -inf) is allowed; the rest still sum to 1.
    assert option_probs([0.0, -math.inf]) == pytest.approx([1.0, 0.0])


def test_predict_and_is_correct():
    # argmax of [-1, -2, -3] is option 0.
    assert predict([-1.0, -2.0, -3.0]) == 0
    assert predict([-3.0, -2.5, -2.0]) == 2
    assert is_correct([-1.0, -2.0, -3.0], 0) is True
    assert is_correct([-1.0, -2.0, -3.0], 1) is False


def test_tie_counts_as_wrong():
    # [-2, -1, -1]: options 1 and 2 tie for the maximum -> no prediction, wrong even for gold 1.
    assert predict([-2.0, -1.0, -1.0]) is None
    assert is_correct([-2.0, -1.0, -1.0], 1) is False
    assert is_correct([-2.0, -1.0, -1.0], 2) is False
    # Ties use exact float equality: -1 and the next float above -1 are different, so no tie.
    assert predict([-1.0, np.nextafter(-1.0, 0.0)]) == 1


def test_confidence_is_prob_of_predicted_option_even_on_a_tie():
    # [-1, -2, -3]: predicted option 0, confidence = 0.6652409558 (as above).
    assert confidence([-1.0, -2.0, -3.0]) == pytest.approx(0.6652409558, abs=1e-10)
    # Tie [-1, -1, -3]: confidence = e^-1 / (2 e^-1 + e^-3) = 1 / (2 + e^-2) = 1 / 2.1353353 = 0.4683105
    assert confidence([-1.0, -1.0, -3.0]) == pytest.approx(1.0 / (2.0 + math.exp(-2.0)))
    assert confidence([-1.0, -1.0, -3.0]) == pytest.approx(0.4683105, abs=1e-7)


@pytest.mark.parametrize(
    "bad",
    [[], [float("nan"), -1.0], [math.inf, -1.0], [-math.inf, -math.inf]],
)
def test_invalid_logprobs_raise(bad):
    with pytest.raises(ValueError):
        option_probs(bad)


def test_gold_index_out_of_range_raises():
    with pytest.raises(IndexError):
        gold_prob([-1.0, -2.0], 2)
    with pytest.raises(IndexError):
        is_correct([-1.0, -2.0], -1)


def test_accuracy_and_prob_mass():
    # 3 of 4 correct -> 0.75; mean of [0.2, 0.4, 0.9] = 1.5 / 3 = 0.5.
    assert accuracy([True, False, True, True]) == 0.75
    assert prob_mass([0.2, 0.4, 0.9]) == pytest.approx(0.5)
    assert math.isnan(accuracy([]))
    assert math.isnan(prob_mass([]))


def test_accuracy_at_k_hand_table():
    # item  confidence  correct
    #   1     0.95       yes
    #   2     0.80       no
    #   3     0.55       yes
    #   4     0.30       yes
    #   5     0.50       no    (a tie of two options: [-0.5, -0.5] -> confidence 0.5, wrong)
    tie = [-0.5, -0.5]
    assert confidence(tie) == 0.5 and is_correct(tie, 0) is False
    conf = [0.95, 0.80, 0.55, 0.30, confidence(tie)]
    corr = [True, False, True, True, is_correct(tie, 0)]
    got = accuracy_at_k(conf, corr, thresholds=[0.1, 0.5, 0.55, 0.9, 0.96])
    # K=0.1:  all 5 kept, correct 1,3,4            -> 3/5
    # K=0.5:  items 1,2,3,5 (0.5 >= 0.5 kept)      -> 2/4
    # K=0.55: items 1,2,3 (boundary kept)          -> 2/3
    # K=0.9:  item 1                               -> 1/1
    # K=0.96: none                                 -> NaN, n=0
    assert got[0.1] == (pytest.approx(0.6), 5)
    assert got[0.5] == (pytest.approx(0.5), 4)
    assert got[0.55] == (pytest.approx(2 / 3), 3)
    assert got[0.9] == (1.0, 1)
    acc, n = got[0.96]
    assert math.isnan(acc) and n == 0


def test_accuracy_at_k_length_mismatch():
    with pytest.raises(ValueError):
        accuracy_at_k([0.5, 0.6], [True])


def _two_relation_table() -> pd.DataFrame:
    # Relation A: 4 facts, 3 correct; relation B: 2 facts, 0 correct.
    return pd.DataFrame(
        {
            "relation": ["A", "A", "A", "A", "B", "B"],
            "correct": [True, True, True, False, False, False],
            "gold_prob": [0.9, 0.6, 0.7, 0.2, 0.1, 0.3],
            "confidence": [0.9, 0.6, 0.7, 0.5, 0.4, 0.8],
        }
    )


def test_summarize_micro_vs_macro():
    out = summarize(_two_relation_table(), n_boot=500, seed=0)
    # micro: 3 correct of 6 facts = 0.5
    # macro: mean(acc_A, acc_B) = mean(3/4, 0/2) = 0.375 (the small relation B counts as much as A)
    assert out["accuracy"] == pytest.approx(0.5)
    assert out["macro_accuracy"] == pytest.approx(0.375)
    # prob mass: (0.9 + 0.6 + 0.7 + 0.2 + 0.1 + 0.3) / 6 = 2.8 / 6
    assert out["prob_mass"] == pytest.approx(2.8 / 6)
    assert out["n"] == 6
    assert out["per_relation"]["A"]["accuracy"] == pytest.approx(0.75)
    assert out["per_relation"]["A"]["prob_mass"] == pytest.approx(2.4 / 4)
    assert out["per_relation"]["A"]["n"] == 4
    assert out["per_relation"]["B"] == {"accuracy": 0.0, "accuracy_ci": [0.0, 0.0], "prob_mass": pytest.approx(0.2), "n": 2}
    lo, hi = out["accuracy_ci"]
    assert lo <= 0.5 <= hi
    # Macro replicates: B always 0, A's resampled accuracy in {0, .25, .5, .75, 1} -> macro in [0, 0.5].
    lo, hi = out["macro_accuracy_ci"]
    assert 0.0 <= lo <= 0.375 <= hi <= 0.5
    lo, hi = out["prob_mass_ci"]
    assert lo <= 2.8 / 6 <= hi


def test_summarize_accuracy_at_k_keys_and_values():
    out = summarize(_two_relation_table(), n_boot=200)
    assert list(out["accuracy_at_k"]) == [str(k) for k in DEFAULT_THRESHOLDS]
    assert list(out["accuracy_at_k"])[:3] == ["0.1", "0.2", "0.3"]
    # confidence >= 0.7: facts 1 (0.9, correct), 3 (0.7, correct), 6 (0.8, wrong) -> 2/3
    # coverage 3 of 6 facts
    assert out["accuracy_at_k"]["0.7"] == {"accuracy": pytest.approx(2 / 3), "n": 3, "coverage": 0.5}
    # confidence >= 0.5: facts 1,2,3,4,6 -> correct 1,2,3 -> 3/5; coverage 5/6
    assert out["accuracy_at_k"]["0.5"] == {"accuracy": pytest.approx(0.6), "n": 5, "coverage": pytest.approx(5 / 6)}


def test_summarize_is_deterministic_and_json_ready():
    a = summarize(_two_relation_table(), n_boot=300, seed=7)
    b = summarize(_two_relation_table().sample(frac=1.0, random_state=1).reset_index(drop=True), n_boot=300, seed=7)
    assert json.dumps(a) == json.dumps(summarize(_two_relation_table(), n_boot=300, seed=7))
    assert a["accuracy"] == b["accuracy"] and a["macro_accuracy"] == b["macro_accuracy"]
    json.dumps(a)  # plain Python numbers only


def test_summarize_accepts_zero_one_correct_and_rejects_bad_tables():
    df = _two_relation_table()
    df["correct"] = df["correct"].astype(int)
    assert summarize(df, n_boot=50)["accuracy"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="confidence"):
        summarize(df.drop(columns="confidence"))
    df.loc[0, "correct"] = 2
    with pytest.raises(ValueError, match="correct"):
        summarize(df)


def test_summarize_empty_table():
    empty = pd.DataFrame({"relation": [], "correct": pd.Series([], dtype=bool), "gold_prob": [], "confidence": []})
    out = summarize(empty, n_boot=10)
    assert out["n"] == 0 and out["per_relation"] == {}
    assert math.isnan(out["accuracy"]) and math.isnan(out["macro_accuracy"])
    assert all(math.isnan(v) for v in out["accuracy_ci"])


def test_template_summary_hand_case():
    # P36: t1 2/4 right, t2 1/4, t3 3/4 -> mean 0.5, population stdev sqrt(((0)^2 + .25^2 + .25^2) / 3)
    # P37: t1 1/2, t2 1/2 -> mean 0.5, stdev 0
    rows = []
    for template, hits in (("t1", [1, 1, 0, 0]), ("t2", [1, 0, 0, 0]), ("t3", [1, 1, 1, 0])):
        rows += [("P36", template, bool(h)) for h in hits]
    rows += [("P37", "t1", True), ("P37", "t1", False), ("P37", "u2", 1), ("P37", "u2", 0)]
    df = pd.DataFrame(rows, columns=["relation", "template", "correct"]).sample(frac=1.0, random_state=0)
    out = template_summary(df)
    assert out["per_template"]["P36"] == {
        "t1": {"accuracy": 0.5, "n": 4},
        "t2": {"accuracy": 0.25, "n": 4},
        "t3": {"accuracy": 0.75, "n": 4},
    }
    assert out["per_relation"]["P36"]["mean"] == pytest.approx(0.5)
    assert out["per_relation"]["P36"]["stdev"] == pytest.approx(math.sqrt(0.125 / 3))
    assert out["per_relation"]["P37"] == {"mean": 0.5, "stdev": 0.0, "n_templates": 2}
    # overall: five template accuracies 0.5, 0.25, 0.75, 0.5, 0.5 -> mean 0.5, stdev sqrt(0.125 / 5)
    assert out["n_templates"] == 5
    assert out["mean"] == pytest.approx(0.5)
    assert out["stdev"] == pytest.approx(math.sqrt(0.125 / 5))
    sample = template_summary(df, ddof=1)
    assert sample["stdev"] == pytest.approx(math.sqrt(0.125 / 4))
    json.dumps(out, allow_nan=False)


def test_template_summary_edge_cases():
    one = template_summary(pd.DataFrame({"relation": ["P1"], "template": ["t"], "correct": [True]}), ddof=1)
    assert one["per_relation"]["P1"]["mean"] == 1.0 and math.isnan(one["per_relation"]["P1"]["stdev"])
    empty = template_summary(pd.DataFrame({"relation": [], "template": [], "correct": []}))
    assert empty["n_templates"] == 0 and math.isnan(empty["mean"]) and math.isnan(empty["stdev"])
    with pytest.raises(ValueError, match="lacks column"):
        template_summary(pd.DataFrame({"relation": ["P1"], "correct": [True]}))
    with pytest.raises(ValueError, match="must be bool"):
        template_summary(pd.DataFrame({"relation": ["P1"], "template": ["t"], "correct": [0.5]}))
