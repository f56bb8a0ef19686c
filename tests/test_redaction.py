"""Credentials never reach a message: `factprobe.redact.redact`, every FactprobeError, the
tracking warnings and errors, and what `factprobe pipeline run` prints and logs."""

from __future__ import annotations

import io

import pytest

from factprobe.errors import ConfigError, DataError
from factprobe.redact import redact

SECRET = "s3cr3t-T0ken"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("https://user:s3cr3t-T0ken@mlflow.example.com/api", "https://***@mlflow.example.com/api"),
        ("http://bob:p@ss@127.0.0.1:5000", "http://***@127.0.0.1:5000"),  # unescaped @ in the password
        ("postgresql+psycopg2://mlflow:s3cr3t-T0ken@db:5432/m", "postgresql+psycopg2://***@db:5432/m"),
        ("https://s3cr3t-T0ken@github.com/org/repo.git", "https://***@github.com/org/repo.git"),
        (
            (
                "GET https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA%2F20250101"
                "&X-Amz-Signature=abc123&X-Amz-Security-Token=s3cr3t-T0ken&x-id=GetObject"
            ),
            (
                "GET https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=***"
                "&X-Amz-Signature=***&X-Amz-Security-Token=***&x-id=GetObject"
            ),
        ),
        ("https://h/x?token=s3cr3t-T0ken&page=2", "https://h/x?token=***&page=2"),
        ("https://h/x?access_token=a&sig=b&key=c&monkey=1", "https://h/x?access_token=***&sig=***&key=***&monkey=1"),
        ("Authorization: Bearer s3cr3t-T0ken", "Authorization: Bearer ***"),
        (
            "MLFLOW_TRACKING_PASSWORD=s3cr3t-T0ken MLFLOW_TRACKING_USERNAME=bob",
            "MLFLOW_TRACKING_PASSWORD=*** MLFLOW_TRACKING_USERNAME=bob",
        ),
    ],
)
def test_redact(text, expected):
    assert redact(text) == expected
    assert SECRET not in redact(text)


@pytest.mark.parametrize(
    "text",
    [
        "sqlite:////home/a@b/mlruns.db",
        "http://127.0.0.1:5000/api",
        "mail me at a@b.com",
        "basic auth failed",
        "unknown relation(s) P999 in countryinfo",
        "s3://bucket/prefix/P36.jsonl",
        "set MLFLOW_TRACKING_PASSWORD",
    ],
)
def test_redact_leaves_ordinary_text(text):
    assert redact(text) == text


def test_factprobe_errors_are_redacted():
    for cls in (ConfigError, DataError):
        e = cls(f"no run at https://bob:{SECRET}@mlflow.example.com")
        assert str(e) == "no run at https://***@mlflow.example.com"


@pytest.mark.slow
def test_tracked_run_warning_and_error_hide_credentials():
    from factprobe_ops.tracking.run import TrackedRun, TrackingError

    dead = f"http://bob:{SECRET}@127.0.0.1:9"
    msgs: list[str] = []
    with TrackedRun(tracking_uri=dead, warn=msgs.append):
        pass
    assert len(msgs) == 1 and SECRET not in msgs[0] and "http://***@127.0.0.1:9" in msgs[0]
    with pytest.raises(TrackingError) as e, TrackedRun(tracking_uri=dead, required=True):
        pass
    assert SECRET not in str(e.value) and "http://***@127.0.0.1:9" in str(e.value)


def test_rest_and_local_server_errors_hide_credentials():
    from factprobe_ops.tracking.local_server import LocalServerError
    from factprobe_ops.tracking.rest_client import RestError

    assert SECRET not in str(RestError("GET x", 401, "", f"bad token for https://u:{SECRET}@h"))
    assert SECRET not in str(LocalServerError(f"did not start: could not reach https://u:{SECRET}@h"))


def test_compare_against_an_unreachable_server_is_one_redacted_line(monkeypatch):
    from factprobe_ops.tracking.compare import resolve_run
    from factprobe_ops.tracking.run import TrackingError

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    with pytest.raises(TrackingError) as e:
        resolve_run("baseline=true", f"http://bob:{SECRET}@127.0.0.1:9")
    assert SECRET not in str(e.value) and "http://***@127.0.0.1:9" in str(e.value) and e.value.exit_code == 1


def test_pipeline_run_log_and_summary_are_redacted(tmp_path):
    from factprobe_ops.pipelines.local_run import _RunLog, failure_report

    terminal = io.StringIO()
    log = _RunLog(terminal, tmp_path / "logs" / "run.log")
    log.write(f'    "tracking_uri": "https://bob:{SECRET}@mlflow.example.com"\n')
    log.close_log()
    assert SECRET not in terminal.getvalue() and SECRET not in log.path.read_text()
    assert "https://***@mlflow.example.com" in log.path.read_text()
    line = failure_report(log.path, RuntimeError(f"Task 'x' failed at https://u:{SECRET}@h"))
    assert SECRET not in line


def test_pipeline_cli_summary_line_is_redacted(monkeypatch, capsys):
    from factprobe_ops.pipelines import cli

    monkeypatch.setattr(cli, "get_pipeline", lambda name, local=False: object())
    monkeypatch.setattr(cli, "parse_params", lambda pipe, pairs, name: {})
    uri = f"https://bob:{SECRET}@mlflow.example.com"
    monkeypatch.setattr(cli, "run_local", lambda *a, **k: (False, 1.0, "/tmp/root", uri))  # `LocalRun`: the store used
    assert cli.pipeline_cli(["run", "probe", "--tracking-uri", uri]) == 1
    out = capsys.readouterr().out
    assert SECRET not in out and "MLflow: https://***@mlflow.example.com" in out
