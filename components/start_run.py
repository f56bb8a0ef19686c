"""KFP component. Step: open the MLflow parent run of a pipeline run and return the run context of its steps (the logic is in components/steps/start_run.py)."""

from kfp import dsl

from .config import CPU_IMAGE


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def start_run(
    pipeline: str, kfp_run_id: str, trigger: str, tracking_uri: str, models: list, probes: list, config: dict, options: str
) -> str:
    """Open the MLflow parent run for this pipeline run (tags: trigger, KFP run id, git sha); return the run context (JSON) every later step takes."""
    import json

    from factprobe_ops.components.steps.start_run import run_start

    return run_start(
        pipeline,
        kfp_run_id,
        trigger,
        tracking_uri,
        json.dumps({"models": models, "probes": probes, **config, "options": options}),
    )
