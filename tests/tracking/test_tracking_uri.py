"""One place decides where MLflow is (issue 42 item 3): `resolve_tracking_uri` (tracking/conventions.py),
and `factprobe pipeline run` prints the store its steps logged to, not another one."""

from __future__ import annotations

import pytest

from factprobe_ops.tracking.conventions import resolve_tracking_uri


def test_the_first_given_uri_wins_then_the_environment_then_the_embedded_store(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert resolve_tracking_uri() == f"sqlite:///{tmp_path / 'mlruns.db'}"
    assert resolve_tracking_uri(None, "", "  ") == f"sqlite:///{tmp_path / 'mlruns.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.example:5000")
    assert resolve_tracking_uri(None, "") == "http://mlflow.example:5000"
    assert resolve_tracking_uri(None, " sqlite:////a.db ", "sqlite:////b.db") == "sqlite:////a.db"
    assert resolve_tracking_uri("none") == "none"  # tracking off is kept as given


def test_every_default_goes_through_the_one_rule(monkeypatch, tmp_path):
    """The run context, a TrackedRun and `regress`/`compare`'s run lookup all resolve alike."""
    from factprobe_ops.tracking.context import RunContext
    from factprobe_ops.tracking.run import TrackedRun

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'env.db'}")
    assert RunContext(tracking_uri=" ").uri == TrackedRun().uri == f"sqlite:///{tmp_path / 'env.db'}"
    assert RunContext(tracking_uri="none").uri is None


def test_pipeline_cli_prints_the_store_run_local_used(monkeypatch, capsys, tmp_path):
    """The summary line names the store `run_local` reports, whatever `--tracking-uri` or the cwd say."""
    from factprobe_ops.pipelines import cli
    from factprobe_ops.pipelines.local_run import LocalRun

    used = f"sqlite:///{tmp_path / 'given.db'}"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "get_pipeline", lambda name, local=False: object())
    monkeypatch.setattr(cli, "parse_params", lambda pipe, pairs, name: {"tracking_uri": used})
    monkeypatch.setattr(cli, "run_local", lambda *a, **k: LocalRun(True, 1.0, "/tmp/root", used))
    assert cli.pipeline_cli(["run", "probe", "--param", f"tracking_uri={used}"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].endswith(f"MLflow: {used}") and "mlruns.db" not in out[-1]


@pytest.mark.parametrize("given", ["param", "flag"])
def test_run_local_resolves_the_param_before_the_flag(monkeypatch, tmp_path, given):
    """run_local's store: the `tracking_uri` parameter, else `--tracking-uri` (made absolute when it is a
    sqlite file); it is what the loopback server serves and what LocalRun reports. Stopped right after the
    server would start, so no step runs."""
    from factprobe_ops.pipelines import local_run
    from factprobe_ops.tracking import local_server

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    served = []

    class Stop(Exception):
        pass

    class FakeServer:
        def __init__(self, store):
            served.append(store)

        def start(self):
            raise Stop

    monkeypatch.setattr(local_server, "LocalTrackingServer", FakeServer)
    monkeypatch.setattr("factprobe_ops.pipelines.checks.check_run_values", lambda name, params: None)
    params = {"tracking_uri": "sqlite:///rel/p.db"} if given == "param" else {}
    with pytest.raises(Stop):
        local_run.run_local("probe", params, tracking_uri="sqlite:///rel/f.db")
    assert served == [f"sqlite:///{tmp_path / 'rel' / ('p.db' if given == 'param' else 'f.db')}"]
