"""The `probe` pipeline: build data -> ParallelFor over models x probes -> aggregate and report.

Its parameters are generated from the probe registry (pipelines/params.py): `models`, `probes`,
every config field of every registered probe, and tracking_uri / trigger / work_root.

Compile: `factprobe pipeline compile` (writes build/pipelines/probe.yaml for the Kubeflow UI).
Run locally: `factprobe pipeline run probe --param models='["smollm2-135m-instruct"]'`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from kfp import dsl

from components.data_build import data_build
from components.finalize_run import finalize_run
from components.plan import plan_matrix
from components.probe import probe_model
from components.report import report
from components.start_run import start_run

from .params import Param, config_dict, make_pipeline, probes_param
from .platform import cpu_step, gpu_step

DEFAULT_MODELS = ["smollm2-135m-instruct", "gemma-3-270m"]


@dataclass
class DagConfig:
    """What `probe_dag` needs: the pipeline's name, its models and probes (lists or channels), the
    one run-config dict (`pipelines.params.config_dict`), tracking and where resumable work goes.

    `inside(parent, probe_task, report_task)` may add more steps within the ExitHandler (so the
    parent run is finalized after them)."""

    pipeline: str
    models: Any
    probes: Any
    config: dict[str, Any]
    tracking_uri: Any
    trigger: Any
    work_root: Any
    inside: Callable[[Any, Any, Any], None] | None = None
    probe_component: Any = None  # default components.probe.probe_model; a sweep passes probe_model_tolerant

    @classmethod
    def from_values(cls, pipeline: str, values: dict[str, Any], models: Any, probes: Any, inside=None,
                    probe_component=None) -> "DagConfig":
        return cls(pipeline, models, probes, config_dict(values), values["tracking_uri"], values["trigger"],
                   values["work_root"], inside, probe_component)


def probe_dag(dag: DagConfig):
    """Add the probe DAG (inside an ExitHandler) to the current pipeline; collect the loop's
    results with `dsl.Collected(probe_task.outputs["results"])`. Returns (parent, probe task, report task)."""
    job = dsl.PIPELINE_JOB_ID_PLACEHOLDER
    final = cpu_step(finalize_run(pipeline=dag.pipeline, kfp_run_id=job, tracking_uri=dag.tracking_uri), s3=False)
    final.set_display_name("finalize-mlflow-run")
    with dsl.ExitHandler(final, name="track-and-probe"):
        parent = cpu_step(start_run(pipeline=dag.pipeline, kfp_run_id=job, trigger=dag.trigger, tracking_uri=dag.tracking_uri,
                                    models=dag.models, probes=dag.probes, config=dag.config), s3=False)
        parent.set_display_name("start-mlflow-run")
        # The parent run id travels inside each loop item: kfp 2.17's local runner hands a loop
        # item to a task-output argument used inside a ParallelFor over another task's output.
        plan = cpu_step(plan_matrix(models=dag.models, probes=dag.probes, config=dag.config, parent_run_id=parent.output), s3=False)
        build = cpu_step(data_build(config=dag.config, probes=dag.probes, pipeline=dag.pipeline, parent_run_id=parent.output,
                                    tracking_uri=dag.tracking_uri), memory="8G")
        build.after(plan)  # the plan validates every (model, probe) config first
        with dsl.ParallelFor(plan.output, name="models-x-probes") as cell:
            probed = gpu_step((dag.probe_component or probe_model)(items=build.outputs["items"], model=cell.model, probe=cell.probe, config=dag.config,
                                          parent_run_id=cell.parent_run_id, tracking_uri=dag.tracking_uri,
                                          work_root=dag.work_root, kfp_run_id=job, trigger=dag.trigger, pipeline=dag.pipeline))
        rep = cpu_step(report(results=dsl.Collected(probed.outputs["results"]), parent_run_id=parent.output,
                              tracking_uri=dag.tracking_uri, pipeline=dag.pipeline), s3=False)
        if dag.inside is not None:
            dag.inside(parent, probed, rep)
    return parent, probed, rep


def _body(values: dict[str, Any]) -> None:
    probe_dag(DagConfig.from_values("probe", values, values["models"], values["probes"]))


def build():
    """The pipeline (built from the registry and the cluster settings in effect; see pipelines.platform.building)."""
    return make_pipeline(
        "probe", "factprobe-probe",
        "Estimate the factual knowledge of language models with the registered probes, logged to MLflow.",
        "Probe several models with several knowledge probes.",
        [Param("models", list, DEFAULT_MODELS, "Models to probe: built-in aliases (smollm2-135m-instruct, gemma-3-270m), "
               "Hugging Face hub ids, PEFT adapter folders or folders on a mounted volume."), probes_param()],
        "ui", _body,
    )
