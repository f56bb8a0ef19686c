"""KFP components. Steps: a probe that writes a model's known/unknown table, and a probe that reads it (counterfactual ICL). GPU steps (the logic is in components/steps/known_unknown.py)."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Metrics, Output

from .config import GPU_IMAGE


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def probe_known_unknown(
    items: Input[Dataset],
    model: str,
    probe: str,
    config: dict,
    options: str,
    overrides: dict,
    context: str,
    work_root: str,
    results: Output[Dataset],
    table: Output[Dataset],
    metrics: Output[Metrics],
):
    """Run a probe that classifies facts as known/unknown (qa over all splits) on one model; output its results and the known/unknown table (parquet)."""
    from factprobe_ops.components.steps.known_unknown import run_known_unknown_step

    info = run_known_unknown_step(
        items.path, results.path, table.path, model, probe, {**config, "options": options}, overrides, context, work_root
    )
    results.metadata.update({"model": model, "probe": probe, "mlflow_run_id": info["run_id"], "files": info["files"]})
    table.metadata.update(
        {
            "model": model,
            "format": "parquet",
            "n_facts": info["n_facts"],
            "n_known": info["n_known"],
            "n_unknown": info["n_unknown"],
        }
    )
    for name, value in info["scalars"].items():
        metrics.log_metric(name, value)


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def probe_with_known_unknown(
    items: Input[Dataset],
    table: Input[Dataset],
    model: str,
    probe: str,
    config: dict,
    options: str,
    overrides: dict,
    context: str,
    work_root: str,
    results: Output[Dataset],
    metrics: Output[Metrics],
):
    """Run a probe that reads the model's known/unknown table (counterfactual ICL) on one model, with the table from the previous step."""
    from factprobe_ops.components.steps.known_unknown import run_with_known_unknown_step

    info = run_with_known_unknown_step(
        items.path, table.path, results.path, model, probe, {**config, "options": options}, overrides, context, work_root
    )
    results.metadata.update({"model": model, "probe": probe, "mlflow_run_id": info["run_id"], "files": info["files"]})
    for name, value in info["scalars"].items():
        metrics.log_metric(name, value)
