"""`factprobe pipeline run|compile|submit NAME` and `factprobe schedule NAME`.

- run: the real DAG with `kfp.local.SubprocessRunner(use_venv=False)` in this Python, logging to
  the embedded sqlite MLflow (`sqlite:///<cwd>/mlruns.db`) unless `--tracking-uri` says otherwise.
- compile: the YAML to upload in the Kubeflow UI (default `build/pipelines/<name>.yaml`).
- submit / schedule: `kfp.Client(host=...)`: `create_run_from_pipeline_func`, and
  `create_recurring_run` with a six-field cron (seconds first).
"""
from __future__ import annotations

import argparse
import inspect
import io
import json
import os
import re
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from factprobe.errors import ConfigError, ServiceError
from factprobe.redact import redact

PIPELINES = ("probe", "nightly_sweep", "regression", "counterfactual_icl", "coherency", "finetune_known_unknown", "belief")


def get_pipeline(name: str, local: bool = False):
    """The pipeline function for `name`; unknown names raise ConfigError listing the known ones.

    Pipelines are built on request from the probe registry and the cluster settings
    (`pipelines.platform.building`): `local=True` builds them for the local runner (no retries on
    preemption), `False` for a cluster. Nothing is read from the environment at import."""
    import importlib

    from .platform import building

    key = name.replace("-", "_")
    if key not in PIPELINES:
        raise ConfigError(f"unknown pipeline {name!r}; known: {', '.join(PIPELINES)}")
    with building(local=local):
        return importlib.import_module(f"pipelines.{key}").build()


def pipeline_parameters(pipe) -> dict[str, tuple[type, Any]]:
    """{name: (python type, default)} of a pipeline's parameters."""
    sig = inspect.signature(pipe.pipeline_func)
    return {n: (p.annotation, p.default) for n, p in sig.parameters.items()}


def _coerce(name: str, text: str, typ: type) -> Any:
    if typ is str:
        return text
    if typ is bool:
        if text.lower() in ("true", "1", "yes"):
            return True
        if text.lower() in ("false", "0", "no"):
            return False
    elif typ is int:
        try:
            return int(text)
        except ValueError:
            pass
    elif typ is float:
        try:
            return float(text)
        except ValueError:
            pass
    elif typ in (list, dict):
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            looks_json = text.lstrip().startswith(("[", "{"))
            value = [s.strip() for s in text.split(",") if s.strip()] if typ is list and not looks_json else None
        if isinstance(value, typ):
            return value
    raise ConfigError(f"parameter {name}={text!r}: expected {typ.__name__}")


def parse_params(pipe, pairs: list[str], name: str) -> dict[str, Any]:
    """`k=v` strings -> typed arguments; unknown names, wrong types and values the steps would
    refuse (`validate_params`) raise ConfigError."""
    spec = pipeline_parameters(pipe)
    out: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"--param needs key=value, got {pair!r}")
        k, v = pair.split("=", 1)
        k = k.strip().replace("-", "_")
        if k not in spec:
            raise ConfigError(f"pipeline {name} has no parameter {k!r}; parameters: {', '.join(spec)}")
        out[k] = _coerce(k, v, spec[k][0])
        _check_config_value(k, out[k])
    validate_params(pipe, name, out)
    return out


def _check_config_value(name: str, value: Any) -> None:
    """Type-check a config-carrying parameter against its config field before anything reaches a
    cluster: optional ints are `str` pipeline parameters ("" = not set), so `_coerce` alone would
    let `max_facts_per_relation=abc` through to the plan step."""
    from factprobe.probes.config import _coerce as coerce_field
    from factprobe.probes.registry import option_classes

    for cls in option_classes():
        if name in cls.field_names():
            coerce_field(cls, name, value)
            return


def pipeline_probes(name: str, values: dict[str, Any]) -> list[str]:
    """The probes a run of pipeline `name` with parameter `values` runs: its `probes` parameter, the
    regression pipeline's `probe_name`, else the module's fixed `PROBES` / `PROBE`."""
    import importlib

    if "probes" in values:
        return list(values["probes"]) if isinstance(values["probes"], list) else [values["probes"]]
    if "probe_name" in values:
        return [values["probe_name"]]
    module = importlib.import_module(f"pipelines.{name.replace('-', '_')}")
    return list(getattr(module, "PROBES", None) or [module.PROBE])


def validate_params(pipe, name: str, params: dict[str, Any]) -> None:
    """Refuse invalid parameter values before anything runs or is sent: build the configs the steps
    will build from them (the plan step's probe check, `RunConfig` per probe as the probe steps do,
    `FinetuneConfig` per training set as the fine-tuning step does), so the one-line ConfigError is
    the step's own (`lora_r=-1: must be >= 0 ...`). Unknown probes name the parameter."""
    from components.steps._common import run_config
    from factprobe.probes.registry import probe_names

    from .params import config_dict

    values = {k: d for k, (_, d) in pipeline_parameters(pipe).items() if d is not inspect.Parameter.empty}
    values.update(params)
    probes = pipeline_probes(name, values)
    known = probe_names()
    bad = [p for p in probes if p not in known]
    if bad or not probes:
        which = "probe_name" if "probe_name" in values else "probes"
        raise ConfigError(f"parameter {which}: unknown probe(s) {', '.join(map(repr, bad)) or '(none given)'}; "
                          f"choose from {', '.join(known)}")
    if name.replace("-", "_") == "regression":  # the gate step's own checks, before the candidate is probed
        from tracking.baseline import check_gate_settings, gate_needs, gateable_probes

        if values.get("probe_name") not in gateable_probes():
            raise ConfigError(f"parameter probe_name: {values.get('probe_name')!r} runs cannot be gated; {gate_needs()}")
        check_gate_settings(values.get("max_drop"), values.get("alpha"), names=("parameter max_drop", "parameter alpha"))
    if "models" in values and isinstance(values["models"], list) and not values["models"]:
        raise ConfigError("parameter models: the models list is empty")
    config = config_dict(values)
    for probe in probes:
        run_config(config, probe=str(probe), model="-")
    if name.replace("-", "_") == "finetune_known_unknown":
        from factprobe.finetune import NEEDS_TABLE, FinetuneConfig

        from .finetune_known_unknown import finetune_dict

        ft = finetune_dict(values)
        for setting in values.get("settings") or []:  # as components.steps.finetune.finetune_config
            FinetuneConfig.from_dict({**ft, "model": values.get("model") or "-", "train_set": setting,
                                      "known_unknown": "-" if setting in NEEDS_TABLE else None, "out": "-"})


def _absolute_paths(params: dict[str, Any]) -> dict[str, Any]:
    """Local runs execute steps in other folders: make relative file arguments absolute."""
    for k in ("data", "train_data", "work_root", "models_yaml"):
        v = params.get(k)
        if isinstance(v, str) and v and "://" not in v and "\n" not in v and Path(v).exists():
            params[k] = str(Path(v).resolve())
    return params


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_TASK_START = re.compile(r"Executing task '([^']+)'")
_TASK_END = re.compile(r"Task '([^']+)' finished with status (\w+)")
_QUOTED_TASK = re.compile(r"'([^']+)'")
_EXCEPTION_LINE = re.compile(r"(?:[A-Za-z_][\w]*\.)*(?P<name>[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure))(?::\s*(?P<msg>.*))?")


HEADLINE_PREFIX = "headline: "  # a step prints its main number on such a line (components/steps/probe.py)
PROGRESS_PREFIX = "progress: "  # a long step's progress line, at most every 30 s (components/steps/progress.py)


class _RunLog(io.TextIOBase):
    """What a local run prints, tee'd into a log file: kfp's SubprocessRunner streams each step's
    stdout and stderr through `print` to `sys.stdout`, so the log holds every step's output.
    Credentials in what passes through (a tracking URI with user:password, ...) are masked.

    `verbose=True` passes everything to the terminal too (kfp's executor JSON included, ~500
    lines a run). By default the terminal gets one line when a step starts and one when it ends:
    name, status, seconds, and the step's `headline: ...` line where it printed one."""

    def __init__(self, stream, path: Path, verbose: bool = True) -> None:
        self._stream = stream
        self.path = path
        self.verbose = verbose
        path.parent.mkdir(parents=True, exist_ok=True)
        # Raw, unbuffered bytes: each write is one os.write of a complete bytes object. A TextIOWrapper here
        # once wrote raw heap bytes into the log when a write re-entered it (CPython gh-119506, Python < 3.12.4).
        self._file = path.open("wb", buffering=0)
        self._lock = threading.RLock()
        self._pending = ""
        self._started: dict[str, list[float]] = {}  # task name -> start times (ParallelFor repeats names)
        self._headlines: dict[str, list[str]] = {}
        self._current: list[str] = []  # tasks running, in start order (to attribute headlines)

    def write(self, text: str) -> int:
        text = redact(text)
        with self._lock:
            if not self._file.closed:
                self._file.write(text.encode("utf-8", "replace"))
        if self.verbose:
            self._stream.write(text)
        else:
            self._pending += text
            *lines, self._pending = self._pending.split("\n")
            for line in lines:
                self._summarise(_ANSI.sub("", line))
        return len(text)

    def _summarise(self, line: str) -> None:
        if m := _TASK_START.search(line):
            name = m.group(1)
            self._started.setdefault(name, []).append(time.perf_counter())
            self._current.append(name)
            self._stream.write(f"  {name:<28} started\n")
        elif m := _TASK_END.search(line):
            name, status = m.group(1), m.group(2)
            t0 = self._started.get(name, [time.perf_counter()]).pop(0) if self._started.get(name) else time.perf_counter()
            if name in self._current:
                self._current.remove(name)
            heads = self._headlines.get(name) or []
            head = f"  {heads.pop(0)}" if heads and status == "SUCCESS" else ""
            self._stream.write(f"  {name:<28} {status:<8} {time.perf_counter() - t0:7.1f} s{head}\n")
        elif PROGRESS_PREFIX in line and self._current:  # a long step's progress (components/steps/progress.py)
            self._stream.write(f"  {'':<28} {line.split(PROGRESS_PREFIX, 1)[1].strip()}\n")
        elif HEADLINE_PREFIX in line and self._current:
            owner = self._current[-1] if len(set(self._current)) == 1 else next(
                (n for n in self._current if n.startswith("probe")), self._current[-1])
            self._headlines.setdefault(owner, []).append(line.split(HEADLINE_PREFIX, 1)[1].strip())
        self._stream.flush()

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def encoding(self) -> str:
        return getattr(self._stream, "encoding", "utf-8")

    def close_log(self) -> None:
        if self._pending and not self.verbose:
            self._summarise(_ANSI.sub("", self._pending))
        with self._lock:
            self._file.close()


def step_logs(log_text: str) -> list[tuple[str, str, list[str]]]:
    """(task name, status, output lines) of every step in a local run's log, in run order.

    The lines are the step's own output (kfp indents it by 4 spaces) without ANSI codes."""
    steps: list[tuple[str, str, list[str]]] = []
    current: list[str] | None = None
    for raw in _ANSI.sub("", log_text).splitlines():
        if m := _TASK_START.search(raw):
            current = []
            steps.append((m.group(1), "RUNNING", current))
        elif (m := _TASK_END.search(raw)) and current is not None and steps and steps[-1][0] == m.group(1):
            steps[-1] = (m.group(1), m.group(2), current)
            current = None
        elif current is not None and (raw.startswith("    ") or not raw.strip()):  # kfp's own lines are not indented
            current.append(raw.removeprefix("    ").rstrip())
    for _, _, lines in steps:  # drop the blank lines kfp puts around a step's output
        while lines and not lines[0]:
            lines.pop(0)
        while lines and not lines[-1]:
            lines.pop()
    return steps


def first_error_line(lines: list[str]) -> str:
    """The step's error in one line: its `error: ...` line, else the exception line that ends its
    last traceback (`ConfigError: unknown relation ...`, module path dropped), else its last line
    of output that is not a KFP executor log line."""
    for line in lines:
        if line.lstrip().startswith("error: "):
            return line.lstrip()[len("error: "):].strip()
    # The output of a step that ran beside another (the local runner runs a ParallelFor's
    # iterations at once) comes indented deeper: a traceback ends at the first line indented no
    # deeper than its `Traceback` line.
    in_traceback, indent, exception = False, 0, ""
    for line in lines:
        body = line.lstrip()
        if body.startswith("Traceback (most recent call last):"):
            in_traceback, indent = True, len(line) - len(body)
        elif in_traceback and body and len(line) - len(body) <= indent:
            m = _EXCEPTION_LINE.fullmatch(body.strip())
            if m:
                exception = f"{m['name']}: {m['msg']}" if m["msg"] else m["name"]
            in_traceback = False
    if exception:
        return exception
    own = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("[KFP Executor")]
    return own[-1] if own else "no output"


def failure_report(log_path: Path, error: BaseException | str) -> str:
    """One line for a failed local run: the first failed step, its error line, and the path of its
    own log (written beside the run's log); falls back to the task names kfp's error names."""
    try:
        steps = step_logs(log_path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        steps = []
    failed = [(name, lines) for name, status, lines in steps if status == "FAILURE"]
    if not failed:
        names = _QUOTED_TASK.findall(_ANSI.sub("", str(error)).split("Inner task failed:")[-1])
        where = f"step {names[0]!r}" if names else "the pipeline"
        return redact(f"{where} failed: {_ANSI.sub('', str(error)).splitlines()[0] if str(error) else 'see the log'}; "
                      f"full log: {log_path}")
    name, lines = failed[0]
    step_log = log_path.with_name(f"{log_path.stem}.{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.log")
    try:
        step_log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    except OSError:
        step_log = log_path
    others = [n for n, _ in failed[1:] if n != name]
    also = f" (also failed: {', '.join(dict.fromkeys(others))})" if others else ""
    return redact(f"step {name!r} failed: {first_error_line(lines)}{also}; full log: {step_log}")


def run_local(name: str, params: dict[str, Any], tracking_uri: str | None = None, pipeline_root: str | None = None,
              verbose: bool = True):
    """Run a pipeline with the KFP local SubprocessRunner; returns (success, seconds, pipeline root).

    An embedded sqlite store is served on loopback for the run (tracking/local_server.py), so the
    step processes log over REST instead of each importing mlflow; the runs land in the same file.
    `FACTPROBE_SERVE_LOCAL_STORE=0` makes every step open the sqlite file itself instead.

    Everything the run prints is written to `<pipeline root>/logs/<name>-<time>-<pid>.log`; the
    terminal gets all of it with `verbose`, else one line per step start and end (`_RunLog`).
    A failed run ends with one line on stderr (ANSI codes stripped, credentials masked): the failed
    step, the first line of its error, and the path of that step's own log:
    `error: step 'data-build' failed: ConfigError: unknown relation(s) P999 ...; full log: ...`.

    Ctrl-C or SIGTERM stops the run (pipelines/local_steps.py): the steps' process groups get
    SIGTERM and are waited for, the parent run and every step run still RUNNING are marked KILLED,
    the loopback server stops last, and `PipelineStopped` (exit code 130 or 143) says what was done."""
    from tracking.local_server import LocalTrackingServer, is_local_store

    from .local_steps import LocalSteps, PipelineStopped

    params = _absolute_paths(dict(params))
    store = params.get("tracking_uri") or tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") \
        or f"sqlite:///{Path.cwd() / 'mlruns.db'}"
    serve = is_local_store(store) and os.environ.get("FACTPROBE_SERVE_LOCAL_STORE", "1") != "0"
    steps = LocalSteps()
    server = None
    with steps.handling_signals():
        try:
            try:
                server = LocalTrackingServer(store).start() if serve else None
                from kfp import local

                pipe = get_pipeline(name, local=True)
                from tracking.conventions import git_sha

                os.environ.setdefault("FACTPROBE_GIT_SHA", git_sha())  # one sha for every step of this run
                spec = pipeline_parameters(pipe)
                if "tracking_uri" in spec:
                    params["tracking_uri"] = server.wait() if server is not None else store
                if "trigger" in spec and "trigger" not in params:
                    params["trigger"] = "local"
                root = pipeline_root or str(Path.cwd() / "build" / "kfp-local")
                local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=root, raise_on_error=True)
                log = _RunLog(sys.stdout, Path(root) / "logs" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log",
                              verbose=verbose)
                if not verbose:
                    import warnings

                    # The local runner runs every step in this very environment, so its warning about a step's
                    # (cluster) base image is noise here; one per step would bury the step lines ...
                    warnings.filterwarnings("ignore", message="You may be attemping to run a task that uses custom",
                                            category=RuntimeWarning)
                    # ... and so is its note that cluster settings (cpu/memory limits, display names) do nothing locally.
                    warnings.filterwarnings("ignore", message=r"Task '.*': settings \[.*\] have no effect in the current local runner",
                                            category=UserWarning)
                    print(f"pipeline {name}: one line per step; full log (--verbose prints it here): {log.path}", flush=True)
                start = time.perf_counter()
                error: BaseException | None = None
                sys.stdout = log
                try:
                    with steps.running(log.path.with_suffix(".runs.jsonl")):
                        pipe(**params)
                except Exception as e:  # KFP local raises RuntimeError naming the failed task
                    if not isinstance(e, RuntimeError) and steps.signum is None:
                        raise
                    error = e
                finally:
                    sys.stdout = log._stream
                    log.close_log()
            except KeyboardInterrupt:  # a signal before any step ran (LocalSteps raises it only then)
                if steps.signum is None:
                    raise
            if steps.signum is not None:
                raise PipelineStopped(_stop(name, steps, params.get("tracking_uri"), store), steps.signum)
            if error is not None:
                sys.stdout.flush()
                print(f"error: {failure_report(log.path, error)}", file=sys.stderr)
            return error is None, time.perf_counter() - start, root
        finally:
            if server is not None:  # last: the steps and the KILLED marks went through it
                server.__exit__(None, None, None)


def _stop(name: str, steps, tracking_uri: str | None, store: str) -> str:
    """Finish a stopped run (steps gone, runs KILLED through `tracking_uri`, the URI the steps log
    to) and say what was done, in one line naming `store`."""
    import signal

    steps.finish()
    what = signal.Signals(steps.signum).name
    forced = f", {steps.forced} of them with SIGKILL" if steps.forced else ""
    line = f"pipeline {name} stopped by {what}: {steps.running_at_signal} running step(s) stopped{forced}"
    try:
        parents, killed = steps.mark_killed(tracking_uri)
    except Exception as e:  # noqa: BLE001 - the stop must still end with its one line
        return redact(f"{line}; marking the MLflow runs KILLED failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    if not parents:
        return f"{line}; no MLflow parent run had started"
    return redact(f"{line}; MLflow parent run {', '.join(parents)} and {killed} step run(s) KILLED in {store}")


def image_notice(for_cluster_run: bool, allow_default: bool = False, pipeline: str | list[str] | None = None) -> str:
    """The images the compiled steps will run, as one line for stderr. A default image (never
    pushed) adds a warning naming the setting and how to build one; for `submit` and `schedule`
    (`for_cluster_run`) it is an error unless `allow_default`. The training image counts only
    for pipelines with training steps (`pipeline`: a name or names; None or empty: all of them)."""
    from components.config import TRAINING_PIPELINES, default_image_settings

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
    why = (f"{' and '.join(defaults)} {'is' if len(defaults) == 1 else 'are'} not set, so the steps use the built-in "
           "default image, which is not published; build and push yours with scripts/build_images.sh --registry "
           "REGISTRY (containers/README.md) and set the variable to the printed tag")
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
    def from_args(cls, args: argparse.Namespace) -> "KfpAccess":
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
    p.add_argument("--token", help=f"bearer token for the KFP API behind an auth proxy (env {env['token']}; prefer the "
                                   "variable: a flag shows in the process list)")
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
        raise ConfigError(f"{host} {how} (GET {url} answered HTTP {response.status_code}); pass --token or --cookie, "
                          f"or set {KfpAccess.ENV['token']} / {KfpAccess.ENV['cookie']}")
    if response.status_code != 200:
        raise ConfigError(f"{host} does not serve the Kubeflow Pipelines API: GET {url} answered HTTP "
                          f"{response.status_code} (a full Kubeflow install serves it under <host>/pipeline)")
    health = _json_object(response.content) if "json" in response.headers.get("Content-Type", "").lower() else None
    if health is None:  # e.g. the login page of an SSO proxy, answered 200
        raise ServiceError(f"{host} did not answer like the Kubeflow Pipelines API: GET {urlsplit(url).path} got "
                           f"{describe_answer(response.status_code, response.headers.get('Content-Type'), response.content, access)}")
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
                raise ServiceError(f"cannot reach the Kubeflow Pipelines host {host}: {method} {path}: "
                                   f"{str(e.reason).splitlines()[0] if e.reason else 'no answer'}") from None
            headers = dict(e.headers or {})
            ctype = next((v for k, v in headers.items() if k.lower() == "content-type"), None)
            raise ServiceError(f"{host} refused {method} {path}: {describe_answer(e.status, ctype, e.body, access)}") from None
        retries = getattr(getattr(response, "urllib3_response", None), "retries", None)
        moved = [h.redirect_location for h in getattr(retries, "history", ()) or () if h.redirect_location]
        ctype = response.getheader("content-type") or ""
        if moved or "json" not in ctype.lower() or _json_object(response.data) is None:
            via = f" (redirected to {moved[-1]})" if moved else ""
            raise ServiceError(f"{host} did not answer like the Kubeflow Pipelines API: {method} {path}{via} got "
                               f"{describe_answer(response.status, ctype, response.data, access)}")
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


def wait_for_run(client, run_id: str, timeout_s: float, poll_s: float = 10.0, log=print) -> str:
    """Follow run `run_id` until it ends; print each state change; return the final state
    (upper case). A run that outlives `timeout_s` raises ConfigError naming it. (kfp's own
    `wait_for_run_completion` never returns for a CANCELED run.)"""
    start, last = time.monotonic(), None
    while True:
        state = str(client.get_run(run_id).state or "PENDING").upper()
        if state != last:
            log(f"run {run_id}: {state} after {time.monotonic() - start:.0f} s")
            last = state
        if state in FINAL_RUN_STATES:
            return state
        if time.monotonic() - start > timeout_s:
            raise ConfigError(f"run {run_id} still {state} after --wait-timeout {timeout_s:.0f} s; it keeps running")
        time.sleep(poll_s)


def validate_cron(cron: str) -> str:
    """KFP cron has six fields, seconds first (`0 0 2 * * *` = 02:00 daily)."""
    fields = cron.split()
    if len(fields) != 6:
        hint = f"; did you mean '0 {cron}'?" if len(fields) == 5 else ""
        raise ConfigError(f"--cron {cron!r} has {len(fields)} fields; KFP cron needs 6, seconds first{hint}")
    return cron


def submit(name: str, host: str, params: dict[str, Any], experiment: str | None = None, run_name: str | None = None,
           access: KfpAccess | None = None, compat: bool = False):
    """Submit one run of `name` to the Kubeflow Pipelines API at `host`; returns kfp's result (with
    `.run_id`, and `.client` for `wait_for_run`). Invalid parameter values raise ConfigError before
    anything is sent; an answer that is not the API's own (no run id, HTML, a redirect) raises
    ServiceError naming the host and what came back (`_check_answers`)."""
    pipe = get_pipeline(name)
    validate_params(pipe, name, params)  # before anything is sent
    access = access or KfpAccess()
    client = kfp_client(host, access)
    params = dict(params)
    if "trigger" in pipeline_parameters(pipe):
        params.setdefault("trigger", "ui")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"{name}.yaml"
        compile_checked(pipe, path, client, host, compat)
        result = client.create_run_from_pipeline_package(
            str(path), arguments=params, namespace=access.namespace, experiment_name=experiment or f"factprobe-{name}",
            run_name=run_name or f"{pipe.name} {time.strftime('%Y-%m-%d %H-%M-%S')}")
    _require_id(client, host, access, result, "run_id", "run")
    result.client = client  # for --wait
    return result


def schedule(name: str, host: str, cron: str, params: dict[str, Any], experiment: str | None = None,
             job_name: str | None = None, max_concurrency: int = 1, catchup: bool = False,
             access: KfpAccess | None = None, compat: bool = False):
    """A recurring run of `name` with a six-field cron, evaluated in UTC by the KFP backend.

    `catchup=False` (default) sets KFP's `no_catchup`: after a pause or an outage the schedule
    runs once, not once per missed interval (a nightly sweep missed for a week is not run 7 times)."""
    validate_cron(cron)
    pipe = get_pipeline(name)
    validate_params(pipe, name, params)  # before anything is sent
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
            experiment_id=exp.experiment_id, job_name=job_name or f"factprobe-{name}-scheduled", cron_expression=cron,
            pipeline_package_path=str(path), params=params, max_concurrency=max_concurrency, enabled=True,
            no_catchup=not catchup,
        )
    _require_id(client, host, access, job, "recurring_run_id", "recurring run")
    return job


COMPAT_HELP = ("compile without the platform fields older Kubeflow Pipelines backends reject (secretNameParameter, "
               "optional, securityContext): runs on KFP 2.1.0 or newer; k8s/README.md lists each field's version")


def _parser(prog: str) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog=prog)


def format_params(name: str) -> str:
    """The parameters of pipeline `name` as a table: name, type, default (what `--param K=V` takes)."""
    params = pipeline_parameters(get_pipeline(name))
    rows = [(k, getattr(t, "__name__", str(t)), "(required)" if d is inspect.Parameter.empty else json.dumps(d))
            for k, (t, d) in params.items()]
    w0 = max(len("PARAMETER"), *(len(r[0]) for r in rows))
    w1 = max(len("TYPE"), *(len(r[1]) for r in rows))
    lines = [f"{'PARAMETER':<{w0}}  {'TYPE':<{w1}}  DEFAULT"] + [f"{a:<{w0}}  {b:<{w1}}  {c}" for a, b, c in rows]
    return "\n".join(lines)


def _host_for(args: argparse.Namespace, parser: argparse.ArgumentParser) -> str:
    if not args.host:
        parser.error("the following arguments are required: --host (or --list-params to list the parameters)")
    return args.host


def pipeline_cli(argv: list[str]) -> int:
    p = _parser("factprobe pipeline")
    sub = p.add_subparsers(dest="action", required=True)
    r = sub.add_parser("run", help="run locally with the KFP SubprocessRunner and embedded MLflow")
    r.add_argument("name", help=f"one of {', '.join(PIPELINES)}")
    r.add_argument("--param", action="append", default=[], metavar="K=V")
    r.add_argument("--tracking-uri")
    r.add_argument("--pipeline-root")
    r.add_argument("--list-params", action="store_true", help="list the pipeline's parameters and exit")
    r.add_argument("--verbose", action="store_true",
                   help="print every step's full output (kfp's executor logs) instead of one line per step")
    c = sub.add_parser("compile", help="write pipeline YAML for the Kubeflow UI")
    c.add_argument("names", nargs="*")
    c.add_argument("--out", default="build/pipelines")
    c.add_argument("--compat", action="store_true", help=COMPAT_HELP)
    s = sub.add_parser("submit", help="submit a run to a Kubeflow Pipelines host")
    s.add_argument("name", help=f"one of {', '.join(PIPELINES)}")
    s.add_argument("--host", help="Kubeflow Pipelines API, e.g. https://kubeflow.example.com/pipeline")
    s.add_argument("--param", action="append", default=[], metavar="K=V")
    s.add_argument("--experiment")
    s.add_argument("--run-name")
    s.add_argument("--list-params", action="store_true", help="list the pipeline's parameters and exit (submits nothing)")
    s.add_argument("--wait", action="store_true", help="follow the run to its end; exit 1 unless it SUCCEEDED")
    s.add_argument("--allow-default-image", action="store_true",
                   help="submit even though FACTPROBE_IMAGE_CPU/GPU (and FACTPROBE_IMAGE_TRAIN for fine-tuning) are unset (the default images are not published)")
    s.add_argument("--wait-timeout", type=float, default=24 * 3600, metavar="SECONDS", help="with --wait (default: 24 h)")
    s.add_argument("--compat", action="store_true", help=COMPAT_HELP)
    add_access_arguments(s)
    args = p.parse_args(argv)
    if args.action == "compile":
        print(image_notice(False, pipeline=args.names), file=sys.stderr)
        for path in compile_all(args.out, args.names or None, compat=args.compat):
            print(path)
        return 0
    if args.list_params:
        print(format_params(args.name))
        return 0
    if args.action == "submit":
        _host_for(args, s)
        images = image_notice(True, args.allow_default_image, args.name)  # refuses the unpublished default image
    pipe = get_pipeline(args.name)
    params = parse_params(pipe, args.param, args.name)
    if args.action == "run":
        from .local_steps import PipelineStopped

        try:
            ok, seconds, root = run_local(args.name, params, args.tracking_uri, args.pipeline_root, verbose=args.verbose)
        except PipelineStopped as stopped:
            print(str(stopped), file=sys.stderr, flush=True)
            return stopped.exit_code
        uri = args.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd() / 'mlruns.db'}"
        print(redact(f"pipeline {args.name} {'succeeded' if ok else 'FAILED'} in {seconds:.1f} s; outputs under {root}; "
                     f"MLflow: {uri}"))
        return 0 if ok else 1
    result = submit(args.name, args.host, params, args.experiment, args.run_name, KfpAccess.from_args(args),
                    compat=args.compat)
    print(images, file=sys.stderr)
    print(f"submitted run {result.run_id} to {args.host}", flush=True)
    if not args.wait:
        return 0
    state = wait_for_run(result.client, result.run_id, args.wait_timeout)
    print(f"run {result.run_id} {state}")
    return 0 if state == "SUCCEEDED" else 1


def schedule_cli(argv: list[str]) -> int:
    p = _parser("factprobe schedule")
    p.add_argument("name", help=f"one of {', '.join(PIPELINES)}")
    p.add_argument("--host", help="Kubeflow Pipelines API, e.g. https://kubeflow.example.com/pipeline")
    p.add_argument("--cron", help="six fields, seconds first, in UTC: '0 0 2 * * *' = daily at 02:00 UTC")
    p.add_argument("--param", action="append", default=[], metavar="K=V")
    p.add_argument("--experiment")
    p.add_argument("--job-name")
    p.add_argument("--max-concurrency", type=int, default=1)
    p.add_argument("--catchup", action="store_true",
                   help="after a pause or outage, run once per missed interval (default: once, KFP no_catchup)")
    p.add_argument("--list-params", action="store_true", help="list the pipeline's parameters and exit (schedules nothing)")
    p.add_argument("--allow-default-image", action="store_true",
                   help="schedule even though FACTPROBE_IMAGE_CPU/GPU are unset (the default images are not published)")
    p.add_argument("--compat", action="store_true", help=COMPAT_HELP)
    add_access_arguments(p)
    args = p.parse_args(argv)
    if args.list_params:
        print(format_params(args.name))
        return 0
    _host_for(args, p)
    if not args.cron:
        p.error("the following arguments are required: --cron")
    images = image_notice(True, args.allow_default_image, args.name)  # refuses the unpublished default image
    pipe = get_pipeline(args.name)
    params = parse_params(pipe, args.param, args.name)
    job = schedule(args.name, args.host, args.cron, params, args.experiment, args.job_name, args.max_concurrency,
                   catchup=args.catchup, access=KfpAccess.from_args(args), compat=args.compat)
    print(images, file=sys.stderr)
    print(f"scheduled {args.name} on {args.host} with cron '{args.cron}' (UTC"
          f"{'' if args.catchup else ', no catch-up of missed runs'}): "
          f"recurring run {getattr(job, 'recurring_run_id', job)}")
    return 0
