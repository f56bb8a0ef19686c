"""HTTP/1.1 to one OpenAI-compatible server: kept-alive connections, a whole-request deadline, redirects that never
carry credentials to another origin, and credentials from the URL. `factprobe.lm.served_client.Client` sends through it.

- **Credentials.** `Endpoint.parse(url, key, basic)`: basic-auth `user:password` (from `FACTPROBE_OPENAI_BASIC_AUTH`)
  or else the API key as a bearer token. Either header goes only to the URL's origin (scheme, host, port). A URL
  holding `user:password@` is refused in one line that does not show them (`refuse_credentials`): the URL is part
  of the model's name, and names are recorded.
- **Redirects.** A same-origin 307/308 is followed with the same method and body, a same-origin redirect of a GET
  too (at most `MAX_REDIRECTS`); anything else (another host, port or scheme, or a POST turned into a GET by
  301/302/303) is one `ModelError` line naming the redirect and its `Location` (without credentials or query).
- **Deadline.** `timeout` seconds hold for the whole request: connecting, sending and every byte of the answer
  (each socket read waits at most the time left, so a server that trickles a byte every few seconds is cut off at
  the deadline). A server that sent part of an answer and then missed the deadline is `DeadlineError` (one line
  with what it sent; not retried: it is stalled, not busy); one that sent nothing is `Transient` (retried).
- **Keep-alive.** Idle connections are kept (up to `max_idle`) and reused; one the server closed while idle is
  replaced once, silently.
- **Proxies.** `HTTP_PROXY` / `HTTPS_PROXY` / `NO_PROXY` are honoured as urllib does (an https URL through a CONNECT
  tunnel; a proxy URL's `user:password@` as `Proxy-Authorization`).
"""

from __future__ import annotations

import base64
import http.client
import io
import socket
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from factprobe.errors import ConfigError, ModelError

#: redirects followed within the origin, per request
MAX_REDIRECTS = 5
#: bytes of an answer quoted in a deadline message
HEAD_BYTES = 60
#: the largest answer read (16 echoed prompts of 2048 tokens with their log-probs are a few MiB)
MAX_ANSWER_BYTES = 256 << 20
REDIRECTS = (301, 302, 303, 307, 308)


def public_url(url: str) -> str:
    """`url` without user info, query or fragment (safe to log and record)."""
    p = urllib.parse.urlsplit(url)
    netloc = p.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((p.scheme, netloc, p.path.rstrip("/"), "", ""))


class Transient(Exception):
    """A failure worth retrying (429, 5xx, connection), with the server's Retry-After if it gave one."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


class DeadlineError(ModelError):
    """A server began an answer and did not finish it within the request's deadline (one line, with what it sent)."""


#: the environment variable holding `user:password` for HTTP basic auth (`factprobe.lm.served` reads it)
BASIC_VARIABLE = "FACTPROBE_OPENAI_BASIC_AUTH"


def refuse_credentials(url: str) -> None:
    """ConfigError (one line, without them) when `url` holds `user:password@`: a served model's URL is part of its
    name, which run folders, pipeline parameters and MLflow record; credentials come from the environment."""
    p = urllib.parse.urlsplit(url)
    if p.username is not None or p.password is not None:
        raise ConfigError(
            f"the served model URL {public_url(url)} is written with user:password@, which factprobe does not take "
            f"(the URL is part of the model's name, and names are recorded: run folders, pipeline parameters, "
            f"MLflow): give {BASIC_VARIABLE}=USER:PASSWORD for basic auth, or the API key in FACTPROBE_OPENAI_API_KEY"
        )


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


@dataclass(frozen=True)
class Endpoint:
    """Where requests go: the origin, the API root's path, and the `Authorization` header (never shown)."""

    scheme: str
    host: str
    port: int
    base: str
    authorization: str | None = field(default=None, repr=False)

    @classmethod
    def parse(cls, url: str, key: str | None = None, basic: str | None = None) -> Endpoint:
        """`url` (`http(s)://host[:port]/path`), an API key and basic-auth credentials (`user:password`, sent
        instead of the key) -> Endpoint; ConfigError (one line, never showing a credential) for a URL that names
        no http(s) host, has a bad port or holds credentials (`refuse_credentials`)."""
        p = urllib.parse.urlsplit(url)
        shown = public_url(url)
        refuse_credentials(url)
        if p.scheme not in ("http", "https") or not p.hostname:
            raise ConfigError(f"served model URL {shown!r}: write http(s)://HOST[:PORT]/v1")
        try:
            port = p.port or (443 if p.scheme == "https" else 80)
        except ValueError:
            raise ConfigError(f"served model URL {shown!r}: the port is not a number from 0 to 65535") from None
        auth = f"Bearer {key}" if key else None
        if basic is not None:
            user, colon, password = basic.partition(":")
            if not colon:
                raise ConfigError(f"{BASIC_VARIABLE} must be USER:PASSWORD (it has no ':')")
            auth = _basic(user, password)
        return cls(p.scheme, p.hostname, port, p.path.rstrip("/"), auth)

    @property
    def origin(self) -> tuple[str, str, int]:
        return (self.scheme, self.host, self.port)

    @property
    def where(self) -> str:
        """The API root as messages name it (no credentials)."""
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        netloc = host if self.port == default else f"{host}:{self.port}"
        return f"{self.scheme}://{netloc}{self.base}"


def _origin_of(url: str) -> tuple[str, str | None, int | None] | None:
    p = urllib.parse.urlsplit(url)
    try:
        port = p.port or (443 if p.scheme == "https" else 80)
    except ValueError:
        return None
    if p.username is not None or p.password is not None:
        return None  # credentials of its own: never the same origin
    return (p.scheme, p.hostname, port)


# ------------------------------------------------------------------ reading under a deadline
class _Meter:
    """What the answer of one request has sent so far."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.received = 0
        self.head = b""
        self.passed = False


class _DeadlineReader(io.RawIOBase):
    """The socket's bytes, each read waiting at most until the meter's deadline (over `sock.makefile`'s raw
    reader, which keeps the socket open until the answer is read even when http.client closes the connection)."""

    def __init__(self, sock: socket.socket, meter: _Meter) -> None:
        self.sock, self.meter = sock, meter
        self.raw = sock.makefile("rb", buffering=0)

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        left = self.meter.deadline - time.monotonic()
        if left <= 0:
            self.meter.passed = True
            raise TimeoutError("deadline")
        try:
            self.sock.settimeout(left)
            n = self.raw.readinto(b) or 0
        except TimeoutError:
            self.meter.passed = True
            raise
        if n and len(self.meter.head) < HEAD_BYTES:
            self.meter.head += bytes(memoryview(b)[: min(n, HEAD_BYTES - len(self.meter.head))])
        self.meter.received += n
        return n

    def close(self) -> None:
        self.raw.close()
        super().close()


class _SocketShim:
    """What `http.client.HTTPResponse` reads from: a buffered `_DeadlineReader` instead of `sock.makefile`."""

    def __init__(self, sock: socket.socket, meter: _Meter) -> None:
        self._reader = io.BufferedReader(_DeadlineReader(sock, meter))

    def makefile(self, *args: Any, **kw: Any) -> io.BufferedReader:
        return self._reader


class _Metered:
    meter: _Meter | None = None

    def response_class(self, sock: Any, *args: Any, **kw: Any) -> http.client.HTTPResponse:
        return http.client.HTTPResponse(_SocketShim(sock, self.meter), *args, **kw)


class _HTTP(_Metered, http.client.HTTPConnection):
    pass


class _HTTPS(_Metered, http.client.HTTPSConnection):
    pass


# ------------------------------------------------------------------ the transport
class Transport:
    """Requests to one `Endpoint` over kept-alive connections, under a whole-request deadline (module docstring)."""

    def __init__(self, endpoint: Endpoint, *, timeout: float, max_idle: int = 4) -> None:
        self.endpoint = endpoint
        self.timeout = float(timeout)
        self.max_idle = max(1, int(max_idle))
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self.connections = 0  # opened so far
        self._proxy = self._proxy_for(endpoint)

    # -------------------------------------------------------------- connections
    @staticmethod
    def _proxy_for(ep: Endpoint) -> tuple[str, int, str | None] | None:
        proxy = urllib.request.getproxies().get(ep.scheme)
        if not proxy or urllib.request.proxy_bypass(ep.host):
            return None
        p = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        if not p.hostname:
            return None
        auth = None
        if p.username is not None:
            auth = _basic(urllib.parse.unquote(p.username), urllib.parse.unquote(p.password or ""))
        return p.hostname, p.port or 8080, auth

    def _new(self, left: float) -> http.client.HTTPConnection:
        ep = self.endpoint
        with self._lock:
            self.connections += 1
        if self._proxy is None:
            return (_HTTPS if ep.scheme == "https" else _HTTP)(ep.host, ep.port, timeout=left)
        host, port, auth = self._proxy
        if ep.scheme == "https":
            conn = _HTTPS(host, port, timeout=left)
            conn.set_tunnel(ep.host, ep.port, headers={"Proxy-Authorization": auth} if auth else None)
            return conn
        return _HTTP(host, port, timeout=left)

    def _take(self) -> http.client.HTTPConnection | None:
        with self._lock:
            return self._idle.pop() if self._idle else None

    def _give(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < self.max_idle:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Close the idle connections."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # -------------------------------------------------------------- one request
    def request(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, Any, bytes]:
        """(status, headers, body) of `method` `path` (under the API root), redirects within the origin followed.
        Raises `Transient` (no answer: refused, reset, silent past the deadline), `DeadlineError`, or ModelError
        (a redirect that is not followed)."""
        ep = self.endpoint
        deadline = time.monotonic() + self.timeout
        target = ep.base + path
        hdrs = dict(headers)
        if ep.authorization:
            hdrs["Authorization"] = ep.authorization
        for _ in range(MAX_REDIRECTS + 1):
            status, rheaders, data = self._once(method, target, body, hdrs, deadline, path)
            if status not in REDIRECTS:
                return status, rheaders, data
            target = self._follow(method, path, status, rheaders, target)
        raise ModelError(f"server {ep.where} redirected {method} {path} more than {MAX_REDIRECTS} times within itself")

    def _follow(self, method: str, path: str, status: int, headers: Any, target: str) -> str:
        """The next target of a redirect that may be followed; ModelError (one line) for any other."""
        ep = self.endpoint
        location = (headers.get("Location") if headers else None) or ""
        here = f"{ep.scheme}://{ep.host}:{ep.port}{target}"
        new = urllib.parse.urljoin(here, location.strip())
        shown = public_url(new) if location else "nowhere (no Location header)"
        same = bool(location) and _origin_of(new) == ep.origin
        if same and (status in (307, 308) or method == "GET"):
            p = urllib.parse.urlsplit(new)
            return (p.path or "/") + (f"?{p.query}" if p.query else "")
        why = (
            "another origin (host, port or scheme): factprobe never sends credentials there"
            if location and not same
            else "a redirect that would turn the POST into a GET"
            if location
            else "a redirect without a target"
        )
        raise ModelError(
            f"server {ep.where} answered {method} {path} with a redirect (HTTP {status}) to {shown}, {why}; "
            "factprobe follows only same-origin 307/308 redirects (and same-origin ones of a GET): give the URL "
            "the API answers at"
        )

    def _once(
        self, method: str, target: str, body: bytes | None, headers: dict, deadline: float, path: str
    ) -> tuple[int, Any, bytes]:
        ep = self.endpoint
        if self._proxy is not None and ep.scheme == "http":  # absolute form to a plain proxy
            target = f"http://{ep.host}:{ep.port}{target}"
            if self._proxy[2]:
                headers = {**headers, "Proxy-Authorization": self._proxy[2]}
        conn = self._take()
        for fresh in (conn is None, True):
            left = deadline - time.monotonic()
            if left <= 0:
                raise Transient(f"TimeoutError: no answer within the deadline of {self.timeout:g} s")
            if fresh:
                conn = self._new(left)
            meter = _Meter(deadline)
            conn.meter = meter
            try:
                if conn.sock is not None:
                    conn.sock.settimeout(left)
                conn.request(method, target, body=body, headers=headers)
                resp = conn.getresponse()
                data = self._read(resp, method, path)
            except (http.client.HTTPException, OSError) as err:
                conn.close()
                if meter.passed or deadline - time.monotonic() <= 0:
                    self._deadline(method, path, meter)
                if not fresh and meter.received == 0:
                    continue  # a kept-alive connection the server closed while idle: once more, on a new one
                reason = getattr(err, "reason", None) or err
                raise Transient(f"{type(err).__name__}: {reason}".strip()) from None
            if resp.will_close:
                conn.close()
            else:
                self._give(conn)
            return resp.status, resp.headers, data
        raise AssertionError("unreachable")

    def _read(self, resp: http.client.HTTPResponse, method: str, path: str) -> bytes:
        """The answer's body, at most `MAX_ANSWER_BYTES` (ModelError past that: a server that does not stop)."""
        parts, size = [], 0
        while chunk := resp.read(1 << 20):
            parts.append(chunk)
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                raise ModelError(
                    f"server {self.endpoint.where} answered {method} {path} with more than {MAX_ANSWER_BYTES} bytes; "
                    "an answer of factprobe's requests is far smaller: is the URL the OpenAI-compatible API root?"
                )
        return b"".join(parts)

    def _deadline(self, method: str, path: str, meter: _Meter) -> None:
        if meter.received == 0:
            raise Transient(f"TimeoutError: no answer within the deadline of {self.timeout:g} s")
        raise DeadlineError(
            f"server {self.endpoint.where} did not finish its answer to {method} {path} within the deadline of "
            f"{self.timeout:g} s: it sent {meter.received} bytes ({meter.head!r}...), a stalled or trickling server; "
            "the finished batches are checkpointed: fix the server and rerun the same command to resume"
        )
