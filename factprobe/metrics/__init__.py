"""Metrics: pure functions over per-item / per-fact result tables (numpy and pandas only).

- `multiple_choice`: IC-LKE prediction, accuracy, gold probability mass, Accuracy@K and coverage,
  `summarize`.
- `bootstrap`: percentile, stratified (macro) and paired bootstrap intervals.
- `comparison`: two runs joined fact by fact: subsumption rate (pooled and averaged over
  relations), McNemar, per-relation Pearson r, `compare_runs`.
- `gate`: the `regression_gate` on two such runs, in the gated headline's terms (`GateDecision`).
- `cross_model`: many runs: model x relation accuracy, model order, Pearson matrix and family means,
  subsumption eta for within-family and base/fine-tuned pairs (Figures 5-6, Tables 1 and 10).
- `json_safe`: NaN / inf to `null` with a `<key>_reason`, for strict JSON.
"""

from .bootstrap import bootstrap_ci, paired_bootstrap_diff, stratified_bootstrap_ci
from .comparison import (
    compare_runs,
    join_runs,
    mcnemar,
    pearson_per_relation,
    subsumption_by_relation,
    subsumption_rate,
)
from .cross_model import (
    accuracy_matrix,
    eta_family_summary,
    eta_pairs,
    family_correlation,
    order_models,
    pearson_matrix,
    subsumption,
)
from .gate import GateDecision, regression_gate
from .json_safe import json_safe
from .multiple_choice import (
    DEFAULT_THRESHOLDS,
    accuracy,
    accuracy_at_k,
    confidence,
    coverage_at_k,
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
    "accuracy_matrix",
    "bootstrap_ci",
    "compare_runs",
    "confidence",
    "coverage_at_k",
    "eta_family_summary",
    "eta_pairs",
    "family_correlation",
    "gold_prob",
    "is_correct",
    "join_runs",
    "json_safe",
    "mcnemar",
    "option_probs",
    "order_models",
    "paired_bootstrap_diff",
    "pearson_matrix",
    "pearson_per_relation",
    "predict",
    "prob_mass",
    "regression_gate",
    "stratified_bootstrap_ci",
    "subsumption",
    "subsumption_by_relation",
    "subsumption_rate",
    "summarize",
    "template_summary",
]
