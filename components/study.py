"""KFP components of the study steps (the logic is in components/steps/study.py): `run_study`, a GPU
step that runs one registered study for one model, and `plan_study`, the CPU step that checks a generic `study`
pipeline run's study and options and gives the cells its loop fans out over."""

from kfp import dsl
from kfp.dsl import Dataset, Metrics, Output

from .config import CPU_IMAGE, GPU_IMAGE


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def run_study(
    study: str,
    model: str,
    config: dict,
    options: str,
    params: dict,
    context: str,
    work_root: str,
    results: Output[Dataset],
    metrics: Output[Metrics],
    models: list = [],  # noqa: B006 (a KFP default)
):
    """Run study `study` (factprobe study NAME) for `model` with the pipeline's config and the step's own `params`; its files (metrics.json, tables, figures) are the results artifact. `models` (non-empty: a study over several models, e.g. findings) goes in as the study's `models` option: a list pipeline parameter has its own input, since KFP cannot place one inside a dict constant (`params`) as valid JSON."""
    from factprobe_ops.components.steps.study import run_study_step

    step_params = {**params, **({"models": models} if models else {})}
    info = run_study_step(results.path, study, model, {**config, "options": options}, step_params, context, work_root)
    results.metadata.update({"study": study, "model": model, "mlflow_run_id": info["run_id"]})
    for name, value in info["scalars"].items():
        metrics.log_metric(name, value)


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def plan_study(study: str, models: list, config: dict, options: str, context: str) -> list:
    """Check the study, its options and the study configuration of every model before any model loads; return the cells the study loop fans out over (one per model, or one for a study of several models or of none; each carries the run context)."""
    from factprobe_ops.components.steps.study import run_study_plan

    return run_study_plan(study, models, {**config, "options": options}, context)
