"""The fingerprint of a served model's weights: what identifies a model behind an OpenAI-compatible server.

A server does not say which weights it holds. `weights_fingerprint` asks it: the weight-describing fields
of its model list entry and its greedy continuations of fixed texts, hashed. `ServedSpec.revision`
(`factprobe.lm.served`) carries it, so a run on another model behind the same `openai:MODEL@URL` has
another revision and is never resumed, compared or gated as the old one (factprobe.identity).
"""

from __future__ import annotations

import hashlib
import json

from factprobe.errors import ModelError

from .served_client import Client, ServedRequestError, completion

#: texts whose greedy continuations, with the model's list entry, fingerprint the served weights
FINGERPRINT_TEXTS = ("The capital of France is", "Water boils at a temperature of")
#: tokens generated per fingerprint text
FINGERPRINT_TOKENS = 8
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
    vocabulary and file size, vLLM's `root` the weights' path) and the greedy continuation text
    (`FINGERPRINT_TOKENS` tokens, temperature 0) of each of `FINGERPRINT_TEXTS`.

    Contract: the same weights on the same server give the same fingerprint (greedy text is stable;
    log-prob values are not hashed, they vary in the last digits between batches); other weights almost
    always give another one (a fine-tuned or re-quantized model continues differently or reports another
    size). Not a proof: weights that continue these texts identically behind identical metadata are not told apart."""
    described = {k: entry.get(k) for k in FINGERPRINT_FIELDS if k in entry}
    texts = []
    for text in FINGERPRINT_TEXTS:
        choice = completion(client, model, text, max_tokens=FINGERPRINT_TOKENS, logprobs=None, temperature=0.0)
        texts.append(str(choice.get("text", "")))
    blob = json.dumps({"entry": described, "greedy": texts}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


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
