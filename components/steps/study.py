"""Step: run one registered study (`factprobe study NAME`'s study, factprobe/studies) for one model
in a pipeline run, logged as a child of the pipeline's MLflow parent run (tracking/study_run.py:
the same logging as a CLI study run)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from factprobe_ops.tracking.context import RunContext


def study_work_dir(work_root: str, name: str, key: str) -> Path:
    """Stable working folder of a study (a rerun of the same configuration reuses it): `<root>/study/<name>-<key>`."""
    import os

    from factprobe.paths import cache_root

    root = Path(work_root or os.environ.get("FACTPROBE_WORK") or cache_root() / "work")
    return root / "study" / f"{name}-{key}"


def study_step_config(name: str, model: str, config: dict, params: dict | None = None) -> dict[str, Any]:
    """The study's configuration (`factprobe.studies.cli.study_config`) from the pipeline's config
    dict (its `options` expanded), the step's `model` (none when empty) and the step's own `params`
    (e.g. {"kind": "unknown"}), which win. Options of the dict that are not the study's are ignored;
    a bad value raises the study config's one-line ConfigError."""
    from factprobe.studies.cli import study_config
    from factprobe.studies.registry import get_study

    from ._common import expand_options

    given = {**expand_options(config), **({"model": model} if model else {}), **(params or {})}
    return study_config(get_study(name), given)


def run_study_step(
    out_dir: str, name: str, model: str, config: dict, params: dict | None, context: RunContext | str, work_root: str = ""
) -> dict[str, Any]:
    """Run study `name` for `model` into a stable work folder (claimed; a finished folder of the
    same configuration is reused and computes nothing) and copy every file it wrote to `out_dir`.
    Logs a child run of the pipeline run (`context`, the start step's `RunContext` JSON) with the
    study's metrics, figures and tables; tracking is required when the context is tracked.
    SIGTERM (pod eviction) stops it like Ctrl-C: the child run ends KILLED.
    Returns {"scalars" (the flat metrics without '/'), "run_id", "files", "study", "model"}."""
    import shutil

    from factprobe.framework.reporting import metric_key
    from factprobe.studies.cli import run_study
    from factprobe.studies.registry import get_study
    from factprobe.studies.study_identity import study_identity
    from factprobe_ops.tracking.context import RunContext
    from factprobe_ops.tracking.conventions import tag
    from factprobe_ops.tracking.study_run import StepStudyTracking, study_key

    study = get_study(name)
    cfg = study_step_config(name, model, config, params)
    # the work folder is keyed by the config and the identity (weights, input bytes, numerics)
    key = f"{study_key(cfg)}-{study_identity(cfg, study_key(cfg)).key()}"
    ctx = RunContext.from_json(context)
    work = study_work_dir(work_root, name, key)
    hook = StepStudyTracking(
        ctx,
        step_key=f"{ctx.pipeline}/{ctx.kfp_run_id}/study/{name}-{key}",
        extra_tags={tag("step"): "study", tag("kfp_run_id"): ctx.kfp_run_id},
    )
    from .progress import PROGRESS_PREFIX, ProgressLog

    label = f"{name} {Path(model).name}" if model else name
    from .probe import when_free

    # another pipeline of the same identity on the same volume: wait for it, then reuse its work
    metrics, _, finished = when_free(
        lambda: run_study(
            study,
            cfg,
            work,
            progress=False,
            hooks=[hook],
            step=lambda msg: print(f"{PROGRESS_PREFIX}{label}: {msg}", flush=True),
            batch_progress=lambda what: ProgressLog(what),
        )
    )
    if finished:
        hook.log_finished(study, cfg, work, metrics)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for path in sorted(work.iterdir()):
        if path.is_file() and not path.name.startswith("."):
            shutil.copy2(path, out / path.name)
            files.append(path.name)
    for line in study.summary(metrics):
        print(f"{name} {model}: {line}", flush=True)
    scalars = {metric_key(k): v for k, v in study.flat_metrics(metrics).items() if "/" not in k and v is not None}
    return {"scalars": scalars, "run_id": hook.run_id, "files": files, "study": name, "model": model}


def study_option_names(name: str) -> list[str]:
    """The options study `name` takes in the generic `study` pipeline's `options`: its config class's
    fields and the base config fields it uses (`factprobe.studies.cli.base_fields`), less the ones the
    pipeline sets itself (`model`, and `models` for a study with that option: the `models` parameter)."""
    from dataclasses import fields

    from factprobe.config import PIPELINE
    from factprobe.framework.config import BaseConfig
    from factprobe.studies.cli import base_fields
    from factprobe.studies.registry import get_study

    study = get_study(name)
    own = [f.name for f in fields(study.config_class) if f.metadata.get(PIPELINE, True)]
    base = [f.name for f in fields(BaseConfig) if f.name in base_fields(study) and f.metadata.get(PIPELINE, True)]
    return [n for n in dict.fromkeys(base + own) if n not in ("model", "models", "out")]


def check_study_options(name: str, config: dict) -> None:
    """Refuse an `options` key (the pipeline's config dict, components/steps/_common.py) that is no
    option of study `name` (`study_option_names`): one ConfigError naming the key and the study's options."""
    from factprobe.errors import ConfigError

    from ._common import parse_options

    known = study_option_names(name)
    for key in parse_options(config.get("options")):
        if key in ("model", "models"):
            raise ConfigError(f"options: {key!r} is set by the pipeline's `models` parameter; set it there")
        if key not in known:
            raise ConfigError(f"options: unknown option {key!r} for study {name}; its options: {', '.join(known)}")


def takes_models(name: str) -> bool:
    """Whether study `name` runs several models in one run (its config has a `models` option, as findings)."""
    from factprobe.studies.registry import get_study

    return "models" in get_study(name).config_class.field_names()


def run_study_plan(name: str, models: list, config: dict, context: str = "") -> list:
    """The cells the generic `study` pipeline fans out over, after checking everything a step would
    check (the study exists, its `options`, the study configuration of every cell), so a bad value
    fails here, before any model loads:
    - a study that loads `base.model`: one cell per model, [{"model": m, "context": context}, ...];
    - a study of several models (a `models` option) or of none: one cell, {"model": "", "context": context}
      (the step passes the `models` list as the study's `models` option).
    The run context rides along in each cell (see pipelines/probe.py for why)."""
    from factprobe.errors import ConfigError
    from factprobe.studies.registry import available, get_study

    if name not in available():
        raise ConfigError(f"parameter study: unknown study {name!r}; registered: {', '.join(available()) or 'none'}")
    study = get_study(name)
    check_study_options(name, config)
    odd = [m for m in models if not isinstance(m, str) or not m.strip()]
    if odd:
        raise ConfigError(f"parameter models: {odd[0]!r} is not a model name; give names (aliases, folders or hub ids)")
    if study.names_model():
        if not models:
            raise ConfigError(f"parameter models: the models list is empty; study {name} runs once per model")
        for m in models:
            study_step_config(name, str(m), config)
        return [{"model": str(m), "context": context} for m in models]
    if takes_models(name) and not models:
        raise ConfigError(f"parameter models: the models list is empty; study {name} needs at least one model")
    study_step_config(name, "", config, {"models": list(models)} if takes_models(name) else None)
    return [{"model": "", "context": context}]
