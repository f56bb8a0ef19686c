"""Step: compare this nightly sweep with the previous nightly run of the same configuration."""


def diff_summaries(current: dict[str, dict], previous: dict[str, dict]) -> list[dict]:
    """Rows {run, relation ('*' = overall), previous, current, delta} for every shared run name,
    plus rows for runs that appeared or disappeared (previous or current is None)."""
    rows = []
    for name in sorted(set(current) | set(previous)):
        cur, prev = current.get(name), previous.get(name)
        if cur is None or prev is None:
            rows.append({"run": name, "relation": "*", "previous": prev and prev["accuracy"],
                         "current": cur and cur["accuracy"], "delta": None})
            continue
        rows.append({"run": name, "relation": "*", "previous": prev["accuracy"], "current": cur["accuracy"],
                     "delta": cur["accuracy"] - prev["accuracy"]})
        for rel in sorted(set(cur.get("per_relation", {})) | set(prev.get("per_relation", {}))):
            a = prev.get("per_relation", {}).get(rel, {}).get("accuracy")
            b = cur.get("per_relation", {}).get(rel, {}).get("accuracy")
            rows.append({"run": name, "relation": rel, "previous": a, "current": b,
                         "delta": None if a is None or b is None else b - a})
    return rows


def run_nightly_compare(result_dirs: list[str], md_path: str, parent_run_id: str, tracking_uri: str) -> list[dict]:
    """Find the previous FINISHED nightly parent run with the same `factprobe.config_key`, diff its
    summary against this one, log `delta/...` metrics and a changes table to this parent run,
    and write a Markdown summary. With no previous run, says so and logs nothing else."""
    import json
    import tempfile

    import pandas as pd
    from mlflow.tracking import MlflowClient

    from factprobe.io import atomic_write_text
    from tracking.clients import tag_filter, tags_match
    from tracking.conventions import tag
    from tracking.run import TrackedRun

    from ._common import resolve_tracking_uri
    from .report import load_results

    current = load_results(result_dirs)
    uri = resolve_tracking_uri(tracking_uri)
    if uri is None or not parent_run_id:
        atomic_write_text(md_path, "Tracking is off: nothing to compare with.\n")
        return []
    client = MlflowClient(uri)
    me = client.get_run(parent_run_id)
    key = me.data.tags.get(tag("config_key"), "")
    wanted = {tag("config_key"): key, tag("role"): "parent"}
    prev_runs = client.search_runs(  # tag_filter escapes any value; tags_match re-checks exactly
        [me.info.experiment_id], filter_string=tag_filter(wanted, "FINISHED"),
        order_by=["attributes.start_time DESC"], max_results=20,
    )
    prev_runs = [r for r in prev_runs if r.info.run_id != parent_run_id and r.info.start_time <= me.info.start_time
                 and tags_match(r.data.tags, wanted)]
    run = TrackedRun(pipeline="nightly_sweep", tracking_uri=uri, required=True, run_id=parent_run_id)
    run.__enter__()
    if not prev_runs:
        atomic_write_text(md_path, "# Nightly comparison\n\nNo previous nightly run of this configuration: this run is the new reference.\n")
        run.set_tags({tag("previous_run"): "none"})
        return []
    prev = prev_runs[0]
    with tempfile.TemporaryDirectory() as d:
        previous = json.loads(open(client.download_artifacts(prev.info.run_id, "summary/summary.json", d)).read())
    rows = diff_summaries(current, previous)
    run.set_tags({tag("previous_run"): prev.info.run_id})
    run.log_metrics({f"delta/{r['run'].replace(':', '/')}" + ("" if r["relation"] == "*" else f"/{r['relation']}"): r["delta"]
                     for r in rows if r["delta"] is not None})
    run.log_table(pd.DataFrame(rows), "tables/nightly_changes.json")
    lines = [f"# Nightly comparison with run {prev.info.run_id}", "", "| run | relation | previous | current | change |", "|---|---|---|---|---|"]
    fmt = lambda v: "—" if v is None else f"{v:.3f}"  # noqa: E731
    for r in rows:
        if r["relation"] == "*" or (r["delta"] is not None and abs(r["delta"]) >= 0.05):
            lines.append(f"| {r['run']} | {r['relation']} | {fmt(r['previous'])} | {fmt(r['current'])} | "
                         f"{'—' if r['delta'] is None else format(r['delta'], '+.3f')} |")
    atomic_write_text(md_path, "\n".join(lines) + "\n")
    return rows
