"""Names and tags every factprobe run follows.

- Experiment: `factprobe/<pipeline>` (`factprobe/probe` for a plain CLI probe run).
- Parent run per pipeline run; one nested child per step (`mlflow.parentRunId`).
- Tags: `factprobe.model`, `factprobe.model_revision`, `factprobe.dataset_digest`,
  `factprobe.git_sha`, `factprobe.trigger` (local|ui|nightly|ci), `factprobe.kfp_run_id`,
  `factprobe.step`, `factprobe.probe`, `factprobe.config_key`; and MLflow's standard
  `mlflow.user` and `mlflow.source.git.commit` (`standard_tags`).
- Metrics: what each probe declares (`Probe.flat_metrics`, e.g. `accuracy`, `accuracy/<relation>`, `em/P36`);
  and on every probe run its headline metric under one name per probe family, `headline/<family>`
  (`headline_metric_name`; the family is the probe's `headline_metric.family`: `headline/accuracy`,
  `headline/em`, `headline/coherency`, `headline/belief_accuracy`, or a plug-in's own), whatever
  the pipeline, so all probe runs of a family sort by one column.
- Experiments are tagged (`experiment_tags`) as model development, so the MLflow 3 UI opens the
  runs table, with the pipeline's headline metric as primary metric: the headline family of the
  first of its probes that declares one, given by whoever opens the experiment's first run (a
  pipeline's start step, components/steps/start_run.py); `DEFAULT_HEADLINE_FAMILY` otherwise.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

TRIGGERS = ("local", "ui", "nightly", "ci")
TAG_PREFIX = "factprobe."


def experiment_name(pipeline: str) -> str:
    """MLflow experiment for a pipeline (or `probe` for CLI runs)."""
    return f"factprobe/{pipeline}"


def resolve_tracking_uri(*given: str | None) -> str:
    """Where MLflow is: the first of `given` that is set (not None, not blank; a command's
    `--tracking-uri`, a pipeline's `tracking_uri` parameter, in the caller's order of precedence),
    else `MLFLOW_TRACKING_URI`, else the embedded sqlite store `sqlite:///<cwd>/mlruns.db`. The one
    place this rule is written; "none" is returned as given (tracking off, `context.TRACKING_OFF`)."""
    for uri in given:
        if uri is not None and str(uri).strip():
            return str(uri).strip()
    return os.environ.get("MLFLOW_TRACKING_URI", "").strip() or f"sqlite:///{Path.cwd() / 'mlruns.db'}"


def git_sha() -> str:
    """Commit of the factprobe checkout (env `FACTPROBE_GIT_SHA` wins, e.g. inside containers)."""
    env = os.environ.get("FACTPROBE_GIT_SHA")
    if env:
        return env
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            check=False,
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def run_user() -> str:
    """Who starts the run, for MLflow's `mlflow.user` tag: `FACTPROBE_USER` when set (a pipeline
    step runs as the container's user, so a launcher can pass the person or CI job here), else the
    login name of the process, as MLflow's own client records it; "unknown" if there is none."""
    import getpass

    env = os.environ.get("FACTPROBE_USER", "").strip()
    if env:
        return env
    try:
        return getpass.getuser() or "unknown"
    except (KeyError, OSError):  # no passwd entry (arbitrary UID in a container) and no USER variable
        return "unknown"


def standard_tags() -> dict[str, str]:
    """MLflow's standard tags every run carries: `mlflow.user` and, when the checkout is known,
    `mlflow.source.git.commit` (the same commit as `factprobe.git_sha`)."""
    sha = git_sha()
    out = {"mlflow.user": run_user()}
    if sha and sha != "unknown":
        out["mlflow.source.git.commit"] = sha
    return out


def headline_metric_name(family: str) -> str:
    """The one metric name a probe family's headline is logged under on every probe run."""
    return f"headline/{family}"


#: the headline family of an experiment whose runs name none (a plain CLI probe run's `factprobe/probe`)
DEFAULT_HEADLINE_FAMILY = "accuracy"
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
PRIMARY_METRIC_TAG = "mlflow.experiment.primaryMetric.name"
PRIMARY_GREATER_TAG = "mlflow.experiment.primaryMetric.greaterIsBetter"


def experiment_tags(headline_family: str = "", greater_is_better: bool = True) -> dict[str, str]:
    """The experiment tags of a `factprobe/<pipeline>` experiment: kind `custom_model_development`
    (the MLflow 3 UI then opens the runs table, not the GenAI traces view) and the primary metric,
    the headline metric of `headline_family` ('' = `DEFAULT_HEADLINE_FAMILY`) and whether greater is
    better (a study's headline may be lower-is-better, tracking/study_run.py)."""
    return {
        EXPERIMENT_KIND_TAG: "custom_model_development",
        PRIMARY_METRIC_TAG: headline_metric_name(headline_family or DEFAULT_HEADLINE_FAMILY),
        PRIMARY_GREATER_TAG: "true" if greater_is_better else "false",
    }


def tag(name: str) -> str:
    return TAG_PREFIX + name
