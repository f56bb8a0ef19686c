"""Fixtures for the integration tests against real servers (all marked `server`).

- `servers` (session): PostgreSQL (a private cluster in a temp dir), moto S3 with the bucket
  `mlflow-artifacts`, and an MLflow `basic-auth` server on both, on 127.0.0.1 and free ports
  (see servers.py). Skipped, with the install command, only when the PostgreSQL binaries are
  missing. Everything is stopped at session end, whole process groups, nothing orphaned.
- `mlflow_server`: the session's MLflow server; restarted at teardown if a test stopped it.
- `mlflow_client`: `MlflowClient` on that server, authenticated as the admin (env set for the test).
- `factprobe_env`: env for a `factprobe` subprocess logging to the server (credentials, FACTPROBE_WORK).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from .servers import ADMIN_PASSWORD, ADMIN_USER, MlflowServer, ServerError, Stack, client_env, postgres_bin_dir


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:  # belt and braces: every test in this folder needs the servers
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.server)


@pytest.fixture(scope="session")
def servers(tmp_path_factory) -> Stack:
    if postgres_bin_dir() is None:
        pytest.skip("PostgreSQL binaries not found under /usr/lib/postgresql/*/bin: apt-get install -y postgresql")
    missing = [m for m in ("psycopg2", "flask_wtf", "boto3") if importlib.util.find_spec(m) is None]
    if missing:  # a broken test environment, not a reason to skip
        pytest.fail(
            f"integration servers need {missing}: pip install -c constraints.txt 'mlflow[auth]' psycopg2-binary 'moto[server]'",
            pytrace=False,
        )
    stack = Stack(tmp_path_factory.mktemp("servers"))
    try:
        stack.start()
    except ServerError as e:
        pytest.fail(f"integration servers did not start: {e}", pytrace=False)
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def mlflow_server(servers) -> MlflowServer:
    server = servers.mlflow
    yield server
    if not server.running:  # a failure test stopped it: bring it back for the next test
        server.start()


@pytest.fixture
def mlflow_client(servers, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", ADMIN_USER)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", ADMIN_PASSWORD)
    return MlflowClient(servers.mlflow.uri)


@pytest.fixture
def factprobe_env(servers, tmp_path) -> dict[str, str]:
    env = client_env(servers.mlflow.uri)
    env["FACTPROBE_WORK"] = str(tmp_path / "work")
    return env
