"""The `design_space` pipeline (wu2024 section 3 and 4.2, issue 20 items 1-4): per model, the
number-of-examples curve, the position study with injected examples, and the IC-LKE probe run
(with its Accuracy@K); then the cross-model report over the models' IC-LKE runs.

Steps, inside the tracked scaffold (pipelines/scaffold.py: MLflow parent run, finalized whatever
happens):
- `plan-matrix` validates the IC-LKE run config of every model; `data-build` builds the items once;
- per model (ParallelFor over the plan's cells), GPU steps (`gpu_step`):
  - `probe-model`: the `ic-lke` probe (Accuracy@K over K comes with every multiple-choice run);
  - `icl-examples` (`run-study`): `factprobe study icl-examples` with the pipeline's `n` and `draws`
    (Figure 1: mean and std per n, n95);
  - `icl-sequence-unknown` and `icl-sequence-incorrect` (`run-study`): `factprobe study
    icl-sequence` with `--kind unknown` / `--kind incorrect` and the pipeline's `length`,
    `replace` and `placement` (Figures 2a-2e; a variant also scores the clean sequence);
  each study is a child MLflow run with its curves as figures and the numbers underneath as MLflow
  tables (tracking/study_run.py);
- `report`: the generic report over the models' IC-LKE runs (the model x relation heatmap, the
  cross-model maps and Accuracy@K that the multiple-choice report part draws), on the parent run.

One fact source per run (`source`, `relations`): `make run-design-space` runs it twice, on a few
LAMA relations and on Nobel birth years (`source=nobel`).

Compile: `factprobe pipeline compile` (writes build/pipelines/design_space.yaml).
Run locally: `factprobe pipeline run design_space --param models='["smollm2-135m-instruct"]'
--param source=lama --param relations=P36,P19 --param n=0,1,5,10 --param draws=2 --param length=60 --param replace=12`.
"""

from __future__ import annotations

from typing import Any

from kfp import dsl

from factprobe_ops.components.data_build import data_build
from factprobe_ops.components.plan import plan_matrix
from factprobe_ops.components.probe import probe_model
from factprobe_ops.components.report import report
from factprobe_ops.components.study import run_study

from .params import Param, config_dict, config_params, dataclass_params, make_pipeline
from .platform import cpu_step, data_step, gpu_step
from .probe import models_param
from .scaffold import tracked

NAME = "design_space"
#: the probe of this pipeline (its options are parameters; catalogue.pipeline_probes reads PROBES)
PROBES = ["ic-lke"]
#: the icl-sequence variants each model runs (each also scores the clean sequence: Figure 2a)
SEQUENCE_KINDS = ("unknown", "incorrect")
#: the studies' own options that are parameters here (the rest keep their defaults)
STUDY_OPTIONS = {"icl-examples": ("n", "draws"), "icl-sequence": ("length", "replace", "placement")}


def study_params() -> list[Param]:
    """The studies' options that are pipeline parameters (`STUDY_OPTIONS`), from their config classes."""
    from factprobe.studies.registry import get_study

    return [
        p
        for name, fields in STUDY_OPTIONS.items()
        for p in dataclass_params(get_study(name).config_class, fields, prefix=f"{name}: ")
    ]


def design_config_params() -> list[Param]:
    """The config-carrying parameters: the IC-LKE probe's (pipelines/params.py rules 2-3), then the studies'."""
    probe = config_params(PROBES)
    names = {p.name for p in probe}
    return probe + [p for p in study_params() if p.name not in names]


def sequence_params(kind: str) -> dict[str, Any]:
    """An icl-sequence step's own options: its kind; the sequence is drawn from every fact of a
    relation, so the probe's fact cap does not apply. The pipeline's training data reaches the study
    as a second source of truth (never drawn into the sequence): an "incorrect" object or a
    "fictitious" subject that is true or real there is never used (issue 29 item 6)."""
    return {"kind": kind, "max_facts_per_relation": ""}


def _body(values: dict[str, Any]) -> None:
    config = config_dict(values, design_config_params())
    with tracked(NAME, values, values["models"], PROBES, config) as run:
        plan = cpu_step(
            plan_matrix(models=values["models"], probes=PROBES, config=config, options=run.options, context=run.context), s3=False
        )
        build = data_step(data_build(config=config, options=run.options, probes=PROBES, context=run.context))
        build.after(plan)
        with dsl.ParallelFor(plan.output, name="models") as cell:
            common = {
                "model": cell.model,
                "config": config,
                "options": run.options,
                "work_root": run.work_root,
                **run.step_args(cell.context),
            }
            probed = gpu_step(probe_model(items=build.outputs["items"], probe=cell.probe, **common))
            probed.set_display_name("ic-lke")
            examples = gpu_step(run_study(study="icl-examples", params={}, **common))
            examples.set_display_name("icl-examples")
            for kind in SEQUENCE_KINDS:
                seq = gpu_step(run_study(study="icl-sequence", params=sequence_params(kind), **common))
                seq.set_display_name(f"icl-sequence-{kind}")
        rep = cpu_step(report(results=dsl.Collected(probed.outputs["results"]), context=run.context), s3=False)
        rep.set_display_name("cross-model-report")


def build():
    """The pipeline (built from the registry and the cluster settings in effect; see factprobe_ops.pipelines.platform.building)."""
    return make_pipeline(
        NAME,
        "factprobe-design-space",
        "IC-LKE design space (wu2024 section 3, 4.2): per model the number-of-examples curve (Figure 1), the position "
        "study with unknown and incorrect examples injected (Figure 2) and the IC-LKE run with Accuracy@K; then the "
        "cross-model maps (heatmap, Pearson, subsumption) over the models' runs; logged to MLflow.",
        "The IC-LKE design-space studies and cross-model maps for several models.",
        [models_param()],
        "ui",
        _body,
        design_config_params(),
    )


def check_studies(values: dict[str, Any], config: dict[str, Any]) -> None:
    """Build every study configuration the steps will build (factprobe_ops.pipelines.catalogue.validate_params),
    so a bad study option (`draws=0`, `placement=middle`) fails before anything runs, with the
    study config's one-line ConfigError."""
    from factprobe_ops.components.steps.study import study_step_config

    for model in values.get("models") or ["-"]:
        study_step_config("icl-examples", str(model), config)
        for kind in SEQUENCE_KINDS:
            study_step_config("icl-sequence", str(model), config, sequence_params(kind))
