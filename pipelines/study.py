"""The generic `study` pipeline: any registered study (`factprobe study NAME`, factprobe/studies/registry.py,
built-in or plug-in) as a tracked pipeline run, so a new study needs no pipeline module, catalogue entry or
spec-test edit of its own.

Steps, inside the tracked scaffold (pipelines/scaffold.py: MLflow parent run, finalized whatever
happens):
- `plan-study` (CPU) checks the study name, its `options` and the study configuration of every model, and
  gives the cells: one per model for a study that loads a model (`Study.names_model`), else one cell (a
  study of several models, such as findings, gets the `models` list as its `models` option);
- `run-study` (GPU, a ParallelFor over the cells): the study for one cell, a child MLflow run with its
  metrics, headline, figures and tables (tracking/study_run.py), as `factprobe study NAME` logs it.

Parameters: `study` (the registered study's name), `models`, and the common ones; the study's own options
(its config class's fields, and the base config fields it uses: source, data, relations, seed, ...) go
into `options`, one JSON object (`{"n": "0,1,5", "draws": 2}`).

Why `study` + `options` rather than one parameter per option: a compiled Kubeflow pipeline has a fixed
parameter list, and the registered studies' options together (three built-in studies already have 40)
exceed what a form shows (`params.MAX_PARAMS`) and would change with every study added, plug-ins included.
One `options` object takes the options of any study, and the form still shows them: the `study` parameter's
description lists every registered study with its options, generated from each study's config class when the
pipeline is compiled. `options` is validated against the chosen study's config class twice with the study's
own one-line ConfigError (`unknown option 'x' for study icl-examples; its options: ...`, `draws=0: must be
>= 1`): by `factprobe pipeline run|submit|schedule` before anything is sent (`check_studies`, called by
factprobe_ops.pipelines.catalogue.validate_params), and by the `plan-study` step before any model loads (a run
started from the Kubeflow form).

Compile: `factprobe pipeline compile` (writes build/pipelines/study.yaml).
Run locally: `factprobe pipeline run study --param study=icl-examples --param models='["smollm2-135m-instruct"]'
--param options='{"source": "lama", "relations": "P36", "n": "0,1,5", "draws": 2}'`; any study option may also be
given as `--param K=V` (it goes into `options`).
"""

from __future__ import annotations

from typing import Any

from kfp import dsl

from factprobe_ops.components.study import plan_study, run_study

from .params import Param, make_pipeline
from .platform import cpu_step, gpu_step
from .probe import DEFAULT_MODELS
from .scaffold import tracked

NAME = "study"
#: the study a run of the form runs unless another is chosen
DEFAULT_STUDY = "icl-examples"
MODELS_HELP = (
    "Models: built-in aliases (smollm2-135m-instruct, gemma-3-270m), Hugging Face hub ids, PEFT adapter folders "
    "or folders on a mounted volume. A study that loads one model runs once per model; a study of several "
    "models (findings) gets the list as its `models` option."
)
#: this pipeline runs no probe of its own (the catalogue's probe checks do not apply: `check_studies` does its own)
PROBES: list[str] = []


def study_help() -> str:
    """The `study` parameter's description: every registered study with its options (what `options` takes)."""
    from factprobe.studies.registry import load_studies
    from factprobe_ops.components.steps.study import study_option_names

    listed = "; ".join(f"{name} ({', '.join(study_option_names(name)) or 'no options'})" for name in load_studies())
    return f"The registered study to run, and in brackets the options it takes in `options`: {listed}."


def own_params() -> list[Param]:
    """`study` and `models` (the pipeline's own parameters; the study's options travel in `options`)."""
    from factprobe.studies.registry import available

    default = DEFAULT_STUDY if DEFAULT_STUDY in available() else (available() or [""])[0]
    return [Param("study", str, default, study_help()), Param("models", list, list(DEFAULT_MODELS), MODELS_HELP)]


def _body(values: dict[str, Any]) -> None:
    config: dict[str, Any] = {}  # every study option travels in `options`
    with tracked(NAME, values, values["models"], PROBES, config) as run:
        plan = cpu_step(
            plan_study(study=values["study"], models=values["models"], config=config, options=run.options, context=run.context),
            s3=False,
        )
        with dsl.ParallelFor(plan.output, name="study-cells") as cell:
            step = gpu_step(
                run_study(
                    study=values["study"],
                    model=cell.model,
                    config=config,
                    options=run.options,
                    params={},
                    models=values["models"],
                    context=cell.context,
                    work_root=run.work_root,
                )
            )
            step.set_display_name("study")


def build():
    """The pipeline (built from the registry and the cluster settings in effect; see factprobe_ops.pipelines.platform.building)."""
    return make_pipeline(
        NAME,
        "factprobe-study",
        "Any registered study (factprobe study NAME: icl-examples, icl-sequence, findings or a plug-in) for your "
        "models, with its options; each run a child MLflow run with its metrics, headline, figures and tables.",
        "Run any registered study; its options go into `options` (the `study` parameter lists them).",
        own_params(),
        "ui",
        _body,
        (),
    )


def option_names(values: dict[str, Any]) -> set[str]:
    """The names `factprobe pipeline run study --param K=V` puts into `options`: the chosen study's options
    (factprobe_ops.pipelines.catalogue.parse_params)."""
    from factprobe_ops.components.steps.study import study_option_names

    return set(study_option_names(str(values.get("study") or DEFAULT_STUDY)))


def check_studies(values: dict[str, Any], config: dict[str, Any]) -> None:
    """Check what the plan step will check (factprobe_ops.pipelines.catalogue.validate_params): the study
    exists, every option is one of its own, and the study configuration of every model builds."""
    from factprobe_ops.components.steps.study import run_study_plan

    run_study_plan(str(values.get("study") or ""), list(values.get("models") or []), config)
