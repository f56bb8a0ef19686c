"""The `probe` pipeline: build data -> ParallelFor over models x probes -> aggregate and report.

Its parameters (factprobe_ops/pipelines/params.py): `models`, `probes`, the essentials of the base config, the
options of the default probe (ic-lke), tracking_uri / trigger / work_root, and `options` (JSON)
for the options of any other probe in `probes`.

Compile: `factprobe pipeline compile` (writes build/pipelines/probe.yaml for the Kubeflow UI).
Run locally: `factprobe pipeline run probe --param models='["smollm2-135m-instruct"]'`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from kfp import dsl

from factprobe_ops.components.data_build import data_build
from factprobe_ops.components.plan import plan_matrix
from factprobe_ops.components.probe import probe_model
from factprobe_ops.components.report import report

from .params import DEFAULT_PROBES, Param, config_dict, config_params, make_pipeline, probes_param
from .platform import cpu_step, gpu_step
from .scaffold import tracked

DEFAULT_MODELS = ["smollm2-135m-instruct", "gemma-3-270m"]
MODELS_HELP = ("Models to probe: built-in aliases (smollm2-135m-instruct, gemma-3-270m), Hugging Face hub ids, PEFT "
               "adapter folders or folders on a mounted volume.")


def models_param() -> Param:
    return Param("models", list, DEFAULT_MODELS, MODELS_HELP)


def probe_config_params() -> list[Param]:
    """The config parameters of a pipeline whose probe list is a parameter: those of its default probes."""
    return config_params(DEFAULT_PROBES)


@dataclass
class DagConfig:
    """What `probe_dag` needs: the pipeline's name, its models and probes (lists or channels), the
    one run-config dict (`factprobe_ops.pipelines.params.config_dict`) and the pipeline's parameters (tracking,
    trigger, work_root).

    `inside(scope, probe_task, report_task)` may add more steps within the ExitHandler (so the
    parent run is finalized after them)."""

    pipeline: str
    models: Any
    probes: Any
    config: dict[str, Any]
    values: dict[str, Any]
    inside: Callable[[Any, Any, Any], None] | None = None
    probe_component: Any = None  # default factprobe_ops.components.probe.probe_model; a sweep passes probe_model_tolerant

    @classmethod
    def from_values(cls, pipeline: str, values: dict[str, Any], models: Any, probes: Any, params: list[Param],
                    inside=None, probe_component=None) -> "DagConfig":
        return cls(pipeline, models, probes, config_dict(values, params), values, inside, probe_component)


def probe_dag(dag: DagConfig):
    """Add the probe DAG (inside the tracked scaffold, factprobe_ops/pipelines/scaffold.py) to the current
    pipeline; collect the loop's results with `dsl.Collected(probe_task.outputs["results"])`.
    Returns (scope, probe task, report task)."""
    with tracked(dag.pipeline, dag.values, dag.models, dag.probes, dag.config) as run:
        # The run context travels inside each loop item: kfp 2.17's local runner hands a loop
        # item to a task-output argument used inside a ParallelFor over another task's output.
        plan = cpu_step(plan_matrix(models=dag.models, probes=dag.probes, config=dag.config, options=run.options,
                                    context=run.context), s3=False)
        build = cpu_step(data_build(config=dag.config, options=run.options, probes=dag.probes, context=run.context),
                         memory="8G")
        build.after(plan)  # the plan validates every (model, probe) config first
        with dsl.ParallelFor(plan.output, name="models-x-probes") as cell:
            probed = gpu_step((dag.probe_component or probe_model)(
                items=build.outputs["items"], model=cell.model, probe=cell.probe, config=dag.config, options=run.options,
                context=cell.context, work_root=run.work_root))
        rep = cpu_step(report(results=dsl.Collected(probed.outputs["results"]), context=run.context), s3=False)
        if dag.inside is not None:
            dag.inside(run, probed, rep)
    return run, probed, rep


def _body(values: dict[str, Any]) -> None:
    probe_dag(DagConfig.from_values("probe", values, values["models"], values["probes"], probe_config_params()))


def build():
    """The pipeline (built from the registry and the cluster settings in effect; see factprobe_ops.pipelines.platform.building)."""
    return make_pipeline(
        "probe", "factprobe-probe",
        "Estimate the factual knowledge of language models with the registered probes, logged to MLflow.",
        "Probe several models with several knowledge probes.",
        [models_param(), probes_param()], "ui", _body, probe_config_params(),
    )
