"""Exit-handler step: end the parent run FINISHED or FAILED, and fail any child left RUNNING."""


def run_finalize(pipeline: str, kfp_run_id: str, tracking_uri: str, state: str, error: str = "") -> str:
    """Find the parent run by its `factprobe.kfp_run_id` tag and terminate it with the pipeline's
    final state (SUCCEEDED -> FINISHED, anything else -> FAILED); children still RUNNING become
    FAILED. Returns the status set ('' when tracking is off or no parent exists)."""
    from mlflow.tracking import MlflowClient

    from tracking.conventions import experiment_name, tag

    from ._common import resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri)
    if uri is None:
        return ""
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment_name(pipeline))
    if exp is None:
        return ""
    parents = client.search_runs([exp.experiment_id], filter_string=f"tags.`{tag('kfp_run_id')}` = '{kfp_run_id}'")
    status = "FINISHED" if state == "SUCCEEDED" else "FAILED"
    for p in parents:
        children = client.search_runs([exp.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{p.info.run_id}'")
        for c in children:
            if c.info.status == "RUNNING":
                client.set_terminated(c.info.run_id, status="FAILED")
        if error:
            client.set_tag(p.info.run_id, tag("error"), error[:5000])
        client.set_terminated(p.info.run_id, status=status)
    return status if parents else ""
