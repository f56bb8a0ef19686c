"""KFP component. Step: run one registered probe for one model. GPU step (the logic is in components/steps/probe.py)."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Metrics, Output

from .config import GPU_IMAGE


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def probe_model(
    items: Input[Dataset],
    model: str,
    probe: str,
    config: dict,
    options: str,
    context: str,
    work_root: str,
    results: Output[Dataset],
    metrics: Output[Metrics],
):
    """Run one probe (any name from the probe registry) on one model over the prepared items; log a child MLflow run."""
    from factprobe_ops.components.steps.probe import run_probe_step

    info = run_probe_step(items.path, results.path, model, probe, {**config, "options": options}, context, work_root)
    results.metadata.update({"model": model, "probe": probe, "mlflow_run_id": info["run_id"]})
    for name, value in info["scalars"].items():
        metrics.log_metric(name, value)
