"""KFP component. Step: `probe_model` for sweeps: one model's failure is recorded, not raised (the logic is in factprobe_ops/components/steps/probe.py, run_probe_step_tolerant)."""
from kfp import dsl
from kfp.dsl import Dataset, Input, Metrics, Output
from .config import GPU_IMAGE


# Named `probe_model` on purpose: the task is `probe-model` in every pipeline's spec (the nightly
# sweep's loop, its outputs and the steps that collect them), whichever of the two runs.
@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def probe_model(
    items: Input[Dataset], model: str, probe: str, config: dict, options: str, context: str, work_root: str,
    results: Output[Dataset], metrics: Output[Metrics],
):
    """Run one probe on one model; a failure is recorded (results/failed.json, child run FAILED), not raised."""
    from factprobe_ops.components.steps.probe import run_probe_step_tolerant

    info = run_probe_step_tolerant(items.path, results.path, model, probe, {**config, "options": options}, context,
                                   work_root=work_root)
    results.metadata.update({"model": model, "probe": probe, "mlflow_run_id": info["run_id"],
                             "failed": info.get("failed", "")})
    for name, value in info["scalars"].items():
        metrics.log_metric(name, value)
