"""KFP components of the `belief` pipeline (BELIEF-ICL): the model x setting x instruction plan, one belief-icl probe per cell (GPU step), and the calibration / table report (the logic is in components/steps/belief.py)."""

from kfp import dsl
from kfp.dsl import HTML, Dataset, Input, Markdown, Metrics, Output

from .config import CPU_IMAGE, GPU_IMAGE


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def belief_plan(models: list, settings: list, instructions: list, probe: str, config: dict, options: str, context: str) -> list:
    """Validate the probe's config (and options) for every (model, setting, instruction) and expand them into the list probed in parallel."""
    from factprobe_ops.components.steps.belief import run_belief_plan

    return run_belief_plan(models, settings, instructions, probe, {**config, "options": options}, context)


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def probe_belief(
    items: Input[Dataset],
    model: str,
    probe: str,
    setting: str,
    instruction: str,
    config: dict,
    options: str,
    context: str,
    work_root: str,
    results: Output[Dataset],
    metrics: Output[Metrics],
):
    """Run the belief probe on one model with one ICL setting and instruction over the prepared multi-prompt set; log a child MLflow run."""
    from factprobe_ops.components.steps.belief import run_probe_belief

    info = run_probe_belief(
        items.path, results.path, model, probe, setting, instruction, {**config, "options": options}, context, work_root
    )
    results.metadata.update(
        {"model": model, "probe": info["probe"], "setting": setting, "instruction": instruction, "mlflow_run_id": info["run_id"]}
    )
    for name, value in info["scalars"].items():
        metrics.log_metric(name, value)


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def belief_report(
    results: Input[list[Dataset]], context: str, html_report: Output[HTML], summary: Output[Markdown], metrics: Output[Metrics]
):
    """Aggregate every BELIEF-ICL run: calibration plots (confidence bins vs Acc@1), summary, per-relation, per-template and knowledge-sharing tables."""
    from factprobe_ops.components.steps.belief import run_belief_report

    rows = run_belief_report([r.path for r in results], html_report.path, summary.path, context)
    for row in rows:
        if row.get("acc") is not None:
            metrics.log_metric(f"acc-{row['model']}-{row['setting']}-{row['instruction']}".replace("/", "_"), row["acc"])
