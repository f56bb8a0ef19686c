"""Serve the embedded MLflow store on loopback for the duration of a local pipeline run.

`factprobe pipeline run` executes every step in its own process (KFP SubprocessRunner).
Importing `mlflow` costs ~1.5 s of CPU per process, more than the whole per-step overhead budget.
So the run starts one MLflow tracking server on 127.0.0.1 (MLflow's own Flask app, serving the
same sqlite file and the same local artifact folder), and the steps log to it over REST with
`tracking.rest_client` (no `mlflow` import). Nothing changes on disk: the runs land in the
sqlite store and its artifact folder exactly as when a process opens the store directly.

    with LocalTrackingServer("sqlite:////project/mlruns.db") as url:   # "http://127.0.0.1:<port>"
        ...

Run as a module it is the server process: `python -m tracking.local_server STORE_URI ARTIFACT_ROOT`
prints `READY <port>` once it accepts connections and exits when its parent process does.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import unquote

from .run import TrackingError

START_TIMEOUT_S = 120.0


class LocalServerError(TrackingError):
    """The loopback tracking server did not start."""


def default_artifact_root(store_uri: str) -> str:
    """The artifact folder of an embedded store: `mlruns/` beside the sqlite file, which is where
    `MlflowClient(store_uri)` puts artifacts when run from the store's folder (the default layout)."""
    return str(Path(absolute_store(store_uri)[len("sqlite:///"):]).parent / "mlruns")


def absolute_store(store_uri: str) -> str:
    """`sqlite:///rel/x.db` -> `sqlite:////<cwd>/rel/x.db` (the server process runs elsewhere)."""
    return f"sqlite:///{Path(unquote(store_uri[len('sqlite:///'):])).resolve()}"


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
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> str:
        if self._proc is None:
            self.start()
        return self.wait()

    def start(self) -> "LocalTrackingServer":
        """Spawn the server process and return at once (it starts while the caller works on)."""
        try:
            Path(self.artifact_root).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise LocalServerError(f"the local MLflow server for {self.store_uri} did not start: cannot create "
                                   f"its artifact folder {self.artifact_root}: {e.strerror}") from None
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tracking.local_server", self.store_uri, self.artifact_root],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd=str(Path(__file__).resolve().parent.parent),
        )
        return self

    def wait(self) -> str:
        """Block until the server accepts connections; returns its URL."""
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
            raise LocalServerError(f"the local MLflow server for {self.store_uri} did not start: {last[:300]}")
        self.url = f"http://127.0.0.1:{int(line.split()[1])}"
        # Drain both pipes so a chatty server never blocks on a full pipe.
        for pipe in (self._proc.stdout, self._proc.stderr):
            threading.Thread(target=pipe.read, daemon=True).start()
        return self.url

    def _stop(self) -> None:
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


def serve(store_uri: str, artifact_root: str) -> None:
    """Serve MLflow's tracking app for `store_uri` on an ephemeral loopback port (blocks)."""
    os.environ["_MLFLOW_SERVER_FILE_STORE"] = store_uri
    os.environ["_MLFLOW_SERVER_REGISTRY_STORE"] = store_uri  # else MLflow opens ./mlflow.db for the registry
    os.environ["_MLFLOW_SERVER_ARTIFACT_ROOT"] = artifact_root
    os.environ["_MLFLOW_SERVER_SERVE_ARTIFACTS"] = "false"
    import logging

    from mlflow.server import app, handlers
    from werkzeug.serving import WSGIRequestHandler, make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    handlers._get_tracking_store()  # open (and migrate) the store before saying READY
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=WSGIRequestHandler)
    threading.Thread(target=_exit_with_parent, daemon=True).start()
    print(f"READY {server.server_port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python -m tracking.local_server STORE_URI ARTIFACT_ROOT")
    serve(sys.argv[1], sys.argv[2])
