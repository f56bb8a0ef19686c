"""What the tracking layer adds to the `factprobe` command line (entry points in pyproject.toml).

- `ProbeTracking` (group `factprobe.probe_hooks`): `--tracking-uri`, `--no-track`,
  `--require-tracking`, `--trigger` on every `factprobe probe <probe>`, and an MLflow run around
  the probe: the results are logged when it finishes, and the run is marked FAILED when it fails
  or KILLED when it is interrupted (Ctrl-C, SIGTERM). The run is opened on a background thread
  while the probe scores (importing mlflow and opening a store took 4-6 s before the first
  forward); with `--require-tracking` it is opened before scoring, so that a store that cannot be
  reached stops the run before any compute. A store that cannot be reached when the run opens is
  one warning line (the results stay on disk, exit 0); a logging call that fails once the MLflow
  run exists (a refused batch, a server gone) marks that run FAILED and the command exits 1
  (`logging_failed`), never 0 over a half-logged run.
- `register` (group `factprobe.commands`): `factprobe compare`, `factprobe regress` and
  `factprobe baseline promote`.
"""

from __future__ import annotations

import argparse
import shlex
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Self

from factprobe.redact import redact


class EnteredInBackground:
    """Enters the context manager `make()` returns on a daemon thread, so the caller goes on at once.

    `result()` waits for the thread and returns what the context manager's `__enter__` returned
    (re-raising what the thread raised). On exit the thread is waited for, then the context manager
    is exited with the block's exception, if any: a run opened in the background still ends FAILED or
    KILLED when the block fails or is interrupted. An error of the thread that nobody asked for
    (`result()` not called) is raised on a clean exit."""

    def __init__(self, make: Callable[[], AbstractContextManager]) -> None:
        self._make = make
        self._cm: AbstractContextManager | None = None
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._enter, name="factprobe-tracking-open", daemon=True)

    def _enter(self) -> None:
        try:
            cm = self._make()
            self._value = cm.__enter__()
            self._cm = cm
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread by result() / __exit__
            self._error = exc

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return self._value

    def __exit__(self, exc_type, exc, tb) -> bool:
        self._thread.join()
        if self._cm is None:
            if exc_type is None and self._error is not None:
                raise self._error
            return False
        return bool(self._cm.__exit__(exc_type, exc, tb))


def _warn_beside_bar(message: str) -> None:
    """A run's one-line warning (`warning: ...` on stderr, credentials masked) that does not break a
    progress bar drawn at the same time (`tqdm.write`): the run may be opened while the probe scores."""
    from tqdm.auto import tqdm

    tqdm.write(f"warning: {redact(message)}", file=sys.stderr)


class ProbeTracking:
    """The `factprobe.probe_hooks` entry: MLflow tracking of CLI probe runs.

    `background` (default True): open the MLflow run on a background thread while the probe scores
    (`EnteredInBackground`); False, or `--require-tracking`, opens it before scoring."""

    background: bool = True

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        g = p.add_argument_group("tracking")
        g.add_argument("--tracking-uri", help="MLflow tracking URI (default sqlite:///mlruns.db here)")
        g.add_argument("--no-track", action="store_true", help="do not log to MLflow")
        g.add_argument("--require-tracking", action="store_true", help="fail (exit 1) if MLflow logging fails")
        g.add_argument("--trigger", default="local", choices=["local", "ui", "nightly", "ci"], help="factprobe.trigger tag")

    @contextmanager
    def wrap(self, args: argparse.Namespace, cfg, out: Path) -> Iterator[Callable]:
        """The MLflow run around one probe run (called once the run is validated and its model
        loaded); yields `after(outcome) -> lines`, which logs the outcome. Opened in the background
        unless `--require-tracking`, `--no-track` or `background` is False (see the class)."""
        from .probe_logging import log_probe_outcome

        def opened() -> AbstractContextManager:
            from .context import RunContext
            from .probe_run import probe_run

            context = RunContext.start(args.tracking_uri or "", pipeline="probe", trigger=args.trigger)
            return probe_run(
                cfg,
                context,
                enabled=not args.no_track,
                required=args.require_tracking,
                step_key=step_key(cfg, out),
                run_name=run_name(cfg),
                warn=_warn_beside_bar,
            )

        eager = args.no_track or args.require_tracking or not self.background
        with opened() if eager else EnteredInBackground(opened) as held:

            def after(outcome) -> list[str]:
                run = held if eager else held.result()
                log_probe_outcome(run, outcome, cfg)
                if run.failure:  # a half-logged run is never reported as a success (exit 1)
                    raise logging_failed(run, out)
                return open_lines(run.uri, run.run_id) if run.active else []

            yield after

    def needs_logging(self, args: argparse.Namespace, cfg, out: Path) -> bool:
        """For a folder that already holds its finished run: True unless MLflow already has a FINISHED
        run of it (same step key). A run whose logging failed (server down, crash after the results
        were written) is logged by the rerun; a logged one is not logged twice. An unreachable store
        answers True, so the run opens and fails or warns as any tracked run does."""
        if args.no_track:
            return False
        from .conventions import resolve_tracking_uri

        try:
            return finished_run(resolve_tracking_uri(args.tracking_uri), step_key(cfg, out)) is None
        except Exception:  # noqa: BLE001 - the tracked run reports an unreachable store itself
            return True

    def already_finished(self, args: argparse.Namespace, cfg, out: Path) -> list[str]:
        """Where the MLflow run of a folder's earlier, finished run is (found by its step key):
        the lines that open it, or one line saying none was found. [] with `--no-track`."""
        if args.no_track:
            return []
        from .conventions import resolve_tracking_uri

        uri = resolve_tracking_uri(args.tracking_uri)
        try:
            found = finished_run(uri, step_key(cfg, out))
        except Exception:  # noqa: BLE001 - only a pointer: an unreachable store is not an error here
            found = None
        if found is None:
            return [f"no finished MLflow run of this folder found at {redact(uri)}"]
        return open_lines(uri, found)


def logging_failed(run, out: Path) -> Exception:
    """The TrackingError (exit 1, one line) of a probe run whose MLflow logging failed after the run
    began (`TrackedRun.failure`): what failed, and that the results are on disk, logged by a rerun."""
    from .clients import TrackingError

    return TrackingError(
        f"{run.failure}; the results are in {out}: run the same command again to log them (nothing is scored again)"
    )


def step_key(cfg, out: Path) -> str:
    """`cli/<host>/<folder>/<config key>`: the same config into the same folder on the same host is
    the same step (a rerun marks the run of a crashed attempt FAILED instead of leaving it RUNNING,
    and a rerun of a finished folder finds its run)."""
    return f"cli/{socket.gethostname()}/{Path(out).resolve()}/{cfg.results_key()}"


def run_name(cfg) -> str:
    """`<probe>-<model>-<first 6 of the config key>`: runs of different configurations get different
    names (the key is the `factprobe.config_key` tag; the model is its short label)."""
    from factprobe.framework.reporting import model_label

    return f"{cfg.probe}-{model_label(cfg.base.model)}-{cfg.results_key()[:6]}"


def finished_run(uri: str, key: str) -> str | None:
    """The id of the latest FINISHED run tagged `factprobe.step_key = key` in the CLI's experiment
    at `uri`; None when there is none (or no such experiment, or no sqlite store file)."""
    from .clients import find_tagged_runs, sqlite_path
    from .connect import open_client
    from .conventions import experiment_name, tag

    db = sqlite_path(uri)
    if db is not None and not db.exists():
        return None
    client = open_client(uri)
    runs = find_tagged_runs(client, [client.experiment_id(experiment_name("probe"))], {tag("step_key"): key}, status="FINISHED")
    return runs[0].run_id if runs else None  # newest first (the search order)


def open_lines(uri: str, run_id: str | None) -> list[str]:
    """How to open run `run_id` in the MLflow UI, as `make run` prints it: for a local store
    (sqlite, file) the `mlflow ui` command and the page; for a server its page."""
    from .connect import open_client
    from .conventions import experiment_name

    if not run_id:
        return []
    try:
        exp = open_client(uri).experiment_id(experiment_name("probe"))
    except Exception:  # noqa: BLE001
        exp = None
    page = f"#/experiments/{exp}/runs/{run_id}?workflowType=machine_learning" if exp else ""
    if uri.startswith(("http://", "https://")):
        return [f"MLflow run {run_id}: open {redact(uri.rstrip('/'))}/{page}"]
    mlflow = Path(sys.executable).parent / "mlflow"
    cmd = str(mlflow) if mlflow.exists() else "mlflow"
    try:
        cmd = str(Path(cmd).relative_to(Path.cwd()))
    except ValueError:
        pass
    return [
        f"MLflow run {run_id}; open it in the MLflow UI:",
        f"  {cmd} ui --backend-store-uri {shlex.quote(uri)} --port 5000",
        f"  then open http://127.0.0.1:5000/{page}",
    ]


def register(sub: argparse._SubParsersAction) -> None:
    """Add `compare`, `regress` and `baseline promote` to the factprobe command line."""
    from factprobe.metrics.comparison import TEMPLATE_RULES

    from .compare import compare_cli
    from .regress import regress_cli

    c = sub.add_parser(
        "compare",
        help="join two runs fact by fact, or map many models (heatmap, Pearson r, eta)",
        description="Two runs: a fact-by-fact comparison. Three or more runs (or two with --out, "
        "--cross-model, --model-meta or --intersect): the cross-model maps of Wu et al. "
        "2024 section 4.2: model x relation heatmap, Pearson r between models (within and "
        "across families), subsumption eta of smaller in larger models of a family and of "
        "fine-tuned models against their base.",
    )
    c.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="MLflow run id, results folder/results.jsonl, or tag filter key=value; one run per model",
    )
    c.add_argument("--tracking-uri")
    c.add_argument("--n-boot", type=int, default=2000)
    c.add_argument("--json", action="store_true", help="print the comparison (or cross_model.json) as JSON")
    c.add_argument(
        "--templates",
        choices=TEMPLATE_RULES,
        default="majority",
        help="a prompt-baseline run (one row per fact and template) against a one-row-per-fact run: a "
        "fact is right when the majority / any / all of its templates are (default: majority)",
    )
    c.add_argument(
        "--out", metavar="DIR", help="cross-model maps: write DIR/cross_model.json, DIR/heatmap.png and DIR/pearson.png"
    )
    c.add_argument(
        "--cross-model", action="store_true", help="two runs: the cross-model maps instead of the fact-by-fact comparison"
    )
    c.add_argument(
        "--model-meta",
        metavar="FILE",
        help="YAML or CSV of model, family, size (e.g. 135M, 1.3B), optional base (the model a fine-tuned "
        "one comes from); default: each model's config.json and weights",
    )
    c.add_argument(
        "--intersect",
        action="store_true",
        help="runs on different facts or data: compare the facts all runs share (without it such runs are refused)",
    )
    c.set_defaults(func=compare_cli)

    r = sub.add_parser("regress", help="CI gate: fail if a candidate is significantly worse than a baseline")
    r.add_argument(
        "--candidate",
        required=True,
        help="model to probe now (alias, model folder, or PEFT adapter folder), or an MLflow run id / results folder",
    )
    r.add_argument(
        "--base-model", help="base model of an adapter candidate (default: base_model_name_or_path in its adapter_config.json)"
    )
    r.add_argument(
        "--baseline",
        required=True,
        help="MLflow run id, results folder, or tag filter key=value matching "
        "exactly one run, of a probe that declares a per-fact verdict (the "
        "built-in ones: ic-lke, eic-lke, hgp, mmp, mc-items; or a plug-in)",
    )
    # numbers checked by check_gate_settings (one `error:` line, NaN and text included), not by argparse
    r.add_argument(
        "--max-drop",
        default=0.02,
        metavar="FRACTION",
        help="tolerated change for the worse of the probe's headline metric (a drop of accuracy or win_rate, a "
        "rise of a lower-is-better one), absolute, in [0, 1) (default 0.02 = 2 points)",
    )
    r.add_argument("--alpha", default=0.05, metavar="LEVEL", help="significance level of both tests, in (0, 1) (default 0.05)")
    r.add_argument("--tracking-uri")
    r.add_argument(
        "--out",
        metavar="DIR",
        help="write the gate report (DIR/gate_report.txt), the decision "
        "(DIR/gate.json) and the candidate's probe results (DIR/candidate)",
    )
    r.add_argument(
        "--allow-numerics-change",
        action="store_true",
        help="gate even when the candidate runs with other numerics than the baseline (dtype, device type, "
        "transformers major version); the report names the difference",
    )
    r.add_argument("--report", help="write the readable report to this file too")
    r.add_argument("--no-track", action="store_true")
    r.add_argument(
        "--templates",
        choices=TEMPLATE_RULES,
        default="majority",
        help="how a prompt-baseline run's per-template verdicts become one per fact (see compare)",
    )

    from .baseline import check_gate_settings, register_baseline

    def regress(a: argparse.Namespace) -> int:
        a.max_drop, a.alpha = check_gate_settings(a.max_drop, a.alpha)  # before anything is resolved or probed
        return regress_cli(a)

    r.set_defaults(func=regress)

    register_baseline(sub)
