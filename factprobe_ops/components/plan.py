"""KFP component. Step: the model x probe matrix the probe loop fans out over (the logic is in factprobe_ops/components/steps/plan.py)."""
from kfp import dsl
from .config import CPU_IMAGE


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def plan_matrix(models: list, probes: list, config: dict, options: str, context: str) -> list:
    """Validate the run config for every (model, probe) pair and expand them into the list probed in parallel (each cell carries the run context)."""
    from factprobe_ops.components.steps.plan import run_plan

    return run_plan(models, probes, context, {**config, "options": options})


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def read_models(models_yaml: str) -> list:
    """Read the list of models for a sweep from a YAML file path or inline YAML text."""
    from factprobe_ops.components.steps.plan import run_read_models

    return run_read_models(models_yaml)
