"""KFP component. Step: the model x probe matrix the probe loop fans out over (the logic is in components/steps/plan.py)."""

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


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def plan_units(
    models: list, probes: list, config: dict, options: str, context: str, shards: int, one_load: bool, defaults: dict
) -> list:
    """Validate the models (per-model settings), probes and run config, and expand them into the sweep's units of work: one pod each (a model, its probes, its fact shard, its resources)."""
    from factprobe_ops.components.steps.plan import run_plan_units

    return run_plan_units(
        models, probes, context, {**config, "options": options}, shards=shards, one_load=one_load, defaults=defaults
    )


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def unit_resources(
    unit: dict,
    placement: dict,
    gpus: dsl.OutputPath(str),
    cpu: dsl.OutputPath(str),
    memory: dsl.OutputPath(str),
    node_selector: dsl.OutputPath(dict),
    tolerations: dsl.OutputPath(list),
):
    """The GPUs, CPUs and memory the pod of one unit of work requests (its model's own settings, else the defaults), and where it may run: the GPU pool (`placement`) for a unit with GPUs, any node for one without (a served model)."""
    from factprobe_ops.components.steps.plan import write_unit_placement, write_unit_resources

    write_unit_resources(unit, gpus, cpu, memory)
    write_unit_placement(unit, placement, node_selector, tolerations)
