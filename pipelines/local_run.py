"""`factprobe pipeline run`: a pipeline run locally with the KFP SubprocessRunner, and its run log.

- `run_local` runs the real DAG in this Python, logging to the MLflow store that
  `factprobe_ops.tracking.conventions.resolve_tracking_uri` names (the `tracking_uri` parameter, else
  `--tracking-uri`, else `MLFLOW_TRACKING_URI`, else the embedded `sqlite:///<cwd>/mlruns.db`; a
  sqlite store is served on loopback), and returns that store with the outcome (`LocalRun`).
- `_RunLog` tees what the run prints into a log file, one terminal line per step by default.
- `step_logs`, `first_error_line` and `failure_report` turn a failed run's log into one line.
"""

from __future__ import annotations

import io
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

from factprobe.redact import redact

from .catalogue import get_pipeline, pipeline_parameters


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
_EXCEPTION_LINE = re.compile(
    r"(?:[A-Za-z_][\w]*\.)*(?P<name>[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure))(?::\s*(?P<msg>.*))?"
)


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
            owner = (
                self._current[-1]
                if len(set(self._current)) == 1
                else next((n for n in self._current if n.startswith("probe")), self._current[-1])
            )
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
            return line.lstrip()[len("error: ") :].strip()
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
        return redact(
            f"{where} failed: {_ANSI.sub('', str(error)).splitlines()[0] if str(error) else 'see the log'}; full log: {log_path}"
        )
    name, lines = failed[0]
    step_log = log_path.with_name(f"{log_path.stem}.{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.log")
    try:
        step_log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    except OSError:
        step_log = log_path
    others = [n for n, _ in failed[1:] if n != name]
    also = f" (also failed: {', '.join(dict.fromkeys(others))})" if others else ""
    return redact(f"step {name!r} failed: {first_error_line(lines)}{also}; full log: {step_log}")


def _threads_setting(params: dict[str, Any]) -> int | None:
    """The run's `threads` setting (a parameter, or in the `options` JSON where `--param threads=N` puts it), None if unset."""
    from factprobe_ops.components.steps._common import parse_options

    value = params.get("threads")
    if value is None or not str(value).strip():
        value = parse_options(params.get("options")).get("threads")
    return None if value is None or not str(value).strip() else int(float(value))


class LocalRun(NamedTuple):
    """What `run_local` did: whether every step succeeded, the seconds it took, the pipeline root,
    and the MLflow store the steps logged to (an embedded sqlite store as an absolute `sqlite:////...`)."""

    ok: bool
    seconds: float
    root: str
    tracking_uri: str


def run_local(
    name: str, params: dict[str, Any], tracking_uri: str | None = None, pipeline_root: str | None = None, verbose: bool = True
) -> LocalRun:
    """Run a pipeline with the KFP local SubprocessRunner; returns a `LocalRun`. The store is the
    pipeline's `tracking_uri` parameter, else `tracking_uri`, else the default
    (`factprobe_ops.tracking.conventions.resolve_tracking_uri`, the one place that rule is written).

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
    from factprobe_ops.tracking.conventions import resolve_tracking_uri
    from factprobe_ops.tracking.local_server import LocalTrackingServer, absolute_store, is_local_store

    from .checks import check_run_values
    from .local_steps import LocalSteps, PipelineStopped

    check_run_values(name, params)  # a bad device, a probe's missing input: refused before anything runs
    params = _absolute_paths(dict(params))
    store = resolve_tracking_uri(params.get("tracking_uri"), tracking_uri)
    if is_local_store(store):
        store = absolute_store(store)  # what the loopback server (or each step, from another folder) opens
    serve = is_local_store(store) and os.environ.get("FACTPROBE_SERVE_LOCAL_STORE", "1") != "0"
    steps = LocalSteps()
    steps.threads = _threads_setting(params)  # the run's thread setting reaches every step's environment
    server = None
    with steps.handling_signals():
        try:
            try:
                server = LocalTrackingServer(store).start() if serve else None
                from kfp import local

                pipe = get_pipeline(name, local=True)
                from factprobe_ops.tracking.conventions import git_sha

                os.environ.setdefault("FACTPROBE_GIT_SHA", git_sha())  # one sha for every step of this run
                spec = pipeline_parameters(pipe)
                if "tracking_uri" in spec:
                    params["tracking_uri"] = server.wait() if server is not None else store
                if "trigger" in spec and "trigger" not in params:
                    params["trigger"] = "local"
                root = pipeline_root or str(Path.cwd() / "build" / "kfp-local")
                local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=root, raise_on_error=True)
                log = _RunLog(
                    sys.stdout,
                    Path(root) / "logs" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log",
                    verbose=verbose,
                )
                if not verbose:
                    import warnings

                    # The local runner runs every step in this very environment, so its warning about a step's
                    # (cluster) base image is noise here; one per step would bury the step lines ...
                    warnings.filterwarnings(
                        "ignore", message="You may be attemping to run a task that uses custom", category=RuntimeWarning
                    )
                    # ... and so is its note that cluster settings (cpu/memory limits, display names) do nothing locally.
                    warnings.filterwarnings(
                        "ignore",
                        message=r"Task '.*': settings \[.*\] have no effect in the current local runner",
                        category=UserWarning,
                    )
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
            return LocalRun(error is None, time.perf_counter() - start, root, store)
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
        return redact(
            f"{line}; marking the MLflow runs KILLED failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        )
    if not parents:
        return f"{line}; no MLflow parent run had started"
    return redact(f"{line}; MLflow parent run {', '.join(parents)} and {killed} step run(s) KILLED in {store}")
