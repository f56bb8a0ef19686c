"""What the tracking layer adds to the `factprobe` command line (entry points in pyproject.toml).

- `ProbeTracking` (group `factprobe.probe_hooks`): `--tracking-uri`, `--no-track`,
  `--require-tracking`, `--trigger` on every `factprobe probe <probe>`, and an MLflow run around
  the probe: the results are logged when it finishes, and the run is marked FAILED when it fails
  or KILLED when it is interrupted (Ctrl-C, SIGTERM).
- `register` (group `factprobe.commands`): `factprobe compare`, `factprobe regress` and
  `factprobe baseline promote`.
"""
from __future__ import annotations

import argparse
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


class ProbeTracking:
    """The `factprobe.probe_hooks` entry: MLflow tracking of CLI probe runs."""

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        g = p.add_argument_group("tracking")
        g.add_argument("--tracking-uri", help="MLflow tracking URI (default sqlite:///mlruns.db here)")
        g.add_argument("--no-track", action="store_true", help="do not log to MLflow")
        g.add_argument("--require-tracking", action="store_true", help="fail (exit 1) if MLflow logging fails")
        g.add_argument("--trigger", default="local", choices=["local", "ui", "nightly", "ci"], help="factprobe.trigger tag")

    @contextmanager
    def wrap(self, args: argparse.Namespace, cfg, out: Path) -> Iterator[Callable]:
        from .context import RunContext
        from .probe_logging import log_probe_outcome
        from .probe_run import probe_run

        # Same config into the same folder on the same host = the same step: a rerun marks the run of a
        # crashed attempt (left RUNNING when the server died) FAILED instead of leaving it RUNNING.
        step_key = f"cli/{socket.gethostname()}/{Path(out).resolve()}/{cfg.results_key()}"
        context = RunContext.start(args.tracking_uri or "", pipeline="probe", trigger=args.trigger)
        with probe_run(cfg, context, enabled=not args.no_track, required=args.require_tracking, step_key=step_key) as run:

            def after(outcome) -> list[str]:
                log_probe_outcome(run, outcome, cfg)
                return [f"MLflow run {run.run_id} at {run.uri}"] if run.active else []

            yield after


def register(sub: argparse._SubParsersAction) -> None:
    """Add `compare`, `regress` and `baseline promote` to the factprobe command line."""
    from factprobe.metrics.comparison import TEMPLATE_RULES

    from .compare import compare_cli
    from .regress import regress_cli

    c = sub.add_parser("compare", help="join two runs fact by fact and compare them")
    c.add_argument("run_a", help="MLflow run id or a results folder/results.jsonl")
    c.add_argument("run_b")
    c.add_argument("--tracking-uri")
    c.add_argument("--n-boot", type=int, default=2000)
    c.add_argument("--json", action="store_true", help="print the comparison as JSON")
    c.add_argument("--templates", choices=TEMPLATE_RULES, default="majority",
                   help="a prompt-baseline run (one row per fact and template) against a one-row-per-fact run: a "
                        "fact is right when the majority / any / all of its templates are (default: majority)")
    c.set_defaults(func=compare_cli)

    r = sub.add_parser("regress", help="CI gate: fail if a candidate is significantly worse than a baseline")
    r.add_argument("--candidate", required=True,
                   help="model to probe now (alias, model folder, or PEFT adapter folder), or an MLflow run id / results folder")
    r.add_argument("--base-model", help="base model of an adapter candidate (default: base_model_name_or_path in its "
                                        "adapter_config.json)")
    r.add_argument("--baseline", required=True, help="MLflow run id, results folder, or tag filter key=value, of a "
                                                     "multiple-choice probe run (ic-lke, eic-lke, hgp, mmp)")
    # numbers checked by check_gate_settings (one `error:` line, NaN and text included), not by argparse
    r.add_argument("--max-drop", default=0.02, metavar="FRACTION",
                   help="tolerated accuracy drop, absolute, in [0, 1) (default 0.02 = 2 points)")
    r.add_argument("--alpha", default=0.05, metavar="LEVEL", help="significance level of both tests, in (0, 1) (default 0.05)")
    r.add_argument("--tracking-uri")
    r.add_argument("--out", help="where to write the candidate's probe results and the gate report")
    r.add_argument("--report", help="write the readable report to this file too")
    r.add_argument("--no-track", action="store_true")
    r.add_argument("--templates", choices=TEMPLATE_RULES, default="majority",
                   help="how a prompt-baseline run's per-template verdicts become one per fact (see compare)")

    from .baseline import check_gate_settings, register_baseline

    def regress(a: argparse.Namespace) -> int:
        a.max_drop, a.alpha = check_gate_settings(a.max_drop, a.alpha)  # before anything is resolved or probed
        return regress_cli(a)

    r.set_defaults(func=regress)

    register_baseline(sub)
