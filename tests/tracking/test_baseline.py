"""`factprobe baseline promote RUN_ID` (issue 13, item 6): one baseline per experiment and probe."""

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from factprobe.cli import main
from factprobe.errors import ConfigError
from factprobe_ops.tracking.baseline import BASELINE_TAG, promote


@pytest.fixture
def store(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    client = MlflowClient(uri)
    exp = client.create_experiment("factprobe/probe", artifact_location=(tmp_path / "artifacts").as_uri())

    table = tmp_path / "per_fact.parquet"  # what `regress` gates on (a probe run logs it)
    pd.DataFrame({"fact_id": ["P36|Q1|Q2"], "relation": ["P36"], "correct": [True]}).to_parquet(table)

    def run(probe: str | None = "ic-lke", finish: bool = True) -> str:
        identity = {"factprobe.data_digest": "sha256:0", "factprobe.numerics": '{"dtype": "float32", "device": "cpu"}'}
        r = client.create_run(exp, tags={"factprobe.probe": probe, **identity} if probe else {})
        client.log_metric(r.info.run_id, "accuracy", 0.5)
        client.log_artifact(r.info.run_id, str(table), "tables")
        if finish:
            client.set_terminated(r.info.run_id)
        return r.info.run_id

    return client, run


def tagged(client, run_id):
    return client.get_run(run_id).data.tags.get(BASELINE_TAG)


def test_promote_moves_the_tag_within_the_probe_only(store, capsys):
    client, run = store
    a, b, other = run(), run(), run("hgp")
    assert promote(a) == [] and tagged(client, a) == "true"
    assert promote(other) == []  # another probe keeps its own baseline
    assert main(["baseline", "promote", b]) == 0
    assert f"run {b} is now the baseline" in capsys.readouterr().out
    assert tagged(client, a) is None and tagged(client, b) == "true" and tagged(client, other) == "true"
    assert promote(b) == []  # promoting the baseline again changes nothing
    assert tagged(client, b) == "true"


@pytest.mark.slow
def test_promote_refuses_unknown_unfinished_and_parent_runs(store, capsys):
    client, run = store
    with pytest.raises(ConfigError, match="run 'nope' not found at sqlite://"):
        promote("nope")
    running = run(finish=False)
    with pytest.raises(ConfigError, match=f"run {running} is RUNNING; only a FINISHED run"):
        promote(running)
    parent = run(probe=None)
    assert main(["baseline", "promote", parent]) == 2
    assert "is not a probe run" in capsys.readouterr().err
    assert tagged(client, parent) is None and tagged(client, running) is None
