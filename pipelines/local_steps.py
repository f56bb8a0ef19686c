"""Stopping a local pipeline run (`factprobe pipeline run`) cleanly on Ctrl-C or SIGTERM.

kfp's SubprocessRunner starts every step with `subprocess.Popen` in this process's own process
group and waits for it; a SIGTERM to this process alone used to leave the steps running and their
MLflow runs, and the parent run, RUNNING forever. While `LocalSteps.running(...)` is active:

- every step starts in a process group of its own (`start_new_session`), so a Ctrl-C at the
  terminal reaches this process only, and this process decides the order of the stop;
- the first SIGINT or SIGTERM sends SIGTERM to every step's process group (a probe or training
  step turns it into a KeyboardInterrupt, `factprobe.signals.sigterm_as_interrupt`, and marks its
  own MLflow run KILLED); no further step starts (the exit handler's finalize step included);
  groups still alive GRACE_S later, or at a second signal, get SIGKILL;
- `finish()` then waits until no process of any step group is left, and `mark_killed(uri)` marks
  the parent run (each start-run step writes its id to the file named by
  `factprobe_ops.components.steps._common.RUN_RECORD_ENV`) and every run under it still RUNNING as KILLED.

Each step's environment also carries its thread policy (factprobe/threads.py): `FACTPROBE_STEPS_AT_ONCE`
(1 for a step the pipeline's own thread starts, kfp's ParallelFor cap for one a worker thread starts),
`OMP_WAIT_POLICY=PASSIVE` and `OMP_NUM_THREADS` for its share of the CPUs (the run's `threads` when set).

The caller stops the loopback tracking server after that, and exits 130 (SIGINT) or 143 (SIGTERM)
with one line saying what was stopped (`PipelineStopped`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from factprobe.signals import Terminated

GRACE_S = 20.0  # a step's time to mark its run KILLED and exit after SIGTERM, before SIGKILL
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class PipelineStopped(Exception):
    """A local run stopped by a signal; `exit_code` is 128 + the signal; the message says what was done."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum


def _group_alive(pgid: int) -> bool:
    """True while process group `pgid` has a process that is not a zombie."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def parallel_steps_cap() -> int:
    """How many iterations of a ParallelFor kfp's local runner runs at once (its `ParallelExecutor` cap, 2)."""
    try:
        from kfp.local.orchestrator.enhanced_dag_orchestrator import ParallelExecutor

        return max(1, int(ParallelExecutor().max_workers))
    except Exception:  # noqa: BLE001 - another kfp layout: its documented default
        return 2


class LocalSteps:
    """The step processes of one local run and the signal that stops it (module docstring)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.phase = "setup"  # setup -> steps -> done: a signal in setup raises, later it only stops
        self.groups: list[int] = []  # the process group of every step started (= its pid)
        self.running_at_signal = 0
        self.forced = 0  # groups that needed SIGKILL
        self._live: set[int] = set()
        self._timer: threading.Timer | None = None
        self.threads: int | None = None  # the run's `threads` setting; None: each step's share of the CPUs

    # ------------------------------------------------------------------ signals
    @contextmanager
    def handling_signals(self) -> Iterator[LocalSteps]:
        """SIGINT and SIGTERM stop the run (`_on_signal`) within the block (main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        old = {s: signal.signal(s, self._on_signal) for s in SIGNALS}
        try:
            yield self
        finally:
            for s, handler in old.items():
                signal.signal(s, handler)
            if self._timer is not None:
                self._timer.cancel()

    def _on_signal(self, signum: int, frame) -> None:
        if self.signum is None:
            self.signum = signum
            self.running_at_signal = len(self._live)
            self._kill_all(signal.SIGTERM)
            self._timer = threading.Timer(GRACE_S, self._kill_all, (signal.SIGKILL,))
            self._timer.daemon = True
            self._timer.start()
        else:  # a second Ctrl-C: no more waiting
            self._kill_all(signal.SIGKILL)
        if self.phase == "setup":
            raise Terminated(f"received {signal.Signals(signum).name}") if signum == signal.SIGTERM else KeyboardInterrupt()

    def _kill_all(self, sig: int) -> None:
        for pgid in list(self.groups):
            self._kill(pgid, sig)

    def _kill(self, pgid: int, sig: int) -> None:
        try:
            if sig == signal.SIGKILL and _group_alive(pgid):
                self.forced += 1
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    # ------------------------------------------------------------------ steps
    def run_step(self, full_command: list[str], env_vars: dict[str, str] | None = None) -> int:
        """kfp's `subprocess_task_handler.run_local_subprocess`, the step in a process group of its own."""
        if self.signum is not None:
            print("    step not started: the pipeline is stopping\n")
            return 1
        from factprobe.threads import step_environment

        # the step's share of the CPUs and the passive OpenMP wait (factprobe/threads.py); a task's own env wins
        env = {**os.environ, **step_environment(self.steps_at_once(), self.threads), **(env_vars or {})}
        with subprocess.Popen(
            full_command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, env=env, start_new_session=True
        ) as process:
            self.groups.append(process.pid)
            self._live.add(process.pid)
            if self.signum is not None:  # the signal came while it started
                self._kill(process.pid, signal.SIGTERM)
            try:
                for line in iter(process.stdout.readline, ""):
                    print(line, end="")
                print("\n")
                return process.wait()
            finally:
                self._live.discard(process.pid)

    def steps_at_once(self) -> int:
        """Steps that may run at once with the one being started: 1 when kfp starts it from the thread that
        runs the pipeline (its DAG runs one task after another), else kfp's cap on a ParallelFor's
        concurrent iterations (their worker threads start them)."""
        if threading.current_thread() is getattr(self, "pipeline_thread", threading.main_thread()):
            return 1
        return parallel_steps_cap()

    @contextmanager
    def running(self, record_file: Path) -> Iterator[None]:
        """Run kfp's local steps through `run_step`, the start-run steps recording their parent run
        ids in `record_file`; a signal no longer raises here (the steps end, kfp returns)."""
        from kfp.local import subprocess_task_handler

        from factprobe_ops.components.steps._common import RUN_RECORD_ENV

        original = subprocess_task_handler.run_local_subprocess
        saved = os.environ.get(RUN_RECORD_ENV)
        self.record_file = record_file
        self.pipeline_thread = threading.current_thread()
        record_file.parent.mkdir(parents=True, exist_ok=True)
        os.environ[RUN_RECORD_ENV] = str(record_file)
        subprocess_task_handler.run_local_subprocess = self.run_step
        self.phase = "steps"
        try:
            yield
        finally:
            self.phase = "done"
            subprocess_task_handler.run_local_subprocess = original
            if saved is None:
                os.environ.pop(RUN_RECORD_ENV, None)
            else:
                os.environ[RUN_RECORD_ENV] = saved

    def finish(self, timeout_s: float = GRACE_S + 20.0) -> None:
        """Wait until no process of any step group is left (SIGKILL for what outlives `timeout_s`)."""
        deadline = time.monotonic() + timeout_s
        while any(_group_alive(g) for g in self.groups):
            if time.monotonic() > deadline:
                self._kill_all(signal.SIGKILL)
                deadline = time.monotonic() + 10.0
            time.sleep(0.1)
        if self._timer is not None:
            self._timer.cancel()

    # ------------------------------------------------------------------ MLflow
    def mark_killed(self, tracking_uri: str | None) -> tuple[list[str], int]:
        """Mark the recorded parent runs and every run under them still RUNNING as KILLED (tagged
        `factprobe.error` with the signal). Returns (parent run ids, step runs now KILLED)."""
        from factprobe_ops.tracking.context import RunContext

        path = getattr(self, "record_file", None)
        records = []
        if path is not None and path.is_file():
            records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        uri = RunContext(tracking_uri=tracking_uri or "").uri
        if not records or uri is None:
            return [], 0
        from factprobe_ops.tracking.clients import find_tagged_runs
        from factprobe_ops.tracking.connect import open_client
        from factprobe_ops.tracking.conventions import experiment_name, tag

        why = {tag("error"): f"stopped by {signal.Signals(self.signum or signal.SIGINT).name}"}
        client = open_client(uri)
        parents, killed = [], 0
        for rec in records:
            exp = client.experiment_id(experiment_name(rec["pipeline"]))
            family: dict[str, str] = {}  # run id -> status, every run under the parent
            frontier = [rec["run_id"]]
            while frontier:
                found = [r for pid in frontier for r in find_tagged_runs(client, [exp], {"mlflow.parentRunId": pid})]
                frontier = [r.run_id for r in found if r.run_id not in family]
                family.update({r.run_id: r.status for r in found})
            if rec.get("kfp_run_id"):
                for r in find_tagged_runs(client, [exp], {tag("kfp_run_id"): rec["kfp_run_id"]}, status="RUNNING"):
                    family.setdefault(r.run_id, r.status)
            family.pop(rec["run_id"], None)
            for run_id, status in family.items():
                if status == "RUNNING":
                    client.set_tags(run_id, why)
                    client.set_terminated(run_id, "KILLED")
                    family[run_id] = "KILLED"
            killed += sum(status == "KILLED" for status in family.values())
            client.set_tags(rec["run_id"], why)
            client.set_terminated(rec["run_id"], "KILLED")
            parents.append(rec["run_id"])
        return parents, killed
