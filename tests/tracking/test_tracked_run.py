"""TrackedRun and probe logging against a real embedded sqlite MLflow store."""

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from tracking.run import TrackedRun, TrackingError


@pytest.fixture
def uri(tmp_path):
    return f"sqlite:///{tmp_path / 'mlruns.db'}"


def test_finished_and_failed(uri):
    with TrackedRun(pipeline="t", run_name="ok", tracking_uri=uri) as run:
        run.log_metrics({"acc": 0.5, "acc/P36": 0.25, "nan": float("nan")})
        run.log_params({"model": "m"})
    c = MlflowClient(uri)
    r = c.get_run(run.run_id)
    assert r.info.status == "FINISHED" and r.data.metrics == {"acc": 0.5, "acc/P36": 0.25}
    assert r.data.params["model"] == "m" and r.data.tags["factprobe.git_sha"]
    with pytest.raises(RuntimeError):
        with TrackedRun(pipeline="t", run_name="boom", tracking_uri=uri) as run2:
            raise RuntimeError("crash")
    assert c.get_run(run2.run_id).info.status == "FAILED"


def test_nested_child_and_stale_running_runs(uri):
    with TrackedRun(pipeline="t", tracking_uri=uri) as parent:
        stale = TrackedRun(pipeline="t", tracking_uri=uri, parent_run_id=parent.run_id, step_key="k").__enter__()
        # the step crashed without ending its run; the retry marks it FAILED
        with TrackedRun(pipeline="t", tracking_uri=uri, parent_run_id=parent.run_id, step_key="k") as retry:
            pass
    c = MlflowClient(uri)
    assert c.get_run(stale.run_id).info.status == "FAILED"
    assert c.get_run(retry.run_id).info.status == "FINISHED"
    assert c.get_run(retry.run_id).data.tags["mlflow.parentRunId"] == parent.run_id


def test_unreachable_server_warns_or_raises():
    dead = "http://127.0.0.1:9"  # discard port: nothing listens
    msgs = []
    with TrackedRun(tracking_uri=dead, warn=msgs.append) as run:
        run.log_metrics({"acc": 1.0})
    assert not run.active and len(msgs) == 1 and dead in msgs[0] and "kept on disk" in msgs[0]
    with pytest.raises(TrackingError, match="127.0.0.1:9"):
        with TrackedRun(tracking_uri=dead, required=True):
            pass


def test_tables_datasets_and_figures(uri, tmp_path):
    df = pd.DataFrame({"fact_id": ["P36|Q1|Q2"], "relation": ["P36"], "correct": [True]})
    with TrackedRun(tracking_uri=uri) as run:
        run.log_parquet(df, "tables/per_fact.parquet")
        run.log_table(df, "tables/per_fact.json")
        run.log_input(df, name="d", source="countryinfo", digest="abc123")
    c = MlflowClient(uri)
    names = {a.path for a in c.list_artifacts(run.run_id, "tables")}
    assert names == {"tables/per_fact.parquet", "tables/per_fact.json"}
    inputs = c.get_run(run.run_id).inputs.dataset_inputs
    assert inputs and inputs[0].dataset.digest == "abc123"
