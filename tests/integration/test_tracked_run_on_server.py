"""`TrackedRun` and the pipeline's start/finalize steps against the real server (no model, fast).

The run-status contract of DESIGN.md section 6: a failed step marks its run FAILED, a crashed
step's run does not stay RUNNING, and the exit handler ends the parent and any child left open.
"""

from __future__ import annotations

import json
import os
import uuid
import warnings

import pytest

pytestmark = [pytest.mark.server]


@pytest.fixture
def uri(servers, mlflow_client):
    """The server URI. Restores MLflow's process-wide tracking URI afterwards, in case the code
    under test sets it (it must not leak into the unit tests that run after these)."""
    from mlflow.tracking._tracking_service import utils

    old_uri, old_env = utils._tracking_uri, os.environ.get("MLFLOW_TRACKING_URI")
    yield servers.mlflow.uri
    utils.set_tracking_uri(old_uri)
    if old_env is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = old_env


def test_stale_running_run_of_the_same_step_is_marked_failed(uri, mlflow_client):
    from factprobe_ops.tracking.run import TrackedRun

    step_key = f"itest/{uuid.uuid4().hex}/probe"
    crashed = TrackedRun(pipeline="itest", run_name="crashed", tracking_uri=uri, step_key=step_key, required=True)
    crashed.__enter__()  # the process dies here: no __exit__
    assert mlflow_client.get_run(crashed.run_id).info.status == "RUNNING"
    with TrackedRun(pipeline="itest", run_name="retry", tracking_uri=uri, step_key=step_key, required=True) as retry:
        retry.log_metrics({"acc": 0.5})
    assert mlflow_client.get_run(crashed.run_id).info.status == "FAILED"
    done = mlflow_client.get_run(retry.run_id)
    assert done.info.status == "FINISHED" and done.data.metrics["acc"] == 0.5
    assert done.data.tags["factprobe.step_key"] == step_key


def test_exception_in_the_block_ends_the_run_failed(uri, mlflow_client):
    from factprobe_ops.tracking.run import TrackedRun

    with (
        pytest.raises(RuntimeError, match="step crashed"),
        TrackedRun(pipeline="itest", run_name="boom", tracking_uri=uri, required=True) as run,
    ):
        raise RuntimeError("step crashed")
    assert mlflow_client.get_run(run.run_id).info.status == "FAILED"


def test_wrong_password_warns_once_and_switches_tracking_off(uri, monkeypatch):
    from factprobe_ops.tracking.run import TrackedRun, TrackingError

    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "not-the-password")
    messages: list[str] = []
    with TrackedRun(pipeline="itest", tracking_uri=uri, warn=messages.append) as run:
        run.log_metrics({"acc": 1.0})
        run.log_params({"model": "x"})
    assert not run.active and run.run_id is None
    assert len(messages) == 1 and uri in messages[0] and "401" in messages[0], messages
    with pytest.raises(TrackingError, match="401") as err:
        TrackedRun(pipeline="itest", tracking_uri=uri, required=True).__enter__()
    assert uri in str(err.value) and "\n" not in str(err.value)


def test_experiment_created_by_a_concurrent_run_is_reused(uri, mlflow_client, monkeypatch):
    """Two first runs of a pipeline start at once: both read "no experiment", one creates it, the
    other's create_experiment gets RESOURCE_ALREADY_EXISTS and must use the existing experiment."""
    from factprobe_ops.tracking.conventions import experiment_name
    from factprobe_ops.tracking.rest_client import RestTrackingClient
    from factprobe_ops.tracking.run import TrackedRun

    pipeline = f"itest-race-{uuid.uuid4().hex[:8]}"
    real_request = RestTrackingClient._request
    stale = {"reads": 0}

    def get_before_the_other_created_it(self, method, endpoint, body=None, ok_missing=False):
        if endpoint == "experiments/get-by-name" and body["experiment_name"] == experiment_name(pipeline) and stale["reads"] == 0:
            stale["reads"] += 1
            mlflow_client.create_experiment(body["experiment_name"])  # the other run wins right after our read
            return None
        return real_request(self, method, endpoint, body, ok_missing)

    monkeypatch.setattr(RestTrackingClient, "_request", get_before_the_other_created_it)
    with TrackedRun(pipeline=pipeline, tracking_uri=uri, required=True) as run:
        pass
    assert stale["reads"] == 1
    assert (
        mlflow_client.get_run(run.run_id).info.experiment_id
        == mlflow_client.get_experiment_by_name(experiment_name(pipeline)).experiment_id
    )


def test_finalize_ends_parent_and_children_left_running(uri, mlflow_client):
    from factprobe_ops.components.steps.finalize_run import run_finalize
    from factprobe_ops.components.steps.start_run import run_start
    from factprobe_ops.tracking.context import RunContext
    from factprobe_ops.tracking.run import TrackedRun

    kfp_run_id = uuid.uuid4().hex[:8]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parent_id = RunContext.from_json(
            run_start("itest", kfp_run_id, "ci", uri, json.dumps({"models": ["m1", "m2"], "seed": 0}))
        ).parent_run_id
    child = TrackedRun(pipeline="itest", run_name="probe", tracking_uri=uri, parent_run_id=parent_id, required=True)
    child.__enter__()  # the step was killed: still RUNNING
    assert run_finalize("itest", kfp_run_id, uri, state="FAILED", error="probe-model: OOMKilled") == "FAILED"
    parent = mlflow_client.get_run(parent_id)
    assert parent.info.status == "FAILED"
    assert parent.data.tags["factprobe.error"] == "probe-model: OOMKilled"
    assert parent.data.tags["factprobe.trigger"] == "ci" and parent.data.tags["factprobe.model"] == "m1,m2"
    assert mlflow_client.get_run(child.run_id).info.status == "FAILED"
