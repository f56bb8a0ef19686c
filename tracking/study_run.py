"""MLflow tracking of studies (`factprobe study NAME`, and the study step of the `design_space` and
`findings` pipelines, components/steps/study.py): one place for what a study run logs.

- `StudyTracking` (entry point group `factprobe.study_hooks`, pyproject.toml): the probe hook's
  flags (`--tracking-uri`, `--no-track`, `--require-tracking`, `--trigger`:
  `factprobe_ops.tracking.cli.ProbeTracking.add_arguments`) and `--experiment NAME` (experiment
  `factprobe/NAME` instead of `factprobe/study-<name>`) on every `factprobe study NAME`, and an
  MLflow run around the study. A finished folder rerun logs no second run: `factprobe.studies.cli.run_study`
  returns before any hook is entered.
- `study_run(study, config, context, ...)`: the `TrackedRun` of one study in experiment
  `factprobe/study-<name>` (`study_pipeline`) for a CLI run, or a child of the pipeline's parent run
  in the pipeline's experiment; every option logged as a parameter and the whole configuration as
  `config_json`; tags `factprobe.study`, `factprobe.config_key` (`study_key`), and the model and
  source when the study's configuration names them (a study that loads no model,
  `Study.loads_model = False`, names none: `factprobe.studies.cli.study_config`). A CLI run marks its
  experiment's primary metric as the study's headline (`headline/<study>`, greater or lower is better as declared). It ends FINISHED, FAILED when the study raised, KILLED on
  Ctrl-C or SIGTERM (`TrackedRun`). An unreachable server is one warning line (the results stay on
  disk) unless tracking is required.
- `log_study_outcome(run, study, metrics, out)`: the study's `flat_metrics` (names made safe for
  MLflow), its headline (`Study.headline_metric`) as `headline/<study>` with the tag `factprobe.headline`
  (JSON: metric, value, higher_is_better, label; nothing for a study that declares none), its figures (`study.figures(out)`) as `figures/<name>.png`, every file it wrote
  (`metrics.json`, `study_config.json`, its jsonl tables, a markdown report such as findings.md) under
  `results/`, and its tables as
  MLflow tables (`tables/<name>.json`, shown as tables by the UI) and parquet
  (`tables/<name>.parquet`): each `<out>/*.jsonl` file, and each top-level metrics entry that is a
  list of records (the curves, e.g. icl-examples' `curve`).
"""

from __future__ import annotations

import argparse
import json
import shlex
import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd

from factprobe.redact import redact

from .context import RunContext
from .conventions import experiment_name, headline_metric_name, tag
from .probe_logging import CONFIG_PARAM, HEADLINE_TAG
from .run import TrackedRun

#: the run files a study folder holds besides its own tables and figures (factprobe/studies/cli.py)
STUDY_FILES = ("metrics.json", "study_config.json")


def study_pipeline(name: str) -> str:
    """The `pipeline` of a CLI study run: its experiment is `factprobe/study-<name>`."""
    return f"study-{name}"


def study_headline_name(study) -> str:
    """The metric a study's headline is logged under: `headline/<study name>`."""
    return headline_metric_name(study.name)


def study_headline(study, metrics: dict[str, Any]) -> dict[str, Any] | None:
    """The run's headline for MLflow: {"name": `headline/<study>`, "metric", "value", "higher_is_better",
    "label"}; None when the study declares none or the run has no finite value for it."""
    row = study.headline_row(metrics)
    return None if row is None else {"name": study_headline_name(study), **row}


def study_key(config: dict[str, Any]) -> str:
    """Hash (16 hex) of a study configuration over the fields that decide results
    (`factprobe.studies.study_identity.config_key`: the device and token budget of the base config do not)."""
    from factprobe.studies.study_identity import config_key

    return config_key(config)


def study_params(config: dict[str, Any]) -> dict[str, Any]:
    """The MLflow parameters of a study run: each base and study option by name (a study option
    that shares a base option's name wins), and the whole configuration as `config_json`."""
    return {**(config.get("base") or {}), **config["params"], CONFIG_PARAM: json.dumps(config, sort_keys=True)}


def run_name(study, config: dict[str, Any]) -> str:
    """`<study>[-<model>]-<first 6 of the config key>`."""
    from factprobe.framework.reporting import model_label

    model = (config.get("base") or {}).get("model")
    return "-".join([study.name, *([model_label(str(model))] if model else []), study_key(config)[:6]])


@contextmanager
def study_run(
    study,
    config: dict[str, Any],
    context: RunContext,
    *,
    enabled: bool = True,
    required: bool = False,
    step_key: str | None = None,
    extra_tags: dict[str, str] | None = None,
    child: bool = False,
) -> Iterator[TrackedRun]:
    """The TrackedRun of one study run (module docstring): a top-level run in `context`'s
    experiment, or with `child` a child of its parent run; parameters and tags already logged."""
    base = config.get("base") or {}
    tags = {
        tag("study"): study.name,
        tag("config_key"): study_key(config),
        tag("trigger"): context.trigger or "local",
        **({tag("model"): str(base["model"])} if base.get("model") else {}),
        **({tag("source"): str(base["source"])} if base.get("source") else {}),
        **(extra_tags or {}),
    }
    head = study.headline_metric  # the experiment's primary metric: headline/<study>, in the study's direction
    run = TrackedRun.from_context(
        context,
        run_name=run_name(study, config),
        tags=tags,
        step_key=step_key,
        required=required,
        child=child,
        headline_family=study.name if head else "",
        headline_greater=head.higher_is_better if head else True,
    )
    run.enabled = run.enabled and enabled
    with run:
        run.log_params(study_params(config))
        yield run


def records_table(value: Any) -> pd.DataFrame | None:
    """A metrics entry as a table when it is a non-empty list of records (dicts), else None."""
    if isinstance(value, list) and value and all(isinstance(r, dict) for r in value):
        return pd.DataFrame(value)
    return None


def _parquet_safe(df: pd.DataFrame) -> pd.DataFrame:
    """Cells holding lists or dicts (e.g. the accuracy of each draw) as JSON text, so that any
    table writes to parquet."""
    out = df.copy()
    for col in out.columns:
        if out[col].map(lambda v: isinstance(v, (list, dict, tuple))).any():
            out[col] = out[col].map(lambda v: json.dumps(v, default=str) if isinstance(v, (list, dict, tuple)) else v)
    return out


def study_tables(metrics: dict[str, Any], out: Path) -> dict[str, pd.DataFrame]:
    """{name: table} of a finished study: each `<out>/*.jsonl` (by file stem) and each top-level
    metrics entry that is a list of records (by key; a jsonl file of the same name wins)."""
    tables = {k: t for k, v in metrics.items() if (t := records_table(v)) is not None}
    for path in sorted(Path(out).glob("*.jsonl")):
        tables[path.stem] = pd.read_json(path, lines=True) if path.stat().st_size else pd.DataFrame()
    return tables


def log_study_outcome(run: TrackedRun, study, metrics: dict[str, Any], out: Path) -> None:
    """Log a finished study's metrics, figures, files and tables (module docstring) to `run`."""
    if not run.active:
        return
    from factprobe.framework.reporting import metric_key

    out = Path(out)
    ident = metrics.get("identity")
    if isinstance(ident, dict):  # the study's measurement identity (factprobe.studies.study_identity)
        from factprobe.studies.study_identity import StudyIdentity

        run.set_tags({tag(k): v for k, v in StudyIdentity.from_dict(ident).tags().items()})
    run.log_metrics({metric_key(k): v for k, v in study.flat_metrics(metrics).items() if v is not None})
    head = study_headline(study, metrics)
    if head is not None:
        run.log_metrics({head["name"]: head["value"]})
        run.set_tags({HEADLINE_TAG: json.dumps(head)})
    for fig in study.figures(out):
        run.log_artifact(fig, "figures")
    for path in sorted(out.iterdir()):
        if path.is_file() and (path.name in STUDY_FILES or path.suffix in (".jsonl", ".md")):
            run.log_artifact(path, "results")
    for name, table in study_tables(metrics, out).items():
        safe = metric_key(name).replace("/", "_")
        run.log_table(table, f"tables/{safe}.json")
        run.log_parquet(_parquet_safe(table), f"tables/{safe}.parquet")


def cli_step_key(config: dict[str, Any], out: Path) -> str:
    """`cli/<host>/<folder>/<config key>`, as a CLI probe run's (tracking/cli.py step_key): a rerun
    after a crash marks the crashed attempt's run FAILED instead of leaving it RUNNING."""
    return f"cli/{socket.gethostname()}/{Path(out).resolve()}/{study_key(config)}"


def open_lines(uri: str, run_id: str | None, experiment: str) -> list[str]:
    """How to open run `run_id` of `experiment` in the MLflow UI (as factprobe_ops.tracking.cli.open_lines for probe runs)."""
    from .connect import open_client

    if not run_id:
        return []
    try:
        exp = open_client(uri).experiment_id(experiment)
    except Exception:  # noqa: BLE001 - only a pointer
        exp = None
    page = f"#/experiments/{exp}/runs/{run_id}" if exp else ""
    if uri.startswith(("http://", "https://")):
        return [f"MLflow run {run_id}: open {redact(uri.rstrip('/'))}/{page}"]
    mlflow = Path(sys.executable).parent / "mlflow"
    return [
        f"MLflow run {run_id}; open it in the MLflow UI:",
        f"  {mlflow if mlflow.exists() else 'mlflow'} ui --backend-store-uri {shlex.quote(uri)} --port 5000",
        f"  then open http://127.0.0.1:5000/{page}",
    ]


class StudyTracking:
    """The `factprobe.study_hooks` entry: MLflow tracking of CLI study runs (module docstring)."""

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        from .cli import ProbeTracking

        ProbeTracking().add_arguments(p)
        p.add_argument(
            "--experiment",
            default=None,
            metavar="NAME",
            help="MLflow experiment factprobe/NAME (default: factprobe/study-<study>)",
        )

    @contextmanager
    def wrap(self, args: argparse.Namespace, study, config: dict[str, Any], out: Path) -> Iterator[Callable]:
        """The MLflow run around one CLI study run; yields `after(metrics) -> lines` (the lines that
        open the run in the MLflow UI)."""
        pipeline = getattr(args, "experiment", None) or study_pipeline(study.name)
        context = RunContext.start(
            getattr(args, "tracking_uri", None) or "", pipeline=pipeline, trigger=getattr(args, "trigger", "local")
        )
        with study_run(
            study,
            config,
            context,
            enabled=not getattr(args, "no_track", False),
            required=getattr(args, "require_tracking", False),
            step_key=cli_step_key(config, out),
        ) as run:

            def after(metrics: dict[str, Any]) -> list[str]:
                log_study_outcome(run, study, metrics, out)
                return open_lines(run.uri, run.run_id, experiment_name(pipeline)) if run.active else []

            yield after


class StepStudyTracking:
    """The study hook of a pipeline step (components/steps/study.py): the study's run is a child of
    the pipeline run's parent run (`context`), tracking required (an unreachable server fails the
    step after the results are on disk), the same logging as a CLI study run. `run_id` holds the
    child run's id once it is open."""

    def __init__(self, context: RunContext, step_key: str, extra_tags: dict[str, str] | None = None) -> None:
        self.context = context
        self.step_key = step_key
        self.extra_tags = dict(extra_tags or {})
        self.run_id = ""

    @contextmanager
    def wrap(self, args: argparse.Namespace | None, study, config: dict[str, Any], out: Path) -> Iterator[Callable]:
        with study_run(
            study,
            config,
            self.context,
            enabled=self.context.tracked,
            required=True,
            step_key=self.step_key,
            extra_tags=self.extra_tags,
            child=True,
        ) as run:
            self.run_id = run.run_id or ""

            def after(metrics: dict[str, Any]) -> list[str]:
                log_study_outcome(run, study, metrics, out)
                return []

            yield after

    def log_finished(self, study, config: dict[str, Any], out: Path, metrics: dict[str, Any]) -> None:
        """Log a study folder that an earlier pipeline run finished (its work folder reused): this
        pipeline run still gets its child run (the study computes nothing again)."""
        with self.wrap(None, study, config, out) as after:
            after(metrics)
