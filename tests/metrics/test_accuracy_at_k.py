"""Accuracy@K and the coverage at K (wu2024 appendix D) for every multiple-choice run: the metric
against hand-computed cases, its MLflow names and the per-run figure."""

from __future__ import annotations

import math

import matplotlib.figure
import matplotlib.pyplot as plt
import pandas as pd
import pytest

from factprobe.metrics.json_safe import NO_ITEMS_REASON, json_safe
from factprobe.metrics.multiple_choice import accuracy_at_k, confidence, coverage_at_k, is_correct, summarize
from factprobe.report.cross_model_plots import accuracy_at_k_figure

# item  confidence  correct
#   1     0.95       yes
#   2     0.80       no
#   3     0.55       yes
#   4     0.30       yes
#   5     0.50       no    (a tie of two options [-0.5, -0.5]: confidence 0.5, counted wrong)
TIE = [-0.5, -0.5]
CONF = [0.95, 0.80, 0.55, 0.30, confidence(TIE)]
CORR = [True, False, True, True, is_correct(TIE, 0)]


def test_coverage_at_k_by_hand():
    got = coverage_at_k(CONF, thresholds=[0.0, 0.3, 0.5, 0.55, 0.9, 0.96])
    # K=0: every item (coverage 1 whatever the confidences); K=0.3: all 5 (0.30 >= 0.3) -> 5/5;
    # K=0.5: 1,2,3,5 (the tie's 0.5 is kept) -> 4/5; K=0.55: 1,2,3 -> 3/5; K=0.9: 1 -> 1/5; K=0.96: none -> 0
    assert got == {0.0: 1.0, 0.3: 1.0, 0.5: pytest.approx(0.8), 0.55: pytest.approx(0.6), 0.9: pytest.approx(0.2), 0.96: 0.0}


def test_coverage_is_the_share_accuracy_at_k_keeps():
    ks = [0.0, 0.5, 0.96]
    acc, cov = accuracy_at_k(CONF, CORR, ks), coverage_at_k(CONF, ks)
    assert all(cov[k] == acc[k][1] / len(CONF) for k in ks)
    # the tie lowers Accuracy@0.5: kept 1,2,3,5, right 1,3 -> 2/4 (3/4 if the tie did not count)
    assert acc[0.5][0] == pytest.approx(0.5)
    assert acc[0.0] == (pytest.approx(3 / 5), 5)


def test_coverage_without_items_is_nan():
    assert all(math.isnan(v) for v in coverage_at_k([], [0.0, 0.5]).values())


def _table() -> pd.DataFrame:
    return pd.DataFrame({"relation": ["A"] * 5, "correct": CORR, "gold_prob": [0.5] * 5, "confidence": CONF})


def test_summarize_puts_coverage_next_to_accuracy_at_k():
    out = summarize(_table(), n_boot=20, thresholds=[0.0, 0.5, 0.96])
    assert out["accuracy_at_k"]["0.0"] == {"accuracy": pytest.approx(0.6), "n": 5, "coverage": 1.0}
    assert out["accuracy_at_k"]["0.5"] == {"accuracy": pytest.approx(0.5), "n": 4, "coverage": pytest.approx(0.8)}
    empty_k = out["accuracy_at_k"]["0.96"]  # a K that keeps nothing: no accuracy, coverage 0
    assert math.isnan(empty_k["accuracy"]) and empty_k["n"] == 0 and empty_k["coverage"] == 0.0
    assert json_safe(out)["accuracy_at_k"]["0.96"] == {
        "accuracy": None,
        "accuracy_reason": NO_ITEMS_REASON,
        "n": 0,
        "coverage": 0.0,
    }


def test_summarize_on_no_items_has_no_coverage():
    empty = pd.DataFrame({"relation": [], "correct": [], "gold_prob": [], "confidence": []})
    safe = json_safe(summarize(empty, n_boot=20))
    entry = safe["accuracy_at_k"]["0.5"]
    assert entry["coverage"] is None and entry["coverage_reason"] == NO_ITEMS_REASON


@pytest.mark.parametrize("probe", ["ic-lke", "eic-lke", "hgp", "mmp"])
def test_every_multiple_choice_probe_logs_coverage_and_draws_accuracy_at_k(probe):
    from factprobe.framework.registry import get_probe

    metrics = json_safe(summarize(_table(), n_boot=20))
    p = get_probe(probe)
    flat = p.flat_metrics(metrics)
    assert flat["coverage_at_k/0.5"] == pytest.approx(0.8) and flat["accuracy_at_k/0.5"] == pytest.approx(0.5)
    assert flat["coverage_at_k/0.9"] == pytest.approx(0.2) and flat["accuracy_at_k/0.9"] == 1.0
    figures = p.run_figures(metrics, "/tmp/some-model")
    assert isinstance(figures["accuracy_at_k"], matplotlib.figure.Figure)
    plt.close("all")


def test_no_figure_for_a_run_without_items():
    from factprobe.framework.registry import get_probe

    empty = pd.DataFrame({"relation": [], "correct": [], "gold_prob": [], "confidence": []})
    assert "accuracy_at_k" not in get_probe("ic-lke").run_figures(json_safe(summarize(empty, n_boot=20)), "m")


def test_accuracy_at_k_figure_draws_both_curves_and_skips_undefined_points():
    metrics = json_safe(summarize(_table(), n_boot=20, thresholds=[0.0, 0.5, 0.96]))
    fig = accuracy_at_k_figure(metrics)
    acc_line, cov_line = fig.axes[0].get_lines()[:2]
    assert list(acc_line.get_xdata()) == [0.0, 0.5, 0.96]
    acc = list(acc_line.get_ydata())
    assert acc[:2] == [pytest.approx(0.6), pytest.approx(0.5)] and math.isnan(acc[2])  # K=0.96 keeps nothing
    assert list(cov_line.get_ydata()) == [1.0, pytest.approx(0.8), 0.0]
    plt.close(fig)
    with pytest.raises(ValueError, match="accuracy_at_k"):
        accuracy_at_k_figure({"accuracy": 0.5})
