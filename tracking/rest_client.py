"""`TrackingClient` over MLflow's REST API (`/api/2.0/mlflow/...`) with `requests` only.

Pipeline steps log to a tracking server with this client, so a step process never imports
`mlflow`. Kept after measuring `mlflow-skinny` for a step's start-up cost
(benchmarks/bench_tracking_startup.py, benchmarks/README.md): skinny costs about 3 s more per step
(4x), far above the 0.5 s that would have made this client unnecessary. It honours MLflow's client
environment: MLFLOW_TRACKING_USERNAME /
MLFLOW_TRACKING_PASSWORD (basic auth), MLFLOW_TRACKING_TOKEN (bearer), MLFLOW_TRACKING_INSECURE_TLS,
MLFLOW_TRACKING_SERVER_CERT_PATH, MLFLOW_TRACKING_CLIENT_CERT_PATH, MLFLOW_HTTP_REQUEST_TIMEOUT,
MLFLOW_HTTP_REQUEST_MAX_RETRIES and MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR (fail-fast defaults when
unset: `factprobe_ops.tracking.clients.http_settings`). Error messages never show credentials.

Artifacts go where the run's artifact URI says: `mlflow-artifacts:` (the server proxies them, e.g.
to S3) by HTTP PUT, a local path or `file:` URI by an atomic copy, `s3://` with boto3 (endpoint
MLFLOW_S3_ENDPOINT_URL or AWS_ENDPOINT_URL). Any other store falls back to the MLflow library.
"""

from __future__ import annotations

import mimetypes
import os
import shutil
import time
from pathlib import Path
from urllib.parse import quote, unquote, urlparse

from factprobe.redact import redact

from .clients import (
    MAX_METRICS_PER_BATCH,
    MAX_PARAMS_PER_BATCH,
    MAX_TAGS_PER_BATCH,
    RunRef,
    TrackingError,
    batches,
    http_settings,
)

API = "/api/2.0/mlflow"
ARTIFACTS_API = "/api/2.0/mlflow-artifacts/artifacts"


class RestError(TrackingError):
    """The server answered with an error: HTTP status plus MLflow's error code and message."""

    def __init__(self, what: str, status: int, error_code: str, message: str) -> None:
        self.status, self.error_code = status, error_code
        reason = "Unauthorized" if status == 401 else "Forbidden" if status == 403 else error_code
        super().__init__(f"{what}: HTTP {status} {reason}: {message}".strip().rstrip(":"))


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


def _session():
    import requests
    from requests.adapters import HTTPAdapter
    from urllib3.util.retry import Retry

    settings = http_settings()
    retry = Retry(
        total=int(settings["MLFLOW_HTTP_REQUEST_MAX_RETRIES"]),
        backoff_factor=float(settings["MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"]),
        status_forcelist=(429, 500, 502, 503, 504),
        allowed_methods=None,
        raise_on_status=False,
    )
    s = requests.Session()
    adapter = HTTPAdapter(max_retries=retry)
    s.mount("http://", adapter)
    s.mount("https://", adapter)
    user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if user and password:
        s.auth = (user, password)
    elif os.environ.get("MLFLOW_TRACKING_TOKEN"):
        s.headers["Authorization"] = f"Bearer {os.environ['MLFLOW_TRACKING_TOKEN']}"
    if _env_flag("MLFLOW_TRACKING_INSECURE_TLS"):
        s.verify = False
    elif os.environ.get("MLFLOW_TRACKING_SERVER_CERT_PATH"):
        s.verify = os.environ["MLFLOW_TRACKING_SERVER_CERT_PATH"]
    if os.environ.get("MLFLOW_TRACKING_CLIENT_CERT_PATH"):
        s.cert = os.environ["MLFLOW_TRACKING_CLIENT_CERT_PATH"]
    return s


def not_mlflow_answer(uri: str, r) -> str:
    """One line for a 200 answer that is no MLflow JSON: the host, the status, the content type,
    where a redirect led, and the first bytes of the body, credentials masked."""
    kind = r.headers.get("Content-Type", "no content type").split(";")[0]
    moved = f" after a redirect to {r.url}" if getattr(r, "history", None) else ""
    first = " ".join(r.text[:120].split())
    return redact(
        f"{uri} is not an MLflow tracking server: it answered HTTP {r.status_code} {kind}{moved} "
        f"({first!r}); a login page or proxy in front of the server? check the URI and its credentials"
    )


class RestTrackingClient:
    """The tracking-client interface (tracking/clients.py) for an MLflow tracking server."""

    def __init__(self, uri: str) -> None:
        self.uri = uri.rstrip("/")
        self.timeout = float(http_settings()["MLFLOW_HTTP_REQUEST_TIMEOUT"])
        self._http = _session()
        self._artifact_uris: dict[str, str] = {}

    # ------------------------------------------------------------------ transport
    def _request(self, method: str, endpoint: str, body: dict | None = None, ok_missing: bool = False) -> dict | None:
        """One API call; returns the JSON answer (None for 404 when `ok_missing`); raises RestError."""
        url = f"{self.uri}{API}/{endpoint}"
        if method == "GET":
            r = self._http.get(url, params=body, timeout=self.timeout)
        else:
            r = self._http.request(method, url, json=body or {}, timeout=self.timeout)
        if r.status_code == 200:
            if not r.content:
                return {}
            try:
                return r.json()
            except ValueError:  # an SSO login page, a proxy's HTML, ...: not the MLflow REST API
                raise TrackingError(not_mlflow_answer(self.uri, r)) from None
        try:
            err = r.json()
        except ValueError:
            err = {"error_code": "", "message": r.text.strip()[:200]}
        if ok_missing and r.status_code == 404 and err.get("error_code") == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise RestError(f"{method} {endpoint}", r.status_code, err.get("error_code", ""), err.get("message", ""))

    # ------------------------------------------------------------------ runs and experiments
    def check(self) -> None:
        self._request("GET", "experiments/search", {"max_results": 1})

    def experiment_id(self, name: str) -> str:
        got = self._request("GET", "experiments/get-by-name", {"experiment_name": name}, ok_missing=True)
        if got is not None:
            return got["experiment"]["experiment_id"]
        try:
            return self._request("POST", "experiments/create", {"name": name})["experiment_id"]
        except RestError as e:
            if e.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            return self._request("GET", "experiments/get-by-name", {"experiment_name": name})["experiment"]["experiment_id"]

    def experiment_tags(self, experiment_id: str) -> dict[str, str]:
        exp = self._request("GET", "experiments/get", {"experiment_id": experiment_id})["experiment"]
        return {t["key"]: t.get("value", "") for t in exp.get("tags", [])}

    def set_experiment_tag(self, experiment_id: str, key: str, value: str) -> None:
        self._request("POST", "experiments/set-experiment-tag", {"experiment_id": experiment_id, "key": key, "value": value})

    def create_run(self, experiment_id: str, run_name: str | None, tags: dict[str, str]) -> str:
        body = {
            "experiment_id": experiment_id,
            "start_time": int(time.time() * 1000),
            "user_id": tags.get("mlflow.user", "unknown"),
            "tags": [{"key": k, "value": str(v)} for k, v in tags.items()],
        }
        if run_name:
            body["run_name"] = run_name
        info = self._request("POST", "runs/create", body)["run"]["info"]
        self._artifact_uris[info["run_id"]] = info["artifact_uri"]
        return info["run_id"]

    def find_runs(self, experiment_ids: list[str], filter_string: str) -> list[RunRef]:
        out, token = [], None
        while True:
            body = {"experiment_ids": experiment_ids, "filter": filter_string, "max_results": 1000}
            if token:
                body["page_token"] = token
            page = self._request("POST", "runs/search", body)
            for r in page.get("runs", []):
                tags = {t["key"]: t.get("value", "") for t in r.get("data", {}).get("tags", [])}
                out.append(RunRef(r["info"]["run_id"], r["info"]["status"], tags))
            token = page.get("next_page_token")
            if not token:
                return out

    def _run(self, run_id: str) -> dict:
        return self._request("GET", "runs/get", {"run_id": run_id})["run"]

    def get_tags(self, run_id: str) -> dict[str, str]:
        return {t["key"]: t.get("value", "") for t in self._run(run_id).get("data", {}).get("tags", [])}

    def set_terminated(self, run_id: str, status: str) -> None:
        self._request("POST", "runs/update", {"run_id": run_id, "status": status, "end_time": int(time.time() * 1000)})

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        items = [{"key": k, "value": str(v)} for k, v in tags.items()]
        for chunk in batches(items, MAX_TAGS_PER_BATCH):
            self._request("POST", "runs/log-batch", {"run_id": run_id, "tags": chunk})

    def log_batch(self, run_id: str, params: dict[str, str], metrics: dict[str, float], step: int, timestamp_ms: int) -> None:
        ps = [{"key": k, "value": v} for k, v in params.items()]
        for chunk in batches(ps, MAX_PARAMS_PER_BATCH):
            self._request("POST", "runs/log-batch", {"run_id": run_id, "params": chunk})
        ms = [{"key": k, "value": v, "timestamp": timestamp_ms, "step": step} for k, v in metrics.items()]
        for chunk in batches(ms, MAX_METRICS_PER_BATCH):
            self._request("POST", "runs/log-batch", {"run_id": run_id, "metrics": chunk})

    def log_dataset(self, run_id: str, dataset: dict, context: str) -> None:
        self._request(
            "POST",
            "runs/log-inputs",
            {"run_id": run_id, "datasets": [{"dataset": dataset, "tags": [{"key": "mlflow.data.context", "value": context}]}]},
        )

    # ------------------------------------------------------------------ artifacts
    def _artifact_uri(self, run_id: str) -> str:
        if run_id not in self._artifact_uris:
            self._artifact_uris[run_id] = self._run(run_id)["info"]["artifact_uri"]
        return self._artifact_uris[run_id]

    def log_artifact(self, run_id: str, local_path: str, artifact_path: str | None) -> None:
        rel = "/".join(p for p in ((artifact_path or "").strip("/"), Path(local_path).name) if p)
        self._upload(run_id, Path(local_path), rel)

    def log_artifacts(self, run_id: str, local_dir: str, artifact_path: str | None) -> None:
        root = Path(local_dir)
        for f in sorted(p for p in root.rglob("*") if p.is_file()):
            rel = "/".join(p for p in ((artifact_path or "").strip("/"), f.relative_to(root).as_posix()) if p)
            self._upload(run_id, f, rel)

    def _upload(self, run_id: str, local: Path, rel: str) -> None:
        base = self._artifact_uri(run_id)
        parsed = urlparse(base)
        if parsed.scheme == "mlflow-artifacts":
            host = f"{urlparse(self.uri).scheme}://{parsed.netloc}" if parsed.netloc else self.uri
            url = f"{host}{ARTIFACTS_API}/{quote(parsed.path.strip('/'))}/{quote(rel)}"
            mime = mimetypes.guess_type(local.name)[0] or "application/octet-stream"
            with open(local, "rb") as f:
                r = self._http.put(url, data=f, headers={"Content-Type": mime}, timeout=self.timeout)
            if r.status_code != 200:
                raise RestError(f"PUT artifact {rel}", r.status_code, "", r.text.strip()[:200])
        elif parsed.scheme in ("", "file"):
            dest = Path(unquote(parsed.path) if parsed.scheme else base) / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
            shutil.copyfile(local, tmp)
            os.replace(tmp, dest)
        elif parsed.scheme == "s3":
            import boto3

            endpoint = os.environ.get("MLFLOW_S3_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL") or None
            key = "/".join(p for p in (parsed.path.strip("/"), rel) if p)
            boto3.client("s3", endpoint_url=endpoint).upload_file(str(local), parsed.netloc, key)
        else:  # gs://, wasbs://, hdfs:// ...: let the MLflow library handle the store
            from .library_client import open_mlflow_client

            parent = str(Path(rel).parent)
            open_mlflow_client(self.uri).log_artifact(run_id, str(local), None if parent == "." else parent)
