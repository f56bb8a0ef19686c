"""The served-model client is fit for a real server (issue 38 item 4): connections are kept alive and reused, and
several prompts go in one request where the server takes a list (vLLM's and llama.cpp's own completions do;
llama-cpp-python's server does not, and gets one prompt per request). The server is `tests.lm.served_fake`.
"""

from __future__ import annotations

import time

import pytest

from factprobe.errors import ModelError
from factprobe.lm import served
from factprobe.lm.scorer import ChoiceRequest
from tests.lm.served_fake import lp_of


def ports(fake) -> set[int]:
    """The client ports the server saw: one per connection."""
    return {r[3] for r in fake.requests}


def test_sequential_requests_reuse_one_kept_alive_connection(fake):
    client = served.Client(fake.url)
    for i in range(10):
        served.completion(client, fake.model, f"q{i}", max_tokens=1)
    assert len(fake.requests) == 10 and len(ports(fake)) == 1 and client.connections == 1


def test_concurrent_requests_keep_at_most_one_connection_per_slot(fake):
    fake.delay = 0.02
    client = served.Client(fake.url, concurrency=3)
    for _ in range(3):
        client.map(lambda p: served.completion(client, fake.model, p, max_tokens=1), [f"q{i}" for i in range(9)])
    assert len(fake.requests) == 27 and client.connections <= 3 and len(ports(fake)) <= 3


def test_a_connection_the_server_closed_while_idle_is_replaced_without_a_retry(fake):
    fake.idle_timeout = 0.2
    waits: list[float] = []
    client = served.Client(fake.url, retries=0, sleep=waits.append)
    served.completion(client, fake.model, "q1", max_tokens=1)
    time.sleep(0.6)  # the server hangs up the idle connection
    assert served.completion(client, fake.model, "q2", max_tokens=1)["text"] == " Paris"
    assert waits == [] and client.connections == 2


REQUESTS = [
    ChoiceRequest("The capital of France is", [" Paris", " Lyon", " Rome now"]),
    ChoiceRequest("Water is made of", [" oxygen", " gold"]),
]


def test_a_server_that_takes_lists_gets_several_prompts_per_request(fake, tok):
    m = served.connect(fake.spec(), tokenizer=tok)
    assert m.client.lists
    before = fake.completions
    got = m.make_scorer().score_choices(REQUESTS)
    assert fake.completions - before == 1 and fake.prompts >= 5
    assert got[0].tolist() == pytest.approx([lp_of(" Paris"), lp_of(" Lyon"), lp_of(" Rome") + lp_of(" now")])
    before = fake.completions
    m.client.batch = 2
    gens = m.make_generator().greedy(["a", "b", "c", "d", "e"], max_new_tokens=2)
    assert fake.completions - before == 3 and [g.text for g in gens] == [" Paris"] * 5


def test_a_server_that_refuses_lists_gets_one_prompt_per_request_and_the_same_scores(fake, tok):
    listed = served.connect(fake.spec(), tokenizer=tok).make_scorer().score_choices(REQUESTS)
    fake.accepts_lists = False
    m = served.connect(fake.spec(), tokenizer=tok)
    assert not m.client.lists
    before = fake.completions
    single = m.make_scorer().score_choices(REQUESTS)
    assert fake.completions - before == 5
    assert [a.tolist() for a in single] == [b.tolist() for b in listed]


def test_a_list_answer_with_missing_or_doubled_choices_is_one_line(fake, tok, monkeypatch):
    m = served.connect(fake.spec(), tokenizer=tok)
    real = fake.complete

    def short(body):
        out = real(body)
        out["choices"] = out["choices"][:-1] + [dict(out["choices"][0])]  # the last choice lost, the first twice
        return out

    monkeypatch.setattr(fake, "complete", short)
    with pytest.raises(ModelError, match="choice indices .* not 0 to 4 once each") as e:
        m.make_scorer().score_choices(REQUESTS)
    assert "\n" not in str(e.value)


def test_an_http_proxy_from_the_environment_gets_the_request_in_absolute_form(fake, monkeypatch):
    for var in ("no_proxy", "NO_PROXY", "HTTP_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{fake.port}")
    client = served.Client("http://model.invalid:8000/v1", retries=0)
    assert client.get("/models")["data"][0]["id"] == fake.model
    assert [r[1] for r in fake.requests] == ["http://model.invalid:8000/v1/models"]
