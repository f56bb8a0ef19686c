"""What a served answer must be to be used: whole and finite (issue 41 item 6).

A server's log-probs are read only through these functions. Each refuses, in one `BadAnswerError` line naming
the server and what it sent, an answer that would silently change a score:

- `logprob`: a log-prob must be a finite number <= `LOGPROB_SLACK` (not NaN, inf, a string, a bool, null);
- `echo_tokens`: an echo must cover its prompt: one text offset and one token text per log-prob, the first
  prompt token at offset 0, offsets that never go back, and each prompt token's text equal to the prompt's text
  between its offset and the next token's (an echo that leaves out a token, e.g. the prompt's last one, has a
  token whose span holds more than its text). A token whose text is not whole characters (a byte of a
  multi-byte character: empty, `\\ufffd`, vLLM's `bytes:...`) is checked by its offsets only. A special token a
  server echoes before the text with a null log-prob and counts in the offsets (vLLM's BOS) is skipped;
- `span_logprob`: the summed log-prob of the echoed prompt tokens that end after the context; a null log-prob
  there is the server's fault, except for the text's very first token (nothing precedes it: ConfigError);
- `generated_logprobs`: the log-probs of generated tokens (no null, all finite).
"""

from __future__ import annotations

import math
from typing import Any

from factprobe.errors import ConfigError, ModelError

from .served_client import Client, _logprobs_of, completion

#: the largest log-prob accepted, in nats: a log-softmax can round a little above 0 in float32, never more
LOGPROB_SLACK = 1e-3


class BadAnswerError(ModelError):
    """A server's answer that is not whole or not finite (one line naming the server and what it sent)."""


def _clip(text: str, n: int = 40) -> str:
    return repr(text if len(text) <= n else text[: n - 3] + "...")


def logprob(value: Any, where: str, what: str) -> float:
    """`value` as a log-prob (float); BadAnswerError unless it is a finite number <= `LOGPROB_SLACK`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadAnswerError(f"server {where} sent {value!r} as the log-prob of {what}; a log-prob is a number")
    v = float(value)
    if not math.isfinite(v) or v > LOGPROB_SLACK:
        raise BadAnswerError(
            f"server {where} sent the log-prob {v!r} for {what}; a log-prob is a finite number <= 0, so the answer "
            "is not used (a server whose arithmetic overflows, or not the completions API)"
        )
    return v


def _clean(token: str) -> bool:
    """Whether a token's text is whole characters (so it can be compared with the prompt)."""
    return bool(token) and "\ufffd" not in token and not token.startswith("bytes:")


def echo_tokens(lp: dict, text: str, where: str) -> list[tuple[int, int, str, Any]]:
    """The echoed tokens of prompt `text` as `(start, end, token text, log-prob as sent)`, checked to cover it
    (module docstring); BadAnswerError (one line) otherwise."""
    return echo_parts(lp, text, where)[0]


def echo_parts(lp: dict, text: str, where: str) -> tuple[list[tuple[int, int, str, Any]], list[tuple[str, Any]]]:
    """`echo_tokens` and, after them, the generated tokens as `(token text, log-prob as sent)`."""
    values, offsets, tokens = lp.get("token_logprobs"), lp.get("text_offset"), lp.get("tokens")
    n = len(values) if isinstance(values, list) else 0
    if not isinstance(offsets, list) or len(offsets) != n or any(type(o) is not int for o in offsets):
        got = len(offsets) if isinstance(offsets, list) else "no"
        raise BadAnswerError(f"server {where} gave {n} echo log-probs but {got} whole-number text offsets")
    if not isinstance(tokens, list) or len(tokens) != n or any(not isinstance(t, str) for t in tokens):
        got = len(tokens) if isinstance(tokens, list) else "no"
        raise BadAnswerError(f"server {where} gave {n} echo log-probs but {got} token texts")
    first, shift = 0, 0
    if n > 1 and values[0] is None and offsets[0] == 0 and tokens[0] and not text.startswith(tokens[0]):
        if offsets[1] == len(tokens[0]):  # a special token before the text (vLLM's BOS), counted in the offsets
            first, shift = 1, len(tokens[0])
    starts = [o - shift for o in offsets[first:]]
    toks, vals = tokens[first:], values[first:]
    if not starts or starts[0] != 0:
        raise BadAnswerError(
            f"server {where} echoed {_clip(text)} starting at offset {starts[0] if starts else 'none'}, not 0: "
            "the echo does not cover the prompt"
        )
    out = []
    for i, start in enumerate(starts):
        if start >= len(text):  # the generated token and after
            break
        nxt = starts[i + 1] if i + 1 < len(starts) else len(text)
        if nxt < start:
            raise BadAnswerError(f"server {where} echoed {_clip(text)} with text offsets that go back ({start} then {nxt})")
        end = min(nxt, len(text))
        if _clean(toks[i]) and text[start:end] != toks[i]:
            raise BadAnswerError(
                f"server {where} echoed the token {toks[i]!r} where the prompt {_clip(text)} has {text[start:end]!r} "
                f"(offsets {start} to {end}): the echo is not whole (a token left out?), so the answer is not used"
            )
        out.append((start, end, toks[i], vals[i]))
    if not out or out[-1][1] != len(text):
        raise BadAnswerError(f"server {where} echoed only part of the prompt {_clip(text)}")
    rest = range(first + len(out), n)
    return out, [(tokens[i], values[i]) for i in rest]


def span_logprob(lp: dict, context: str, continuation: str, where: str) -> tuple[float, int]:
    """(summed log-prob, token count) of the echoed prompt tokens of `context + continuation` that end after
    `context` (a token merged across the boundary is scored whole, as in-process), from a checked echo."""
    text = context + continuation
    total, n = 0.0, 0
    for start, end, token, value in echo_tokens(lp, text, where):
        if end <= len(context):
            continue
        if value is None and start == 0:
            raise ConfigError(
                f"server {where} gives no log-prob for the first token of {_clip(text)} "
                "(nothing precedes it); put text before the continuation"
            )
        if value is None:
            raise BadAnswerError(
                f"server {where} sent a null log-prob for the token {token!r} at offset {start} of {_clip(text)}; "
                "only the first token of a prompt has none, so the answer is not used"
            )
        total += logprob(value, where, f"the token {token!r} at offset {start} of {_clip(text)}")
        n += 1
    if n == 0 and continuation:
        raise BadAnswerError(f"server {where} echoed no token of the continuation {continuation!r}")
    return total, n


def echo_span_logprob(client: Client, model: str, context: str, continuation: str) -> tuple[float, int]:
    """`span_logprob` of one echo request for `context + continuation` (one new token, `logprobs` 1)."""
    choice = completion(client, model, context + continuation, max_tokens=1, echo=True, logprobs=1)
    return span_logprob(_logprobs_of(client, choice), context, continuation, client.where)


def generated_logprobs(choice: dict, where: str) -> list[float]:
    """The log-probs of a choice's generated tokens (no echo), each checked by `logprob`; [] when none were sent."""
    lp = choice.get("logprobs") or {}
    values = lp.get("token_logprobs") or []
    tokens = lp.get("tokens") or []
    out = []
    for i, v in enumerate(values):
        token = tokens[i] if i < len(tokens) and isinstance(tokens[i], str) else f"#{i}"
        if v is None:
            raise BadAnswerError(f"server {where} sent a null log-prob for the generated token {token!r}")
        out.append(logprob(v, where, f"the generated token {token!r} (of {_clip(str(choice.get('text', '')))})"))
    return out
