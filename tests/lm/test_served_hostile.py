"""Served models against hostile servers (issue 41 items 4 and 6): the API key and URL credentials go only to the
server they are for, and an answer is used only when it is whole and finite. Each case is one line naming the server
and what it sent; none hangs past the request's deadline. The servers are `tests.lm.served_fake.FakeServer`s.
"""

from __future__ import annotations

import base64
import time

import pytest

from factprobe.errors import ConfigError, FactprobeError, ModelError
from factprobe.lm import served
from factprobe.lm.scorer import ChoiceRequest
from tests.lm.served_fake import FakeServer

KEY = "sk-hostile-key-123"


@pytest.fixture
def other(tiny_model_path):
    """A second server: another origin (another port) that must never see a credential."""
    server = FakeServer(str(tiny_model_path("llama")))
    yield server
    server.close()


def one_line(err: BaseException) -> str:
    msg = str(err)
    assert "\n" not in msg, msg
    return msg


# ------------------------------------------------------------------ item 4: redirects
@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_to_another_origin_is_one_line_and_the_key_never_leaves(fake, other, status):
    fake.redirect = (status, other.url + "/completions?token=abc")
    client = served.Client(fake.url, KEY, retries=0)
    with pytest.raises(ModelError) as e:
        served.completion(client, fake.model, "Hello", max_tokens=1)
    msg = one_line(e.value)
    assert f"redirect (HTTP {status}) to {other.url}/completions" in msg and "another origin" in msg
    assert "token=abc" not in msg and KEY not in msg
    assert other.requests == [], "the other host got a request"
    assert [r[2] for r in fake.requests] == [f"Bearer {KEY}"]


def test_a_redirect_of_the_model_list_to_another_origin_is_refused(fake, other, monkeypatch):
    monkeypatch.setenv("FACTPROBE_OPENAI_API_KEY", KEY)
    fake.redirect = (302, other.url + "/models")
    with pytest.raises(ModelError, match=r"redirect \(HTTP 302\) to http://127\.0\.0\.1:\d+/v1/models") as e:
        served.served_revision(fake.spec(), retries=0)
    one_line(e.value)
    assert other.requests == []


@pytest.mark.parametrize("status", [307, 308])
def test_a_same_origin_307_308_is_followed_with_its_method_body_and_key(fake, status):
    fake.redirect = (status, "/moved/v1/completions")
    client = served.Client(fake.url, KEY, retries=0)
    choice = served.completion(client, fake.model, "Hello", max_tokens=1)
    assert choice["text"] == " Paris"
    assert [(m, p, a) for m, p, a, _ in fake.requests] == [
        ("POST", "/v1/completions", f"Bearer {KEY}"),
        ("POST", "/moved/v1/completions", f"Bearer {KEY}"),
    ]


@pytest.mark.parametrize("status", [301, 302, 303])
def test_a_same_origin_redirect_that_turns_a_post_into_a_get_is_one_line(fake, status):
    fake.redirect = (status, "/moved/v1/completions")
    client = served.Client(fake.url, KEY, retries=0)
    with pytest.raises(ModelError, match=f"redirect \\(HTTP {status}\\) to {fake.url[:-3]}/moved/v1/completions") as e:
        served.completion(client, fake.model, "Hello", max_tokens=1)
    assert "POST into a GET" in one_line(e.value)
    assert [r[:2] for r in fake.requests] == [("POST", "/v1/completions")]


def test_a_redirect_to_the_same_host_with_credentials_of_its_own_is_another_origin(fake):
    fake.redirect = (307, f"http://mallory:pw@127.0.0.1:{fake.port}/moved/v1/completions")
    client = served.Client(fake.url, KEY, retries=0)
    with pytest.raises(ModelError, match="another origin") as e:
        served.completion(client, fake.model, "Hello", max_tokens=1)
    assert "mallory" not in str(e.value) and len(fake.requests) == 1


# ------------------------------------------------------------------ item 4: credentials in the URL
def creds_spec(fake: FakeServer, userinfo: str) -> str:
    return f"openai:{fake.model}@http://{userinfo}@127.0.0.1:{fake.port}/v1"


@pytest.mark.parametrize("userinfo", ["alice:Zq9-secret-pw", "alice:p%40ss%20Zq9-secret-pw", "Zq9-secret-pw", ":Zq9-secret-pw"])
def test_a_url_with_credentials_is_refused_in_one_line_that_does_not_show_them(fake, userinfo):
    """`user:pass@` in the URL is refused before any request (it would be recorded with the model's name); the
    line says how to give basic auth instead. Today it was parsed as a host name and reported as down."""
    for call in (
        lambda: served.parse_spec(creds_spec(fake, userinfo)),
        lambda: served.served_revision(creds_spec(fake, userinfo)),
        lambda: served.Client(f"http://{userinfo}@127.0.0.1:{fake.port}/v1"),
    ):
        with pytest.raises(ConfigError, match="written with user:password@") as e:
            call()
        msg = one_line(e.value)
        assert "Zq9" not in msg and "alice" not in msg and "FACTPROBE_OPENAI_BASIC_AUTH" in msg
        assert f"127.0.0.1:{fake.port}/v1" in msg
    assert fake.requests == []


@pytest.mark.slow
def test_a_run_on_a_url_with_credentials_is_refused_and_records_them_nowhere(fake, tmp_path):
    from factprobe.framework.runner import run_probe
    from tests.lm.test_served import qa_cfg

    lines: list[str] = []
    out = tmp_path / "run"
    with pytest.raises(ConfigError) as e:
        run_probe(qa_cfg(creds_spec(fake, "bob:Zq9-secret-pw")), out, progress=False, log=lines.append)
    assert "Zq9" not in one_line(e.value) and not any("Zq9" in line for line in lines)
    for path in [p for p in out.rglob("*") if p.is_file()] if out.exists() else []:
        assert "Zq9" not in path.read_bytes().decode("utf-8", "replace"), path
    assert fake.requests == []


def test_the_default_run_folder_never_holds_url_credentials():
    """The CLI names the run folder before the run refuses the URL: the name must not carry user or password."""
    from types import SimpleNamespace

    from factprobe.cli import default_out

    cfg = SimpleNamespace(probe="qa", base=SimpleNamespace(model="openai:m@http://bob:Zq9-pw@127.0.0.1:8000/v1", source="lama"))
    assert str(default_out(cfg)) == "runs/qa-served-m-127.0.0.1_8000-lama"


def test_basic_auth_comes_from_the_environment_instead_of_the_key(fake, tok, monkeypatch):
    monkeypatch.setenv("FACTPROBE_OPENAI_API_KEY", KEY)
    monkeypatch.setenv("FACTPROBE_OPENAI_BASIC_AUTH", "alice:p@ss: w0rd")
    fake.require_basic = "alice:p@ss: w0rd"
    m = served.connect(fake.spec(), tokenizer=tok)
    assert set(fake.auth) == {"Basic " + base64.b64encode(b"alice:p@ss: w0rd").decode()}
    assert "w0rd" not in m.revision + repr(m.client._endpoint) + m.path
    monkeypatch.setenv("FACTPROBE_OPENAI_BASIC_AUTH", "wrong:pw-77")
    with pytest.raises(ModelError, match=r"refused the request \(HTTP 401") as e:
        served.connect(fake.spec(), tokenizer=tok)
    assert "pw-77" not in one_line(e.value)
    monkeypatch.setenv("FACTPROBE_OPENAI_BASIC_AUTH", "no-colon-secret")
    with pytest.raises(ConfigError, match="FACTPROBE_OPENAI_BASIC_AUTH must be USER:PASSWORD") as e:
        served.connect(fake.spec(), tokenizer=tok)
    assert "no-colon-secret" not in one_line(e.value)


# ------------------------------------------------------------------ item 6: whole and finite answers
def scorer(fake: FakeServer, tok):
    return served.connect(fake.spec(), tokenizer=tok).make_scorer()


REQUEST = [ChoiceRequest("The capital of France is", [" Paris and more"])]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), 3.5, "abc", True])
def test_a_log_prob_that_is_not_a_finite_number_is_one_line(fake, tok, value):
    s = scorer(fake, tok)
    fake.poison = value
    with pytest.raises(ModelError) as e:
        s.score_choices(REQUEST)
    msg = one_line(e.value)
    assert f"server {fake.url}" in msg and "log-prob" in msg and "more" in msg
    assert repr(value) in msg or str(value) in msg


def test_a_null_log_prob_inside_the_prompt_is_the_servers_fault_not_the_prompts(fake, tok):
    s = scorer(fake, tok)
    fake.poison = None
    with pytest.raises(ModelError) as e:
        s.score_choices(REQUEST)
    msg = one_line(e.value)
    assert not isinstance(e.value, ConfigError) and "null" in msg and f"server {fake.url}" in msg
    assert "put text before" not in msg


def test_an_echo_missing_the_last_prompt_token_is_one_line(fake, tok):
    s = scorer(fake, tok)
    whole = s.score_choices(REQUEST)[0][0]
    fake.drop_last_echo = True
    with pytest.raises(ModelError) as e:
        s.score_choices(REQUEST)
    msg = one_line(e.value)
    assert f"server {fake.url}" in msg and "echoed the token ' and' where the prompt" in msg and "' and more'" in msg
    fake.drop_last_echo = False
    assert s.score_choices(REQUEST)[0][0] == whole


def test_a_non_finite_log_prob_of_a_generated_token_is_one_line(fake, tok):
    gen = served.connect(fake.spec(), tokenizer=tok).make_generator()
    fake.poison = float("nan")
    with pytest.raises(ModelError) as e:
        gen.greedy(["Q: capital?\nA:"], max_new_tokens=2)
    assert "nan" in one_line(e.value) and "Paris" in str(e.value)


def test_a_non_finite_log_prob_in_the_alignment_check_is_one_line(fake, tok):
    fake.poison = float("inf")
    with pytest.raises(ModelError) as e:
        served.connect(fake.spec(), tokenizer=tok)
    assert "inf" in one_line(e.value) and f"server {fake.url}" in str(e.value)


def test_a_run_whose_server_sends_nan_stops_with_one_line_and_writes_no_nan(fake, tmp_path):
    from factprobe.framework.config import RunConfig
    from factprobe.framework.runner import run_probe

    cfg = RunConfig.from_dict({"probe": "ic-lke", "model": fake.spec(), "relations": "P36", "max_facts_per_relation": 2})
    fake.poison = float("nan")  # in the probe's prompts, not in the fingerprint's or the alignment check's
    fake.poison_when = lambda prompt: not prompt.startswith(served.ALIGNMENT_TEXTS + served.FINGERPRINT_TEXTS)
    with pytest.raises(FactprobeError) as e:
        run_probe(cfg, tmp_path / "run", progress=False, log=lambda s: None)
    one_line(e.value)
    for path in [p for p in (tmp_path / "run").rglob("*") if p.is_file()]:
        assert "NaN" not in path.read_text(encoding="utf-8", errors="replace"), path


# ------------------------------------------------------------------ item 6: the whole-request deadline
def test_a_trickling_server_is_cut_off_at_the_deadline_in_one_line(fake):
    """One byte every 0.1 s keeps every socket read under the timeout; the whole request still ends at its
    deadline (1.5 s), with one line naming what arrived, and it is not retried."""
    fake.trickle = 0.1
    client = served.Client(fake.url, timeout=1.5, retries=3, sleep=lambda s: None)
    t0 = time.monotonic()
    with pytest.raises(ModelError) as e:
        client.get("/models")
    took = time.monotonic() - t0
    msg = one_line(e.value)
    assert took < 3.0, f"took {took:.1f} s past a 1.5 s deadline"
    assert "within the deadline of 1.5 s" in msg and "bytes (b'HTTP" in msg and f"server {fake.url}" in msg
    assert len(fake.requests) == 1


def test_a_silent_server_is_retried_and_each_try_holds_the_deadline(fake):
    fake.delay = 1.2
    waits: list[float] = []
    client = served.Client(fake.url, timeout=0.5, retries=1, sleep=waits.append)
    t0 = time.monotonic()
    with pytest.raises(ModelError, match="did not answer /completions after 2 tries .*deadline of 0.5 s") as e:
        served.completion(client, fake.model, "Hello", max_tokens=1)
    one_line(e.value)
    assert time.monotonic() - t0 < 2.0 and len(waits) == 1


def test_the_deadline_comes_from_the_environment(fake, monkeypatch):
    from factprobe.models import load_model

    fake.trickle = 0.2
    monkeypatch.setenv("FACTPROBE_SERVED_TIMEOUT", "1")
    t0 = time.monotonic()
    with pytest.raises(ModelError, match="within the deadline of 1 s"):
        load_model(fake.spec())
    assert time.monotonic() - t0 < 2.5
    monkeypatch.setenv("FACTPROBE_SERVED_TIMEOUT", "soon")
    with pytest.raises(ConfigError, match="FACTPROBE_SERVED_TIMEOUT='soon'") as e:
        load_model(fake.spec())
    one_line(e.value)


def test_an_answer_that_does_not_stop_is_cut_at_the_size_limit(fake, monkeypatch):
    from factprobe.lm import served_http

    monkeypatch.setattr(served_http, "MAX_ANSWER_BYTES", 64)
    with pytest.raises(ModelError, match="answered GET /models with more than 64 bytes") as e:
        served.Client(fake.url, retries=0).get("/models")
    one_line(e.value)
