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
(belief-icl's single-valued `setting` / `instruction` options are not parameters here).

Compile: `factprobe pipeline compile belief` (writes build/pipelines/belief.yaml).
Run locally (small): `factprobe pipeline run belief --param models='["smollm2-135m-instruct"]'
--param source=lama --param relations=P36,P103 --param max_facts_per_relation=5 --param max_templates=5
--param samples=10 --param settings='["zero-shot","4-template"]'`.
"""

from __future__ import annotations

from typing import Any

from kfp import dsl

from factprobe_ops.components.belief import belief_plan, belief_report, probe_belief
from factprobe_ops.components.data_build import data_build

from .params import Param, config_dict, config_params, make_pipeline
from .platform import cpu_step, data_step, gpu_step
from .probe import models_param
from .scaffold import tracked

NAME = "belief"
PROBE = "belief-icl"
DEFAULT_SETTINGS = ["zero-shot", "4-random", "4-relation", "4-template"]
DEFAULT_INSTRUCTIONS = ["mp"]
#: belief-icl fields each cell sets from the `settings` / `instructions` lists
PER_CELL = ("setting", "instruction")


def belief_config_params() -> list[Param]:
    return config_params([PROBE], exclude=PER_CELL)


def _body(values: dict[str, Any]) -> None:
    config = config_dict(values, belief_config_params())
    with tracked(NAME, values, values["models"], [PROBE], config) as run:
        plan = cpu_step(
            belief_plan(
                models=values["models"],
                settings=values["settings"],
                instructions=values["instructions"],
                probe=PROBE,
                config=config,
                options=run.options,
                context=run.context,
            ),
            s3=False,
        )
        build = data_step(data_build(config=config, options=run.options, probes=[PROBE], context=run.context))
        build.after(plan)
        with dsl.ParallelFor(plan.output, name="models-x-settings") as cell:
            probed = gpu_step(
                probe_belief(
                    items=build.outputs["items"],
                    model=cell.model,
                    probe=PROBE,
                    setting=cell.setting,
                    instruction=cell.instruction,
                    config=config,
                    options=run.options,
                    work_root=run.work_root,
                    **run.step_args(cell.context),
                )
            )
            probed.set_display_name("belief-icl")
        rep = cpu_step(belief_report(results=dsl.Collected(probed.outputs["results"]), context=run.context), s3=False)
        rep.set_display_name("belief-report")


def build():
    """The pipeline (built from the registry and the cluster settings in effect; see factprobe_ops.pipelines.platform.building)."""
    return make_pipeline(
        NAME,
        "factprobe-belief",
        "BELIEF-ICL (zhao2024): every template of each relation probed with ICL for several models, settings and "
        "instructions; Acc@1 with range/stdev over template draws, consistency, overconfidence with calibration "
        "plots, one-word rate, per-relation and per-template tables, logged to MLflow.",
        "Multi-prompt BELIEF-ICL probing of several models.",
        [
            models_param(),
            Param(
                "settings",
                list,
                DEFAULT_SETTINGS,
                "ICL settings, one probe run each: zero-shot, 4-random, 4-relation, 4-template.",
            ),
            Param(
                "instructions",
                list,
                DEFAULT_INSTRUCTIONS,
                "Task instructions, one probe run each: mp (mask "
                "prediction, every template) and/or qa (question templates only).",
            ),
        ],
        "ui",
        _body,
        belief_config_params(),
    )
