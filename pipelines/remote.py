"""The remote side of `factprobe pipeline compile|submit` and `factprobe schedule`: compiling the
YAML for the Kubeflow UI, and a `kfp.Client` whose every answer is checked to be the Kubeflow
Pipelines API's (`submit`: `create_run_from_pipeline_package`; `schedule`:
`create_recurring_run` with a six-field cron, seconds first).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from factprobe.errors import ConfigError, ServiceError
from factprobe.redact import redact

from .catalogue import PIPELINES, get_pipeline, pipeline_parameters, validate_params
from .checks import check_run_values


def image_notice(for_cluster_run: bool, allow_default: bool = False, pipeline: str | list[str] | None = None) -> str:
    """The images the compiled steps will run, as one line for stderr. A default image (never
    pushed) adds a warning naming the setting and how to build one; for `submit` and `schedule`
    (`for_cluster_run`) it is an error unless `allow_default`. The training image counts only
    for pipelines with training steps (`pipeline`: a name or names; None or empty: all of them)."""
    from factprobe_ops.components.config import TRAINING_PIPELINES, default_image_settings

    from .platform import read_cluster_config

    cfg = read_cluster_config()
    line = f"images: cpu steps {cfg.cpu_image}, gpu steps {cfg.gpu_image}"
    if getattr(cfg, "train_image", ""):  # FACTPROBE_IMAGE_TRAIN: the fine-tuning steps (containers/Dockerfile.train)
        line += f", training steps {cfg.train_image}"
    names = [pipeline] if isinstance(pipeline, str) else list(pipeline or [])
    training = not names or any(n.replace("-", "_") in TRAINING_PIPELINES for n in names)
    defaults = default_image_settings(cfg, training=training)
    if not defaults:
        return line
    why = (
        f"{' and '.join(defaults)} {'is' if len(defaults) == 1 else 'are'} not set, so the steps use the built-in "
        "default image, which is not published; build and push yours with scripts/build_images.sh --registry "
        "REGISTRY (containers/README.md) and set the variable to the printed tag"
    )
    if for_cluster_run and not allow_default:
        raise ConfigError(f"{why}; --allow-default-image submits anyway")
    return f"{line}\nwarning: {why}"


def compile_all(out_dir: str, names: list[str] | None = None, compat: bool = False) -> list[Path]:
    """Compile pipelines to YAML (the files uploaded in the Kubeflow UI); `compat` leaves out the
    platform fields older backends reject (pipelines/kfp_compat.py)."""
    from kfp import compiler

    from .kfp_compat import write_compat

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names or list(PIPELINES):
        path = out / f"{name}.yaml"
        compiler.Compiler().compile(get_pipeline(name), str(path))
        for note in write_compat(str(path)) if compat else []:
            print(f"warning: {name}: {note}", file=sys.stderr)
        written.append(path)
    return written


@dataclass(frozen=True)
class KfpAccess:
    """How to reach a (multi-user) Kubeflow Pipelines API behind an auth proxy.

    token: a bearer token (`Authorization: Bearer ...`), e.g. a service-account token;
    cookie: a session cookie string, e.g. `authservice_session=...` from a logged-in browser;
    namespace: the Kubeflow profile namespace that owns the experiments and runs (multi-user mode).
    Each comes from its flag or else its environment variable (`ENV`)."""

    token: str | None = None
    cookie: str | None = None
    namespace: str | None = None

    ENV = {"token": "FACTPROBE_KFP_TOKEN", "cookie": "FACTPROBE_KFP_COOKIE", "namespace": "FACTPROBE_KFP_NAMESPACE"}

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> KfpAccess:
        return cls(**{k: getattr(args, k, None) or os.environ.get(env) or None for k, env in cls.ENV.items()})

    def headers(self) -> dict[str, str]:
        h = {}
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        if self.cookie:
            h["Cookie"] = self.cookie
        return h


def add_access_arguments(p: argparse.ArgumentParser) -> None:
    """--namespace, --token, --cookie (each also read from its FACTPROBE_KFP_* variable)."""
    env = KfpAccess.ENV
    p.add_argument("--namespace", help=f"Kubeflow profile namespace for the experiment and run (env {env['namespace']})")
    p.add_argument(
        "--token",
        help=f"bearer token for the KFP API behind an auth proxy (env {env['token']}; prefer the "
        "variable: a flag shows in the process list)",
    )
    p.add_argument("--cookie", help=f"session cookie, e.g. 'authservice_session=...' (env {env['cookie']})")


def kfp_client(host: str, access: KfpAccess | None = None):
    """`kfp.Client` for `host`, failing fast with one line when the host cannot be reached or
    refuses the credentials."""
    import requests

    access = access or KfpAccess()
    url = host.rstrip("/") + "/apis/v2beta1/healthz"
    try:
        response = requests.get(url, timeout=10, headers=access.headers(), allow_redirects=False)
    except requests.RequestException as e:
        raise ConfigError(f"cannot reach the Kubeflow Pipelines host {host}: {type(e).__name__}") from None
    if response.status_code in (401, 403) or 300 <= response.status_code < 400:
        how = "rejected the credentials" if access.token or access.cookie else "needs credentials"
        raise ConfigError(
            f"{host} {how} (GET {url} answered HTTP {response.status_code}); pass --token or --cookie, "
            f"or set {KfpAccess.ENV['token']} / {KfpAccess.ENV['cookie']}"
        )
    if response.status_code != 200:
        raise ConfigError(
            f"{host} does not serve the Kubeflow Pipelines API: GET {url} answered HTTP "
            f"{response.status_code} (a full Kubeflow install serves it under <host>/pipeline)"
        )
    health = _json_object(response.content) if "json" in response.headers.get("Content-Type", "").lower() else None
    if health is None:  # e.g. the login page of an SSO proxy, answered 200
        raise ServiceError(
            f"{host} did not answer like the Kubeflow Pipelines API: GET {urlsplit(url).path} got "
            f"{describe_answer(response.status_code, response.headers.get('Content-Type'), response.content, access)}"
        )
    import kfp

    kwargs: dict[str, Any] = {"existing_token": access.token, "cookies": access.cookie}
    if access.namespace:
        kwargs["namespace"] = access.namespace
    client = kfp.Client(host=host, **kwargs)
    # the API server reports its release as tag_name (pipelines/kfp_compat.py)
    client.backend_version = str(health.get("tag_name") or "")
    _check_answers(client, host, access)
    return client


ANSWER_PREVIEW_CHARS = 200  # how much of an unexpected answer an error shows


def _json_object(body: bytes | str | None) -> dict | None:
    try:
        value = json.loads(body or b"")
    except (ValueError, TypeError):
        return None
    return value if isinstance(value, dict) else None


def describe_answer(status: int, content_type: str | None, body: bytes | str | None, access: KfpAccess | None = None) -> str:
    """`HTTP 200, text/html; charset=utf-8: '<!DOCTYPE html>...'`: an HTTP answer in one line, its
    first ANSWER_PREVIEW_CHARS characters with credentials masked (`redact`, and the token and
    cookie of `access` wherever the body echoes them)."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body or "")
    text = " ".join(text.split())[:ANSWER_PREVIEW_CHARS]
    secrets = []
    if access is not None:
        secrets = [access.token or "", access.cookie or ""]
        secrets += [part.split("=", 1)[-1].strip() for part in (access.cookie or "").split(";")]
    for secret in sorted(filter(None, secrets), key=len, reverse=True):
        text = text.replace(secret, "***")
    shown = f": {text!r}" if text else ", empty body"
    return redact(f"HTTP {status}, {content_type or 'no content type'}{shown}")


def _check_answers(client, host: str, access: KfpAccess) -> None:
    """Make every answer `client` (kfp.Client) gets from `host` be a Kubeflow Pipelines API answer: a
    2xx JSON object that came without a redirect. Anything else (an SSO login page, an error
    status, a redirect) raises ServiceError naming the host, the request and what came back."""
    from kfp_server_api.exceptions import ApiException

    api = client._run_api.api_client  # kfp.Client's one ApiClient, shared by all its service APIs
    send = api.request

    def checked(method: str, url: str, *args, **kwargs):
        path = urlsplit(url).path
        try:
            response = send(method, url, *args, **kwargs)
        except ApiException as e:
            if not e.status:  # no answer at all
                raise ServiceError(
                    f"cannot reach the Kubeflow Pipelines host {host}: {method} {path}: "
                    f"{str(e.reason).splitlines()[0] if e.reason else 'no answer'}"
                ) from None
            headers = dict(e.headers or {})
            ctype = next((v for k, v in headers.items() if k.lower() == "content-type"), None)
            raise ServiceError(f"{host} refused {method} {path}: {describe_answer(e.status, ctype, e.body, access)}") from None
        retries = getattr(getattr(response, "urllib3_response", None), "retries", None)
        moved = [h.redirect_location for h in getattr(retries, "history", ()) or () if h.redirect_location]
        ctype = response.getheader("content-type") or ""
        if moved or "json" not in ctype.lower() or _json_object(response.data) is None:
            via = f" (redirected to {moved[-1]})" if moved else ""
            raise ServiceError(
                f"{host} did not answer like the Kubeflow Pipelines API: {method} {path}{via} got "
                f"{describe_answer(response.status, ctype, response.data, access)}"
            )
        return response

    api.request = checked


def _require_id(client, host: str, access: KfpAccess, obj: Any, attr: str, what: str) -> str:
    """`obj.<attr>`, the id the KFP API returns for what it created; ServiceError naming the host
    and the last answer when it is missing (a 200 without an id is no KFP API answer)."""
    value = getattr(obj, attr, None)
    if value:
        return str(value)
    last = getattr(client._run_api.api_client, "last_response", None)
    got = describe_answer(last.status, last.getheader("content-type"), last.data, access) if last is not None else "no answer"
    raise ServiceError(f"{host} did not answer like the Kubeflow Pipelines API: no {what} id in its answer ({got})")


def compile_checked(pipe, path: Path, client, host: str, compat: bool) -> None:
    """Compile `pipe` to `path` (without the newer platform fields with `compat`) and refuse it when
    the backend behind `client` is too old for a field it uses (ConfigError naming the fields);
    a warning (unknown version, fields the backend ignores) goes to stderr."""
    from kfp import compiler

    from .kfp_compat import check_backend, load_compiled, write_compat

    compiler.Compiler().compile(pipe, str(path))
    for note in write_compat(str(path)) if compat else []:
        print(f"warning: {note}", file=sys.stderr)
    spec, platform, _ = load_compiled(str(path))
    warning = check_backend(getattr(client, "backend_version", ""), spec, platform, host, compat)
    if warning:
        print(warning, file=sys.stderr)


FINAL_RUN_STATES = ("SUCCEEDED", "FAILED", "SKIPPED", "CANCELED", "CANCELLED", "ERROR")
#: what is shown for a run whose answer carried no state (none, empty, or the API's "unspecified")
UNKNOWN_STATE = "state unknown (the server reported none)"
UNSPECIFIED_STATES = ("", "RUNTIME_STATE_UNSPECIFIED", "STATE_UNSPECIFIED")


def run_state(run: Any) -> str:
    """The state of a KFP run answer in upper case, or `UNKNOWN_STATE` when the server reported none
    (never a guessed PENDING)."""
    state = str(getattr(run, "state", None) or "").strip().upper()
    return UNKNOWN_STATE if state in UNSPECIFIED_STATES else state


def wait_for_run(client, run_id: str, timeout_s: float, poll_s: float = 10.0, log=print) -> str:
    """Follow run `run_id` until it ends; print each state change; return the final state
    (upper case; `UNKNOWN_STATE` while the server reports none). A run that outlives `timeout_s`
    raises ConfigError naming it. (kfp's own `wait_for_run_completion` never returns for a CANCELED run.)"""
    start, last = time.monotonic(), None
    while True:
        state = run_state(client.get_run(run_id))
        if state != last:
            log(f"run {run_id}: {state} after {time.monotonic() - start:.0f} s")
            last = state
        if state in FINAL_RUN_STATES:
            return state
        if time.monotonic() - start > timeout_s:
            raise ConfigError(
                f"run {run_id} still {'in ' if state == UNKNOWN_STATE else ''}{state} after --wait-timeout "
                f"{timeout_s:.0f} s; it keeps running"
            )
        time.sleep(poll_s)


def validate_cron(cron: str) -> str:
    """KFP cron has six fields, seconds first (`0 0 2 * * *` = 02:00 daily)."""
    fields = cron.split()
    if len(fields) != 6:
        hint = f"; did you mean '0 {cron}'?" if len(fields) == 5 else ""
        raise ConfigError(f"--cron {cron!r} has {len(fields)} fields; KFP cron needs 6, seconds first{hint}")
    return cron


def submit(
    name: str,
    host: str,
    params: dict[str, Any],
    experiment: str | None = None,
    run_name: str | None = None,
    access: KfpAccess | None = None,
    compat: bool = False,
):
    """Submit one run of `name` to the Kubeflow Pipelines API at `host`; returns kfp's result (with
    `.run_id`, and `.client` for `wait_for_run`). Invalid parameter values raise ConfigError before
    anything is sent; an answer that is not the API's own (no run id, HTML, a redirect) raises
    ServiceError naming the host and what came back (`_check_answers`)."""
    pipe = get_pipeline(name)
    validate_params(pipe, name, params)  # before anything is sent
    check_run_values(name, params)
    access = access or KfpAccess()
    client = kfp_client(host, access)
    params = dict(params)
    if "trigger" in pipeline_parameters(pipe):
        params.setdefault("trigger", "ui")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"{name}.yaml"
        compile_checked(pipe, path, client, host, compat)
        result = client.create_run_from_pipeline_package(
            str(path),
            arguments=params,
            namespace=access.namespace,
            experiment_name=experiment or f"factprobe-{name}",
            run_name=run_name or f"{pipe.name} {time.strftime('%Y-%m-%d %H-%M-%S')}",
        )
    _require_id(client, host, access, result, "run_id", "run")
    result.client = client  # for --wait
    return result


def schedule(
    name: str,
    host: str,
    cron: str,
    params: dict[str, Any],
    experiment: str | None = None,
    job_name: str | None = None,
    max_concurrency: int = 1,
    catchup: bool = False,
    access: KfpAccess | None = None,
    compat: bool = False,
):
    """A recurring run of `name` with a six-field cron, evaluated in UTC by the KFP backend.

    `catchup=False` (default) sets KFP's `no_catchup`: after a pause or an outage the schedule
    runs once, not once per missed interval (a nightly sweep missed for a week is not run 7 times)."""
    validate_cron(cron)
    pipe = get_pipeline(name)
    validate_params(pipe, name, params)  # before anything is sent
    check_run_values(name, params)
    access = access or KfpAccess()
    client = kfp_client(host, access)
    params = dict(params)
    if "trigger" in pipeline_parameters(pipe):
        params.setdefault("trigger", "nightly")
    exp = client.create_experiment(name=experiment or f"factprobe-{name}", namespace=access.namespace)
    _require_id(client, host, access, exp, "experiment_id", "experiment")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"{name}.yaml"
        compile_checked(pipe, path, client, host, compat)
        job = client.create_recurring_run(
            experiment_id=exp.experiment_id,
            job_name=job_name or f"factprobe-{name}-scheduled",
            cron_expression=cron,
            pipeline_package_path=str(path),
            params=params,
            max_concurrency=max_concurrency,
            enabled=True,
            no_catchup=not catchup,
        )
    _require_id(client, host, access, job, "recurring_run_id", "recurring run")
    return job
