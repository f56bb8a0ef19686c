"""Served models against a REAL llama.cpp server (llama-cpp-python[server] 0.3.36, `make test`'s set-up: the
Makefile's `$(VENV)/.llama-server`), serving the GGUF files `make models` fetched, started by the tests on a free
loopback port. The numbers the assertions use are measured here and written down in docs/served-models.md:

- SmolLM2 (no BOS token): the server's echo log-probs are misaligned by one position, so log-likelihood probes
  are refused in one line; QA answers through it agree with the in-process model (float32 weights converted
  from the same GGUF; the server runs the quantized Q4_1 weights) on at least `QA_AGREEMENT` of the questions
  (measured 13 of 20: the quantization changes long greedy answers).
- Gemma-3 (BOS token first): the echo log-probs are aligned; option log-probs equal the in-process ones
  within `GEMMA_LOGPROB_TOL` nats (the server's Q4_K_M arithmetic against float32).
- A server without log-probs (`--logits_all false`), an API key the server wants, a wrong model name and a
  server killed mid-run (then restarted and the run resumed) each give one line / the right rows.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from factprobe.errors import ModelError
from factprobe.lm import served
from factprobe.lm.scorer import ChoiceRequest
from factprobe.models.loading import served_tokenizer

pytestmark = [
    pytest.mark.server,
    pytest.mark.real_model,
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("llama_cpp") is None,
        reason="llama-cpp-python[server] is not installed: make .venv/.llama-server (make test does)",
    ),
]

SMOL, GEMMA = "smollm2-135m-instruct", "gemma-3-270m"
#: measured (docs/served-models.md): QA greedy answers are the same text as in-process on 13 of 20 questions (0.65;
#: SmolLM2 Q4_1 on the server vs float32 in-process, 0-shot countryinfo P36 + P1376); the bound leaves 2 questions
QA_AGREEMENT = 0.55
#: measured (docs/served-models.md): max |served - in-process| option log-prob 0.167 nats on this test's options,
#: 0.346 on benchmarks/bench_served.py's (Gemma-3 Q4_K_M vs float32)
GEMMA_LOGPROB_TOL = 0.5


def gguf_of(alias: str) -> Path:
    from factprobe.models.aliases import gguf_cache_path

    return gguf_cache_path(alias)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """`python -m llama_cpp.server` on a loopback port, serving one GGUF under an alias."""

    def __init__(self, alias: str, *extra: str, port: int | None = None) -> None:
        self.alias, self.extra = alias, extra
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.proc: subprocess.Popen | None = None

    def start(self) -> LlamaServer:
        cmd = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(gguf_of(self.alias)),
            "--model_alias",
            self.alias,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_ctx",
            "2048",
            "--n_threads",
            "1",
            "--verbose",
            "false",
            *self.extra,
        ]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited: {self.proc.stderr.read().decode()[-2000:]}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v1/models", timeout=5).read()
                return self
            except OSError as err:
                if getattr(err, "code", None) == 401:  # up, and wants a key
                    return self
                time.sleep(0.5)
        raise RuntimeError("llama_cpp.server did not become ready in 180 s")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def spec(self, model: str | None = None) -> str:
        return f"openai:{model or self.alias}@{self.url}"


@pytest.fixture(scope="module")
def smol_server(real_model_path):
    real_model_path(SMOL)
    server = LlamaServer(SMOL).start()
    yield server
    server.kill()


@pytest.fixture(scope="module")
def gemma_server(real_model_path):
    real_model_path(GEMMA)
    server = LlamaServer(GEMMA).start()
    yield server
    server.kill()


# ------------------------------------------------------------------ log-probs must be proven
def test_llama_cpp_echo_log_probs_are_misaligned_for_smollm2_and_refused(smol_server):
    m = served.connect(smol_server.spec(), tokenizer_of=served_tokenizer)
    assert not m.alignment.aligned
    worst = max(abs(c["echo"] - c["next"]) for c in m.alignment.checks)
    assert worst > 1.0  # measured 1.5 to 12 nats: the distribution of the NEXT position
    with pytest.raises(ModelError, match="misaligned echo log-probs") as e:
        served.check_probe(m, "ic-lke", ("causal",))
    assert "\n" not in str(e.value)


def test_llama_cpp_echo_log_probs_are_aligned_for_gemma_and_match_in_process(gemma_server, real_model_path):
    from factprobe.lm.scorer import ChoiceRequest, Scorer
    from factprobe.models import load_model

    m = served.connect(gemma_server.spec(), tokenizer_of=served_tokenizer)
    assert m.alignment.aligned, m.alignment.line()
    requests = [
        ChoiceRequest("The capital of France is", [" Paris", " Lyon", " Berlin"]),
        ChoiceRequest("Water is made of hydrogen and", [" oxygen", " gold"]),
        ChoiceRequest("The Eiffel Tower is in", [" Paris, France", " Rome"]),
    ]
    got = m.make_scorer().score_choices(requests)
    loaded = load_model(GEMMA, device="cpu", dtype="float32")
    want = Scorer(loaded.model, loaded.tokenizer).score_choices(requests)
    for g, w in zip(got, want):
        assert abs(g - w).max() <= GEMMA_LOGPROB_TOL, (g, w)
        assert g.argmax() == w.argmax()


def test_the_fingerprint_of_a_real_server_holds_through_other_requests(gemma_server):
    """The fingerprint hashes log-prob sums (issue 41 item 3); on this server they move when a request reuses the
    prefix of the one before (benchmarks/bench_served_noise.py). Its texts share no first word with other requests,
    so the revision asked before scoring equals the one asked after, also right after a text that shares words."""
    first = served.served_revision(gemma_server.spec())
    m = served.connect(gemma_server.spec(), tokenizer_of=served_tokenizer)
    m.make_scorer().score_choices([ChoiceRequest("The capital of France is", [" Paris", " Lyon"])])
    served.completion(m.client, GEMMA, "Water boils at a temperature of", max_tokens=4)
    assert m.revision == first == served.served_revision(gemma_server.spec())


# ------------------------------------------------------------------ generation probes agree
def qa_cfg(model: str):
    from factprobe.framework.config import RunConfig

    return RunConfig.from_dict(
        {
            "probe": "qa",
            "model": model,
            "relations": "P36,P1376",
            "max_facts_per_relation": 10,
            "shots": "0",
            "qa_train_per_relation": 5,
        }
    )


def test_qa_through_the_server_agrees_with_the_in_process_model(smol_server, tmp_path):
    from factprobe.framework.runner import run_probe

    quiet = {"progress": False, "log": lambda s: None}
    remote = run_probe(qa_cfg(smol_server.spec()), tmp_path / "served", **quiet).results
    local = run_probe(qa_cfg(SMOL), tmp_path / "local", **quiet).results
    assert list(remote["key"]) == list(local["key"]) and len(remote) >= 15
    same = (remote["answer"].str.strip() == local["answer"].str.strip()).mean()
    assert same >= QA_AGREEMENT, f"{same:.2f} of QA answers agree"


# ------------------------------------------------------------------ one line each
def test_a_server_without_log_probs_is_one_line(real_model_path):
    server = LlamaServer(SMOL, "--logits_all", "false").start()
    try:
        with pytest.raises(ModelError, match="gives no log-probs") as e:
            served.connect(server.spec(), tokenizer_of=served_tokenizer)
        assert "\n" not in str(e.value)
    finally:
        server.kill()


def test_a_wrong_model_name_is_one_line(smol_server):
    with pytest.raises(ModelError, match=f"does not serve model 'smollm3'; it serves: {SMOL}"):
        served.connect(smol_server.spec("smollm3"), tokenizer_of=served_tokenizer)


def test_the_api_key_comes_from_the_environment(real_model_path, monkeypatch):
    server = LlamaServer(SMOL, "--api_key", "sk-test-key").start()
    try:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        monkeypatch.delenv("FACTPROBE_OPENAI_API_KEY", raising=False)
        with pytest.raises(ModelError, match="refused the request .*set the API key") as e:
            served.connect(server.spec(), check=False, tokenizer_of=served_tokenizer)
        assert "sk-test-key" not in str(e.value)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
        assert served.connect(server.spec(), check=False, tokenizer_of=served_tokenizer).spec.model == SMOL
    finally:
        server.kill()


def test_a_server_killed_mid_run_stops_the_run_and_the_rerun_resumes(smol_server, tmp_path):
    """The server is killed after the first checkpointed group; the run stops with one line and keeps that
    group; a new server on the same port and the same command resume; the rows equal an uninterrupted run."""
    from factprobe.framework.config import RunConfig
    from factprobe.framework.runner import run_probe

    port = free_port()
    server = LlamaServer(SMOL, port=port).start()
    cfg = lambda: RunConfig.from_dict(
        {
            "probe": "qa",
            "model": server.spec(),
            "relations": "P36,P1376",
            "max_facts_per_relation": 4,
            "shots": "0,1",
            "qa_train_per_relation": 3,
        }
    )
    kills = []

    def kill_once(done: int, total: int) -> None:
        if not kills:
            kills.append(done)
            server.kill()

    try:
        with pytest.raises(ModelError, match="did not answer .*rerun the same command to resume"):
            run_probe(cfg(), tmp_path / "run", progress=False, log=lambda s: None, on_batch=kill_once)
        server.start()
        again = run_probe(cfg(), tmp_path / "run", progress=False, log=lambda s: None)
        clean = run_probe(cfg(), tmp_path / "clean", progress=False, log=lambda s: None)
    finally:
        server.kill()
    assert again.n_resumed == kills[0] > 0 and again.n_scored_now == len(clean.results) - kills[0]
    assert list(again.results["answer"]) == list(clean.results["answer"])
