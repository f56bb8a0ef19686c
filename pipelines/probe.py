"""The `probe` pipeline: build data -> ParallelFor over units of work -> merge -> aggregate and report.

Its parameters (pipelines/params.py): `models`, `probes`, `shards`, `one_load`, the essentials of
the base config, the options of the default probe (ic-lke), tracking_uri / trigger / work_root, and
`options` (JSON) for the options of any other probe in `probes`.

The sweeps (`probe`, `nightly_sweep`: `sweep_dag`) fan out over units of work (components/steps/plan.py
`run_plan_units`), one pod each: a model, the probes it runs (one, or all of them loaded once with
`one_load=true`) and its fact shard (`shards=N` splits each run's facts across N pods). A model is a
name or a mapping with its own settings (`gpus`, `memory`, `cpu`, `dtype`, `device_map`,
`endpoint`); each unit's pod requests its model's resources, read by a small `unit-resources` step
in the loop and set from its outputs, and a unit with `gpus: 0` (a served model) runs without the GPU
pool's node selector and toleration (`placed_by_outputs`) (kfp 2.17 compiles them as `resourceCpuLimit`, ... placeholders,
which KFP backends honour from 2.5.0: pipelines/kfp_compat.py; a loop item's fields
cannot be resource values in kfp 2.17, a task's outputs can). The fan-out runs at most
`sweep_parallelism()` pods at once (setting FACTPROBE_PARALLELISM). A merge step joins the units'
folders into one run folder per (model, probe) (components/steps/merge.py), which the
report reads.

Both DAGs can end with a knowledge map (issue 39, `DagConfig.knowledge_map`): a sweep maps the merged
run folders (`knowledge_map`), a `probe_dag` the loop's collected ones (`knowledge_map_runs`), after the
report. `probe` switches it with its `knowledge_map` parameter (default false), `nightly_sweep` always
maps and diffs the map against the previous night's (`DagConfig.map_previous`). A DAG whose probe list
is one fixed probe gets no map step (a map compares two or more probes on the same facts); with a
probe-list parameter, a run of one probe skips the map inside the step and says why.

Compile: `factprobe pipeline compile` (writes build/pipelines/probe.yaml for the Kubeflow UI).
Run locally: `factprobe pipeline run probe --param models='["smollm2-135m-instruct"]'`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kfp import dsl

from factprobe.errors import ConfigError
from factprobe_ops.components.data_build import data_build
from factprobe_ops.components.knowledge_map import knowledge_map, knowledge_map_runs
from factprobe_ops.components.merge import merge_results
from factprobe_ops.components.merge import report as merged_report
from factprobe_ops.components.plan import plan_matrix, plan_units, unit_resources
from factprobe_ops.components.probe import probe_model
from factprobe_ops.components.probe_unit import probe_model as probe_unit
from factprobe_ops.components.report import report

from .params import DEFAULT_PROBES, Param, config_dict, config_params, make_pipeline, probes_param
from .platform import (
    cpu_step,
    data_step,
    gpu_placement,
    gpu_step,
    local_build,
    placed_by_outputs,
    read_cluster_config,
    with_storage,
)
from .scaffold import tracked

DEFAULT_MODELS = ["smollm2-135m-instruct", "gemma-3-270m"]
MODELS_HELP = (
    "Models to probe: built-in aliases (smollm2-135m-instruct, gemma-3-270m), Hugging Face hub ids, PEFT "
    "adapter folders or folders on a mounted volume; an entry may be a mapping with the model's own gpus, memory, "
    "cpu, dtype, device_map or endpoint (a served model's OpenAI-compatible URL)."
)
#: the parallelism cap of a sweep's fan-out when FACTPROBE_PARALLELISM is not set (cluster builds)
DEFAULT_PARALLELISM = 8


def models_param() -> Param:
    return Param("models", list, DEFAULT_MODELS, MODELS_HELP)


def sweep_params() -> list[Param]:
    """The sweeps' own settings of their units of work (issue 30 item 4)."""
    return [
        Param("shards", int, 1, "Pods per probe run: each run's facts are split across this many pods and merged (1: no split)."),
        Param(
            "one_load",
            bool,
            False,
            "Run all the probes of a model in one pod with one model load (instead of one pod per probe).",
        ),
    ]


def sweep_parallelism() -> int:
    """How many units of a sweep run at once on a cluster: FACTPROBE_PARALLELISM (a whole number;
    0 = no cap), default `DEFAULT_PARALLELISM`. Local builds set none (kfp's local runner has its
    own cap, which pipelines/local_steps.py counts on). ConfigError naming the setting."""
    import os

    if local_build():
        return 0
    text = os.environ.get("FACTPROBE_PARALLELISM", "").strip()
    if not text:
        return DEFAULT_PARALLELISM
    if not text.isdigit():
        raise ConfigError(f"FACTPROBE_PARALLELISM={text!r}: give a whole number of pods at once (0: no cap)")
    return int(text)


def resource_defaults() -> dict[str, Any]:
    """A unit's resources when its model names none: FACTPROBE_GPU_COUNT GPUs and `gpu_step`'s CPU and memory."""
    from factprobe_ops.components.steps.plan import DEFAULT_RESOURCES

    return {**DEFAULT_RESOURCES, "gpus": read_cluster_config().gpu_count}


def probe_config_params() -> list[Param]:
    """The config parameters of a pipeline whose probe list is a parameter: those of its default probes."""
    return config_params(DEFAULT_PROBES)


@dataclass
class DagConfig:
    """What `probe_dag` needs: the pipeline's name, its models and probes (lists or channels), the
    one run-config dict (`factprobe_ops.pipelines.params.config_dict`) and the pipeline's parameters (tracking,
    trigger, work_root).

    `inside(scope, probe_task, report_task)` may add more steps within the ExitHandler (so the
    parent run is finalized after them); `report_task` is the last reporting step (the map step when
    the DAG always has one).

    `knowledge_map`: end with a knowledge-map step (issue 39): False (none), True (always), or a
    pipeline's bool parameter (the step under an If on it; nothing can then wait for the step).
    Never for a probe list of one fixed probe (`maps_probes`). `map_previous`: the map step also
    diffs the map against the previous run's of this pipeline (the nightly sweep's previous night)."""

    pipeline: str
    models: Any
    probes: Any
    config: dict[str, Any]
    values: dict[str, Any]
    inside: Callable[[Any, Any, Any], None] | None = None
    knowledge_map: Any = False
    map_previous: bool = False

    @classmethod
    def from_values(
        cls,
        pipeline: str,
        values: dict[str, Any],
        models: Any,
        probes: Any,
        params: list[Param],
        inside=None,
        knowledge_map: Any = False,
        map_previous: bool = False,
    ) -> DagConfig:
        return cls(pipeline, models, probes, config_dict(values, params), values, inside, knowledge_map, map_previous)


def maps_probes(probes: Any) -> bool:
    """Whether a map step can have two probes to compare: False for a fixed list of fewer than two
    probes; True for two or more, or for a probe-list parameter (known at run time: the step skips a
    run of one probe and says why)."""
    return not isinstance(probes, (list, tuple)) or len(set(probes)) > 1


def end_with_map(dag: DagConfig, make_step: Callable[[], Any], report_task):
    """Add the map step `make_step()` builds after `report_task` as `dag.knowledge_map` asks
    (`DagConfig`). Returns the last reporting step: the map step when it always runs, else `report_task`."""
    if dag.knowledge_map is False or not maps_probes(dag.probes):
        return report_task
    if dag.knowledge_map is True:
        return cpu_step(make_step(), s3=False).after(report_task)
    with dsl.If(dag.knowledge_map == True, name="knowledge-map-asked"):  # noqa: E712 - a pipeline channel, compiled to a condition
        cpu_step(make_step(), s3=False).after(report_task)
    return report_task


def knowledge_map_param() -> Param:
    """The `probe` pipeline's switch of its map step (`DagConfig.knowledge_map`)."""
    return Param(
        "knowledge_map",
        bool,
        False,
        "End with a knowledge map of the runs: which facts each model knows under every probe (needs two or more "
        "probes on the same facts; a run of one probe skips it and says why).",
    )


def probe_dag(dag: DagConfig):
    """Add the probe DAG (inside the tracked scaffold, pipelines/scaffold.py) to the current
    pipeline; collect the loop's results with `dsl.Collected(probe_task.outputs["results"])`.
    Returns (scope, probe task, report task)."""
    with tracked(dag.pipeline, dag.values, dag.models, dag.probes, dag.config) as run:
        # The run context travels inside each loop item: kfp 2.17's local runner hands a loop
        # item to a task-output argument used inside a ParallelFor over another task's output.
        plan = cpu_step(
            plan_matrix(models=dag.models, probes=dag.probes, config=dag.config, options=run.options, context=run.context),
            s3=False,
        )
        build = data_step(data_build(config=dag.config, options=run.options, probes=dag.probes, context=run.context))
        build.after(plan)  # the plan validates every (model, probe) config first
        with dsl.ParallelFor(plan.output, name="models-x-probes") as cell:
            probed = gpu_step(
                probe_model(
                    items=build.outputs["items"],
                    model=cell.model,
                    probe=cell.probe,
                    config=dag.config,
                    options=run.options,
                    context=cell.context,
                    work_root=run.work_root,
                )
            )
        rep = cpu_step(report(results=dsl.Collected(probed.outputs["results"]), context=run.context), s3=False)
        last = end_with_map(
            dag, lambda: knowledge_map_runs(results=dsl.Collected(probed.outputs["results"]), context=run.context), rep
        )
        if dag.inside is not None:
            dag.inside(run, probed, last)
    return run, probed, rep


def sweep_dag(dag: DagConfig, tolerant: bool = False):
    """The DAG of a sweep (module docstring) inside the tracked scaffold: plan the units, build the
    data, fan out over the units (each with its own resources; `tolerant`: a probe's failure is
    recorded, not raised), merge, report. `dag.values` holds `shards` and `one_load`;
    `dag.inside(scope, merge_task, report_task)` may add steps that read the merged folder (after
    `report_task`, the last reporting step: the map step when the DAG always has one).
    Returns (scope, merge task, report task)."""
    with tracked(dag.pipeline, dag.values, dag.models, dag.probes, dag.config) as run:
        # the plan mounts the claim too: with shards > 1 it counts each probe's facts in the data root
        # (components/steps/shards.py), which lies on the claim (FACTPROBE_DATA)
        plan = with_storage(
            cpu_step(
                plan_units(
                    models=dag.models,
                    probes=dag.probes,
                    config=dag.config,
                    options=run.options,
                    context=run.context,
                    shards=dag.values["shards"],
                    one_load=dag.values["one_load"],
                    defaults=resource_defaults(),
                ),
                s3=False,
            )
        )
        build = data_step(data_build(config=dag.config, options=run.options, probes=dag.probes, context=run.context))
        build.after(plan)  # the plan validates every model, probe and config first
        with dsl.ParallelFor(plan.output, name="units", parallelism=sweep_parallelism()) as unit:
            size = cpu_step(unit_resources(unit=unit, placement=gpu_placement()), cpu="0.5", memory="512M", s3=False)
            probed = gpu_step(
                probe_unit(
                    items=build.outputs["items"],
                    unit=unit,
                    config=dag.config,
                    options=run.options,
                    context=unit.context,
                    work_root=run.work_root,
                    tolerant=tolerant,
                ),
                cpu=size.outputs["cpu"],
                memory=size.outputs["memory"],
            )
            probed.set_accelerator_limit(size.outputs["gpus"])
            # the GPU pool for a unit with GPUs, any node for a served model's (gpus: 0)
            placed_by_outputs(probed, size.outputs["node_selector"], size.outputs["tolerations"])
            probed.after(size)  # resource values are no dependency by themselves (kfp 2.17 writes no dependentTasks for them)
        merged = cpu_step(
            merge_results(units=dsl.Collected(probed.outputs["results"]), items=build.outputs["items"], context=run.context),
            memory="8G",
            s3=False,
        )
        rep = cpu_step(merged_report(results=merged.outputs["results"], context=run.context), s3=False)
        last = end_with_map(
            dag,
            lambda: knowledge_map(results=merged.outputs["results"], context=run.context, against_previous=dag.map_previous),
            rep,
        )
        if dag.inside is not None:
            dag.inside(run, merged, last)
    return run, merged, rep


def _body(values: dict[str, Any]) -> None:
    sweep_dag(
        DagConfig.from_values(
            "probe", values, values["models"], values["probes"], probe_config_params(), knowledge_map=values["knowledge_map"]
        )
    )


def build():
    """The pipeline (built from the registry and the cluster settings in effect; see factprobe_ops.pipelines.platform.building)."""
    return make_pipeline(
        "probe",
        "factprobe-probe",
        "Estimate the factual knowledge of language models with the registered probes, logged to MLflow.",
        "Probe several models with several knowledge probes.",
        [models_param(), probes_param(), *sweep_params(), knowledge_map_param()],
        "ui",
        _body,
        probe_config_params(),
    )
