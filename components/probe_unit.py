"""KFP component. Step: one unit of work of a sweep (`probe`, `nightly_sweep`): a model's probes over one fact shard, the model loaded once (the logic is in components/steps/probe.py, run_unit_step)."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Metrics, Output

from .config import GPU_IMAGE


# Named `probe_model` on purpose: the task is `probe-model` in every pipeline's spec, as with the
# one-probe component of the other pipelines (components/probe.py).
@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def probe_model(
    items: Input[Dataset],
    unit: dict,
    config: dict,
    options: str,
    context: str,
    work_root: str,
    tolerant: bool,
    results: Output[Dataset],
    metrics: Output[Metrics],
):
    """Run the probes of one unit (a model, its probes, its fact shard) one after the other with one model load; with `tolerant`, a probe's failure is recorded, not raised."""
    from factprobe_ops.components.steps.probe import run_unit_step

    info = run_unit_step(
        items.path, results.path, unit, {**config, "options": options}, context, work_root=work_root, tolerant=tolerant
    )
    results.metadata.update(
        {
            "model": unit["model"],
            "probes": ",".join(info["probes"]),
            "shard": f"{int(unit['shard']) + 1}/{unit['shards']}",
            "failed": "; ".join(i["failed"] for i in info["probes"].values() if i.get("failed")),
            "mlflow_run_ids": {probe: one["run_id"] for probe, one in info["probes"].items()},
        }
    )
    for probe, one in info["probes"].items():
        for name, value in one["scalars"].items():
            metrics.log_metric(f"{probe}.{name}", value)
