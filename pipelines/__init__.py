"""Kubeflow pipelines composed from `components/`: probe, nightly_sweep, regression."""
