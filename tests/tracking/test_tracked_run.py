"""TrackedRun against a real embedded sqlite MLflow store, opened two ways: directly with the
MLflow library (`sqlite:///...`), and over REST through the loopback server a local pipeline run
starts (`http://127.0.0.1:<port>`, tracking/local_server.py + tracking/rest_client.py)."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from factprobe_ops.tracking.local_server import LocalServerError, LocalTrackingServer
from factprobe_ops.tracking.run import TrackedRun, TrackingError


@pytest.fixture(scope="module")
def served_store(tmp_path_factory):
    store = f"sqlite:///{tmp_path_factory.mktemp('served') / 'mlruns.db'}"
    with LocalTrackingServer(store) as url:
        yield url


@pytest.fixture(params=["sqlite", "rest"])
def uri(request, tmp_path):
    """The same tests through the library client and through the REST client."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'mlruns.db'}"
    return request.getfixturevalue("served_store")


@pytest.mark.slow
def test_finished_and_failed(uri):
    with TrackedRun(pipeline="t", run_name="ok", tracking_uri=uri) as run:
        run.log_metrics({"acc": 0.5, "acc/P36": 0.25, "nan": float("nan")})
        run.log_params({"model": "m"})
    c = MlflowClient(uri)
    r = c.get_run(run.run_id)
    assert r.info.status == "FINISHED" and r.data.metrics == {"acc": 0.5, "acc/P36": 0.25}
    assert r.data.params["model"] == "m" and r.data.tags["factprobe.git_sha"]
    with pytest.raises(RuntimeError), TrackedRun(pipeline="t", run_name="boom", tracking_uri=uri) as run2:
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


@pytest.mark.slow
def test_unreachable_server_warns_or_raises():
    dead = "http://127.0.0.1:9"  # discard port: nothing listens
    msgs = []
    with TrackedRun(tracking_uri=dead, warn=msgs.append) as run:
        run.log_metrics({"acc": 1.0})
    assert not run.active and len(msgs) == 1 and dead in msgs[0] and "kept on disk" in msgs[0]
    with pytest.raises(TrackingError, match="127.0.0.1:9"), TrackedRun(tracking_uri=dead, required=True):
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


def _run_content(c: MlflowClient, run_id: str) -> dict:
    r = c.get_run(run_id)
    tags = {k: v for k, v in r.data.tags.items() if k not in ("mlflow.runName",)}
    ds = r.inputs.dataset_inputs[0]
    files = sorted(f.path for d in ("tables", "figures", "notes") for f in c.list_artifacts(run_id, d))
    table = json.loads(Path(c.download_artifacts(run_id, "tables/per_fact.json")).read_text())
    parquet = pd.read_parquet(c.download_artifacts(run_id, "tables/per_fact.parquet")).to_dict("list")
    return {
        "status": r.info.status,
        "tags": tags,
        "params": r.data.params,
        "metrics": r.data.metrics,
        "dataset": (
            ds.dataset.name,
            ds.dataset.digest,
            ds.dataset.source_type,
            ds.dataset.source,
            ds.dataset.schema,
            ds.dataset.profile,
            [(t.key, t.value) for t in ds.tags],
        ),
        "files": files,
        "table": table,
        "parquet": parquet,
        "text": Path(c.download_artifacts(run_id, "notes/n.txt")).read_text(encoding="utf-8"),
    }


def _log_everything(uri: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    df = pd.DataFrame(
        {
            "fact_id": ["P36|Q1|Q2", "P36|Q3|Q4"],
            "relation": ["P36"] * 2,
            "n": [1, 2],
            "gold_prob": [0.25, 0.5],
            "correct": [True, False],
        }
    )
    fig, ax = plt.subplots()
    ax.plot([0, 1])
    with TrackedRun(pipeline="equiv", run_name="r", tracking_uri=uri, tags={"factprobe.model": "m"}) as run:
        run.log_params({"model": "m", "choices": 100, "long": "x" * 7000})
        run.log_metrics({f"acc/P{i}": i / 1000 for i in range(1200)})
        run.set_tags({"factprobe.dataset_digest": "d1"})
        run.log_table(df, "tables/per_fact.json")
        run.log_table(df.head(1), "tables/per_relation.json")
        run.log_parquet(df, "tables/per_fact.parquet")
        run.log_figure(fig, "figures/f.png")
        run.log_text("héllo", "notes/n.txt")
        run.log_input(df, name="countryinfo-mc100", source="countryinfo", digest="abc123")
    plt.close(fig)
    return run.run_id


@pytest.mark.slow
def test_rest_and_library_clients_write_the_same_run(tmp_path, served_store):
    """Every kind of logging through REST lands exactly as through the MLflow library: tags,
    params (incl. >100 and a capped long value), 1200 metrics (over one batch), tables (with the
    `mlflow.loggedArtifacts` tag the UI reads), figure, text, dataset input."""
    lib_uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    lib = _run_content(MlflowClient(lib_uri), _log_everything(lib_uri))
    rest = _run_content(MlflowClient(served_store), _log_everything(served_store))
    for content in (lib, rest):
        content["tags"].pop("factprobe.git_sha")
    assert lib == rest
    assert len(lib["metrics"]) == 1200 and len(lib["params"]["long"]) == 6000
    assert json.loads(lib["tags"]["mlflow.loggedArtifacts"]) == [
        {"path": "tables/per_fact.json", "type": "table"},
        {"path": "tables/per_relation.json", "type": "table"},
    ]
    assert lib["dataset"][4] == json.dumps(
        {
            "mlflow_colspec": [
                {"type": "string", "name": "fact_id", "required": True},
                {"type": "string", "name": "relation", "required": True},
                {"type": "long", "name": "n", "required": True},
                {"type": "double", "name": "gold_prob", "required": True},
                {"type": "boolean", "name": "correct", "required": True},
            ]
        }
    )


def test_dataset_record_matches_mlflow_from_pandas():
    import mlflow.data

    from factprobe_ops.tracking.clients import dataset_record

    df = pd.DataFrame({"fact_id": ["a", "b"], "n": [1, 2], "p": [0.5, 0.25], "ok": [True, False]})
    for source in ("countryinfo", "/data/lama", "s3://bucket/prefix"):
        e = mlflow.data.from_pandas(df, source=source, name="x", digest="d")._to_mlflow_entity()
        assert dataset_record(df, "x", source, "d") == {
            "name": e.name,
            "digest": e.digest,
            "source_type": e.source_type,
            "source": e.source,
            "schema": e.schema,
            "profile": e.profile,
        }


def test_a_step_logging_over_rest_never_imports_mlflow(served_store):
    """The point of the REST client: a pipeline step process skips mlflow's ~1.5 s import."""
    code = f"""
import sys, pandas as pd
from factprobe_ops.tracking.run import TrackedRun
with TrackedRun(pipeline="noimport", tracking_uri={served_store!r}, required=True) as run:
    run.log_metrics({{"acc": 1.0}}); run.log_params({{"m": "x"}})
    run.log_table(pd.DataFrame({{"a": [1]}}), "tables/t.json"); run.log_text("t", "t.txt")
    run.log_input(pd.DataFrame({{"a": ["x"]}}), name="d", source="countryinfo", digest="d")
assert "mlflow" not in sys.modules, "mlflow was imported"
print(run.run_id)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert MlflowClient(served_store).get_run(out).info.status == "FINISHED"


def test_rest_errors_name_the_call_and_the_server_answer(served_store):
    from factprobe_ops.tracking.rest_client import RestError, RestTrackingClient

    with pytest.raises(RestError, match=r"POST runs/update: HTTP 404 RESOURCE_DOES_NOT_EXIST: .*nope"):
        RestTrackingClient(served_store).set_terminated("nope", "FAILED")
    with (
        TrackedRun(tracking_uri=served_store, run_id="nope", required=True) as run,
        pytest.raises(TrackingError, match="setting tags failed.*nope"),
    ):
        run.set_tags({"a": "b"})


@pytest.mark.slow
def test_local_server_that_cannot_start_says_why(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with (
        pytest.raises(LocalServerError, match=r"local MLflow server for sqlite:///.*did not start: .+") as e,
        LocalTrackingServer(f"sqlite:///{blocker}/mlruns.db", artifact_root=str(tmp_path / "art")),
    ):
        pass
    assert "\n" not in str(e.value)


def test_rest_client_uploads_to_an_s3_artifact_store(moto_s3_endpoint, monkeypatch, tmp_path):
    """A server that hands out `s3://` artifact URIs (no artifact proxying): the step uploads with
    boto3 to MLFLOW_S3_ENDPOINT_URL, keeping the artifact path."""
    import boto3

    from factprobe_ops.tracking.rest_client import RestTrackingClient

    for k, v in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "MLFLOW_S3_ENDPOINT_URL": moto_s3_endpoint,
    }.items():
        monkeypatch.setenv(k, v)
    s3 = boto3.client("s3", endpoint_url=moto_s3_endpoint)
    s3.create_bucket(Bucket="artifacts-rest")
    client = RestTrackingClient("http://127.0.0.1:9")  # never called: the artifact URI is known
    client._artifact_uris["r1"] = "s3://artifacts-rest/1/r1/artifacts"
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "a.txt").write_text("a")
    (tmp_path / "d" / "sub" / "b.txt").write_text("b")
    client.log_artifact("r1", str(tmp_path / "d" / "a.txt"), "results")
    client.log_artifacts("r1", str(tmp_path / "d"), "all")
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="artifacts-rest")["Contents"])
    assert keys == ["1/r1/artifacts/all/a.txt", "1/r1/artifacts/all/sub/b.txt", "1/r1/artifacts/results/a.txt"]
    assert s3.get_object(Bucket="artifacts-rest", Key="1/r1/artifacts/all/sub/b.txt")["Body"].read() == b"b"


@pytest.mark.slow
def test_relative_store_is_served_from_the_callers_folder(tmp_path, monkeypatch):
    """`sqlite:///mlruns.db` means the caller's working folder, not the server process's."""
    from factprobe_ops.tracking.local_server import absolute_store, default_artifact_root

    monkeypatch.chdir(tmp_path)
    assert absolute_store("sqlite:///sub/mlruns.db") == f"sqlite:///{tmp_path / 'sub' / 'mlruns.db'}"
    assert absolute_store(f"sqlite:///{tmp_path}/a.db") == f"sqlite:///{tmp_path}/a.db"
    assert default_artifact_root("sqlite:///sub/mlruns.db") == str(tmp_path / "sub" / "mlruns")
    with LocalTrackingServer("sqlite:///mlruns.db") as url, TrackedRun(pipeline="rel", tracking_uri=url, required=True) as run:
        run.log_text("x", "x.txt")
    assert MlflowClient(f"sqlite:///{tmp_path / 'mlruns.db'}").get_run(run.run_id).info.status == "FINISHED"
    assert (tmp_path / "mlruns").is_dir() and not (tmp_path / "mlflow.db").exists()


@pytest.mark.slow
def test_runs_record_mlflow_user_and_git_commit(uri, monkeypatch):
    """MLflow's standard tags (the UI's User and Source columns): `mlflow.user` from FACTPROBE_USER
    (else the login name), `mlflow.source.git.commit` = the checkout's commit = factprobe.git_sha."""
    from factprobe_ops.tracking.conventions import git_sha

    monkeypatch.setenv("FACTPROBE_USER", "ci-bot@example.com")
    monkeypatch.setenv("FACTPROBE_GIT_SHA", "0123456789abcdef0123456789abcdef01234567")
    with TrackedRun(pipeline="t", run_name="tags", tracking_uri=uri) as run:
        pass
    with TrackedRun(pipeline="t", run_name="child", tracking_uri=uri, parent_run_id=run.run_id) as child:
        pass
    c = MlflowClient(uri)
    for r in (c.get_run(run.run_id), c.get_run(child.run_id)):
        assert r.data.tags["mlflow.user"] == "ci-bot@example.com" and r.info.user_id == "ci-bot@example.com"
        assert r.data.tags["mlflow.source.git.commit"] == git_sha() == r.data.tags["factprobe.git_sha"]
    monkeypatch.delenv("FACTPROBE_USER")
    monkeypatch.delenv("FACTPROBE_GIT_SHA")
    import getpass

    with TrackedRun(pipeline="t", run_name="login", tracking_uri=uri) as run:
        pass
    tags = c.get_run(run.run_id).data.tags
    assert tags["mlflow.user"] == getpass.getuser()
    sha = subprocess.run(
        ["git", "-C", str(Path(__file__).parent), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert tags["mlflow.source.git.commit"] == sha


# --- the one run context (tracking/context.py, issue 19 item 3) -----------------------------------


def test_run_context_crosses_a_step_boundary_as_one_json_string():
    from factprobe.errors import ConfigError
    from factprobe_ops.tracking.context import RunContext

    ctx = RunContext(
        tracking_uri="http://mlflow:5000",
        pipeline="probe",
        trigger="ui",
        parent_run_id="p1",
        kfp_run_id="k1",
        user="ana",
        git_commit="abc",
    )
    text = ctx.to_json()
    assert isinstance(text, str) and RunContext.from_json(text) == ctx and RunContext.from_json(json.loads(text)) == ctx
    assert ctx.with_parent("p2").parent_run_id == "p2" and ctx.parent_run_id == "p1"
    with pytest.raises(ConfigError, match="unknown key.*tracking"):
        RunContext.from_json('{"tracking": "x"}')
    with pytest.raises(ConfigError, match="not JSON"):
        RunContext.from_json("{nope")


def test_run_context_resolves_the_tracking_uri(monkeypatch, tmp_path):
    from factprobe_ops.tracking.context import RunContext

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    assert RunContext(tracking_uri="none", parent_run_id="p").uri is None
    assert not RunContext(tracking_uri="none", parent_run_id="p").tracked
    assert RunContext().uri == f"sqlite:///{tmp_path / 'mlruns.db'}" and not RunContext().tracked  # no parent run
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://env:5000")
    assert RunContext(parent_run_id="p").uri == "http://env:5000" and RunContext(parent_run_id="p").tracked
    monkeypatch.setenv("FACTPROBE_USER", "ci-bot")
    monkeypatch.setenv("FACTPROBE_GIT_SHA", "f" * 40)
    started = RunContext.start("", pipeline="coherency", kfp_run_id="k")
    assert (started.user, started.git_commit, started.trigger, started.pipeline) == ("ci-bot", "f" * 40, "local", "coherency")


def test_tracked_run_from_context_tags_and_nests_the_run(uri):
    from factprobe_ops.tracking.context import RunContext

    ctx = RunContext(tracking_uri=uri, pipeline="ctx", trigger="nightly", kfp_run_id="kfp-1", user="ana", git_commit="1" * 40)
    with TrackedRun.from_context(ctx, run_name="parent", child=False, required=True) as parent:
        pass
    with TrackedRun.from_context(ctx.with_parent(parent.run_id), run_name="child", tags={"x": "y"}) as child:
        pass
    assert not TrackedRun.from_context(ctx).enabled  # a step run without a parent run is not logged
    assert not TrackedRun.from_context(RunContext(tracking_uri="none", parent_run_id="p")).enabled
    c = MlflowClient(uri)
    got = c.get_run(child.run_id).data.tags
    assert got["mlflow.parentRunId"] == parent.run_id and got["x"] == "y"
    for tags in (got, c.get_run(parent.run_id).data.tags):
        assert tags["factprobe.trigger"] == "nightly" and tags["factprobe.kfp_run_id"] == "kfp-1"
        assert tags["factprobe.git_sha"] == "1" * 40 == tags["mlflow.source.git.commit"] and tags["mlflow.user"] == "ana"
    assert "mlflow.parentRunId" not in c.get_run(parent.run_id).data.tags
    assert c.get_experiment(c.get_run(child.run_id).info.experiment_id).name == "factprobe/ctx"


def test_parent_of_logs_into_the_parent_and_leaves_it_running(uri):
    """A report step logs into its context's parent run (TrackedRun.parent_of) without ending it;
    with tracking off or no parent run it logs nothing. A RunContext passes through from_json."""
    from factprobe_ops.tracking.context import RunContext

    ctx = RunContext(tracking_uri=uri, pipeline="ctx", trigger="ui")
    parent = TrackedRun.from_context(ctx, run_name="parent", child=False, required=True)
    parent.__enter__()  # RUNNING, as start-run leaves it
    step_ctx = RunContext.from_json(ctx.with_parent(parent.run_id).to_json())
    assert RunContext.from_json(step_ctx) is step_ctx
    with TrackedRun.parent_of(step_ctx) as run:
        run.set_tags({"factprobe.gate": "PASS"})
    got = MlflowClient(uri).get_run(parent.run_id)
    assert got.data.tags["factprobe.gate"] == "PASS" and got.info.status == "RUNNING"
    assert not TrackedRun.parent_of(ctx).enabled  # no parent run
    assert not TrackedRun.parent_of(RunContext(tracking_uri="none", parent_run_id=parent.run_id)).enabled
    parent.__exit__(None, None, None)
