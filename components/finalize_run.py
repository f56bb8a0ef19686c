"""KFP component. Exit-handler step: end the parent run FINISHED or FAILED, and fail any child left RUNNING (the logic is in components/steps/finalize_run.py)."""

from kfp import dsl

from .config import CPU_IMAGE


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def finalize_run(pipeline: str, kfp_run_id: str, tracking_uri: str, status: dsl.PipelineTaskFinalStatus) -> str:
    """Exit handler: mark the MLflow parent run FINISHED or FAILED, and any child left RUNNING as FAILED."""
    from factprobe_ops.components.steps.finalize_run import run_finalize

    return run_finalize(pipeline, kfp_run_id, tracking_uri, status.state, status.error_message or "")
