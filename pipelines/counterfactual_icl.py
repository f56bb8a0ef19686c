"""The `counterfactual_icl` pipeline (yuan2024 section 4): build the QA set once, then per model
(ParallelFor) QA over every split -> the model's known/unknown table -> counterfactual ICL reading
that table; one cross-model report (Figure 7) at the end.

Per model, two GPU steps:

1. `probe-known-unknown`: the `qa` probe with `split=all` and `shots=0,<known_shots>`. Its k = 0
   answers give the zero-shot EM of the evaluation split (Figure 7's zero-shot line); its regular
   `known_shots`-shot answers over the train split (the exemplar pool) decide which facts the model
   knows, written as `known_unknown.parquet` (the step's `table` artifact, logged to MLflow as a
   dataset input of the QA child run).
2. `probe-with-known-unknown`: the `counterfactual` probe with `known_unknown` pointing at that
   table (no second pool pass): regular and counterfactual `known_shots`-shot, then known/unknown x
   shuffle/unshuffle for every k of `shots` (default 10,15,20,32).

`counterfactual-report` then draws Figure 7 across models (with each model's zero-shot EM), Figure 6
and the tables, logged to the MLflow parent run.

Compile: `factprobe pipeline compile` (writes build/pipelines/counterfactual_icl.yaml).
Run locally: `factprobe pipeline run counterfactual_icl --param models='["smollm2-135m-instruct"]'
--param source=lama --param train_data=../shared/data/lpaqa/trex_train --param relations=P36,P19`.
"""

from __future__ import annotations

from typing import Any

from kfp import dsl

from factprobe_ops.components.counterfactual_report import counterfactual_report
from factprobe_ops.components.data_build import data_build
from factprobe_ops.components.known_unknown import probe_known_unknown, probe_with_known_unknown
from factprobe_ops.components.plan import plan_matrix

from .params import Param, config_dict, config_params, make_pipeline
from .platform import cpu_step, data_step, gpu_step
from .probe import models_param
from .scaffold import tracked

NAME = "counterfactual_icl"
#: the probes of this pipeline (one QA dataset kind: data_build builds it once)
PROBES = ["qa", "counterfactual"]
#: options the steps set themselves: the QA step's split (`qa_overrides`), the counterfactual step's table
SET_BY_STEPS = ("split", "known_unknown")


def cf_config_params() -> list[Param]:
    return config_params(PROBES, exclude=SET_BY_STEPS)


def qa_overrides(known_shots: Any) -> dict[str, Any]:
    """The QA step's own config: every split (the train split is the exemplar pool that the
    known/unknown table classifies), k = 0 first (the probe's top-level scores are those of its
    first k over the evaluation split: the zero-shot EM), then the regular `known_shots`-shot block
    whose answers make the table (the qa probe's first k > 0). `known_shots` is a pipeline channel:
    it reaches the step as a placeholder inside the list, resolved by the KFP driver."""
    return {"split": "all", "shots": [0, known_shots]}


def _body(values: dict[str, Any]) -> None:
    config = config_dict(values, cf_config_params())
    # The tracked scaffold (pipelines/scaffold.py), plan (validates the config for every model),
    # data build once; then this pipeline's own loop.
    with tracked(NAME, values, values["models"], PROBES, config) as run:
        # One cell per model (the counterfactual probe's config is validated for each); the run
        # context rides in the cell, as in probe_dag.
        plan = cpu_step(
            plan_matrix(
                models=values["models"], probes=["counterfactual"], config=config, options=run.options, context=run.context
            ),
            s3=False,
        )
        build = data_step(data_build(config=config, options=run.options, probes=PROBES, context=run.context))
        build.after(plan)
        with dsl.ParallelFor(plan.output, name="models") as cell:
            common = {
                "items": build.outputs["items"],
                "model": cell.model,
                "config": config,
                "options": run.options,
                "work_root": run.work_root,
                **run.step_args(cell.context),
            }
            qa = gpu_step(probe_known_unknown(probe="qa", overrides=qa_overrides(values["known_shots"]), **common))
            qa.set_display_name("qa-known-unknown")
            cf = gpu_step(probe_with_known_unknown(table=qa.outputs["table"], probe="counterfactual", overrides={}, **common))
            cf.set_display_name("counterfactual-icl")
        rep = cpu_step(
            counterfactual_report(
                qa_results=dsl.Collected(qa.outputs["results"]),
                counterfactual_results=dsl.Collected(cf.outputs["results"]),
                context=run.context,
            ),
            s3=False,
        )
        rep.set_display_name("counterfactual-report")


def build():
    """The pipeline (built from the registry and the cluster settings in effect; see factprobe_ops.pipelines.platform.building)."""
    return make_pipeline(
        NAME,
        "factprobe-counterfactual-icl",
        "Counterfactual ICL (yuan2024): per model, QA over all splits makes the known/unknown table, then regular vs "
        "counterfactual exemplars from known and unknown facts; Figure 7 across models, logged to MLflow.",
        "Counterfactual in-context learning with known and unknown knowledge, for several models.",
        [models_param()],
        "ui",
        _body,
        cf_config_params(),
    )
