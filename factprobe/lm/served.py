"""Served models: a language model behind an OpenAI-compatible completions server (vLLM, llama.cpp).

A model name `openai:MODEL@URL` (e.g. `openai:smollm2-135m-instruct@http://127.0.0.1:8000/v1`) loads a
`ServedModel` instead of weights: `MODEL` is the name the server knows the model by and the name the
tokenizer is resolved from (an alias, a local folder or a hub id, like any factprobe model name: the
probes measure prompts in tokens), `URL` is the server's API root (ending in `/v1`). The API key comes
from the environment (`FACTPROBE_OPENAI_API_KEY`, else `OPENAI_API_KEY`; none is needed by a local
server) and is sent as a bearer token, never logged or recorded; basic auth from `FACTPROBE_OPENAI_BASIC_AUTH`
(`user:password`) instead. Either goes only to the URL's origin. A URL written with `user:password@` is refused
in one line (the URL is part of the model's name, and names are recorded).

Engines, with the interface the probes use (`Session.scorer`, `Session.generator`):

- `ServedScorer.score_choices`: log P(option | context) from the completions API with `echo`,
  `logprobs` and one new token (`max_tokens` 1), as lm-evaluation-harness's `local-completions` asks:
  the prompt tokens that end after the context (text offsets of the echoed tokens) are summed. The
  context's trailing whitespace moves into the option (`split_trailing_whitespace`), as in-process.
- `ServedGenerator.greedy` / `.sample`: completions at temperature 0, or with temperature, top-p,
  top-k and one seed per sample.
Packed segments (`score_segments`), prefix extension (`extend`) and full next-token distributions
(`PrefixCache.next_logprobs`) need the model's forward pass; a probe that needs them (eic-lke,
mc-items, coherency; belief-mlm needs a masked LM) is refused in one line before anything runs
(`check_probe`).

A served model's revision carries a fingerprint of its answers (`factprobe.lm.served_fingerprint`: greedy
text, tokens and rounded log-prob sums): a different model behind the same name and URL is another revision, so
its results are never reused for, compared with or gated against the old one's.

A server must prove its log-probs (`ServedModel.connect` -> `check_alignment`): the echo log-prob of a
known text's last token must equal the log-prob the same server gives that token as the next token
after the text before it. llama.cpp's server (llama-cpp-python 0.3.36) fails this for models without a
BOS token: it scores each echoed token with the distribution at its own position, i.e. the one that
predicts the NEXT token; log-likelihood probes are refused on such a server (generation probes run).

Transport (`Client`, `factprobe.lm.served_client` over `factprobe.lm.served_http`): kept-alive connections,
retries with backoff, a whole-request deadline (`FACTPROBE_SERVED_TIMEOUT`, 120 s), a cap on requests in flight,
redirects only within the origin, several prompts per request where the server takes a list. Answers are used
only whole and finite (`factprobe.lm.served_answers`). Every failure a user can cause is ONE `ModelError` line: an
unreachable server, a login page, a model the server does not serve, no log-probs, a non-finite or null
log-prob, an echo that does not cover its prompt, a trickling server, a redirect elsewhere, a server that stopped
mid-run (the runner's checkpoint keeps every finished batch: rerunning resumes; no row is written from a failed
request).

Over 500 lines: one backend, the served model and its two engines behind the probes' scorer and generator interface;
the transport is already in served_client, and ruff format's one-argument-per-line calls add the rest.
"""

from __future__ import annotations

import dataclasses
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np

from factprobe.errors import ConfigError, ContextTooLongError, ModelError

from .served_answers import BadAnswerError, echo_span_logprob, generated_logprobs, logprob, span_logprob  # noqa: F401
from .served_client import (  # noqa: F401
    Client,
    ServedRequestError,
    _error_text,
    _logprobs_of,
    _Transient,
    accepts_lists,
    completion,
    completions,
)
from .served_fingerprint import FINGERPRINT_TEXTS, model_entry, models_listing, weights_fingerprint  # noqa: F401
from .served_http import BASIC_VARIABLE, DeadlineError, public_url, refuse_credentials  # noqa: F401

#: the prefix that marks a served model's name
SCHEME = "openai:"
#: environment variables holding the API key, first found wins
KEY_VARIABLES = ("FACTPROBE_OPENAI_API_KEY", "OPENAI_API_KEY")
#: the environment variable holding the whole-request deadline in seconds (`DEFAULT_TIMEOUT` when unset)
TIMEOUT_VARIABLE = "FACTPROBE_SERVED_TIMEOUT"
DEFAULT_TIMEOUT = 120.0
#: the probes' needs a server cannot meet, by probe name (a probe not named here runs through the engines)
UNSERVABLE = {
    "eic-lke": "packed token segments with their own attention masks (Scorer.score_segments)",
    "mc-items": "packed token segments with their own attention masks (Scorer.score_segments)",
    "coherency": "the full next-token distribution at every step (PrefixCache.next_logprobs)",
    "belief-mlm": "a masked LM's [MASK] distribution",
}
#: probes that read log-likelihoods (refused on a server whose echo log-probs are misaligned)
LOGLIK_PROBES = frozenset({"ic-lke", "hgp", "mmp"})
#: texts the alignment check scores both ways (echo vs next token)
ALIGNMENT_TEXTS = ("The capital of France is", "One, two, three, four,")
#: |echo - next-token| log-prob allowed by the alignment check, in nats. Measured on llama-cpp-python 0.3.36
#: (gemma-3-270m Q4_K_M, aligned): 0 to 1e-5; misaligned SmolLM2: 1.5 to 12 nats (docs/served-models.md).
ALIGNMENT_TOL = 0.02
#: the context window assumed when neither the server nor the tokenizer's model says
DEFAULT_SERVED_MAX_LENGTH = 2048


# ------------------------------------------------------------------ the name
@dataclass(frozen=True)
class ServedSpec:
    """A parsed `openai:MODEL@URL`: the model name and the API root (no trailing slash)."""

    model: str
    url: str
    #: `weights_fingerprint` of what the server answered when asked (empty before that)
    fingerprint: str = ""

    @property
    def revision(self) -> str:
        """What identifies the weights of a run: `served:MODEL@URL#FINGERPRINT` (the URL without
        credentials or query; the fingerprint of the server's answers, `weights_fingerprint`, once it
        was asked). A server does not prove which weights it holds; the fingerprint makes a changed
        model behind the same name and URL a different revision (docs/served-models.md says how far)."""
        base = f"served:{self.model}@{public_url(self.url)}"
        return f"{base}#{self.fingerprint}" if self.fingerprint else base


def is_served(name: Any) -> bool:
    """True when `name` names a served model (`openai:...`)."""
    return isinstance(name, str) and name.startswith(SCHEME)


def parse_spec(name: str) -> ServedSpec:
    """`openai:MODEL@URL` -> `ServedSpec`; ConfigError (one line) for anything else. URL is http(s)://..."""
    body = name[len(SCHEME) :] if is_served(name) else name
    at = max(body.rfind("@http://"), body.rfind("@https://"))
    if at <= 0:
        raise ConfigError(
            f"served model {name!r}: write openai:MODEL@URL, e.g. openai:smollm2-135m-instruct@http://127.0.0.1:8000/v1"
        )
    model, url = body[:at], body[at + 1 :].rstrip("/")
    refuse_credentials(url)
    host = urllib.parse.urlsplit(url).netloc
    if not host:
        raise ConfigError(f"served model {name!r}: the URL {url!r} names no host")
    return ServedSpec(model, url)


def api_key(environ: dict | None = None) -> str | None:
    """The API key from the environment (`KEY_VARIABLES`), None when unset."""
    env = os.environ if environ is None else environ
    for var in KEY_VARIABLES:
        if env.get(var):
            return env[var]
    return None


def basic_auth(environ: dict | None = None) -> str | None:
    """`user:password` for HTTP basic auth from `BASIC_VARIABLE` (sent instead of the API key), None when unset."""
    env = os.environ if environ is None else environ
    return env.get(BASIC_VARIABLE) or None


def request_timeout(timeout: float | None = None, environ: dict | None = None) -> float:
    """The whole-request deadline in seconds: `timeout` when given, else `TIMEOUT_VARIABLE`, else
    `DEFAULT_TIMEOUT`; ConfigError (one line) for a value that is not a positive number of seconds."""
    if timeout is not None:
        return float(timeout)
    env = os.environ if environ is None else environ
    raw = env.get(TIMEOUT_VARIABLE)
    if raw is None or raw == "":
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (0 < value < float("inf")):
        raise ConfigError(f"{TIMEOUT_VARIABLE}={raw!r}: give the whole-request deadline as a positive number of seconds")
    return value


def make_client(spec: ServedSpec, *, environ: dict | None, timeout: float | None, retries: int, concurrency: int) -> Client:
    """The `Client` for `spec`'s server, with the credentials and the deadline the environment gives."""
    return Client(
        spec.url,
        api_key(environ),
        basic=basic_auth(environ),
        timeout=request_timeout(timeout, environ),
        retries=retries,
        concurrency=concurrency,
    )


def served_numerics() -> dict[str, Any]:
    """The numerics a run on a served model records, before and after connecting: dtype and attention
    "served" (the server's own; a server does not say), device "cpu" (where factprobe's side runs)."""
    import torch

    from factprobe.identity import numerics

    return numerics(torch.device("cpu"), "served", "served")


# ------------------------------------------------------------------ the weights' fingerprint
def served_revision(name: str, *, environ: dict | None = None, timeout: float | None = None, retries: int = 4) -> str:
    """The revision (`ServedSpec.revision`, fingerprint included) of the server `name` names, asked now
    without the alignment check: what a run's identity is checked against before it connects."""
    spec = parse_spec(name)
    client = make_client(spec, environ=environ, timeout=timeout, retries=retries, concurrency=1)
    try:
        entry = model_entry(client, spec.model)
        return dataclasses.replace(spec, fingerprint=weights_fingerprint(client, spec.model, entry)).revision
    finally:
        client.close()


# ------------------------------------------------------------------ the check
@dataclass
class Alignment:
    """The alignment check's outcome: per text, the next token's log-prob both ways."""

    aligned: bool
    checks: list[dict] = field(default_factory=list)

    def line(self) -> str:
        """One line: what was compared and what came out."""
        parts = [f"{c['token']!r} after {c['text']!r}: echo {c['echo']:.3f}, next-token {c['next']:.3f}" for c in self.checks]
        return "; ".join(parts)


def check_alignment(client: Client, model: str, texts: Sequence[str] = ALIGNMENT_TEXTS, tol: float = ALIGNMENT_TOL) -> Alignment:
    """Whether the server's echo log-probs score each prompt token with the distribution BEFORE it.

    For each text: a 1-token greedy completion gives the next token and its log-prob (generated-token
    log-probs are right on every server checked); then the echo log-prob of that token at the end of
    `text + token` must agree within `tol` nats."""
    out = Alignment(True)
    for text in texts:
        try:
            choice = completion(client, model, text, max_tokens=1, logprobs=1, retries=1)
        except ModelError as err:  # llama.cpp without logits_all answers 500 "logprobs is not supported ..."
            if "logprob" not in str(err).lower():
                raise
            _logprobs_of(client, {})  # raises the one line
        lp = _logprobs_of(client, choice)
        token = choice.get("text", "")
        if not token or not lp["token_logprobs"]:
            continue  # the model ended the text at once (EOS): nothing to compare
        nxt = logprob(lp["token_logprobs"][0], client.where, f"the next token {token!r} after {text!r}")
        echo, n = echo_span_logprob(client, model, text, token)
        if n != 1:
            continue  # the token merged with the text when re-encoded: not a one-token comparison
        out.checks.append({"text": text, "token": token, "echo": echo, "next": nxt})
        out.aligned = out.aligned and abs(echo - nxt) <= tol
    if not out.checks:
        raise ModelError(
            f"server {client.where}: the log-prob alignment check found nothing to compare (the model "
            f"{model} ended every check text at once)"
        )
    return out


# ------------------------------------------------------------------ the model
@dataclass
class ServedModel:
    """A model behind a server, in place of `factprobe.models.loading.LoadedModel` (the same fields the runner,
    identity and tracking read). `served` is True; `make_scorer()` / `make_generator()` build its engines."""

    name: str
    spec: ServedSpec
    client: Client
    tokenizer: Any
    max_length: int
    alignment: Alignment | None = None
    served: bool = True
    kind: str = "causal"
    source: str = "served"
    is_random: bool = False
    has_chat_template: bool = False
    adapter_path: None = None
    base_name: None = None
    base_path: None = None
    device_map: None = None
    dtype: str = "served"
    model: Any = field(default_factory=lambda: SimpleNamespace(config=SimpleNamespace(_attn_implementation="served")))

    @property
    def path(self) -> str:
        return public_url(self.spec.url)

    @property
    def revision(self) -> str:
        return self.spec.revision

    @property
    def device(self):
        import torch

        return torch.device("cpu")  # where the (few) local tensors live; the model runs on the server

    @property
    def dtype_name(self) -> str:
        return self.dtype

    def make_scorer(self, token_budget: int | None = None) -> ServedScorer:
        """The log-likelihood engine; ModelError (one line) when the server's echo log-probs are misaligned."""
        if self.alignment is not None and not self.alignment.aligned:
            raise ModelError(misaligned_line(self))
        return ServedScorer(self)

    def make_generator(self, token_budget: int | None = None) -> ServedGenerator:
        """The generation engine."""
        return ServedGenerator(self, token_budget)


def misaligned_line(model: ServedModel) -> str:
    """The one line that refuses a misaligned server for log-likelihoods."""
    return (
        f"server {model.client.where} gives misaligned echo log-probs for {model.spec.model} (each prompt token "
        f"scored with the distribution after it: {model.alignment.line() if model.alignment else ''}); "
        "log-likelihood probes cannot run on it (generation probes can): serve the model with vLLM or run it in-process"
    )


def connect(
    name: str,
    *,
    check: bool = True,
    timeout: float | None = None,
    retries: int = 4,
    concurrency: int = 4,
    tokenizer: Any = None,
    tokenizer_of: Callable[[str], Any] | None = None,
    environ: dict | None = None,
) -> ServedModel:
    """Connect to the server `name` (`openai:MODEL@URL`) names: the server answers, serves MODEL, gives
    log-probs, and (with `check`) its echo log-probs are tested for alignment (`check_alignment`).
    The tokenizer is `tokenizer`, else `tokenizer_of(MODEL)`, asked once the server answered (the model
    store's `factprobe.models.loading.served_tokenizer` resolves MODEL like any factprobe model name: an
    engine does not resolve names); neither: ConfigError."""
    spec = parse_spec(name)
    client = make_client(spec, environ=environ, timeout=timeout, retries=retries, concurrency=concurrency)
    entry = model_entry(client, spec.model)
    spec = dataclasses.replace(spec, fingerprint=weights_fingerprint(client, spec.model, entry))
    if tokenizer is None and tokenizer_of is None:
        raise ConfigError(f"served model {name}: no tokenizer given (tokenizer= or tokenizer_of=)")
    tok = tokenizer if tokenizer is not None else tokenizer_of(spec.model)
    model = ServedModel(name, spec, client, tok, served_max_length(entry, tok))
    if check:
        model.alignment = check_alignment(client, spec.model)
    client.lists = accepts_lists(client, spec.model)
    return model


def served_max_length(entry: dict, tokenizer: Any) -> int:
    """The context window: the server's `max_model_len` (vLLM) when it says, else the tokenizer's model's
    window capped at `DEFAULT_SERVED_MAX_LENGTH` (llama.cpp's server does not say; its default n_ctx)."""
    value = entry.get("max_model_len")
    if isinstance(value, int) and value > 0:
        return value
    tml = getattr(tokenizer, "model_max_length", None)
    if isinstance(tml, int) and 0 < tml < DEFAULT_SERVED_MAX_LENGTH:
        return tml
    return DEFAULT_SERVED_MAX_LENGTH


def check_probe(loaded: Any, probe: str, kinds: Sequence[str]) -> None:
    """Refuse, in one line before anything runs, a probe that needs what a server cannot give, and a
    log-likelihood probe on a server whose echo log-probs are misaligned."""
    if probe in UNSERVABLE:
        raise ConfigError(
            f"probe {probe} cannot run on the served model {loaded.name}: it needs {UNSERVABLE[probe]}, "
            "which an OpenAI-compatible server does not give; run the model in-process"
        )
    if "causal" not in kinds:
        raise ConfigError(f"probe {probe} accepts {' or '.join(kinds)} LMs; a served model is a causal LM")
    if probe in LOGLIK_PROBES and loaded.alignment is not None and not loaded.alignment.aligned:
        raise ModelError(misaligned_line(loaded))


# ------------------------------------------------------------------ the engines
class _Engine:
    def __init__(self, model: ServedModel) -> None:
        self.served = model
        self.tokenizer = model.tokenizer
        self.max_length = model.max_length
        self.client = model.client
        self.model_name = model.spec.model


class ServedPrefix:
    """The text of a shared prefix (a server keeps no KV state across requests we can name)."""

    def __init__(self, text: str, token_ids: Sequence[int]) -> None:
        self.text = text
        self.token_ids = tuple(token_ids)
        self.kv = None
        self.next_logprobs = None

    def __len__(self) -> int:
        return len(self.token_ids)


class ServedScorer(_Engine):
    """`factprobe.lm.scorer.Scorer`'s interface over a server: `score_choices`, `prefix`, `encode_context`,
    `encode_continuation`, `stats`. A request's context is its full text (a shared prefix is only an
    optimisation in-process); each option is one echo prompt (`completions`: several per request where the server
    takes a list)."""

    def __init__(self, model: ServedModel) -> None:
        super().__init__(model)
        from factprobe.lm.scorer import ScoreStats

        self.stats = ScoreStats()

    def encode_context(self, text: str, stand_in: bool = True) -> list[int]:
        from factprobe.lm.scorer import context_token_ids

        return context_token_ids(self.tokenizer, text, stand_in)

    def encode_continuation(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prefix(self, text_or_ids: str | Sequence[int]) -> ServedPrefix:
        if isinstance(text_or_ids, str):
            return ServedPrefix(text_or_ids, self.encode_context(text_or_ids, stand_in=False))
        ids = list(text_or_ids)
        return ServedPrefix(self.tokenizer.decode(ids, skip_special_tokens=True), ids)

    def score_choices(self, requests: Sequence[Any], shared_prefix: Any = None, pack_contexts: bool = False) -> list[np.ndarray]:
        """Summed log-prob of every option of every request, `[len(options)]` float64 each (see the class).
        `pack_contexts` is the local scorer's packing of whole contexts into one forward; a server has no
        forward to pack (each option is one whole request), so it changes nothing here."""
        from factprobe.lm.scorer import split_trailing_whitespace

        jobs = []
        for r in requests:
            for o in r.options:
                ctx, cont = split_trailing_whitespace(r.context, o)
                if not ctx:
                    raise ConfigError(
                        "an empty context cannot be scored on a server (nothing precedes the option); put text before the slot"
                    )
                n = len(self.encode_context(ctx + cont))
                if n + 1 > self.max_length:
                    raise ContextTooLongError(
                        f"{n} tokens + 1 exceed the served model's context window of {self.max_length} tokens"
                    )
                self.stats.naive_tokens += n
                jobs.append((ctx, cont, n))
        choices = completions(self.client, self.model_name, [j[0] + j[1] for j in jobs], max_tokens=1, echo=True, logprobs=1)
        sums = [span_logprob(_logprobs_of(self.client, c), j[0], j[1], self.client.where)[0] for c, j in zip(choices, jobs)]
        self.stats.forwards += len(jobs)
        self.stats.packed_tokens += sum(j[2] for j in jobs)
        out, k = [], 0
        for r in requests:
            out.append(np.asarray(sums[k : k + len(r.options)], dtype=np.float64))
            k += len(r.options)
        return out

    def score_segments(self, prefix: Any, segments: Any) -> Any:
        raise ConfigError(
            f"the served model {self.served.name} cannot score packed token segments "
            f"({UNSERVABLE['eic-lke']}); run the model in-process"
        )

    def extend(self, prefix: Any, ids: Any) -> Any:
        raise ConfigError(
            f"the served model {self.served.name} cannot extend a prefix token by token "
            f"({UNSERVABLE['coherency']}); run the model in-process"
        )


class ServedGenerator(_Engine):
    """`factprobe.lm.generate.Generator`'s interface over a server: `greedy`, `sample`, `encode`, `stats`,
    `eos_token_ids`, `token_budget` (unused: the server batches). `Generation.token_ids` are the answer
    text re-encoded by the local tokenizer (a server names tokens by text); `finish_reason` is "length"
    when the server says so, else "stop" when stop strings were given, else "eos" (the OpenAI API says
    "stop" for both)."""

    def __init__(self, model: ServedModel, token_budget: int | None = None) -> None:
        super().__init__(model)
        from factprobe.lm.generate import GenerateStats

        self.stats = GenerateStats()
        self.token_budget = token_budget or 1024
        eos = getattr(self.tokenizer, "eos_token_id", None)
        self.eos_token_ids = frozenset([] if eos is None else [eos] if isinstance(eos, int) else eos)

    def encode(self, text: str) -> list[int]:
        """Token ids of a prompt, with the tokenizer's default special tokens (as `Generator.encode`)."""
        return list(self.tokenizer(text, add_special_tokens=True)["input_ids"])

    def clear_prefix_cache(self) -> None:
        """Nothing to forget: the server holds no prefix of ours."""

    def _check(self, prompt: str, max_new_tokens: int) -> int:
        if not isinstance(max_new_tokens, int) or max_new_tokens <= 0:
            raise ConfigError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
        n = len(self.encode(prompt))
        if not n:
            raise ConfigError("prompts: an empty prompt encodes to no tokens; nothing to condition on")
        if n + max_new_tokens > self.max_length:
            raise ContextTooLongError(
                f"prompt of {n} tokens + max_new_tokens={max_new_tokens} exceed the served "
                f"model's context window of {self.max_length} tokens"
            )
        return n

    def _generation(self, choice: dict, stops: Sequence[str]):
        from factprobe.lm.generate import Generation

        text = choice.get("text") or ""
        lps = generated_logprobs(choice, self.client.where)
        reason = choice.get("finish_reason")
        finish = "length" if reason == "length" else "stop" if stops else "eos"
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        self.stats.decode_tokens += len(lps) or len(ids)
        return Generation(text, ids, lps, finish)

    def greedy(
        self, prompts: Sequence[str], max_new_tokens: int = 16, stop: str | Sequence[str] = (), shared_prefix: str | None = None
    ) -> list:
        """Greedy continuation of every prompt, in input order (temperature 0; several prompts per request where the
        server takes a list, `completions`)."""
        stops = [stop] if isinstance(stop, str) else list(stop)
        sizes = [self._check(p, max_new_tokens) for p in prompts]
        self.stats.naive_prompt_tokens += sum(sizes)
        self.stats.prompt_tokens += sum(sizes)
        self.stats.forwards += len(prompts)
        choices = completions(
            self.client, self.model_name, list(prompts), max_tokens=max_new_tokens, logprobs=1, temperature=0.0, stop=stops
        )
        return [self._generation(c, stops) for c in choices]

    def sample(
        self,
        prompt: str,
        n: int,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        seed: int = 0,
        stop: str | Sequence[str] = (),
    ) -> list:
        """`n` samples continuing `prompt`: one request each, seeded `seed * 1_000_003 + i` (reproducible on a
        server that honours `seed`, as vLLM and llama.cpp do)."""
        if not isinstance(n, int) or n < 1:
            raise ConfigError(f"n must be a positive integer, got {n!r}")
        if not (temperature >= 0 and 0 < top_p <= 1 and isinstance(top_k, int) and top_k >= 0):
            raise ConfigError(
                f"temperature >= 0, 0 < top_p <= 1 and integer top_k >= 0 are needed, got {temperature!r}, {top_p!r}, {top_k!r}"
            )
        stops = [stop] if isinstance(stop, str) else list(stop)
        size = self._check(prompt, max_new_tokens)
        self.stats.naive_prompt_tokens += n * size
        self.stats.prompt_tokens += n * size
        self.stats.forwards += n
        seeds = [(seed * 1_000_003 + i) % (2**31 - 1) for i in range(n)]
        choices = self.client.map(
            lambda s: completion(
                self.client,
                self.model_name,
                prompt,
                max_tokens=max_new_tokens,
                logprobs=1,
                temperature=temperature,
                stop=stops,
                seed=s,
                top_p=top_p,
                top_k=top_k,
            ),
            seeds,
        )
        return [self._generation(c, stops) for c in choices]


__all__ = [
    "ALIGNMENT_TOL",
    "Alignment",
    "Client",
    "ServedGenerator",
    "ServedModel",
    "ServedScorer",
    "ServedSpec",
    "check_alignment",
    "check_probe",
    "connect",
    "is_served",
    "parse_spec",
]
