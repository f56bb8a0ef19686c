"""The fingerprint of a served model's weights: what identifies a model behind an OpenAI-compatible server.

A server does not say which weights it holds. `weights_fingerprint` asks it: the weight-describing fields
of its model list entry, its greedy continuations of fixed texts, their tokens, and the log-probs it gives them
(summed per text, rounded to a step that batch-to-batch noise stays inside), hashed. `ServedSpec.revision`
(`factprobe.lm.served`) carries it, so a run on another model behind the same `openai:MODEL@URL` has
another revision and is never resumed, compared or gated as the old one (factprobe.identity).
"""

from __future__ import annotations

import hashlib
import json
import math

from factprobe.errors import ModelError

from .served_answers import echo_parts, logprob
from .served_client import Client, ServedRequestError, logprob_completion

#: texts whose greedy continuations, tokens and log-probs, with the model's list entry, fingerprint the served weights.
#: Their first words are shared with no probe prompt, check text or each other: llama.cpp's server reuses the prefix
#: a request shares with the one before it, and log-probs computed that way move (0.13 nats in a text's sum, measured)
FINGERPRINT_TEXTS = ("Marmalade aside, the capital of France is", "Kettles aside, water boils at a temperature of")
#: tokens generated per fingerprint text
FINGERPRINT_TOKENS = 8
#: the step (nats) each text's summed log-prob is rounded to before it is hashed: 3.7x the largest batch-to-batch
#: difference published for vLLM on one token (0.067 nats, vllm#32480), above every difference llama.cpp's server
#: showed in the conditions a run meets (0; 0.22 in a sum only when it reuses a shared prefix, which these texts
#: avoid), while Gemma-3-270M's Q4_K_M against its float32 weights moves these texts' sums by 0.29 and 0.65 nats
#: (benchmarks/bench_served_noise.py, docs/served-models.md)
FINGERPRINT_LOGPROB_STEP = 0.25
#: fields of a `GET /models` entry that describe the weights (not `created`: servers stamp it per request)
FINGERPRINT_FIELDS = ("id", "owned_by", "root", "parent", "max_model_len", "meta")


def models_listing(client: Client) -> list:
    """The server's `GET /models` list (its `data`); ModelError (one line) when it has none."""
    try:
        listing = client.get("/models")
    except ServedRequestError as err:
        raise ModelError(
            f"server {client.where} has no model list (GET /models: HTTP {err.status}); is the URL the "
            "OpenAI-compatible API root (it ends in /v1)?"
        ) from None
    data = listing.get("data")
    if not isinstance(data, list):
        raise ModelError(f"server {client.where} answered GET /models without a model list; is it OpenAI-compatible?")
    return data


def weights_fingerprint(client: Client, model: str, entry: dict) -> str:
    """16 hex digits of SHA-256 over what the server says and does: the weight-describing fields of its
    `GET /models` entry for `model` (`FINGERPRINT_FIELDS`; llama.cpp's `meta` holds the parameter count,
    vocabulary and file size, vLLM's `root` the weights' path) and, for each of `FINGERPRINT_TEXTS`, one echo
    request at temperature 0 (`FINGERPRINT_TOKENS` new tokens, `logprobs` 1): its greedy continuation, the
    echoed prompt tokens' texts, and the summed log-prob of the prompt's and the continuation's tokens rounded to
    `FINGERPRINT_LOGPROB_STEP` nats (`rounded_nats`).

    Contract: the same weights on the same server give the same fingerprint (greedy text is stable; the log-prob
    sums move between batches far less than the step: docs/served-models.md has the measured and published
    noise); other weights, another quantization or another tokenizer behind the same name give another one when
    a continuation, a token or a sum changes by a step or more (a change of d < step nats in a sum changes the
    rounding with probability about d / step). Not a proof: weights that answer these texts identically behind
    identical metadata are not told apart. The answers are checked (`factprobe.lm.served_answers`): a server
    that sends non-finite log-probs or an echo that is not whole is one line here too."""
    described = {k: entry.get(k) for k in FINGERPRINT_FIELDS if k in entry}
    answers = []
    for text in FINGERPRINT_TEXTS:
        choice, lp = logprob_completion(client, model, text, max_tokens=FINGERPRINT_TOKENS, echo=True, temperature=0.0)
        prompt, generated = echo_parts(lp, text, client.where)
        values = [logprob(v, client.where, f"the token {t!r} of {text!r}") for _, _, t, v in prompt[1:]]
        values += [logprob(v, client.where, f"the generated token {t!r} after {text!r}") for t, v in generated]
        full = str(choice.get("text", ""))
        answers.append(
            {
                "greedy": full[len(text) :] if full.startswith(text) else full,
                "tokens": [t for _, _, t, _ in prompt],
                "nats": rounded_nats(sum(values)),
            }
        )
    blob = json.dumps({"entry": described, "answers": answers}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def rounded_nats(total: float, step: float = FINGERPRINT_LOGPROB_STEP) -> int:
    """`total` (nats) in whole steps of `step`, rounded to the nearest (halves up): what the fingerprint hashes."""
    return math.floor(total / step + 0.5)


def model_entry(client: Client, model: str) -> dict:
    """`model`'s entry of the server's model list; ModelError (one line naming what it serves) when absent."""
    listing = models_listing(client)
    served = [str(m.get("id")) for m in listing if isinstance(m, dict)]
    if model not in served:
        raise ModelError(
            f"server {client.where} does not serve model {model!r}; it serves: "
            f"{', '.join(served) or 'nothing'} (write openai:<one of them>@{client.where})"
        )
    return next(m for m in listing if isinstance(m, dict) and str(m.get("id")) == model)
