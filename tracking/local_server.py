"""Serve the embedded MLflow store on loopback for the duration of a local pipeline run.

`factprobe pipeline run` executes every step in its own process (KFP SubprocessRunner).
Importing `mlflow` costs ~1.5 s of CPU per process, more than the whole per-step overhead budget.
So the run starts one MLflow tracking server on 127.0.0.1 (MLflow's own Flask app, serving the
same sqlite file and the same local artifact folder), and the steps log to it over REST with
`factprobe_ops.tracking.rest_client` (no `mlflow` import). Nothing changes on disk: the runs land in the
sqlite store and its artifact folder exactly as when a process opens the store directly.

    with LocalTrackingServer("sqlite:////project/mlruns.db") as url:   # "http://127.0.0.1:<port>"
        ...

Access: the server listens on 127.0.0.1 only, and answers only requests that carry its per-run
random token as `Authorization: Bearer <token>` (401 otherwise), so another local process or
user cannot read or write the store through it. The token reaches the server process through
its environment (never its command line, which `ps` shows to every user). While the server is
up, `LocalTrackingServer` puts it in this process's environment as `MLFLOW_TRACKING_TOKEN`
(and hides MLFLOW_TRACKING_USERNAME / _PASSWORD, which would take precedence), so the pipeline
steps it spawns, `factprobe_ops.tracking.rest_client` and `mlflow.MlflowClient` all send it; the previous
values come back when the server stops.

Run as a module it is the server process: `python -m factprobe_ops.tracking.local_server STORE_URI ARTIFACT_ROOT`
(token in env `FACTPROBE_LOCAL_SERVER_TOKEN`) prints `READY <port>` once it accepts connections
and exits when its parent process does. It runs in a process group of its own, so a Ctrl-C at
the terminal reaches only the parent, which stops it last (`__exit__`).
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import unquote

from factprobe.redact import redact

from .clients import TrackingError, sqlite_store_lock

START_TIMEOUT_S = 120.0
TOKEN_ENV = "FACTPROBE_LOCAL_SERVER_TOKEN"  # server process: the token it accepts
CLIENT_TOKEN_ENV = "MLFLOW_TRACKING_TOKEN"  # clients: sent as `Authorization: Bearer`
_HIDDEN_WHILE_SERVING = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")


class LocalServerError(TrackingError):
    """The loopback tracking server did not start."""


def default_artifact_root(store_uri: str) -> str:
    """The artifact folder of an embedded store: `mlruns/` beside the sqlite file, which is where
    `MlflowClient(store_uri)` puts artifacts when run from the store's folder (the default layout)."""
    return str(Path(absolute_store(store_uri)[len("sqlite:///") :]).parent / "mlruns")


def absolute_store(store_uri: str) -> str:
    """`sqlite:///rel/x.db` -> `sqlite:////<cwd>/rel/x.db` (the server process runs elsewhere)."""
    return f"sqlite:///{Path(unquote(store_uri[len('sqlite:///') :])).resolve()}"


def is_local_store(uri: str) -> bool:
    """True for stores a local run serves itself (sqlite files); False for servers and 'none'."""
    return uri.lower().startswith("sqlite:///")


class LocalTrackingServer:
    """Context manager: start the server process, yield its URL, stop it on exit.

    Raises LocalServerError (one line, with the server's last error line) when it does not come up
    within START_TIMEOUT_S seconds."""

    def __init__(self, store_uri: str, artifact_root: str | None = None) -> None:
        self.store_uri = absolute_store(store_uri)
        self.artifact_root = artifact_root or default_artifact_root(store_uri)
        self.url = ""
        self.token = secrets.token_urlsafe(32)
        self._proc: subprocess.Popen | None = None
        self._saved_env: dict[str, str | None] | None = None

    def __enter__(self) -> str:
        if self._proc is None:
            self.start()
        return self.wait()

    def start(self) -> LocalTrackingServer:
        """Spawn the server process and return at once (it starts while the caller works on)."""
        try:
            Path(self.artifact_root).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise LocalServerError(
                f"the local MLflow server for {self.store_uri} did not start: cannot create "
                f"its artifact folder {self.artifact_root}: {e.strerror}"
            ) from None
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "factprobe_ops.tracking.local_server", self.store_uri, self.artifact_root],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=str(Path(__file__).resolve().parent.parent),
            env={**os.environ, TOKEN_ENV: self.token},
            # its own process group: a Ctrl-C at the terminal must not stop it before the steps of a
            # stopped run have marked their runs KILLED through it (pipelines/local_steps.py)
            start_new_session=True,
        )
        return self

    def wait(self) -> str:
        """Block until the server accepts connections; returns its URL. From then on until
        the server stops, this process (and what it spawns) sends the server's token."""
        if self.url:
            return self.url
        ready: list[str] = []
        reader = threading.Thread(target=lambda: ready.append(self._proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(START_TIMEOUT_S)
        line = ready[0].strip() if ready else ""
        if not line.startswith("READY "):
            self._stop()
            err = self._proc.stderr.read().strip().splitlines() if self._proc.poll() is not None else []
            last = next((e for e in reversed(err) if e.strip()), "no output")
            raise LocalServerError(f"the local MLflow server for {self.store_uri} did not start: {redact(last)[:300]}")
        self.url = f"http://127.0.0.1:{int(line.split()[1])}"
        # Drain both pipes so a chatty server never blocks on a full pipe.
        for pipe in (self._proc.stdout, self._proc.stderr):
            threading.Thread(target=pipe.read, daemon=True).start()
        self._export_token()
        return self.url

    def _export_token(self) -> None:
        if self._saved_env is None:
            keys = (CLIENT_TOKEN_ENV, *_HIDDEN_WHILE_SERVING)
            self._saved_env = {k: os.environ.get(k) for k in keys}
            for k in _HIDDEN_WHILE_SERVING:
                os.environ.pop(k, None)
            os.environ[CLIENT_TOKEN_ENV] = self.token

    def _restore_env(self) -> None:
        if self._saved_env is not None:
            for k, v in self._saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            self._saved_env = None

    def _stop(self) -> None:
        self._restore_env()
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def __exit__(self, *exc) -> bool:
        self._stop()
        return False


def _exit_with_parent() -> None:
    parent = os.getppid()
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(0)


def require_token(app, token: str):
    """WSGI middleware: pass requests whose `Authorization` header is `Bearer <token>` to `app`,
    answer every other request 401 with an MLflow-style JSON error."""
    expected = f"Bearer {token}".encode()
    body = json.dumps(
        {"error_code": "UNAUTHENTICATED", "message": "this local MLflow server needs its run token (MLFLOW_TRACKING_TOKEN)"}
    ).encode()

    def guarded(environ, start_response):
        given = environ.get("HTTP_AUTHORIZATION", "").encode("latin-1", "replace")
        if hmac.compare_digest(given, expected):
            return app(environ, start_response)
        start_response(
            "401 UNAUTHORIZED",
            [("Content-Type", "application/json"), ("Content-Length", str(len(body))), ("WWW-Authenticate", "Bearer")],
        )
        return [body]

    return guarded


def serve(store_uri: str, artifact_root: str) -> None:
    """Serve MLflow's tracking app for `store_uri` on an ephemeral loopback port (blocks); only
    requests with the token of env FACTPROBE_LOCAL_SERVER_TOKEN are answered."""
    token = os.environ.pop(TOKEN_ENV, "")
    if not token:
        raise SystemExit(f"{TOKEN_ENV} is not set: the local server refuses to run without a token")
    os.environ["_MLFLOW_SERVER_FILE_STORE"] = store_uri
    os.environ["_MLFLOW_SERVER_REGISTRY_STORE"] = store_uri  # else MLflow opens ./mlflow.db for the registry
    os.environ["_MLFLOW_SERVER_ARTIFACT_ROOT"] = artifact_root
    os.environ["_MLFLOW_SERVER_SERVE_ARTIFACTS"] = "false"
    import logging

    from mlflow.server import app, handlers
    from werkzeug.serving import WSGIRequestHandler, make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    with sqlite_store_lock(store_uri):  # another process may be creating the same fresh store
        handlers._get_tracking_store()  # open (and migrate) the store before saying READY
    server = make_server("127.0.0.1", 0, require_token(app, token), threaded=True, request_handler=WSGIRequestHandler)
    threading.Thread(target=_exit_with_parent, daemon=True).start()
    print(f"READY {server.server_port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python -m factprobe_ops.tracking.local_server STORE_URI ARTIFACT_ROOT")
    serve(sys.argv[1], sys.argv[2])
