"""Exit-handler step: end the parent run FINISHED or FAILED, fail any child left RUNNING, and write
the summary table as the parent run's description."""

import json


def run_finalize(pipeline: str, kfp_run_id: str, tracking_uri: str, state: str, error: str = "") -> str:
    """Find the parent run by its `factprobe.kfp_run_id` tag and terminate it with the pipeline's
    final state (SUCCEEDED -> FINISHED, anything else -> FAILED); children still RUNNING become
    FAILED. The parent's description (`mlflow.note.content`) becomes the summary table of its
    probe runs (`factprobe_ops.tracking.probe_logging.summary_markdown`, from their `factprobe.headline` tags).
    Returns the status set ('' when tracking is off or no parent exists)."""
    from factprobe_ops.tracking.clients import find_tagged_runs
    from factprobe_ops.tracking.connect import open_client
    from factprobe_ops.tracking.context import RunContext
    from factprobe_ops.tracking.conventions import experiment_name, tag

    # the exit task runs even when start-run failed, so it cannot take start-run's context: it
    # gets the tracking URI as a pipeline parameter (tracking/context.py's rule: '' = default, 'none' = off)
    uri = RunContext(tracking_uri=tracking_uri, pipeline=pipeline).uri
    if uri is None:
        return ""
    client = open_client(uri)
    exp_id = client.experiment_id(experiment_name(pipeline))
    # role=parent: the step runs carry the KFP run id too, and a FINISHED step run must stay FINISHED
    parents = find_tagged_runs(client, [exp_id], {tag("kfp_run_id"): kfp_run_id, tag("role"): "parent"})
    status = "FINISHED" if state == "SUCCEEDED" else "FAILED"
    for p in parents:
        children = find_tagged_runs(client, [exp_id], {"mlflow.parentRunId": p.run_id})
        for c in children:
            if c.status == "RUNNING":
                client.set_terminated(c.run_id, "FAILED")
        note = _summary_note(children)
        if note:
            client.set_tags(p.run_id, {"mlflow.note.content": note})
        if error:
            client.set_tags(p.run_id, {tag("error"): error[:5000]})
        client.set_terminated(p.run_id, status)
    return status if parents else ""


def _summary_note(children) -> str:
    """Markdown summary of the child probe runs that logged a headline ('' when none did)."""
    from factprobe_ops.tracking.conventions import tag
    from factprobe_ops.tracking.probe_logging import HEADLINE_TAG, summary_markdown

    rows = []
    for c in children:
        try:
            h = json.loads(c.tags.get(HEADLINE_TAG, ""))
        except ValueError:
            continue
        rows.append({"model": c.tags.get(tag("model"), ""), "probe": c.tags.get(tag("probe"), ""), "headline": h})
    if not rows:
        return ""
    rows.sort(key=lambda r: (r["model"], r["probe"]))
    return "Summary (headline metric per model and probe):\n\n" + summary_markdown(rows)
