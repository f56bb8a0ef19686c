"""Step: compare this nightly sweep with the previous night, model by model, with paired statistics.

Each (probe, model) is its own key: its probe run's `factprobe.config_key` (the run config's results
key: probe, model and options, not the model list), so adding a model to the sweep keeps every
other model's comparison. For each result of tonight the step finds the latest FINISHED probe run
with the same key from an earlier sweep (experiment `factprobe/nightly_sweep`), joins the two fact by fact on the
per-fact verdict the probe declares, read in its headline's direction (`factprobe.framework.verdict`: any
probe with a verdict, a plug-in included; a probe without one is not paired, and the table says so), and
applies the paired test of `factprobe regress` (`factprobe.metrics.gate.regression_gate`: a change for
the worse larger than `max_drop`, McNemar p < alpha and a paired-bootstrap interval on the worse side
of 0), in the probe's headline metric and its direction: the reason, the change, the alert and the
table name that metric (`win_rate`, or a lower-is-better `miss_rate`, whose rise is the drop). Like with like (`like_with_like`): a previous run made on
other data (its measurement identity's data digest) is not paired, and says why; other numerics, or
a run without an identity, are paired with a note. It logs `delta/<probe>/<model>[/<relation>]` metrics and
a changes table to the parent run and tags it:

- `factprobe.alert`: `significant_drop`, `failed_models` or both (comma-separated), absent when
  all is well; filter with `tags.factprobe.alert LIKE '%significant_drop%'` in the MLflow UI;
- `factprobe.alert_detail`: one line naming the models, their drops and p-values, the failures.

With `fail_on_alert` the step then exits non-zero (after logging), so the KFP run turns red.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from factprobe_ops.tracking.context import RunContext

ALERT_DROP = "significant_drop"
ALERT_FAILED = "failed_models"


def compared_metrics(run_name: str) -> tuple[str | None, str | None]:
    """(overall, per-relation) metric names compared for the run `<probe>:<model>`: the probe's
    declared headline metric and relation metric (factprobe/framework/base.py); None where the probe
    declares none (no row is then compared at that level)."""
    from factprobe.framework.registry import get_probe

    spec = get_probe(run_name.split(":", 1)[0])
    return (spec.headline_metric.metric if spec.headline_metric else None), spec.relation_metric


def diff_summaries(current: dict[str, dict], previous: dict[str, dict]) -> list[dict]:
    """Rows {run, relation ('*' = overall), metric, previous, current, delta} for every shared run name
    (`<probe>:<model>`), of the probe's headline metric overall and its relation metric per
    relation (`compared_metrics`; `metric` names it), plus rows for runs that appeared or disappeared
    (previous or current is None)."""
    rows = []
    for name in sorted(set(current) | set(previous)):
        cur, prev = current.get(name), previous.get(name)
        overall, per_relation = compared_metrics(name)
        if cur is None or prev is None:
            rows.append(
                {
                    "run": name,
                    "relation": "*",
                    "metric": overall,
                    "previous": prev and prev.get(overall),
                    "current": cur and cur.get(overall),
                    "delta": None,
                }
            )
            continue
        a, b = prev.get(overall), cur.get(overall)
        rows.append(
            {
                "run": name,
                "relation": "*",
                "metric": overall,
                "previous": a,
                "current": b,
                "delta": None if a is None or b is None else b - a,
            }
        )
        if per_relation is None:
            continue
        for rel in sorted(set(cur.get("per_relation", {})) | set(prev.get("per_relation", {}))):
            a = prev.get("per_relation", {}).get(rel, {}).get(per_relation)
            b = cur.get("per_relation", {}).get(rel, {}).get(per_relation)
            delta = None if a is None or b is None else b - a
            rows.append({"run": name, "relation": rel, "metric": per_relation, "previous": a, "current": b, "delta": delta})
    return rows


def like_with_like(tonight: dict | None, previous: dict | None) -> tuple[str, str]:
    """(error, note) from the measurement identities (`factprobe.identity`) of tonight's result and
    the previous night's: `error` when they were made on different data (the digests and the inputs
    that differ: such results are not paired), `note` when their numerics differ (dtype, device type,
    transformers major version: paired, and the change may come from the numerics) or when either has
    no identity (paired unchecked); both "" when alike."""
    from factprobe_ops.tracking.identity_check import MISSING, data_difference, numerics_difference

    if tonight is None or previous is None:
        which = "tonight's result" if tonight is None else "the previous run"
        return "", f"{which} {MISSING}: data and numerics not checked"
    names = ("previous", "tonight")
    diff = data_difference(previous, tonight, names)
    if diff:
        return f"not compared: other data than the previous night ({diff})", ""
    num = numerics_difference(previous, tonight, names)
    return "", (f"numerics changed ({num}): part of the change may come from the numerics" if num else "")


def paired_change(
    tonight,
    last_night,
    max_drop: float,
    alpha: float,
    identities: tuple[dict | None, dict | None] | None = None,
    probe: str | None = None,
) -> dict:
    """The paired comparison of two per-fact tables of the same `probe` and model, on the probe's
    per-fact verdict in its headline's direction (`factprobe.framework.verdict`; `probe` None: tables
    with the multiple-choice `correct`): {"n", "metric" (the headline, e.g. `win_rate`), "direction"
    ("higher is better" / "lower is better"), "diff" (tonight - last night, of that metric), "diff_ci",
    "p_value", "drop": bool (the gate FAILed: the metric got worse), "reason", "note"?}; {"note": ...} alone when the probe
    declares no verdict (not paired); {"error": ...} when the tables cannot be joined (no shared fact,
    no verdict column, ...), or when `identities` (tonight's, the previous night's) say they measured
    other data (`like_with_like`; its note on numerics or a missing identity is kept as "note")."""
    from factprobe.errors import DataError
    from factprobe.framework.verdict import verdict_of, verdict_table, why_no_verdict
    from factprobe.metrics.comparison import align_templates
    from factprobe.metrics.gate import regression_gate

    if verdict_of(probe) is None:
        return {"note": f"not paired fact by fact: {probe} runs{why_no_verdict(str(probe))}"}
    note = ""
    if identities is not None:
        error, note = like_with_like(*identities)
        if error:
            return {"error": error}
    needs = "the nightly paired test joins the probe's boolean verdict per fact"
    try:
        tonight, verdict = verdict_table(tonight, probe, "tonight's result", needs, error=DataError)
        last_night, _ = verdict_table(last_night, probe, "the previous run", needs, error=DataError)
        cand, base, _ = align_templates(tonight, last_night)
        d = regression_gate(
            cand, base, max_drop=max_drop, alpha=alpha, metric=verdict.metric, higher_is_better=verdict.higher_is_better
        )
    except (ValueError, KeyError) as e:
        return {"error": str(e).splitlines()[0][:300]}
    out = {
        "n": d.n,
        "metric": d.metric,
        "direction": d.direction,
        "diff": d.diff,
        "diff_ci": list(d.diff_ci),
        "p_value": d.p_value,
        "drop": not d.passed,
        "reason": d.reason,
    }
    return {**out, "note": note} if note else out


def _previous_probe_run(client, experiment_ids: list[str], key: str, parent_run_id: str, before_ms: int):
    """The latest FINISHED probe run with config key `key` of another sweep in the nightly_sweep
    experiment (any trigger: a scheduled or a hand-started sweep), started before `before_ms`, or None."""
    from factprobe_ops.tracking.clients import tag_filter, tags_match
    from factprobe_ops.tracking.conventions import tag

    wanted = {tag("config_key"): key, tag("step"): "probe"}
    found = client.search_runs(
        experiment_ids, filter_string=tag_filter(wanted, "FINISHED"), order_by=["attributes.start_time DESC"], max_results=20
    )
    for r in found:
        if (
            tags_match(r.data.tags, wanted)
            and r.data.tags.get("mlflow.parentRunId") != parent_run_id
            and r.info.start_time <= before_ms
        ):
            return r
    return None


def _markdown(
    rows: list[dict], pairs: dict[str, dict], previous_runs: dict[str, str], failures: list[dict], alerts: list[str]
) -> str:
    fmt = lambda v: "—" if v is None else f"{v:.3f}"
    lines = ["# Nightly comparison", ""]
    if alerts:
        lines += [f"**ALERT: {', '.join(alerts)}**", ""]
    for f in failures:
        lines.append(f"- FAILED: {f['probe']} on {f['model']}: {f['error']}")
    if failures:
        lines.append("")
    if not previous_runs:
        lines += ["No previous nightly run of these models and options: this run is the new reference.", ""]
    lines += [
        "| run | metric | previous run | facts | previous | tonight | change | 95% CI | McNemar p | significant drop |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["relation"] != "*":
            continue
        pr = pairs.get(r["run"], {})
        ci = pr.get("diff_ci")
        metric = r.get("metric") or "—"
        if pr.get("direction"):
            metric += f" ({pr['direction']})"
        lines.append(
            f"| {r['run']} | {metric} | {previous_runs.get(r['run'], '—')} | {pr.get('n', '—')} | {fmt(r['previous'])} | "
            f"{fmt(r['current'])} | {'—' if r['delta'] is None else format(r['delta'], '+.3f')} | "
            f"{'—' if not ci else f'[{ci[0]:+.3f}, {ci[1]:+.3f}]'} | "
            f"{'—' if 'p_value' not in pr else format(pr['p_value'], '.3g')} | "
            f"{'YES' if pr.get('drop') else ('—' if 'p_value' not in pr else 'no')} |"
        )
    told = [(name, p.get("note") or p.get("error")) for name, p in sorted(pairs.items()) if p.get("note") or p.get("error")]
    if told:
        lines += ["", *[f"- {name}: {text}" for name, text in told]]
    changed = [r for r in rows if r["relation"] != "*" and r["delta"] is not None and abs(r["delta"]) >= 0.05]
    if changed:
        lines += ["", "Relations that moved by 5 points or more:", ""]
        lines += [f"- {r['run']} {r['relation']}: {fmt(r['previous'])} -> {fmt(r['current'])}" for r in changed]
    return "\n".join(lines) + "\n"


def run_nightly_compare(
    result_dirs: list[str],
    md_path: str,
    context: RunContext | str,
    max_drop: float = 0.02,
    alpha: float = 0.05,
    fail_on_alert: bool = True,
) -> list[dict]:
    """Compare every (probe, model) result of tonight with its previous nightly run (module doc),
    log metrics, the changes table and the alert tags to the parent run of `context` (the sweep's
    `RunContext` or its JSON), write a Markdown summary;
    returns the changes rows. Raises SystemExit naming the alert when `fail_on_alert` and a model
    failed or dropped significantly (everything is logged first)."""
    import json
    import tempfile
    from pathlib import Path

    import pandas as pd

    from factprobe.errors import DataError
    from factprobe.identity import identity_of
    from factprobe.io import atomic_write_text
    from factprobe_ops.tracking.context import RunContext
    from factprobe_ops.tracking.conventions import tag
    from factprobe_ops.tracking.identity_check import identity_from_tracking
    from factprobe_ops.tracking.library_client import open_mlflow_client
    from factprobe_ops.tracking.run import TrackedRun
    from factprobe_ops.tracking.run_tables import _from_results_file, folder_identity

    from .report import load_failures, load_results

    ctx = RunContext.from_json(context)
    uri, parent_run_id = ctx.uri, ctx.parent_run_id
    current = load_results(result_dirs)
    failures = load_failures(result_dirs)
    folders = {name: d for d in result_dirs if not (Path(d) / "failed.json").exists() for name in load_results([d])}
    alerts = [ALERT_FAILED] if failures else []
    if not ctx.tracked:
        atomic_write_text(
            md_path,
            _markdown(diff_summaries(current, {}), {}, {}, failures, alerts) + "\nTracking is off: nothing to compare with.\n",
        )
        _maybe_fail(alerts, failures, {}, fail_on_alert)
        return []
    client = open_mlflow_client(uri)
    me = client.get_run(parent_run_id)
    previous: dict[str, dict] = {}
    previous_runs: dict[str, str] = {}
    pairs: dict[str, dict] = {}
    for name, folder in folders.items():
        key = json.loads((Path(folder) / "run_config.json").read_text())["results_key"]
        prev = _previous_probe_run(client, [me.info.experiment_id], key, parent_run_id, me.info.start_time)
        if prev is None:
            continue
        previous_runs[name] = prev.info.run_id
        with tempfile.TemporaryDirectory() as d:
            try:
                prev_metrics = json.loads(
                    Path(client.download_artifacts(prev.info.run_id, "results/metrics.json", d)).read_text()
                )
                last_night = pd.read_parquet(client.download_artifacts(prev.info.run_id, "tables/per_fact.parquet", d))
            except Exception as e:  # noqa: BLE001 - an old run without these artifacts is not comparable
                pairs[name] = {"error": f"previous run {prev.info.run_id}: {str(e).splitlines()[0][:200]}"}
                continue
        previous[name] = prev_metrics
        prev_identity = identity_of(prev_metrics) or identity_from_tracking(prev.data.tags, prev.data.params)
        try:
            tonight = _from_results_file(Path(folder))
        except DataError as e:  # a truncated or empty results.jsonl: named, not a traceback
            pairs[name] = {"error": str(e)}
            continue
        pairs[name] = paired_change(
            tonight, last_night, max_drop, alpha, identities=(folder_identity(folder), prev_identity), probe=name.split(":", 1)[0]
        )
    rows = diff_summaries(current, previous)
    drops = {n: p for n, p in pairs.items() if p.get("drop")}
    if drops:
        alerts.insert(0, ALERT_DROP)
    with TrackedRun.parent_of(ctx) as run:  # the parent run: logged into, not ended (the finalize step ends it)
        tags = {
            tag("previous_run"): ",".join(sorted(set(previous_runs.values()))) or "none",
            tag("previous_sweep"): ",".join(
                sorted({client.get_run(r).data.tags.get("mlflow.parentRunId", "") for r in previous_runs.values()} - {""})
            )
            or "none",
        }
        if alerts:
            tags[tag("alert")] = ",".join(alerts)
            tags[tag("alert_detail")] = _detail(drops, failures)[:5000]
        run.set_tags(tags)
        from factprobe_ops.tracking.metric_keys import safe_ids

        from .report import metric_safe

        rel = safe_ids(sorted({r["relation"] for r in rows if r["relation"] != "*"}))  # each relation one name segment
        metrics = {
            f"delta/{metric_safe(r['run'])}" + ("" if r["relation"] == "*" else f"/{rel[r['relation']]}"): r["delta"]
            for r in rows
            if r["delta"] is not None
        }
        for name, p in pairs.items():
            if "p_value" in p:
                metrics[f"nightly_p/{metric_safe(name)}"] = p["p_value"]
                metrics[f"nightly_drop/{metric_safe(name)}"] = float(p["drop"])
        metrics["nightly/alert"] = float(bool(alerts))
        run.log_metrics(metrics)
        if rows:
            run.log_table(pd.DataFrame(rows), "tables/nightly_changes.json")
        atomic_write_text(md_path, _markdown(rows, pairs, previous_runs, failures, alerts))
        run.log_text(Path(md_path).read_text(), "report/nightly_changes.md")
        _maybe_fail(alerts, failures, drops, fail_on_alert)
        return rows


def _detail(drops: dict[str, dict], failures: list[dict]) -> str:
    """One line: each drop as `<probe>:<model>: <metric> <change> (<direction>; p = ..., n facts)`, then each failure."""
    parts = [
        f"{n}: {p.get('metric', 'accuracy')} {p['diff']:+.3f} ({p.get('direction', 'higher is better')}; "
        f"p = {p['p_value']:.3g}, {p['n']} facts)"
        for n, p in sorted(drops.items())
    ]
    parts += [f"{f['probe']}:{f['model']} failed: {f['error']}" for f in failures]
    return "; ".join(parts)


def _maybe_fail(alerts: list[str], failures: list[dict], drops: dict[str, dict], fail_on_alert: bool) -> None:
    if alerts and fail_on_alert:
        raise SystemExit(f"nightly alert ({', '.join(alerts)}): {_detail(drops, failures)}")
