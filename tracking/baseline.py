"""`factprobe baseline promote RUN_ID`: make one finished probe run THE baseline that the CI gate
(`factprobe regress --baseline factprobe.baseline=true`) compares candidates against.

The tag `factprobe.baseline=true` is set on the run and removed from every other run of the same
experiment and probe that carries it, so a tag filter finds exactly one baseline per probe.
"""
from __future__ import annotations

import argparse

from factprobe.errors import ConfigError

from .clients import TrackingError
from .conventions import default_tracking_uri

BASELINE_TAG = "factprobe.baseline"


def promote(run_id: str, tracking_uri: str | None = None) -> list[str]:
    """Tag `run_id` as the baseline and untag the previous baseline(s) of its experiment and
    probe. Returns the run ids that lost the tag. Refuses a run that is unknown, not FINISHED, or
    not a probe run with per-fact results (no `factprobe.probe` tag)."""
    from .library_client import open_mlflow_client
    from .run import _describe

    uri = tracking_uri or default_tracking_uri()
    client = open_mlflow_client(uri)
    try:
        run = client.get_run(run_id)
    except Exception as e:  # noqa: BLE001 - unknown id, unreachable server
        raise ConfigError(f"run {run_id!r} not found at {uri} ({_describe(e)})") from None
    probe = run.data.tags.get("factprobe.probe")
    if not probe:
        raise ConfigError(f"run {run_id} at {uri} is not a probe run (no factprobe.probe tag); promote a model's "
                          "probe run (a child run of a pipeline), not a pipeline's parent run")
    if run.info.status != "FINISHED":
        raise ConfigError(f"run {run_id} is {run.info.status}; only a FINISHED run can be the baseline")
    try:
        previous = client.search_runs(
            [run.info.experiment_id],
            filter_string=f"tags.`{BASELINE_TAG}` = 'true' and tags.`factprobe.probe` = '{probe}'",
            max_results=1000)
        cleared = [r.info.run_id for r in previous if r.info.run_id != run_id]
        for rid in cleared:
            client.delete_tag(rid, BASELINE_TAG)
        client.set_tag(run_id, BASELINE_TAG, "true")
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001
        raise TrackingError(f"MLflow tracking at {uri}: promoting run {run_id} failed: {_describe(e)}") from None
    return cleared


def register_baseline(sub: argparse._SubParsersAction) -> None:
    """Add `factprobe baseline promote RUN_ID`."""
    b = sub.add_parser("baseline", help="manage the baseline run that `regress` gates against")
    bs = b.add_subparsers(dest="baseline_action", required=True)
    p = bs.add_parser("promote", help=f"tag RUN_ID {BASELINE_TAG}=true and untag the previous baseline of its probe")
    p.add_argument("run_id")
    p.add_argument("--tracking-uri")

    def run(a: argparse.Namespace) -> int:
        cleared = promote(a.run_id, a.tracking_uri)
        was = f"; removed from {', '.join(cleared)}" if cleared else ""
        print(f"run {a.run_id} is now the baseline ({BASELINE_TAG}=true){was}")
        return 0

    p.set_defaults(func=run)
