"""Served models (`factprobe.lm.served`) against a scripted OpenAI-compatible server on loopback.

The scripted server (`tests.lm.served_fake.FakeServer`) speaks the completions API the way a real one does and
can be told to misalign its echo log-probs (as llama.cpp's server does), answer HTML, drop log-probs, answer
429/503, or die after N requests. The tokenizer is a tiny random model's (only prompt lengths are read from it).
tests/lm/test_served_hostile.py has the hostile servers; tests/lm/test_served_llama.py runs the same paths
against a real llama.cpp server.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from factprobe.errors import ConfigError, ModelError
from factprobe.lm import served
from factprobe.lm.scorer import ChoiceRequest
from factprobe.models import load_model, model_revision
from tests.lm.served_fake import free_url, lp_of


# ------------------------------------------------------------------ names
def test_spec_parses_model_and_url_and_drops_the_query():
    spec = served.parse_spec("openai:org/model@x@https://example.com/v1/?a=1")
    assert spec.model == "org/model@x" and spec.url == "https://example.com/v1/?a=1"
    assert spec.revision == "served:org/model@x@https://example.com/v1"
    assert served.is_served("openai:m@http://h/v1") and not served.is_served("smollm2-135m-instruct")


@pytest.mark.parametrize("bad", ["openai:smollm2", "openai:@http://h/v1", "openai:m@ftp://h", "openai:m@http://"])
def test_a_bad_spec_is_one_line(bad):
    with pytest.raises(ConfigError) as e:
        served.parse_spec(bad)
    assert "\n" not in str(e.value) and "openai:" in str(e.value)


def test_a_served_models_revision_is_a_fingerprint_of_its_answers(fake, tok):
    """No files to hash: the revision asks the server (list entry + greedy texts). The same server gives the
    same revision, also when connected; another model behind the same name and URL gives another."""
    first = model_revision(fake.spec())
    assert first.startswith(f"served:{fake.model}@{fake.url}#") and len(first.split("#")[1]) == 16
    assert model_revision(fake.spec()) == first == served.connect(fake.spec(), tokenizer=tok).revision
    fake.answer = " Lyon"  # other weights: another continuation
    assert model_revision(fake.spec()) != first
    fake.answer, fake.meta = " Paris", {"n_params": 2}  # other weights: another size in the list entry
    assert model_revision(fake.spec()) != first


def test_a_served_models_revision_needs_the_server(fake):
    with pytest.raises(ModelError, match="did not answer /models after 1 tries") as e:
        served.served_revision(f"openai:smollm2@{free_url()}", retries=0)
    assert "\n" not in str(e.value)
    with pytest.raises(ModelError, match="does not serve model 'other'"):
        model_revision(fake.spec("other"))


# ------------------------------------------------------------------ connecting: one line each
def test_connect_sends_the_key_from_the_environment_and_never_records_it(fake, tok, monkeypatch):
    monkeypatch.setenv("FACTPROBE_OPENAI_API_KEY", "sk-secret-123")
    m = served.connect(fake.spec(), tokenizer=tok)
    assert m.alignment.aligned and m.alignment.checks
    assert set(fake.auth) == {"Bearer sk-secret-123"}
    assert "sk-secret" not in repr(m.alignment.checks) + m.revision + str(m.path)


def test_a_login_page_is_one_line(fake, tok):
    fake.html = True
    with pytest.raises(ModelError) as e:
        served.connect(fake.spec(), tokenizer=tok)
    assert "HTML page" in str(e.value) and "login page" in str(e.value) and "\n" not in str(e.value)


def test_a_wrong_model_name_is_one_line_naming_what_is_served(fake, tok):
    with pytest.raises(ModelError) as e:
        served.connect(fake.spec("no-such-model"), tokenizer=tok)
    msg = str(e.value)
    assert "does not serve model 'no-such-model'" in msg and fake.model in msg and "\n" not in msg


def test_a_server_without_logprobs_is_one_line(fake, tok):
    fake.no_logprobs = True
    with pytest.raises(ModelError, match="gives no log-probs") as e:
        served.connect(fake.spec(), tokenizer=tok)
    assert "\n" not in str(e.value)


def test_an_unreachable_server_is_one_line_after_retries():
    waits: list[float] = []
    client = served.Client(free_url(), retries=2, backoff=0.01, sleep=waits.append, timeout=2)
    with pytest.raises(ModelError, match=r"did not answer /models after 3 tries") as e:
        client.get("/models")
    assert waits == [0.01, 0.02] and "\n" not in str(e.value)


def test_load_model_connects_and_refuses_local_only_options(fake, monkeypatch):
    m = load_model(fake.spec())
    assert m.served and m.kind == "causal" and m.revision.startswith("served:")
    with pytest.raises(ConfigError, match="device_map='auto' does not apply to the served model"):
        load_model(fake.spec(), device_map="auto")


# ------------------------------------------------------------------ retries, concurrency
def test_429_and_503_are_retried_with_backoff_and_retry_after(fake):
    fake.fail_first, fake.retry_after = 2, "0.25"
    waits: list[float] = []
    client = served.Client(fake.url, retries=3, backoff=0.01, sleep=waits.append)
    choice = served.completion(client, fake.model, "Hello", max_tokens=1)
    assert choice["text"] == " Paris" and waits == [0.25, 0.25] and fake.completions == 3
    fake.fail_first, fake.fail_status, fake.retry_after, fake.completions = 1, 503, None, 0
    waits.clear()
    served.completion(client, fake.model, "Hello", max_tokens=1)
    assert waits == [0.01]


def test_a_4xx_is_not_retried_and_says_what_the_server_said(fake):
    fake.fail_first, fake.fail_status = 5, 400
    client = served.Client(fake.url, retries=3, sleep=lambda s: None)
    with pytest.raises(ModelError, match="HTTP 400: busy"):
        served.completion(client, fake.model, "Hello", max_tokens=1)
    assert fake.completions == 1


def test_requests_in_flight_stay_within_the_concurrency_limit(fake):
    fake.delay = 0.05
    client = served.Client(fake.url, concurrency=3)
    client.map(lambda p: served.completion(client, fake.model, p, max_tokens=1), [f"q{i}" for i in range(12)])
    assert fake.max_in_flight == 3


# ------------------------------------------------------------------ log-probs
def test_echo_scores_the_continuation_tokens_only(fake):
    client = served.Client(fake.url)
    total, n = served.echo_span_logprob(client, fake.model, "The capital of France is", " Paris or Lyon")
    assert n == 3 and total == pytest.approx(lp_of(" Paris") + lp_of(" or") + lp_of(" Lyon"))


def test_a_misaligned_server_is_found_and_refused_for_log_likelihoods_only(fake, tok):
    fake.misaligned = True
    m = served.connect(fake.spec(), tokenizer=tok)
    assert not m.alignment.aligned
    with pytest.raises(ModelError, match="misaligned echo log-probs") as e:
        served.check_probe(m, "ic-lke", ("causal",))
    assert "\n" not in str(e.value) and "generation probes can" in str(e.value)
    with pytest.raises(ModelError, match="misaligned"):
        m.make_scorer()
    served.check_probe(m, "qa", ("causal",))  # generation is fine
    assert m.make_generator().greedy(["Where?"], max_new_tokens=4)[0].text == " Paris"


@pytest.mark.parametrize("probe", sorted(served.UNSERVABLE))
def test_a_probe_that_needs_the_forward_pass_is_refused_in_one_line(fake, tok, probe):
    m = served.connect(fake.spec(), tokenizer=tok)
    with pytest.raises(ConfigError, match=f"probe {probe} cannot run on the served model") as e:
        served.check_probe(m, probe, ("causal", "masked"))
    assert "\n" not in str(e.value)


def test_score_choices_sums_each_options_echo_log_probs(fake, tok):
    m = served.connect(fake.spec(), tokenizer=tok)
    scorer = m.make_scorer()
    out = scorer.score_choices([ChoiceRequest("Paris is the capital of ", ["France", "Spain now"])])
    assert out[0].tolist() == pytest.approx([lp_of(" France"), lp_of(" Spain") + lp_of(" now")])
    assert scorer.stats.forwards == 2


def test_greedy_and_sample_through_the_server(fake, tok):
    m = served.connect(fake.spec(), tokenizer=tok)
    gen = m.make_generator()
    fake.answer = " Paris\nQuestion"
    g = gen.greedy(["Q: capital?\nA:"], max_new_tokens=5, stop="\n")[0]
    assert g.text == " Paris" and g.finish_reason == "stop" and g.logprobs == [lp_of(" Paris")]
    fake.answer = " a b c d e f"
    assert gen.greedy(["x"], max_new_tokens=3)[0].finish_reason == "length"
    samples = gen.sample("x", n=4, max_new_tokens=2, temperature=0.7, seed=3)
    assert len(samples) == 4 and all(s.text == " a b" for s in samples)


# ------------------------------------------------------------------ a run through the runner
def qa_cfg(model: str, **kw):
    from factprobe.framework.config import RunConfig

    d = {
        "probe": "qa",
        "model": model,
        "relations": "P36,P1376",
        "max_facts_per_relation": 3,
        "shots": "0,1",
        "qa_train_per_relation": 3,
    }
    d.update(kw)
    return RunConfig.from_dict(d)


@pytest.mark.slow
def test_a_run_that_loses_its_server_stops_with_one_line_and_resumes(fake, tmp_path):
    """QA through the scripted server: the server dies after 2 requests; the run stops with one line and
    writes no row from a failed request; the rerun (server back) resumes and equals a clean run."""
    from factprobe.framework.checkpoint import CHECKPOINT
    from factprobe.framework.runner import run_probe

    # the revision: /completions x 2 (fingerprint); connect: x 7 (fingerprint 2, alignment checks 2 x 2, the list
    # check 1); then the first group (its 6 prompts in one request: the fake takes lists)
    fake.die_after = 2 + 7 + 1
    out = tmp_path / "run"
    with pytest.raises(ModelError, match="did not answer /completions after .* rerun the same command to resume"):
        run_probe(qa_cfg(fake.spec()), out, progress=False, log=lambda s: None)
    partial = (out / CHECKPOINT).read_text(encoding="utf-8").splitlines() if (out / CHECKPOINT).exists() else []
    assert len(partial) == 6 and all(json.loads(r)["answer"] == " Paris" for r in partial)
    fake.die_after = None
    again = run_probe(qa_cfg(fake.spec()), out, progress=False, log=lambda s: None)
    clean = run_probe(qa_cfg(fake.spec()), tmp_path / "clean", progress=False, log=lambda s: None)
    assert again.n_resumed == len(partial) and again.n_scored_now + again.n_resumed == len(clean.results)
    cols = ["key", "answer", "em"]
    assert again.results[cols].to_dict("records") == clean.results[cols].to_dict("records")
    assert again.metrics["model_revision"] == clean.metrics["model_revision"] == model_revision(fake.spec())


def test_a_log_likelihood_run_on_a_misaligned_server_is_refused_before_anything_is_written(fake, tmp_path):
    from factprobe.framework.config import RunConfig
    from factprobe.framework.runner import run_probe

    fake.misaligned = True
    cfg = RunConfig.from_dict({"probe": "ic-lke", "model": fake.spec(), "relations": "P36", "max_facts_per_relation": 2})
    with pytest.raises(ModelError, match="misaligned echo log-probs"):
        run_probe(cfg, tmp_path / "run", progress=False, log=lambda s: None)
    assert not (Path(tmp_path / "run") / "run_config.json").exists()


def test_a_served_models_default_folder_is_a_plain_name():
    """`runs/<probe>-served-MODEL-HOST_PORT-<source>`: no `:`, `/` or `@` of the URL in a folder name."""
    from types import SimpleNamespace

    from factprobe.cli import default_out

    cfg = SimpleNamespace(probe="qa", base=SimpleNamespace(model="openai:smollm2@http://127.0.0.1:8000/v1", source="lama"))
    assert str(default_out(cfg)) == "runs/qa-served-smollm2-127.0.0.1_8000-lama"
    cfg.base.model = "org/name"
    assert str(default_out(cfg)) == "runs/qa-org_name-lama"
