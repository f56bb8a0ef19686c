"""`factprobe baseline promote RUN_ID`: make one finished probe run THE baseline that the CI gate
(`factprobe regress --baseline factprobe.baseline=true`) compares candidates against.

The tag `factprobe.baseline=true` is set on the run and removed from every other run of the same
experiment and probe that carries it, so a tag filter finds exactly one baseline per probe.

Only runs that `regress` can gate against are promoted: runs of the multiple-choice probes
(`gateable_probes()`: ic-lke, eic-lke, hgp, mmp), which log the `accuracy` metric and one boolean
`correct` verdict per fact (or per fact and template) in `tables/per_fact.parquet`. `regress` gates
accuracy fact by fact (paired McNemar test and bootstrap, factprobe.metrics.comparison); the other
probes score generated answers (qa, counterfactual: EM per setting and shot count, several rows per
fact), coherency rounds or belief templates, which that gate does not pair.
`check_gate_table` is the same rule for a run `regress` was given (refused before it probes).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from factprobe.errors import ConfigError

from .clients import TrackingError
from .conventions import default_tracking_uri

if TYPE_CHECKING:
    import pandas as pd

BASELINE_TAG = "factprobe.baseline"
PROBE_TAG = "factprobe.probe"
PER_FACT_ARTIFACT = "tables/per_fact.parquet"


def gateable_probes() -> list[str]:
    """Names of the registered probes whose runs `regress` can gate: the multiple-choice ones."""
    from factprobe.probes.mc import MCProbe
    from factprobe.probes.registry import load_probes

    return [name for name, probe in load_probes().items() if isinstance(probe, MCProbe)]


def gate_needs() -> str:
    """One clause naming what `regress` needs of a run."""
    return (f"regress gates multiple-choice runs ({', '.join(gateable_probes())}): it needs their `accuracy` metric and "
            f"one boolean `correct` per fact ({PER_FACT_ARTIFACT} or results.jsonl)")


def check_gate_settings(max_drop: float | str, alpha: float | str,
                        names: tuple[str, str] = ("--max-drop", "--alpha")) -> tuple[float, float]:
    """(max_drop, alpha) as floats. Raises ConfigError (one line, naming the setting by `names`)
    unless `max_drop` (tolerated accuracy drop, absolute) is a finite number in [0, 1) and `alpha`
    (significance level) one in (0, 1); a text that is no number (`abc`) is refused the same way."""
    import math

    out = []
    for name, value, ok, interval in ((names[0], max_drop, lambda v: 0.0 <= v < 1.0, "[0, 1)"),
                                      (names[1], alpha, lambda v: 0.0 < v < 1.0, "(0, 1)")):
        try:
            v = float(value)
        except (TypeError, ValueError):
            v = math.nan
        if not (math.isfinite(v) and ok(v)):
            raise ConfigError(f"{name} must be a number in {interval}, got {value!r}")
        out.append(v)
    return out[0], out[1]


def _folder_probe(ref: str) -> str | None:
    """The probe named by a results folder's run_config.json (None when there is none)."""
    p = Path(ref)
    cfg = (p if p.is_dir() else p.parent) / "run_config.json"
    try:
        return json.loads(cfg.read_text())["config"]["probe"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_gate_table(df: pd.DataFrame, desc: dict, role: str = "baseline") -> None:
    """Raise ConfigError (one line naming what `regress` needs) unless the run `desc` describes
    (`factprobe_ops.tracking.compare.resolve_run`'s description: its `ref`, and its MLflow `tags` when it is a
    run) is one `regress` can gate: a multiple-choice probe (by its `factprobe.probe` tag or the
    folder's run_config.json) whose per-fact table `df` has `fact_id`, `relation` and a `correct`
    verdict on every row. A folder that names no probe is judged by its table alone."""
    ref = desc.get("ref", "?")
    probe = (desc.get("tags") or {}).get(PROBE_TAG) or _folder_probe(ref)
    if probe is not None and probe not in gateable_probes():
        raise ConfigError(f"{role} {ref} is a {probe} run; {gate_needs()}")
    missing = [c for c in ("fact_id", "relation", "correct") if c not in df.columns]
    if missing:
        raise ConfigError(f"{role} {ref} has no {', '.join(map(repr, missing))} column in its per-fact table; {gate_needs()}")
    if df["correct"].isna().any() or not df["correct"].isin([True, False, 0, 1]).all():
        raise ConfigError(f"{role} {ref} has rows without a boolean `correct`; {gate_needs()}")


def promote(run_id: str, tracking_uri: str | None = None, notes: list[str] | None = None) -> list[str]:
    """Tag `run_id` as the baseline and untag the previous baseline(s) of its experiment and
    probe. Returns the run ids that lost the tag. Refuses (ConfigError) a run that is unknown, not
    FINISHED, not a probe run (no `factprobe.probe` tag), or one `regress` cannot gate against: not
    a multiple-choice probe, without the `accuracy` metric or the per-fact table (see the module
    docstring), or without a measurement identity (a run logged before identities were recorded).
    When `notes` is given, a line is appended to it for each previous baseline whose data or numerics
    differ from the new one's (candidates are then gated on other items or numerics than before)."""
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
    if probe not in gateable_probes():
        raise ConfigError(f"run {run_id} is a {probe} run; {gate_needs()}")
    if not {"accuracy", "acc"} & set(run.data.metrics):  # `acc`: runs logged before the rename (issue 22)
        raise ConfigError(f"run {run_id} has no `accuracy` metric; {gate_needs()}")
    try:
        logged = {a.path for a in client.list_artifacts(run_id, PER_FACT_ARTIFACT.rsplit("/", 1)[0])}
    except Exception as e:  # noqa: BLE001 - unreachable server or artifact store
        raise TrackingError(f"MLflow tracking at {uri}: listing the artifacts of run {run_id} failed: {_describe(e)}") from None
    if PER_FACT_ARTIFACT not in logged:
        raise ConfigError(f"run {run_id} has no {PER_FACT_ARTIFACT} artifact; {gate_needs()}")
    from .identity_check import MISSING, tracked_identity

    ident = tracked_identity(client, run)
    if ident is None:
        raise ConfigError(f"run {run_id} {MISSING}: regress would refuse it as a baseline; probe the model again with "
                          "this factprobe and promote that run")
    try:
        previous = client.search_runs(
            [run.info.experiment_id],
            filter_string=f"tags.`{BASELINE_TAG}` = 'true' and tags.`factprobe.probe` = '{probe}'",
            max_results=1000)
        cleared = [r.info.run_id for r in previous if r.info.run_id != run_id]
        if notes is not None:
            notes.extend(_changes_from_previous(client, ident, [r for r in previous if r.info.run_id != run_id]))
        for rid in cleared:
            client.delete_tag(rid, BASELINE_TAG)
        client.set_tag(run_id, BASELINE_TAG, "true")
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001
        raise TrackingError(f"MLflow tracking at {uri}: promoting run {run_id} failed: {_describe(e)}") from None
    return cleared


def _changes_from_previous(client, ident: dict, previous: list) -> list[str]:
    """One note per previous baseline run whose data or numerics differ from identity `ident`'s."""
    from .identity_check import data_difference, numerics_difference, tracked_identity

    out = []
    for r in previous:
        old = tracked_identity(client, r)
        if old is None:
            continue
        names = (f"previous baseline {r.info.run_id}", "new")
        diffs = [d for d in (data_difference(old, ident, names), numerics_difference(old, ident, names)) if d]
        if diffs:
            out.append(f"note: the baseline changes what candidates are gated on: {'; '.join(diffs)}")
    return out


def register_baseline(sub: argparse._SubParsersAction) -> None:
    """Add `factprobe baseline promote RUN_ID`."""
    b = sub.add_parser("baseline", help="manage the baseline run that `regress` gates against")
    bs = b.add_subparsers(dest="baseline_action", required=True)
    p = bs.add_parser("promote", help=f"tag RUN_ID {BASELINE_TAG}=true and untag the previous baseline of its probe")
    p.add_argument("run_id")
    p.add_argument("--tracking-uri")

    def run(a: argparse.Namespace) -> int:
        notes: list[str] = []
        cleared = promote(a.run_id, a.tracking_uri, notes)
        for line in notes:
            print(line, file=sys.stderr)
        was = f"; removed from {', '.join(cleared)}" if cleared else ""
        print(f"run {a.run_id} is now the baseline ({BASELINE_TAG}=true){was}")
        return 0

    p.set_defaults(func=run)
