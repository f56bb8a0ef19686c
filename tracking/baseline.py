"""`factprobe baseline promote RUN_ID`: make one finished probe run THE baseline that the CI gate
(`factprobe regress --baseline factprobe.baseline=true`) compares candidates against.

The tag `factprobe.baseline=true` is set on the run and removed from every other run of the same
experiment and probe that carries it, so a tag filter finds exactly one baseline per probe.

Only runs that `regress` can gate against are promoted: runs of a probe that declares a per-fact
verdict (`gateable_probes()`: the multiple-choice ic-lke, eic-lke, hgp, mmp, mc-items and any plug-in
that declares one; `factprobe.framework.verdict`), which log the probe's headline metric and its boolean
verdict per fact (or per fact and template) in `tables/per_fact.parquet`. `regress` gates the share
of right facts fact by fact (paired McNemar test and bootstrap, factprobe.metrics.comparison), in the
headline's direction (under a lower-is-better headline a fact is right when its verdict is False);
the other built-in probes score generated answers (qa, counterfactual: EM per setting and shot
count, several rows per fact), coherency rounds or belief templates, which that gate does not pair.
`gate_table` is the same rule for a run `regress` was given (refused before it probes).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from factprobe.errors import ConfigError

from .clients import TrackingError
from .conventions import resolve_tracking_uri

if TYPE_CHECKING:
    import pandas as pd

    from factprobe.framework.verdict import FactVerdict

BASELINE_TAG = "factprobe.baseline"
PROBE_TAG = "factprobe.probe"
PER_FACT_ARTIFACT = "tables/per_fact.parquet"


def gateable_probes() -> list[str]:
    """Names of the registered probes whose runs `regress` can gate: those declaring a per-fact verdict
    (`factprobe.framework.verdict`), plug-ins included."""
    from factprobe.framework.verdict import verdict_probes

    return verdict_probes()


def gate_needs() -> str:
    """One clause naming what `regress` needs of a run."""
    return (
        f"regress gates runs of probes that declare a boolean verdict per fact ({', '.join(gateable_probes())}): it "
        f"needs the run's headline metric and that verdict (`correct` for the multiple-choice probes) on every fact "
        f"({PER_FACT_ARTIFACT} or results.jsonl)"
    )


def check_gate_settings(
    max_drop: float | str, alpha: float | str, names: tuple[str, str] = ("--max-drop", "--alpha")
) -> tuple[float, float]:
    """(max_drop, alpha) as floats. Raises ConfigError (one line, naming the setting by `names`)
    unless `max_drop` (tolerated change for the worse of the headline, absolute) is a finite number in [0, 1) and `alpha`
    (significance level) one in (0, 1); a text that is no number (`abc`) is refused the same way."""
    import math

    out = []
    for name, value, ok, interval in (
        (names[0], max_drop, lambda v: 0.0 <= v < 1.0, "[0, 1)"),
        (names[1], alpha, lambda v: 0.0 < v < 1.0, "(0, 1)"),
    ):
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


def run_probe(desc: dict) -> str | None:
    """The probe of a resolved run (`resolve_run`'s description): its `factprobe.probe` tag, else its
    folder's run_config.json; None when neither names one."""
    return (desc.get("tags") or {}).get(PROBE_TAG) or _folder_probe(desc.get("ref", "?"))


def gate_table(df: pd.DataFrame, desc: dict, role: str = "baseline") -> tuple[pd.DataFrame, FactVerdict]:
    """The per-fact table `df` of the run `desc` describes (`factprobe_ops.tracking.run_tables.resolve_run`'s
    description: its `ref`, and its MLflow `tags` when it is a run) as `regress` gates it: its probe's
    verdict (by its `factprobe.probe` tag or the folder's run_config.json; a folder that names no probe
    is judged by its `correct` column) read as the right series `correct`
    (`factprobe.framework.verdict.verdict_table`), and that verdict. Raises ConfigError (one line naming
    what `regress` needs) for a probe without a verdict, or a table without `fact_id`, `relation` or a
    boolean verdict on every row."""
    from factprobe.framework.verdict import verdict_table

    return verdict_table(df, run_probe(desc), f"{role} {desc.get('ref', '?')}", gate_needs())


def headline_logged(verdict: FactVerdict, logged: set[str]) -> bool:
    """Whether the MLflow metric names `logged` hold the headline `verdict` is the share of: its name as
    logged (`metric_key`: `acc@1` -> `acc_1`), or `acc` for `accuracy` (runs logged before the rename, issue 22)."""
    from factprobe.framework.reporting import metric_key

    return metric_key(verdict.metric) in logged or (verdict.metric == "accuracy" and "acc" in logged)


def promote(run_id: str, tracking_uri: str | None = None, notes: list[str] | None = None) -> list[str]:
    """Tag `run_id` as the baseline and untag the previous baseline(s) of its experiment and
    probe. Returns the run ids that lost the tag. Refuses (ConfigError) a run that is unknown, not
    FINISHED, not a probe run (no `factprobe.probe` tag), or one `regress` cannot gate against: a
    probe without a per-fact verdict, a run without its headline metric or the per-fact table (see the
    module docstring), or without a measurement identity (a run logged before identities were recorded).
    When `notes` is given, a line is appended to it for each previous baseline whose data or numerics
    differ from the new one's (candidates are then gated on other items or numerics than before)."""
    from factprobe.framework.verdict import verdict_of, why_no_verdict

    from .library_client import open_mlflow_client
    from .run import _describe

    uri = resolve_tracking_uri(tracking_uri)
    client = open_mlflow_client(uri)
    try:
        run = client.get_run(run_id)
    except Exception as e:  # noqa: BLE001 - unknown id, unreachable server
        raise ConfigError(f"run {run_id!r} not found at {uri} ({_describe(e)})") from None
    probe = run.data.tags.get("factprobe.probe")
    if not probe:
        raise ConfigError(
            f"run {run_id} at {uri} is not a probe run (no factprobe.probe tag); promote a model's "
            "probe run (a child run of a pipeline), not a pipeline's parent run"
        )
    if run.info.status != "FINISHED":
        raise ConfigError(f"run {run_id} is {run.info.status}; only a FINISHED run can be the baseline")
    verdict = verdict_of(probe)
    if verdict is None:
        raise ConfigError(f"run {run_id} is a {probe} run{why_no_verdict(probe)}; {gate_needs()}")
    if not headline_logged(verdict, set(run.data.metrics)):
        raise ConfigError(f"run {run_id} has no `{verdict.metric}` metric (the {probe} headline); {gate_needs()}")
    try:
        logged = {a.path for a in client.list_artifacts(run_id, PER_FACT_ARTIFACT.rsplit("/", 1)[0])}
    except Exception as e:  # noqa: BLE001 - unreachable server or artifact store
        raise TrackingError(f"MLflow tracking at {uri}: listing the artifacts of run {run_id} failed: {_describe(e)}") from None
    if PER_FACT_ARTIFACT not in logged:
        raise ConfigError(f"run {run_id} has no {PER_FACT_ARTIFACT} artifact; {gate_needs()}")
    from .identity_check import MISSING, tracked_identity

    ident = tracked_identity(client, run)
    if ident is None:
        raise ConfigError(
            f"run {run_id} {MISSING}: regress would refuse it as a baseline; probe the model again with "
            "this factprobe and promote that run"
        )
    try:
        previous = client.search_runs(
            [run.info.experiment_id],
            filter_string=f"tags.`{BASELINE_TAG}` = 'true' and tags.`factprobe.probe` = '{probe}'",
            max_results=1000,
        )
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
