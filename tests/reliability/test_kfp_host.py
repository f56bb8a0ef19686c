"""Issue 18 item 14: `submit` and `schedule` accept only a Kubeflow Pipelines API answer (JSON that
carries the run or recurring-run id). Anything else (an SSO login page, a 200 without an id, a
redirect) is an error naming the host and what came back: status, content type, first bytes,
credentials masked. It used to print `submitted run None` and exit 0."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from factprobe.cli import main
from tests.pipelines.pipeline_fixtures import FakeKfpApi, Request

pytestmark = pytest.mark.filterwarnings("ignore:This client only works with Kubeflow Pipeline:FutureWarning")

SECRET = "hunter2-very-secret"
LOGIN_PAGE = (
    f"<!DOCTYPE html><html><head><title>Sign in</title></head><body><form action="
    f"'https://alice:{SECRET}@sso.example.com/login?access_token={SECRET}'>Dex login</form></body></html>"
)


class Host:
    """A KFP API (FakeKfpApi) behind a proxy: `raw[(method, path)] = (status, content type, body, headers)`
    answers that request as given; `everything` answers every request so (an SSO login page)."""

    def __init__(self) -> None:
        self.api = FakeKfpApi()
        self.raw: dict[tuple[str, str], tuple[int, str, bytes, dict]] = {}
        self.everything: tuple[int, str, bytes, dict] | None = None
        self.host = ""

    @property
    def requests(self) -> list[Request]:
        return self.api.requests


def _handler(h: Host):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _serve(self, method: str):
            url = urlsplit(self.path)
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b""
            body = json.loads(raw) if raw and raw.startswith(b"{") else None
            answer = h.everything or h.raw.get((method, url.path))
            if answer is None:
                code, out = h.api.answer(method, url.path, parse_qs(url.query), body)
                answer = (code, "application/json", json.dumps(out).encode(), {})
            h.api.requests.append(Request(method, url.path, parse_qs(url.query), body, answer[0]))
            status, ctype, data, headers = answer
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            for k, v in headers.items():
                self.send_header(k, v.replace("HOST", h.host))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._serve("GET")

        def do_POST(self):
            self._serve("POST")

    return Handler


@pytest.fixture
def host(monkeypatch, tmp_path):
    h = Host()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(h))
    h.host = h.api.host = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    for var in (
        "KF_PIPELINES_ENDPOINT",
        "KF_PIPELINES_UI_ENDPOINT",
        "KF_PIPELINES_DEFAULT_EXPERIMENT_NAME",
        "KF_PIPELINES_OVERRIDE_EXPERIMENT_NAME",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("FACTPROBE_IMAGE_CPU", "registry.example.com/factprobe-cpu:0.1.0-abc1234")
    monkeypatch.setenv("FACTPROBE_IMAGE_GPU", "registry.example.com/factprobe-gpu:0.1.0-abc1234")
    import kfp

    monkeypatch.setattr(kfp.Client, "_LOCAL_KFP_CONTEXT", str(tmp_path / "kfp-context.json"))
    try:
        yield h
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


SUBMIT = ["pipeline", "submit", "probe", "--param", "max_facts_per_relation=2"]
SCHEDULE = ["schedule", "nightly_sweep", "--cron", "0 0 2 * * *"]


def _run(host: Host, capsys, argv: list[str]) -> tuple[int, str, str]:
    rc = main([*argv, "--host", host.host])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _assert_one_error(rc: int, out: str, err: str, host: Host, *expected: str) -> str:
    assert rc == 1, (rc, out, err)
    assert "submitted run" not in out and "recurring run" not in out, out
    lines = [line for line in err.strip().splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    line = lines[0]
    assert host.host in line, line
    for text in expected:
        assert text in line, line
    assert SECRET not in out + err
    return line


@pytest.mark.slow
@pytest.mark.parametrize("argv", [SUBMIT, SCHEDULE], ids=["submit", "schedule"])
def test_item14_sso_login_page_is_an_error_naming_what_came_back(host, capsys, argv):
    """issue 18 item 14: every answer is an HTML login page (an SSO proxy in front of the API)."""
    host.everything = (200, "text/html; charset=utf-8", LOGIN_PAGE.encode(), {})
    rc, out, err = _run(host, capsys, argv)
    _assert_one_error(rc, out, err, host, "200", "text/html", "<!DOCTYPE html><html><head><title>Sign in")
    assert [r.method for r in host.requests if r.path.endswith(("/runs", "/recurringruns"))] == []


@pytest.mark.slow
def test_item14_run_answer_without_an_id_is_an_error(host, capsys):
    """issue 18 item 14: POST runs answers 200 JSON, but without a run id."""
    host.raw[("POST", "/apis/v2beta1/runs")] = (200, "application/json", b'{"display_name": "x"}', {})
    rc, out, err = _run(host, capsys, SUBMIT)
    _assert_one_error(rc, out, err, host, "run id", "200", "application/json", '{"display_name": "x"}')


@pytest.mark.slow
def test_item14_recurring_run_answer_without_an_id_is_an_error(host, capsys):
    """issue 18 item 14: POST recurringruns answers 200 JSON without a recurring run id."""
    host.raw[("POST", "/apis/v2beta1/recurringruns")] = (200, "application/json", b"{}", {})
    rc, out, err = _run(host, capsys, SCHEDULE)
    _assert_one_error(rc, out, err, host, "recurring run id", "200", "application/json")


@pytest.mark.slow
def test_item14_redirect_to_a_login_page_is_an_error(host, capsys):
    """issue 18 item 14: the run POST is redirected (session expired) to a login page."""
    host.raw[("POST", "/apis/v2beta1/runs")] = (302, "text/html", b"", {"Location": "HOST/login"})
    for method in ("GET", "POST"):  # a 302 keeps the method with urllib3
        host.raw[(method, "/login")] = (200, "text/html", LOGIN_PAGE.encode(), {})
    rc, out, err = _run(host, capsys, SUBMIT)
    _assert_one_error(rc, out, err, host, f"redirected to {host.host}/login", "200", "text/html", "Sign in")


@pytest.mark.slow
def test_item14_echoed_token_is_masked(host, capsys, monkeypatch):
    """issue 18 item 14: what came back is shown with credentials masked, the token we sent included."""
    token = "tok-ABCDEFGH12345678"
    monkeypatch.setenv("FACTPROBE_KFP_TOKEN", token)
    host.raw[("POST", "/apis/v2beta1/runs")] = (200, "text/plain", f"bad request from {token}".encode(), {})
    rc, out, err = _run(host, capsys, SUBMIT)
    _assert_one_error(rc, out, err, host, "text/plain", "bad request from")
    assert token not in out + err


@pytest.mark.slow
def test_item14_a_real_answer_still_submits(host, capsys):
    """issue 18 item 14: the KFP API's own answers pass."""
    rc, out, err = _run(host, capsys, SUBMIT)
    assert rc == 0, err
    (run_id,) = host.api.runs
    assert f"submitted run {run_id} to {host.host}" in out
