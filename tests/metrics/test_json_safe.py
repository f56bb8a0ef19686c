"""json_safe: strict JSON (no NaN / inf) with a reason next to every undefined value."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from factprobe.metrics import compare_runs, json_safe, summarize, template_summary
from factprobe.metrics.json_safe import DEFAULT_REASON, INFINITE_REASON, NO_ITEMS_REASON


def _strict(obj) -> str:
    return json.dumps(obj, allow_nan=False)


def test_nested_nan_and_inf_become_null_with_reasons():
    raw = {
        "accuracy": float("nan"),
        "n": 0,
        "ci": (np.float64("nan"), 0.5),
        "ratio": float("inf"),
        "per_relation": {"P1": {"accuracy": np.float32("nan"), "n": np.int64(3)}},
        "rows": [{"x": float("-inf")}, 1.0, [float("nan")]],
        "ok": np.float64(0.25),
        "count": np.int64(7),
        "flag": np.bool_(True),
        "arr": np.array([1.0, np.nan]),
    }
    with pytest.raises(ValueError):
        _strict(raw)
    safe = json_safe(raw)
    _strict(safe)
    assert safe["accuracy"] is None and safe["accuracy_reason"] == NO_ITEMS_REASON  # n == 0 in this dict
    assert safe["ci"] == [None, 0.5] and safe["ci_reason"] == NO_ITEMS_REASON
    assert safe["ratio"] is None and safe["ratio_reason"] == NO_ITEMS_REASON
    p1 = safe["per_relation"]["P1"]
    assert p1 == {"accuracy": None, "accuracy_reason": DEFAULT_REASON, "n": 3}  # n = 3: not "no items"
    assert safe["rows"][0] == {"x": None, "x_reason": INFINITE_REASON}
    assert safe["rows"][2] == [None] and safe["rows_reason"] == NO_ITEMS_REASON
    assert (safe["ok"], safe["count"], safe["flag"], safe["arr"]) == (0.25, 7, True, [1.0, None])
    assert type(safe["count"]) is int and type(safe["flag"]) is bool
    assert math.isnan(raw["accuracy"])  # the input is not modified


def test_default_reason_and_existing_reason_kept():
    safe = json_safe(
        {"r": float("nan"), "s": float("nan"), "s_reason": "fewer than two relations"},
        default_reason="undefined: model a knows no fact",
    )
    assert safe == {"r": None, "r_reason": "undefined: model a knows no fact", "s": None, "s_reason": "fewer than two relations"}
    assert json_safe([float("nan"), 1]) == [None, 1]
    assert json_safe(float("inf")) is None and json_safe("text") == "text"


def test_summarize_on_no_items_serialises_strictly():
    empty = pd.DataFrame({"relation": [], "correct": [], "gold_prob": [], "confidence": []})
    out = summarize(empty, n_boot=20)
    assert math.isnan(out["accuracy"]) and math.isnan(out["macro_accuracy_ci"][0])
    safe = json_safe(out)
    _strict(safe)
    assert safe["accuracy"] is None and safe["accuracy_reason"] == NO_ITEMS_REASON
    assert safe["accuracy_ci"] == [None, None]
    assert safe["accuracy_at_k"]["0.5"] == {
        "accuracy": None,
        "accuracy_reason": NO_ITEMS_REASON,
        "n": 0,
        "coverage": None,
        "coverage_reason": NO_ITEMS_REASON,
    }


def test_summarize_thresholds_without_items_on_a_normal_run():
    # a weak model: no item reaches confidence 0.5, so Accuracy@0.5 and above are NaN in a normal run
    df = pd.DataFrame(
        {
            "relation": ["P1", "P1", "P2"],
            "correct": [True, False, True],
            "gold_prob": [0.3, 0.1, 0.2],
            "confidence": [0.3, 0.4, 0.2],
        }
    )
    safe = json_safe(summarize(df, n_boot=20))
    _strict(safe)
    assert safe["accuracy_at_k"]["0.3"] == {"accuracy": 0.5, "n": 2, "coverage": pytest.approx(2 / 3)}
    assert safe["accuracy_at_k"]["0.5"]["accuracy"] is None
    assert "accuracy_reason" not in safe and "accuracy_reason" not in safe["per_relation"]["P1"]


def test_compare_runs_and_template_summary_degenerate_serialise_strictly():
    a = pd.DataFrame({"fact_id": ["f1", "f2"], "relation": ["P1", "P1"], "correct": [False, False]})
    b = pd.DataFrame({"fact_id": ["f1", "f2"], "relation": ["P1", "P1"], "correct": [True, False]})
    out = compare_runs(a, b, n_boot=20)
    assert math.isnan(out["subsumption_a_given_b"]) and math.isnan(out["pearson_per_relation"])
    safe = json_safe(out)
    _strict(safe)
    assert safe["eta_relation_mean_a_given_b"] is None and safe["eta_relation_mean_a_given_b_reason"] == DEFAULT_REASON
    assert safe["eta_pooled_b_given_a"] == 0.0
    empty = template_summary(pd.DataFrame({"relation": [], "template": [], "correct": []}))
    safe = json_safe(empty)
    _strict(safe)
    assert safe["mean"] is None and safe["mean_reason"] == NO_ITEMS_REASON
