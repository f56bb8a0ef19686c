"""Kubeflow pipelines composed from `components/`: probe, nightly_sweep, regression, counterfactual_icl
(QA -> known/unknown table -> counterfactual ICL per model, Figure 7 across models) and coherency."""
