"""The `findings` pipeline (issue 20 item 6): `factprobe study findings` as one tracked pipeline
step: the papers' qualitative claims measured on several models, each judged holds / does not hold /
inconclusive with its numbers, 95% interval and n (factprobe/studies/findings.py).

Steps, inside the tracked scaffold (pipelines/scaffold.py: MLflow parent run, finalized whatever
happens): `findings` (`run-study`, a GPU step: every probe and study the claims need, for every
model of `models`, in one study run; a child MLflow run with the findings table as an MLflow table,
`findings.md` and `findings.png`).

Its parameters are the findings study's options (`models` as a list, like the other pipelines) and
the common ones; `budget` sizes every step (tiny, small: about 30 minutes for two models on 2 CPU
cores, paper).

Compile: `factprobe pipeline compile` (writes build/pipelines/findings.yaml).
Run locally: `factprobe pipeline run findings --param models='["smollm2-135m-instruct","gemma-3-270m"]'
--param relations=P36,P19 --param budget=small`.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any

from factprobe.studies.findings import PROBES as FINDINGS_PROBES
from factprobe_ops.components.study import run_study

from .params import Param, config_dict, dataclass_params, make_pipeline
from .platform import gpu_step
from .probe import models_param
from .scaffold import tracked

NAME = "findings"
STUDY = "findings"
#: the probes the findings study runs (the parent run's headline and the `options` check read them)
PROBES = list(FINDINGS_PROBES)


def findings_config_params() -> list[Param]:
    """The findings study's options but `models` (a list parameter of its own), with the study's
    defaults (not the probe pipelines' sample size: `budget` is sized for them)."""
    from factprobe.studies.registry import get_study

    cls = get_study(STUDY).config_class
    defaults = {f.name: f.default for f in fields(cls) if f.default is not MISSING}
    out = []
    for p in dataclass_params(cls, exclude=("models",)):
        if p.type is not str and isinstance(p.default, str):  # a probe-pipeline default (PIPELINE_DEFAULTS) of another type
            p = Param(p.name, p.type, defaults[p.name], p.help)
        out.append(p)
    return out


def _body(values: dict[str, Any]) -> None:
    config = config_dict(values, findings_config_params())
    with tracked(NAME, values, values["models"], PROBES, config) as run:
        step = gpu_step(
            run_study(
                study=STUDY,
                model="",
                config=config,
                options=run.options,
                params={},
                models=values["models"],
                context=run.context,
                work_root=run.work_root,
            )
        )
        step.set_display_name("findings")


def check_studies(values: dict[str, Any], config: dict[str, Any]) -> None:
    """Build the findings study's configuration as its step will (factprobe_ops.pipelines.catalogue.validate_params):
    a bad option fails before anything runs, in the study config's one line."""
    from factprobe_ops.components.steps.study import study_step_config

    study_step_config(STUDY, "", config, {"models": values.get("models")})


def build():
    """The pipeline (built from the registry and the cluster settings in effect; see factprobe_ops.pipelines.platform.building)."""
    return make_pipeline(
        NAME,
        "factprobe-findings",
        "The papers' qualitative claims (wu2024, youssef2024, zhao2024, yuan2024) measured on several models: each "
        "holds, does not hold or is inconclusive, with its numbers, 95% interval and n; the table logged to MLflow.",
        "The findings table: the papers' claims checked on your models.",
        [models_param()],
        "ui",
        _body,
        findings_config_params(),
    )
