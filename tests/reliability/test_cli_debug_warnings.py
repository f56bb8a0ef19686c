"""Issue 18 items 19 and 20: `--debug` anywhere on the command line; an unreachable tracking
server is one `warning: ...` line on stderr, not a Python UserWarning with its source line."""

import subprocess
import sys
import warnings

import pytest

from factprobe.cli import main
from factprobe.errors import ConfigError

SECRET = "s3cr3t-token"


@pytest.mark.parametrize(
    "argv",
    [
        ["--debug", "regress", "--candidate", "m", "--baseline", "b", "--max-drop", "nan"],
        ["regress", "--debug", "--candidate", "m", "--baseline", "b", "--max-drop", "nan"],
        ["regress", "--candidate", "m", "--baseline", "b", "--max-drop", "nan", "--debug"],
        ["probe", "ic-lke", "--debug", "--relations", "P999", "--no-track", "--no-progress"],
        ["probe", "qa", "--relations", "P999", "--no-track", "--no-progress", "--debug"],
        ["pipeline", "run", "--debug", "no-such-pipeline"],
        ["pipeline", "--debug", "run", "no-such-pipeline"],
    ],
)
def test_debug_after_the_subcommand_shows_the_traceback(argv, tmp_path, monkeypatch):
    """issue 18 item 19: `--debug` before or after the subcommand re-raises the error (traceback)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError):
        main(argv)


def test_without_debug_the_same_errors_are_one_line(tmp_path, monkeypatch, capsys):
    """issue 18 item 19: the counterpart: without `--debug`, one `error:` line and exit 2."""
    monkeypatch.chdir(tmp_path)
    for argv in (
        ["regress", "--candidate", "m", "--baseline", "b", "--max-drop", "nan"],
        ["pipeline", "run", "no-such-pipeline"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: "), err


def test_debug_after_a_double_dash_is_not_taken(tmp_path, monkeypatch, capsys):
    """issue 18 item 19: after `--` an argument is a value, never the `--debug` switch."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlruns.db'}")
    assert main(["compare", "--", "--debug", "nope"]) == 2  # run_a is "--debug"
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: '--debug' is neither a results folder nor a run"), err


@pytest.mark.slow
def test_unreachable_tracking_server_is_one_warning_line(capsys):
    """issue 18 item 20: one redacted `warning:` line on stderr; no UserWarning."""
    from factprobe_ops.tracking.run import TrackedRun

    dead = f"http://bob:{SECRET}@127.0.0.1:9"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with TrackedRun(tracking_uri=dead) as run:
            run.log_metrics({"acc": 1.0})
    assert not run.active and caught == []
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("warning: MLflow tracking server http://***@127.0.0.1:9 unreachable (")
    assert err[0].endswith("the run is not logged; results are kept on disk only") and SECRET not in err[0]


@pytest.mark.slow
def test_cli_probe_with_unreachable_server_prints_one_warning_line(tmp_path, tiny_model_path):
    """issue 18 item 20, end to end: a probe run against a dead tracking server prints one
    warning line (no `UserWarning`, no `warnings.warn(...)` source line) and still writes results."""
    model = str(tiny_model_path("gpt2"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "factprobe.cli",
            "probe",
            "ic-lke",
            "--model",
            model,
            "--relations",
            "P36",
            "--max-facts-per-relation",
            "1",
            "--choices",
            "5",
            "--examples",
            "3",
            "--no-progress",
            "--tracking-uri",
            "http://127.0.0.1:9",
            "--out",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "UserWarning" not in proc.stderr and "warn(" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "127.0.0.1:9" in ln]
    assert lines == [lines[0]] and lines[0].startswith("warning: MLflow tracking server http://127.0.0.1:9 unreachable")
    assert (tmp_path / "o" / "results.jsonl").exists()


@pytest.fixture
def login_page():
    """A local HTTP server that answers every request as an SSO proxy does: 200 text/html."""
    import http.server
    import threading

    class Page(http.server.BaseHTTPRequestHandler):
        def _page(self):
            body = b"<html><body>Sign in to Corp SSO</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PATCH = _page

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://bob:{SECRET}@127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_login_page_as_tracking_server_is_named_as_such(login_page, capsys):
    """Second hostile pass (a host that is not what it seems): a tracking URI answered by an HTML
    login page gives one warning line saying it is no MLflow server, with the status, the content
    type and the first bytes, credentials masked; required tracking fails with the same words.
    (It used to say `unreachable (Expecting value: line 1 column 1 (char 0))`.)"""
    from factprobe_ops.tracking.run import TrackedRun, TrackingError

    with TrackedRun(tracking_uri=login_page) as run:
        run.log_metrics({"acc": 1.0})
    assert not run.active
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: http://***@127.0.0.1:"), err
    assert "is not an MLflow tracking server" in err[0] and "HTTP 200 text/html" in err[0] and "Sign in" in err[0]
    assert SECRET not in err[0]
    with pytest.raises(TrackingError, match="is not an MLflow tracking server") as e:
        with TrackedRun(tracking_uri=login_page, required=True):
            pass
    assert SECRET not in str(e.value)
