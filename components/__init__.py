"""Kubeflow Pipelines (kfp v2) components: one module per step, each a thin adapter.

Each module holds a plain `run_*` function (parse inputs, call `factprobe`, write outputs, log
to MLflow through `tracking`) and a `@dsl.component` wrapper that only calls it. The wrappers'
images come from `factprobe_ops.components.config` (env `FACTPROBE_IMAGE_CPU` / `FACTPROBE_IMAGE_GPU`).
"""
