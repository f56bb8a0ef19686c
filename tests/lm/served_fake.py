"""A scripted OpenAI-compatible completions server on loopback, for the served-model tests (not a test module).

`FakeServer` speaks the completions API the way a real one does: words are tokens (`\\s*\\S+`), a token's
log-prob is a fixed function of its text (`lp_of`), `echo` returns the prompt's tokens with `text_offset`s and
a null first log-prob, a list `prompt` gets one choice per prompt (`index`), and HTTP/1.1 keeps connections
alive. Attributes steer it, as a real server may misbehave:

- `misaligned` (echo log-probs scored with the distribution after each token, as llama.cpp's server does for
  models without BOS), `html`, `no_logprobs`, `fail_first`/`fail_status`/`retry_after`, `die_after`, `delay`,
  `meta` (llama.cpp's model list `meta`), `accepts_lists` (False: a list of more than one prompt is a 500, as
  llama-cpp-python's server answers);
- `drift`: added to every log-prob (another quantization behind the same name; the greedy text stays);
- `poison`: the value sent as the log-prob of the last prompt token of an echo, or of the first generated
  token otherwise (`float("nan")`, `float("inf")`, None, ...), for the prompts `poison_when` accepts (all if None);
- `drop_last_echo`: the echo leaves out the prompt's last token;
- `trickle`: seconds between the bytes of every answer (for at most `trickle_for` seconds, then it hangs up);
- `redirect`: `(status, location)` answered to the first request of each path not under `/moved`;
- `require_basic`: `user:password` that basic auth must carry (else 401);
- `idle_timeout`: seconds a kept-alive connection may idle before the server closes it.

Every request is logged in `requests` as `(method, path, Authorization header, client port)`. Test modules make
their `fake` and `tok` fixtures from `serve` and `tiny_tokenizer`.
"""

from __future__ import annotations

import base64
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN = re.compile(r"\s*\S+")


def lp_of(token: str) -> float:
    """The scripted model's log-prob of a token: a fixed function of its text."""
    return -round(1 + (sum(map(ord, token.strip())) % 13) / 4, 3)


class FakeServer:
    """A scripted completions server; attributes steer it (see the module docstring)."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.answer = " Paris"
        self.misaligned = False
        self.html = False
        self.no_logprobs = False
        self.fail_first = 0  # answer this many requests with `fail_status` first
        self.fail_status = 429
        self.retry_after: str | None = None
        self.die_after: int | None = None  # answer 503 to every completion after this many
        self.delay = 0.0
        self.meta: dict | None = None  # llama.cpp's `meta` of the model list entry
        self.accepts_lists = True
        self.drift = 0.0
        self.poison: object = "unset"
        self.poison_when: Callable[[str], bool] | None = None
        self.drop_last_echo = False
        self.trickle = 0.0
        self.trickle_for = 8.0
        self.redirect: tuple[int, str] | None = None
        self.require_basic: str | None = None
        self.idle_timeout: float | None = None  # seconds a kept-alive connection may idle before the server closes it
        self.completions = 0
        self.prompts = 0  # prompts answered (a list request counts each)
        self.in_flight = 0
        self.max_in_flight = 0
        self.auth: list[str | None] = []
        self.requests: list[tuple[str, str, str | None, int]] = []
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def spec(self, model: str | None = None) -> str:
        return f"openai:{model or self.model}@{self.url}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def choice(self, body: dict, prompt: str, index: int) -> dict:
        echo = body.get("echo", False)
        toks = [m.group(0) for m in TOKEN.finditer(prompt)] if echo else []
        gen_toks, cut = [], False
        answer = " then" if echo and body["max_tokens"] == 1 else self.answer  # a prompt's next token is not its last
        for m in TOKEN.finditer(answer):  # stop strings end the text before them (OpenAI semantics)
            if len(gen_toks) == body["max_tokens"]:
                break
            hit = [s for s in body.get("stop") or [] if s in "".join(gen_toks) + m.group(0)]
            if hit:
                text = "".join(gen_toks) + m.group(0)
                rest = text[: min(text.index(s) for s in hit)][len("".join(gen_toks)) :]
                gen_toks += [rest] if rest else []
                cut = True
                break
            gen_toks.append(m.group(0))
        all_toks = toks + gen_toks
        values: list = [round(lp_of(t) + self.drift, 6) for t in all_toks]
        if self.misaligned and echo:  # each prompt token scored with the distribution after it
            values = values[1:] + [lp_of(" next")]  # (the last one: a token after the generated one)
        offsets, pos = [], 0
        for t in all_toks:
            offsets.append(pos)
            pos += len(t)
        if echo and values:
            values[0] = None
        if self.poison != "unset" and (self.poison_when is None or self.poison_when(prompt)):
            at = len(toks) - 1 if echo else 0
            if 0 <= at < len(values):
                values[at] = self.poison
        if self.drop_last_echo and echo and toks:
            k = len(toks) - 1
            del all_toks[k], values[k], offsets[k]
        choice = {
            "index": index,
            "text": (prompt if echo else "") + "".join(gen_toks),
            "finish_reason": "length" if not cut and len(gen_toks) == body["max_tokens"] else "stop",
        }
        if body.get("logprobs") is not None and not self.no_logprobs:
            choice["logprobs"] = {
                "tokens": all_toks,
                "token_logprobs": values,
                "text_offset": offsets,
                "top_logprobs": [None] * len(all_toks),
            }
        return choice

    def complete(self, body: dict) -> dict:
        prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
        with self.lock:
            self.prompts += len(prompts)
        choices = [self.choice(body, p, i) for i, p in enumerate(prompts)]
        return {"object": "text_completion", "model": self.model, "choices": choices}

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real servers

            def log_message(self, *a):  # quiet
                pass

            def setup(self):
                self.timeout = fake.idle_timeout
                super().setup()

            def _send(self, status: int, obj, ctype="application/json", headers=()):
                data = obj.encode() if isinstance(obj, str) else json.dumps(obj).encode()
                if fake.trickle:
                    return self._trickle(status, data, ctype)
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _trickle(self, status: int, data: bytes, ctype: str) -> None:
                head = f"HTTP/1.1 {status} OK\r\nContent-Type: {ctype}\r\nContent-Length: {len(data)}\r\n\r\n"
                end = time.monotonic() + fake.trickle_for
                self.close_connection = True
                try:
                    for b in head.encode() + data:
                        if time.monotonic() > end:
                            return
                        self.wfile.write(bytes([b]))
                        self.wfile.flush()
                        time.sleep(fake.trickle)
                except OSError:
                    return

            def _log(self) -> bool:
                """Log the request; answer a redirect or a 401 when told to (True: answered)."""
                auth = self.headers.get("Authorization")
                fake.auth.append(auth)
                fake.requests.append((self.command, self.path, auth, self.client_address[1]))
                if fake.redirect and not self.path.startswith("/moved"):
                    status, location = fake.redirect
                    self.send_response(status)
                    self.send_header("Location", location)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return True
                if fake.require_basic is not None:
                    want = "Basic " + base64.b64encode(fake.require_basic.encode()).decode()
                    if auth != want:
                        self._send(401, {"error": {"message": "basic auth required"}})
                        return True
                return False

            def do_GET(self):
                if self._log():
                    return
                if fake.html:
                    return self._send(200, "<html><body>Sign in</body></html>", "text/html")
                entry = {"id": fake.model, "object": "model", "created": time.time()}  # stamped per request
                self._send(200, {"object": "list", "data": [{**entry, **({"meta": fake.meta} if fake.meta else {})}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self._log():
                    return
                with fake.lock:
                    fake.completions += 1
                    n = fake.completions
                    fake.in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                try:
                    time.sleep(fake.delay)
                finally:
                    # out of flight BEFORE the answer goes: a client that sends its next request as soon as it
                    # has read this answer must not be counted twice (a race that counted 4 of 3 under load)
                    with fake.lock:
                        fake.in_flight -= 1
                if n <= fake.fail_first:
                    hdr = [("Retry-After", fake.retry_after)] if fake.retry_after else []
                    return self._send(fake.fail_status, {"error": {"message": "busy"}}, headers=hdr)
                if fake.die_after is not None and n > fake.die_after:
                    return self._send(503, {"error": {"message": "gone"}})
                if fake.html:
                    return self._send(200, "<!DOCTYPE html><html>login</html>", "text/html")
                if isinstance(body.get("prompt"), list) and len(body["prompt"]) > 1 and not fake.accepts_lists:
                    return self._send(500, {"error": {"message": "AssertionError"}})
                self._send(200, fake.complete(body))

        return Handler


def tiny_tokenizer(tiny_model_path):
    """The tokenizer of the tiny random llama the fake server serves (only prompt lengths are read from it)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_path("llama"))


def serve(tiny_model_path) -> Iterator[FakeServer]:
    """A `FakeServer` of the tiny random llama, closed afterwards (the body of each test module's `fake` fixture)."""
    server = FakeServer(str(tiny_model_path("llama")))
    try:
        yield server
    finally:
        server.close()


def free_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"
