"""The client of a served model: JSON over HTTP to one OpenAI-compatible completions server.

`Client` posts through `factprobe.lm.served_http` (kept-alive connections, a whole-request deadline, credentials only
to the URL's origin) with retries and exponential backoff on 429, 5xx, connection errors and a server silent past
the deadline (the server's Retry-After honoured), and a cap on requests in flight; a login page (HTML), 401/403 and
other 4xx answers become one line (`ServedRequestError` for a 4xx other than 401/403, with the server's own
message). `completion` makes one completions call and returns its first choice; `completions` answers many
prompts, several per request where the server takes a list (`accepts_lists`). The engines that use it live in
`factprobe.lm.served`; the answers are checked in `factprobe.lm.served_answers`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from factprobe.errors import ModelError

from .served_http import Endpoint, Transport
from .served_http import Transient as _Transient

#: prompts per completions request to a server that takes a list (`completions`)
PROMPTS_PER_REQUEST = 16


# ------------------------------------------------------------------ transport
class Client:
    """JSON over HTTP to one OpenAI-compatible server, with retries, backoff, timeout and a concurrency cap.

    `url` is the API root (without credentials); `basic` (`user:password`) is sent as HTTP basic auth instead of
    `key` (a bearer token), and neither ever leaves the URL's origin (`factprobe.lm.served_http`). `retries`: extra tries after a 429, a
    5xx, a dropped/refused connection or a server silent past the deadline; the wait doubles from `backoff` seconds
    (a `Retry-After` header wins, capped at 60 s). `timeout`: the whole-request deadline in seconds (connect, send,
    every byte of the answer; a server that starts answering and misses it is `DeadlineError`, not retried).
    `concurrency`: requests in flight at once across threads (`map`), each over a kept-alive connection.
    `sleep` is injectable for tests.
    """

    def __init__(
        self,
        url: str,
        key: str | None = None,
        *,
        basic: str | None = None,
        timeout: float = 120.0,
        retries: int = 4,
        backoff: float = 0.5,
        concurrency: int = 4,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._endpoint = Endpoint.parse(url.rstrip("/"), key, basic)
        self.url = self.where = self._endpoint.where  # the API root without credentials
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.concurrency = max(1, int(concurrency))
        self._sleep = sleep
        self._slots = threading.BoundedSemaphore(self.concurrency)
        self._transport = Transport(self._endpoint, timeout=timeout, max_idle=self.concurrency)
        self.requests = 0  # requests sent, retries included
        #: the server takes a list of prompts per request (`accepts_lists`); `completions` then sends `batch` at a time
        self.lists = False
        self.batch = PROMPTS_PER_REQUEST

    @property
    def connections(self) -> int:
        """Connections opened so far (kept-alive ones are reused)."""
        return self._transport.connections

    def close(self) -> None:
        """Close the idle kept-alive connections (a later request opens a new one)."""
        self._transport.close()

    def get(self, path: str) -> dict:
        """GET `path` under the API root; the decoded JSON object."""
        return self._request("GET", path, None)

    def post(self, path: str, payload: dict, retries: int | None = None) -> dict:
        """POST `payload` as JSON to `path` under the API root; the decoded JSON object."""
        return self._request("POST", path, payload, retries)

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        """`[fn(x) for x in items]`, up to `concurrency` at once; the first error is raised."""
        if self.concurrency == 1 or len(items) < 2:
            return [fn(x) for x in items]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(items))) as pool:
            return list(pool.map(fn, items))

    def _request(self, method: str, path: str, payload: dict | None, retries: int | None = None) -> dict:
        tries = 1 + (self.retries if retries is None else retries)
        last, after = "", None
        for attempt in range(tries):
            if attempt:  # exponential backoff; the server's Retry-After wins (capped at 60 s)
                self._sleep(min(60.0, after) if after is not None else self.backoff * 2 ** (attempt - 1))
            try:
                with self._slots:
                    self.requests += 1
                    status, headers, body = self._send(method, path, payload)
            except _Transient as t:
                last, after = t.reason, t.retry_after
                continue
            return self._decode(status, headers, body, path)
        raise ModelError(
            f"server {self.where} did not answer {path} after {tries} tries ({last}); the finished "
            "batches are checkpointed: start the server again and rerun the same command to resume"
        )

    def _send(self, method: str, path: str, payload: dict | None) -> tuple[int, Any, bytes]:
        data = None if payload is None else json.dumps(payload).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        status, rheaders, body = self._transport.request(method, path, data, headers)
        if status >= 500 and "logprob" in _error_text(body).lower():  # llama.cpp without logits_all: no retry helps
            raise ServedRequestError(status, f"server {self.where} answered {path} with HTTP {status}: {_error_text(body)[:300]}")
        if status == 429 or status >= 500:
            after = rheaders.get("Retry-After") if rheaders else None
            raise _Transient(
                f"HTTP {status}: {_error_text(body)[:200]}",
                float(after) if after and after.replace(".", "", 1).isdigit() else None,
            )
        return status, rheaders, body

    def _decode(self, status: int, headers: Any, body: bytes, path: str) -> dict:
        ctype = (headers.get("Content-Type") if headers else "") or ""
        text = body.decode("utf-8", "replace")
        if "html" in ctype.lower() or text.lstrip()[:1] == "<":
            raise ModelError(
                f"server {self.where} answered {path} with an HTML page, not JSON (a login page or a "
                "proxy?): point the URL at the OpenAI-compatible API root (it ends in /v1) and check the "
                "API key in FACTPROBE_OPENAI_API_KEY / OPENAI_API_KEY"
            )
        if status in (401, 403):
            raise ModelError(
                f"server {self.where} refused the request (HTTP {status}: {_error_text(body)[:200]}); "
                "set the API key in FACTPROBE_OPENAI_API_KEY or OPENAI_API_KEY"
            )
        if status >= 400:
            raise ServedRequestError(status, f"server {self.where} answered {path} with HTTP {status}: {_error_text(body)[:300]}")
        try:
            out = json.loads(text)
        except ValueError:
            raise ModelError(
                f"server {self.where} answered {path} with something that is not JSON "
                f"({text[:80]!r}); is the URL the OpenAI-compatible API root (ending in /v1)?"
            ) from None
        if not isinstance(out, dict):
            raise ModelError(f"server {self.where} answered {path} with JSON that is not an object")
        return out


class ServedRequestError(ModelError):
    """A 4xx answer other than 401/403 (one line, with the server's own message)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _error_text(body: bytes) -> str:
    """The server's error message from a JSON error body (OpenAI, vLLM, FastAPI shapes), else the text."""
    text = body.decode("utf-8", "replace").strip()
    try:
        obj = json.loads(text)
    except ValueError:
        return " ".join(text.split())
    err = obj.get("error", obj.get("detail", obj)) if isinstance(obj, dict) else obj
    if isinstance(err, dict):
        err = err.get("message", err)
    return " ".join(str(err).split())


# ------------------------------------------------------------------ the completions calls
def completion(client: Client, model: str, prompt: str, *, retries: int | None = None, **kw: Any) -> dict:
    """One completion choice (`choices[0]`) for `prompt`; ModelError when the answer has none. `kw`: `max_tokens`
    (required), `echo`, `logprobs` (1; None for none), `temperature` (0), `stop`, `seed`, `top_p`, `top_k`."""
    return _post(client, model, prompt, retries, **kw)[0]


def completions(client: Client, model: str, prompts: Sequence[str], **kw: Any) -> list[dict]:
    """One choice per prompt, in order (`completion`'s `kw`). A client whose server takes a list of prompts
    (`Client.lists`, found by `accepts_lists`) sends up to `Client.batch` prompts per request; otherwise one request
    per prompt. Requests go `Client.concurrency` at a time."""
    items = list(prompts)
    if not client.lists or len(items) < 2:
        return client.map(lambda p: completion(client, model, p, **kw), items)
    chunks = [items[i : i + client.batch] for i in range(0, len(items), client.batch)]
    parts = client.map(
        lambda chunk: _post(client, model, chunk, None, **kw) if len(chunk) > 1 else [completion(client, model, chunk[0], **kw)],
        chunks,
    )
    return [choice for part in parts for choice in part]


def accepts_lists(client: Client, model: str) -> bool:
    """Whether the server answers a list of prompts with one choice per prompt (vLLM and llama.cpp's own server
    do; llama-cpp-python's answers 500): one small request, not retried; any failure means no."""
    try:
        return len(_post(client, model, ["Hello", "One, two"], 0, max_tokens=1, logprobs=None)) == 2
    except ModelError:
        return False


def _post(
    client: Client,
    model: str,
    prompt: str | list[str],
    retries: int | None,
    *,
    max_tokens: int,
    echo: bool = False,
    logprobs: int | None = 1,
    temperature: float = 0.0,
    stop: Sequence[str] = (),
    seed: int | None = None,
    top_p: float = 1.0,
    top_k: int = 0,
) -> list[dict]:
    """The choices of one completions request, one per prompt in order (by `index` for a list; ModelError in one
    line when a choice is missing, doubled or not an object)."""
    payload: dict[str, Any] = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "echo": echo,
    }
    if logprobs is not None:
        payload["logprobs"] = logprobs
    if stop:
        payload["stop"] = list(stop)
    if seed is not None:
        payload["seed"] = seed
    if top_p < 1.0:
        payload["top_p"] = top_p
    if top_k:
        payload["top_k"] = top_k
    out = client.post("/completions", payload, retries)
    choices = out.get("choices")
    if not isinstance(choices, list) or not choices or not all(isinstance(c, dict) for c in choices):
        raise ModelError(
            f"server {client.where} answered /completions without choices; is it an OpenAI-compatible completions server?"
        )
    if isinstance(prompt, str):
        return choices[:1]
    indices = [c.get("index") for c in choices]
    if sorted(i for i in indices if type(i) is int) != list(range(len(prompt))):
        raise ModelError(
            f"server {client.where} answered {len(prompt)} prompts with the choice indices {indices[:20]}, not 0 to "
            f"{len(prompt) - 1} once each: the answer is not whole"
        )
    return sorted(choices, key=lambda c: c["index"])


def logprob_completion(client: Client, model: str, prompt: str, **kw: Any) -> tuple[dict, dict]:
    """`completion` with log-probs (`logprobs` 1 unless given): (choice, its `logprobs`); the one line of
    `_logprobs_of` when the server gives none, also when it refuses them with an error (llama.cpp without logits_all)."""
    kw.setdefault("logprobs", 1)
    try:
        choice = completion(client, model, prompt, **kw)
    except ServedRequestError as err:
        if "logprob" not in str(err).lower():
            raise
        choice = {}
    return choice, _logprobs_of(client, choice)


def _logprobs_of(client: Client, choice: dict) -> dict:
    lp = choice.get("logprobs")
    if not isinstance(lp, dict) or not isinstance(lp.get("token_logprobs"), list):
        raise ModelError(
            f"server {client.where} gives no log-probs with its completions (asked for logprobs=1); "
            "use a server that does (vLLM; llama.cpp's server with --logits_all true)"
        )
    return lp
