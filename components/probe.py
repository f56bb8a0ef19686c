"""KFP component. Step: run one multiple-choice probe (IC-LKE, EIC-LKE, HGP or MMP) for one model. GPU step (the logic is in components/steps/probe.py)."""
from kfp import dsl
from kfp.dsl import Dataset, Input, Metrics, Output
from .config import GPU_IMAGE


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def probe_model(
    items: Input[Dataset], model: str, probe: str, examples: int, choices: int, seed: int, parent_run_id: str,
    tracking_uri: str, work_root: str, kfp_run_id: str, trigger: str, pipeline: str,
    results: Output[Dataset], metrics: Output[Metrics],
):
    """Score every multiple-choice item with one model and one probe (exact shared-prefix scorer); log a child MLflow run."""
    from components.steps.probe import run_probe_step

    info = run_probe_step(items.path, results.path, model, probe, examples, choices, seed, parent_run_id,
                          tracking_uri, work_root, kfp_run_id, trigger, pipeline)
    results.metadata.update({"model": model, "probe": probe, "mlflow_run_id": info["run_id"]})
    metrics.log_metric("acc", info["accuracy"])
    metrics.log_metric("prob_mass", info["prob_mass"])
    metrics.log_metric("n", info["n"])
