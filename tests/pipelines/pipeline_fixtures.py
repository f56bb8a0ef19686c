"""Shared fixtures of the pipeline tests: compiled pipeline YAML and a loopback KFP REST API.

Test modules import what they use (`from tests.pipelines.pipeline_fixtures import compiled, kfp_api`).

- `compiled`: every pipeline compiled by `factprobe_ops.pipelines.remote.compile_all` in a *fresh* Python with no
  `FACTPROBE_*` variables, so images, retries and scheduling are the defaults a cluster gets
  (the cluster settings are read when a pipeline is built, `factprobe_ops.pipelines.platform.building`).
  {name: CompiledPipeline}.
  The default compile names no pipeline, like `factprobe pipeline compile`: it writes them all.
- `compiled_overridden`: the probe pipeline compiled with every `FACTPROBE_*` knob set (images,
  GPU label/toleration/count, secret names, S3 endpoint); `compiled_overridden_all` holds every
  pipeline of `OVERRIDDEN` compiled so. `start_compile_jobs()` starts both compiles in the
  background (idempotent). Local builds (no retries) are
  `get_pipeline(name, local=True)`, not an environment variable.
- `kfp_api`: `FakeKfpApi`, a loopback HTTP server speaking enough of KFP's v2beta1 REST API for
  `kfp.Client(host=...)` to submit runs and recurring runs; it records every request.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


#: compiled with every FACTPROBE_* knob set: one pipeline per way of placing GPU steps
OVERRIDDEN = ("probe", "counterfactual_icl", "coherency")

# Everything pipelines/platform.py and components/config.py read; the overridden compile sets all
# (test_compiled_specs.test_environment_overrides_reach_the_compiled_spec checks each one).
OVERRIDES = {
    "FACTPROBE_IMAGE_CPU": "registry.example.com/team/fp-cpu:test-1",
    "FACTPROBE_IMAGE_GPU": "registry.example.com/team/fp-gpu:test-1",
    "FACTPROBE_GPU_NODE_LABEL": "cloud.google.com/gke-accelerator=nvidia-l4",
    "FACTPROBE_GPU_TOLERATION": "gpu-team=reserved:NoExecute",
    "FACTPROBE_GPU_ACCELERATOR": "nvidia.com/mig-1g.10gb",
    "FACTPROBE_GPU_COUNT": "2",
    "FACTPROBE_MLFLOW_SECRET": "team-mlflow",
    "FACTPROBE_S3_SECRET": "team-s3",
    "FACTPROBE_S3_ENDPOINT": "http://minio.factprobe.svc.cluster.local:9000",
    "FACTPROBE_SERVED_KEY_SECRET": "team-vllm",
}


def clean_env(**extra: str) -> dict[str, str]:
    """os.environ without any FACTPROBE_* variable (plus `extra`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FACTPROBE_")}
    env.update(extra)
    return env


@dataclass
class CompiledPipeline:
    """One compiled pipeline file: the raw text, the pipeline spec and the Kubernetes platform spec."""

    name: str
    path: Path
    text: str
    spec: dict
    platform: dict  # platforms.kubernetes, {} when the file has no platform document

    @property
    def k8s_executors(self) -> dict:
        return self.platform.get("deploymentSpec", {}).get("executors", {})

    @property
    def executors(self) -> dict:
        return self.spec["deploymentSpec"]["executors"]

    def executor_of(self, component: str) -> str:
        """`probe-model` -> `exec-probe-model` (via the component's executorLabel)."""
        return self.spec["components"][f"comp-{component}"]["executorLabel"]

    def step_names(self) -> set[str]:
        """Container components of this pipeline (`probe-model`, `report`, ...), not DAGs."""
        return {k[len("comp-") :] for k, c in self.spec["components"].items() if "executorLabel" in c}

    def tasks(self) -> dict[str, tuple[str, dict]]:
        """Every task in every DAG: {task name: (owning DAG, task spec)}; the root DAG is 'root'."""
        out = {}
        dags = {"root": self.spec["root"]}
        dags.update({k: c for k, c in self.spec["components"].items() if "dag" in c})
        for owner, comp in dags.items():
            for tname, task in comp["dag"].get("tasks", {}).items():
                assert tname not in out, f"task name {tname} is not unique in {self.name}"
                out[tname] = (owner, task)
        return out


def split_documents(text: str) -> tuple[dict, dict]:
    """The pipeline spec and the platform spec of a compiled file.

    KFP writes a `# PIPELINE DEFINITION` comment header first. kfp 2.17 copies string defaults
    into that header verbatim, so a default with a newline breaks the header (see
    test_compiled_specs.test_compiled_file_loads_like_the_kfp_client). The spec proper starts at
    the first top-level key, `components:`; parse from there so that the structural tests still
    say something useful when the header is broken.
    """
    start = text.find("\ncomponents:\n")
    assert start >= 0, "compiled pipeline has no top-level `components:` key"
    docs = [d for d in yaml.safe_load_all(text[start + 1 :]) if d is not None]
    assert 1 <= len(docs) <= 2, f"expected a pipeline spec and at most one platform spec, got {len(docs)} documents"
    platform = docs[1]["platforms"]["kubernetes"] if len(docs) == 2 else {}
    return docs[0], platform


def load_compiled(path: Path) -> CompiledPipeline:
    text = path.read_text()
    spec, platform = split_documents(text)
    return CompiledPipeline(path.stem, path, text, spec, platform)


_COMPILE = "import sys; from factprobe_ops.pipelines.remote import compile_all; compile_all(sys.argv[1], sys.argv[2:])"


class _CompileJob:
    def __init__(self, out: Path, names: tuple[str, ...], env: dict[str, str]):
        self.out = out
        self.names = names
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _COMPILE, str(out), *names],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def result(self) -> dict[str, CompiledPipeline]:
        """{name: compiled pipeline} of every file written (no names given: every pipeline)."""
        log, _ = self.proc.communicate(timeout=180)
        if self.proc.returncode != 0:
            pytest.fail(f"compiling {self.names or 'every pipeline'} failed (exit {self.proc.returncode}):\n{log[-4000:]}")
        return {p.stem: load_compiled(p) for p in sorted(self.out.glob("*.yaml"))}


_JOBS: dict[str, _CompileJob] = {}
_JOBS_DIR: list[Path] = []


def start_compile_jobs() -> dict[str, _CompileJob]:
    """Start both compiles once (idempotent); they run while other tests run."""
    if not _JOBS:
        base = Path(tempfile.mkdtemp(prefix="factprobe-compiled-"))
        _JOBS_DIR.append(base)
        _JOBS["default"] = _CompileJob(base / "default", (), clean_env())  # what `factprobe pipeline compile` writes
        _JOBS["overridden"] = _CompileJob(base / "overridden", OVERRIDDEN, clean_env(**OVERRIDES))
    return _JOBS


@atexit.register
def _stop_compile_jobs() -> None:
    for job in _JOBS.values():
        if job.proc.poll() is None:  # started but never waited for (its tests were deselected)
            job.proc.kill()
            job.proc.communicate()
    for base in _JOBS_DIR:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def compiled() -> dict[str, CompiledPipeline]:
    return start_compile_jobs()["default"].result()


@pytest.fixture(scope="session")
def compiled_overridden_all() -> dict[str, CompiledPipeline]:
    return start_compile_jobs()["overridden"].result()


@pytest.fixture(scope="session")
def compiled_overridden(compiled_overridden_all) -> CompiledPipeline:
    return compiled_overridden_all["probe"]


# --- a loopback KFP v2beta1 REST API -------------------------------------------------------------


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    body: dict | None
    status: int = 0
    response: dict | None = None  # what the fake server answered
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class FakeKfpApi:
    """What `kfp.Client` (kfp_server_api) calls, answered like the KFP API server does.

    - GET  /apis/v2beta1/healthz                     -> {"commit_sha", "tag_name": <tag_name>, "multi_user": false}
                                                        (the API server's own handler; its proto has only multi_user)
    - GET  /apis/v2beta1/experiments?filter=...      -> experiments whose display_name matches
    - POST /apis/v2beta1/experiments                 -> the experiment with an experiment_id
    - POST /apis/v2beta1/runs                        -> the run with run_id, state PENDING
    - POST /apis/v2beta1/recurringruns               -> the recurring run with recurring_run_id
    - GET  /apis/v2beta1/runs/<id>                   -> the run, its state the next of `run_states`
                                                        (the last one repeats)
    - any request without `required_headers`         -> 401 (an auth proxy in front of the API)
    Anything else is recorded and answered 404 (a gRPC-gateway style error body).
    """

    experiments: dict[str, dict] = field(default_factory=dict)  # display_name -> experiment
    healthz_status: int = 200  # e.g. 404: a host that answers, but is not the KFP API
    tag_name: str = "2.17.0"  # the backend release healthz reports ("unknown" when the server was built without it)
    requests: list[Request] = field(default_factory=list)
    host: str = ""
    run_states: list[str] = field(default_factory=lambda: ["RUNNING", "SUCCEEDED"])
    required_headers: dict[str, str] = field(default_factory=dict)
    runs: dict[str, dict] = field(default_factory=dict)

    def calls(self, method: str, path: str) -> list[Request]:
        return [r for r in self.requests if r.method == method and r.path == path]

    def only(self, method: str, path: str) -> Request:
        found = self.calls(method, path)
        assert len(found) == 1, f"expected one {method} {path}, got {len(found)}: {[(r.method, r.path) for r in self.requests]}"
        return found[0]

    def answer(self, method: str, path: str, query: dict, body: dict | None) -> tuple[int, dict]:
        if method == "GET" and path == "/apis/v2beta1/healthz":
            if self.healthz_status != 200:
                return self.healthz_status, {"error": "Not Found", "code": 5, "message": "Not Found"}
            return 200, {"commit_sha": "0123abc", "tag_name": self.tag_name, "multi_user": False}
        if method == "GET" and path == "/apis/v2beta1/experiments":
            flt = json.loads(query.get("filter", ["{}"])[0] or "{}")
            names = [p["stringValue"] for p in flt.get("predicates", []) if p.get("key") == "display_name"]
            found = [e for n, e in self.experiments.items() if not names or n in names]
            return 200, ({"experiments": found, "total_size": len(found)} if found else {})
        if method == "POST" and path == "/apis/v2beta1/experiments":
            exp = dict(body, experiment_id=str(uuid.uuid4()), storage_state="AVAILABLE")
            self.experiments[exp["display_name"]] = exp
            return 200, exp
        if method == "POST" and path == "/apis/v2beta1/runs":
            run = dict(body, run_id=str(uuid.uuid4()), state="PENDING")
            self.runs[run["run_id"]] = run
            return 200, run
        if method == "GET" and path.startswith("/apis/v2beta1/runs/") and path.rsplit("/", 1)[1] in self.runs:
            run = self.runs[path.rsplit("/", 1)[1]]
            run["state"] = self.run_states.pop(0) if len(self.run_states) > 1 else self.run_states[0]
            return 200, run
        if method == "POST" and path == "/apis/v2beta1/recurringruns":
            return 200, dict(body, recurring_run_id=str(uuid.uuid4()), status="ENABLED")
        return 404, {"error": f"no route for {method} {path}", "code": 5, "message": "Not Found"}


def _handler(api: FakeKfpApi):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # keep pytest output clean
            pass

        def _serve(self, method: str):
            url = urlsplit(self.path)
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b""
            body = json.loads(raw) if raw else None
            query = parse_qs(url.query)
            headers = {k.title(): v for k, v in self.headers.items()}  # HTTP header names are case-insensitive
            if any(headers.get(k.title()) != v for k, v in api.required_headers.items()):
                code, out = 401, {"error": "Unauthorized", "code": 16, "message": "Unauthorized"}
            else:
                code, out = api.answer(method, url.path, query, body)
            api.requests.append(Request(method, url.path, query, body, code, out, headers))
            data = json.dumps(out).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._serve("GET")

        def do_POST(self):
            self._serve("POST")

        def do_DELETE(self):
            self._serve("DELETE")

    return Handler


@pytest.fixture
def kfp_api(monkeypatch, tmp_path):
    api = FakeKfpApi()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(api))
    api.host = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    # Loopback only: no proxy, no user kube/KFP context, no KFP env overrides.
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    for var in (
        "KF_PIPELINES_ENDPOINT",
        "KF_PIPELINES_UI_ENDPOINT",
        "KF_PIPELINES_DEFAULT_EXPERIMENT_NAME",
        "KF_PIPELINES_OVERRIDE_EXPERIMENT_NAME",
    ):
        monkeypatch.delenv(var, raising=False)
    import kfp

    monkeypatch.setattr(kfp.Client, "_LOCAL_KFP_CONTEXT", str(tmp_path / "kfp-context.json"))
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def run_local_pipeline(name: str, params: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess, object, list]:
    """`factprobe pipeline run NAME --param ...` in a fresh Python in `cwd` (its work folder and
    ./mlruns.db there), asserted to succeed. Returns (the process, the MLflow client, the run's
    MLflow runs) after checking the FINISHED parent and that every child ended FINISHED."""
    from mlflow.tracking import MlflowClient

    env = {**os.environ, "FACTPROBE_WORK": str(cwd / "work")}
    env.pop("MLFLOW_TRACKING_URI", None)
    p = subprocess.run(
        [sys.executable, "-m", "factprobe.cli", "pipeline", "run", name, *params],
        check=False,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    c = MlflowClient(f"sqlite:///{cwd / 'mlruns.db'}")
    runs = c.search_runs([c.get_experiment_by_name(f"factprobe/{name}").experiment_id])
    # the newest parent: a cwd that ran the pipeline before (a second night) holds the earlier ones too
    parent = max((r for r in runs if r.data.tags.get("factprobe.role") == "parent"), key=lambda r: r.info.start_time)
    assert parent.info.status == "FINISHED"
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert children and all(r.info.status == "FINISHED" for r in children)
    return p, c, [parent, *children]
