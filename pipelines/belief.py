"""The `belief` pipeline (BELIEF-ICL, zhao2024 section 3): build the multi-prompt set once, then run
the `belief-icl` probe for every (model, ICL setting, instruction) in one ParallelFor, and report
across them.

Steps: start the MLflow parent run; `belief-plan` expands `models` x `settings` x `instructions`
(validating each run config); `data-build` builds the multi-prompt dataset once; `probe-belief`
(GPU step, `gpu_step`) runs belief-icl for one cell (a nested child run per cell); `belief-report`
draws the calibration plots (confidence bins against Acc@1, one panel per model, one curve per
setting and instruction: Figures 2-3) and logs the summary (Acc@1 with range and stdev, Consist,
Overconf, one-word rate, coverage), per-relation, per-template and knowledge-sharing tables to the
parent run; the run is finalized whatever happens.

The pipeline's `settings` and `instructions` lists decide each cell's `setting` and `instruction`
(the single-valued `setting` / `instruction` parameters that every pipeline has for the probe
registry are overridden per cell).

Compile: `factprobe pipeline compile belief` (writes build/pipelines/belief.yaml).
Run locally (small): `factprobe pipeline run belief --param models='["smollm2-135m-instruct"]'
--param source=lama --param relations=P36,P103 --param max_facts_per_relation=5 --param max_templates=5
--param samples=10 --param settings='["zero-shot","4-template"]'`.
"""
from __future__ import annotations

from typing import Any

from kfp import dsl

from components.belief import belief_plan, belief_report, probe_belief
from components.data_build import data_build
from components.finalize_run import finalize_run
from components.start_run import start_run

from .params import Param, make_pipeline
from .platform import cpu_step, gpu_step
from .probe import DEFAULT_MODELS, DagConfig

NAME = "belief"
PROBE = "belief-icl"
DEFAULT_SETTINGS = ["zero-shot", "4-random", "4-relation", "4-template"]
DEFAULT_INSTRUCTIONS = ["mp"]


def _body(values: dict[str, Any]) -> None:
    dag = DagConfig.from_values(NAME, values, values["models"], [PROBE])
    job = dsl.PIPELINE_JOB_ID_PLACEHOLDER
    final = cpu_step(finalize_run(pipeline=NAME, kfp_run_id=job, tracking_uri=dag.tracking_uri), s3=False)
    final.set_display_name("finalize-mlflow-run")
    with dsl.ExitHandler(final, name="track-and-probe"):
        parent = cpu_step(start_run(pipeline=NAME, kfp_run_id=job, trigger=dag.trigger, tracking_uri=dag.tracking_uri,
                                    models=dag.models, probes=[PROBE], config=dag.config), s3=False)
        parent.set_display_name("start-mlflow-run")
        plan = cpu_step(belief_plan(models=dag.models, settings=values["settings"], instructions=values["instructions"],
                                    config=dag.config, parent_run_id=parent.output), s3=False)
        build = cpu_step(data_build(config=dag.config, probes=[PROBE], pipeline=NAME, parent_run_id=parent.output,
                                    tracking_uri=dag.tracking_uri), memory="8G")
        build.after(plan)
        with dsl.ParallelFor(plan.output, name="models-x-settings") as cell:
            probed = gpu_step(probe_belief(items=build.outputs["items"], model=cell.model, setting=cell.setting,
                                           instruction=cell.instruction, config=dag.config,
                                           parent_run_id=cell.parent_run_id, tracking_uri=dag.tracking_uri,
                                           work_root=dag.work_root, kfp_run_id=job, trigger=dag.trigger, pipeline=NAME))
            probed.set_display_name("belief-icl")
        rep = cpu_step(belief_report(results=dsl.Collected(probed.outputs["results"]), parent_run_id=parent.output,
                                     tracking_uri=dag.tracking_uri, pipeline=NAME), s3=False)
        rep.set_display_name("belief-report")


def build():
    """The pipeline (built from the registry and the cluster settings in effect; see pipelines.platform.building)."""
    return make_pipeline(
        NAME, "factprobe-belief",
        "BELIEF-ICL (zhao2024): every template of each relation probed with ICL for several models, settings and "
        "instructions; Acc@1 with range/stdev over template draws, consistency, overconfidence with calibration "
        "plots, one-word rate, per-relation and per-template tables, logged to MLflow.",
        "Multi-prompt BELIEF-ICL probing of several models.",
        [Param("models", list, DEFAULT_MODELS, "Models to probe: built-in aliases (smollm2-135m-instruct, gemma-3-270m), "
               "Hugging Face hub ids, PEFT adapter folders or folders on a mounted volume."),
         Param("settings", list, DEFAULT_SETTINGS, "ICL settings, one probe run each: zero-shot, 4-random, 4-relation, "
               "4-template (overrides the single `setting` parameter)."),
         Param("instructions", list, DEFAULT_INSTRUCTIONS, "Task instructions, one probe run each: mp (mask "
               "prediction, every template) and/or qa (question templates only) (overrides `instruction`).")],
        "ui", _body,
    )
