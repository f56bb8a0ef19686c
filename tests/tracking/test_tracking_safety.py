"""Tracking under awkward conditions, against a real sqlite MLflow store opened two ways (the
MLflow library, and REST through the token-guarded loopback server of local pipeline runs):

- one error base: every tracking error is a FactprobeError that tells the CLI its exit code;
- importing tracking leaves the environment alone; clients still fail fast;
- step keys and tag values with quotes, backslashes, spaces and non-ASCII characters;
- two processes creating the same fresh mlruns.db at once;
- the loopback server answers only requests carrying its run token.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
import requests
from mlflow.tracking import MlflowClient

from factprobe.errors import DataError, FactprobeError, ServiceError
from factprobe_ops.tracking.clients import TrackingError, find_tagged_runs, tag_filter
from factprobe_ops.tracking.connect import open_client
from factprobe_ops.tracking.local_server import LocalServerError, LocalTrackingServer
from factprobe_ops.tracking.rest_client import RestError, RestTrackingClient
from factprobe_ops.tracking.run import TrackedRun

REPO = Path(__file__).resolve().parents[2]

AWKWARD_KEYS = [
    "data/it's here/P36",
    'say "hi"',
    "both ' and \"",
    "back\\slash\\",
    "naïve Zürich 東京 ✓",
    "with spaces  and\ttab",
    "100%_wild",
    "'",
]


@pytest.fixture(scope="module")
def served_store(tmp_path_factory):
    store = f"sqlite:///{tmp_path_factory.mktemp('served-safety') / 'mlruns.db'}"
    with LocalTrackingServer(store) as url:
        yield url


@pytest.fixture(params=["sqlite", "rest"])
def uri(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'mlruns.db'}"
    return request.getfixturevalue("served_store")


# ---------------------------------------------------------------------------------------------
# one error base


def test_tracking_errors_are_factprobe_errors_with_exit_code_1():
    for cls in (TrackingError, LocalServerError, RestError):
        assert issubclass(cls, ServiceError) and issubclass(cls, FactprobeError)
        assert issubclass(cls, RuntimeError)  # as before: code catching RuntimeError still does
    assert TrackingError("x").exit_code == LocalServerError("x").exit_code == 1
    assert RestError("GET x", 500, "INTERNAL_ERROR", "boom").exit_code == 1
    assert DataError("x").exit_code == FactprobeError("x").exit_code == 2
    import factprobe_ops.tracking.run

    assert factprobe_ops.tracking.run.TrackingError is TrackingError


# ---------------------------------------------------------------------------------------------
# no side effects at import


def test_importing_tracking_sets_no_environment_variable():
    code = textwrap.dedent("""
        import os, sys
        before = dict(os.environ)
        import factprobe_ops.tracking, factprobe_ops.tracking.run, factprobe_ops.tracking.clients, factprobe_ops.tracking.rest_client, factprobe_ops.tracking.local_server
        import factprobe_ops.tracking.compare, factprobe_ops.tracking.conventions, factprobe_ops.tracking.library_client, factprobe_ops.tracking.probe_logging
        changed = {k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k)}
        print(sorted(changed))
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_HTTP_REQUEST_")}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.slow
def test_clients_fail_fast_without_touching_the_environment(monkeypatch):
    for k in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "MLFLOW_HTTP_REQUEST_TIMEOUT"):
        monkeypatch.delenv(k, raising=False)
    client = RestTrackingClient("http://127.0.0.1:9")
    assert client.timeout == 15.0
    assert client._http.adapters["http://"].max_retries.total == 2
    assert "MLFLOW_HTTP_REQUEST_TIMEOUT" not in os.environ
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "3")
    assert RestTrackingClient("http://127.0.0.1:9").timeout == 3.0
    start = time.monotonic()
    with pytest.raises(TrackingError, match="connection refused"), TrackedRun(tracking_uri="http://127.0.0.1:9", required=True):
        pass
    assert time.monotonic() - start < 30


@pytest.mark.slow
def test_the_library_client_gets_the_fail_fast_settings_when_opened(monkeypatch, tmp_path):
    for k in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "MLFLOW_HTTP_REQUEST_TIMEOUT"):
        monkeypatch.delenv(k, raising=False)
    open_client(f"sqlite:///{tmp_path / 'mlruns.db'}")
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "2" and os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "15"


# ---------------------------------------------------------------------------------------------
# filters built from user values


@pytest.mark.slow
@pytest.mark.parametrize("key", AWKWARD_KEYS)
def test_stale_runs_with_awkward_step_keys_are_failed(uri, key):
    """A step key holding quotes, backslashes, wildcards or non-ASCII text: the run is tracked,
    the stale RUNNING run of the same key is marked FAILED, and a run whose key only looks
    alike (what a LIKE pattern would also match) is left alone."""
    pipeline = f"safety-{abs(hash((uri, key)))}"
    lookalike = key.replace("'", "x").replace('"', "x").replace("\\", "x").replace("%", "y").replace("_", "z")
    if lookalike == key:
        lookalike = key.upper() if key.upper() != key else key + "!"
    msgs: list[str] = []
    with TrackedRun(pipeline=pipeline, tracking_uri=uri, warn=msgs.append) as parent:
        other = TrackedRun(pipeline=pipeline, tracking_uri=uri, step_key=lookalike, warn=msgs.append).__enter__()
        stale = TrackedRun(pipeline=pipeline, tracking_uri=uri, step_key=key, warn=msgs.append).__enter__()
        with TrackedRun(
            pipeline=pipeline, tracking_uri=uri, parent_run_id=parent.run_id, step_key=key, warn=msgs.append
        ) as retry:
            assert retry.active
    assert msgs == []
    c = MlflowClient(uri)
    assert c.get_run(stale.run_id).info.status == "FAILED"
    assert c.get_run(retry.run_id).info.status == "FINISHED"
    assert c.get_run(retry.run_id).data.tags["factprobe.step_key"] == key
    assert c.get_run(other.run_id).info.status == "RUNNING"


def test_find_tagged_runs_matches_exactly(uri):
    client = open_client(uri)
    exp = client.experiment_id("factprobe/safety-find")
    ids = {v: client.create_run(exp, None, {"k": v}) for v in ["a'b", 'a"b', "a_b", "aXb", "A'B", "a'b\"c", "a\\b"]}
    for value, run_id in ids.items():
        assert [r.run_id for r in find_tagged_runs(client, [exp], {"k": value})] == [run_id], value
    assert find_tagged_runs(client, [exp], {"k": "a'b"}, status="FINISHED") == []


def test_tag_filter_forms():
    assert tag_filter({"a.b": "x y"}, "RUNNING") == "tags.`a.b` = 'x y' and attributes.status = 'RUNNING'"
    assert tag_filter({"k": "it's"}) == 'tags.`k` = "it\'s"'
    assert tag_filter({"k": 'it\'s "x"'}) == "tags.`k` LIKE 'it_s _x_'"
    with pytest.raises(FactprobeError, match="backtick"):
        tag_filter({"a`b": "x"})


@pytest.mark.slow
def test_compare_resolves_tag_references_with_awkward_values(tmp_path):
    from factprobe_ops.tracking.compare import resolve_run

    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    table = pd.DataFrame({"fact_id": ["P36|a|b"], "relation": ["P36"], "correct": [True]})
    value = 'l\'équipe "A"'
    # probe runs (compare resolves only runs of a probe with a per-fact verdict, de118a2)
    with TrackedRun(pipeline="probe", tracking_uri=uri, tags={"baseline": value, "factprobe.probe": "ic-lke"}) as run:
        run.log_metrics({"acc": 1.0})
        run.log_parquet(table, "tables/per_fact.parquet")
    with TrackedRun(pipeline="probe", tracking_uri=uri, tags={"baseline": "l_équipe _A_", "factprobe.probe": "ic-lke"}) as decoy:
        decoy.log_metrics({"acc": 0.0})  # newer, and matched by the LIKE pattern: must not win
        decoy.log_parquet(table, "tables/per_fact.parquet")
    df, desc = resolve_run(f"baseline={value}", uri)
    assert desc["run_id"] == run.run_id != decoy.run_id and list(df["fact_id"]) == ["P36|a|b"]


# ---------------------------------------------------------------------------------------------
# a fresh sqlite store opened by two processes at once


@pytest.mark.slow
def test_two_processes_create_the_same_fresh_store(tmp_path):
    """MLflow creates and migrates a new sqlite file without a lock of its own: two processes
    starting on the same fresh mlruns.db used to collide ('duplicate column name', 'table
    already exists'). Both start at the same instant, several times."""
    code = textwrap.dedent("""
        import sys, time
        import mlflow  # import first, so both processes reach the store at the same moment
        from factprobe_ops.tracking.run import TrackedRun
        uri, start = sys.argv[1], float(sys.argv[2])
        while time.time() < start:
            time.sleep(0.001)
        with TrackedRun(pipeline="race", tracking_uri=uri, required=True) as run:
            run.log_metrics({"acc": 1.0})
        print(run.run_id)
    """)
    for attempt in range(3):
        uri = f"sqlite:///{tmp_path / f'race{attempt}' / 'mlruns.db'}"
        start = time.time() + 8
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", code, uri, str(start)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            for _ in range(2)
        ]
        outs = [p.communicate(timeout=300) for p in procs]
        for p, (_out, err) in zip(procs, outs):
            assert p.returncode == 0, err[-2000:]
        run_ids = [out.strip() for out, _ in outs]
        c = MlflowClient(uri)
        assert {c.get_run(r).info.status for r in run_ids} == {"FINISHED"}
        assert len(c.search_experiments(filter_string="name = 'factprobe/race'")) == 1


# ---------------------------------------------------------------------------------------------
# the loopback server's token


@pytest.mark.slow
def test_loopback_server_needs_its_run_token(tmp_path):
    store = f"sqlite:///{tmp_path / 'mlruns.db'}"
    before = os.environ.get("MLFLOW_TRACKING_TOKEN")
    os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"] = "someone", "elsewhere"
    try:
        server = LocalTrackingServer(store)
        with server as url:
            api = f"{url}/api/2.0/mlflow/experiments/search"
            assert requests.get(api, params={"max_results": 1}, timeout=10).status_code == 401
            wrong = {"Authorization": "Bearer " + "x" * len(server.token)}
            assert requests.get(api, params={"max_results": 1}, headers=wrong, timeout=10).status_code == 401
            right = {"Authorization": f"Bearer {server.token}"}
            assert requests.get(api, params={"max_results": 1}, headers=right, timeout=10).status_code == 200
            # this process and its children send it (basic-auth variables are hidden meanwhile)
            assert os.environ["MLFLOW_TRACKING_TOKEN"] == server.token
            assert "MLFLOW_TRACKING_USERNAME" not in os.environ
            with TrackedRun(pipeline="token", tracking_uri=url, required=True) as run:
                run.log_metrics({"acc": 1.0})
            assert MlflowClient(url).get_run(run.run_id).info.status == "FINISHED"
            # the token is not on the server's command line (which every local user can read)
            cmdline = Path(f"/proc/{server._proc.pid}/cmdline").read_bytes()
            assert server.token.encode() not in cmdline
        assert os.environ.get("MLFLOW_TRACKING_TOKEN") == before
        assert os.environ["MLFLOW_TRACKING_USERNAME"] == "someone"
        with LocalTrackingServer(store) as url2:  # a new run, a new token
            assert os.environ["MLFLOW_TRACKING_TOKEN"] != server.token
            assert url2.startswith("http://127.0.0.1:")
    finally:
        os.environ.pop("MLFLOW_TRACKING_USERNAME", None)
        os.environ.pop("MLFLOW_TRACKING_PASSWORD", None)


def test_server_process_refuses_to_run_without_a_token(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "FACTPROBE_LOCAL_SERVER_TOKEN"}
    p = subprocess.run(
        [sys.executable, "-m", "factprobe_ops.tracking.local_server", f"sqlite:///{tmp_path / 'x.db'}", str(tmp_path)],
        check=False,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode != 0 and "refuses to run without a token" in p.stderr
