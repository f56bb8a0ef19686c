"""`runs:/<run id>` references: a known/unknown table read back from the MLflow run that logged it
(issue 10: "later steps ... read it by run id or by path")."""

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from factprobe.datasets.known_unknown import FILE_NAME, known_unknown_table, read_known_unknown
from factprobe.errors import ConfigError
from factprobe.refs import resolve_ref
from factprobe_ops.tracking.clients import TrackingError

ROWS = [
    {
        "fact_id": "P36|Q1|Q2",
        "relation": "P36",
        "subject": "France",
        "question": "What is the capital of France?",
        "split": "train",
        "shots": 10,
        "answer": " Paris",
        "em": 1.0,
        "f1": 1.0,
        "contains": 1.0,
    },
    {
        "fact_id": "P36|Q3|Q4",
        "relation": "P36",
        "subject": "Chad",
        "question": "What is the capital of Chad?",
        "split": "train",
        "shots": 10,
        "answer": " Lagos",
        "em": 0.0,
        "f1": 0.0,
        "contains": 0.0,
    },
]


@pytest.fixture
def logged_table(tmp_path, monkeypatch):
    """A run of an sqlite store with the table under results/ (where probe runs log their files)."""
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("FACTPROBE_CACHE", str(tmp_path / "cache"))
    client = MlflowClient(uri)
    exp = client.create_experiment("factprobe/probe", artifact_location=(tmp_path / "artifacts").as_uri())
    run = client.create_run(exp)
    table = tmp_path / "out" / FILE_NAME
    table.parent.mkdir()
    known_unknown_table(ROWS, "smollm2-135m-instruct", "rev-1").to_parquet(table, index=False)
    client.log_artifact(run.info.run_id, str(table), "results")
    client.set_terminated(run.info.run_id)
    return run.info.run_id


def test_a_table_is_read_by_run_id_as_by_path(logged_table, tmp_path):
    by_id = read_known_unknown(f"runs:/{logged_table}", "smollm2-135m-instruct")
    by_path = read_known_unknown(tmp_path / "out", "smollm2-135m-instruct")
    pd.testing.assert_frame_equal(by_id, by_path)
    assert by_id["known"].tolist() == [True, False]
    explicit = read_known_unknown(f"runs:/{logged_table}/results/{FILE_NAME}", "smollm2-135m-instruct")
    pd.testing.assert_frame_equal(explicit, by_path)
    with pytest.raises(ConfigError, match="not of gemma-3-270m"):  # the model check still applies
        read_known_unknown(f"runs:/{logged_table}", "gemma-3-270m")


def test_unknown_run_and_missing_artifact_are_one_line(logged_table):
    with pytest.raises(TrackingError, match=r"runs:/0123abc: no such run at sqlite://"):
        resolve_ref("runs:/0123abc")
    with pytest.raises(ConfigError, match=rf"run {logged_table} has no artifact 'tables/nope.parquet'"):
        resolve_ref(f"runs:/{logged_table}/tables/nope.parquet")
    with pytest.raises(ConfigError, match="expected runs:/<run id>"):
        resolve_ref("runs:/")


def test_unknown_schemes_are_refused_and_paths_pass_through(tmp_path):
    with pytest.raises(ConfigError, match=r"no resolver for gs:/ references \(known: runs:/\)"):
        resolve_ref("gs://bucket/table.parquet")
    odd = tmp_path / "it's a ü path:x"
    assert resolve_ref(odd) == odd and resolve_ref("C:/tables/x.parquet").name == "x.parquet"
