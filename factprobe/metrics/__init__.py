"""Metrics: pure functions over per-item / per-fact result tables (numpy and pandas only).

- `multiple_choice`: IC-LKE prediction, accuracy, gold probability mass, Accuracy@K, `summarize`.
- `bootstrap`: percentile, stratified (macro) and paired bootstrap intervals.
- `comparison`: two runs joined fact by fact: subsumption rate (pooled and averaged over
  relations), McNemar, per-relation Pearson r, `compare_runs` and the `regression_gate`.
- `json_safe`: NaN / inf to `null` with a `<key>_reason`, for strict JSON.
"""
from .bootstrap import bootstrap_ci, paired_bootstrap_diff, stratified_bootstrap_ci
from .comparison import (
    GateDecision,
    compare_runs,
    join_runs,
    mcnemar,
    pearson_per_relation,
    regression_gate,
    subsumption_by_relation,
    subsumption_rate,
)
from .json_safe import json_safe
from .multiple_choice import (
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

__all__ = [
    "DEFAULT_THRESHOLDS",
    "GateDecision",
    "accuracy",
    "accuracy_at_k",
    "bootstrap_ci",
    "compare_runs",
    "confidence",
    "gold_prob",
    "is_correct",
    "join_runs",
    "json_safe",
    "mcnemar",
    "option_probs",
    "paired_bootstrap_diff",
    "pearson_per_relation",
    "predict",
    "prob_mass",
    "regression_gate",
    "stratified_bootstrap_ci",
    "subsumption_by_relation",
    "subsumption_rate",
    "summarize",
    "template_summary",
]
