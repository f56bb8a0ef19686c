"""`make rehearse REHEARSE_ARGS=--kill-check`: a probe step killed mid-run, as a cluster kills a pod, then the rerun.

On a cluster the pod's PID 1 is Argo's emissary (`argoexec emissary`), which starts its child in a process group of
its own (Setpgid) and forwards a signal to that whole group (argo-workflows, workflow/executor/osspecific:
`syscall.Kill(-pgid, s)`), so kubelet's SIGTERM at eviction reaches the step's Python process under KFP's launcher
and kfp's `sh -ec` wrapper. In a DockerRunner container that `sh` is PID 1 and passes no signal on, so
`podman kill --signal TERM` never reaches Python. The check does what the emissary does: once the probe step's first
checkpoint row is on the claim, `kill -TERM -1` inside the container signals every process of it but PID 1 (the
`sh`, as the emissary is not signalled by itself) and the caller. Then:

1. the step's Python process says `Terminated: received signal SIGTERM` (`factprobe.signals`), its container
   exits non-zero (1: kfp's executor_main lets the exception out, so not the 143 of `factprobe probe`), the
   pipeline run fails, and the step's MLflow child run is KILLED (not FAILED, not left RUNNING);
2. the same pipeline, run again on the same claim, resumes: its probe run is FINISHED with `n_resumed` > 0 (the
   rows scored before the kill) and the accuracy of an uninterrupted laptop run of the same parameters.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

#: large enough that the step writes checkpoint rows for a while (2 relations x 30 LAMA facts, 10 options each)
KILL_PARAMS = {"source": "lama", "relations": "P36,P19", "max_facts_per_relation": "30", "choices": "10", "examples": "10"}
#: what a step's Python process says when SIGTERM reached it (factprobe.signals.Terminated)
SIGNALLED = "received signal SIGTERM"
#: exit codes of the rehearsal's step containers, in order (filled by rehearse.run_container)
EXIT_CODES: list[tuple[str, int]] = []


def first_checkpoint(work: Path, timeout: float) -> Path | None:
    """The first `probe/<key>/checkpoint.jsonl` under the claim's `work` folder holding a row, else None after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in work.glob("probe/*/checkpoint.jsonl"):
            try:
                if path.stat().st_size > 0:
                    return path
            except FileNotFoundError:
                continue
        time.sleep(0.5)
    return None


def probe_container(client, gpu_image: str):
    """The running container of the probe step (the one in the GPU image), else None."""
    for c in client.containers.list():
        tags = c.image.tags or []
        if gpu_image in tags or c.attrs.get("Config", {}).get("Image") == gpu_image:
            return c
    return None


def signal_like_the_emissary(container) -> list[str]:
    """SIGTERM to every process of `container` but PID 1 (`kill -TERM -1`, from a `podman exec` shell, which
    kill(2) also spares); returns the processes it found before, `PID COMMAND` each, for the log."""
    ps = container.exec_run(["sh", "-c", "for p in /proc/[0-9]*; do echo ${p#/proc/} $(tr '\\0' ' ' < $p/cmdline); done"])
    seen = [line for line in ps.output.decode(errors="replace").splitlines() if line.strip()]
    out = container.exec_run(["sh", "-c", "kill -TERM -1"])
    if out.exit_code not in (0, None):
        raise RuntimeError(f"kill -TERM -1 in {container.name} exited {out.exit_code}: {out.output.decode()[-200:]}")
    return seen


def runs_since(client, experiment: str, since_ms: int) -> list:
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    return [r for r in client.search_runs([exp.experiment_id], max_results=1000) if r.info.start_time >= since_ms]


def probe_runs(runs: list) -> list:
    """The probe steps' child runs (tag factprobe.step=probe), oldest first."""
    chosen = [r for r in runs if r.data.tags.get("factprobe.step") == "probe"]
    return sorted(chosen, key=lambda r: r.info.start_time)


def kill_check(
    run_pipeline, client, docker_client, gpu_image: str, work: Path, experiment: str, times: dict
) -> tuple[list[str], dict]:
    """The check of the module docstring. `run_pipeline()` runs the probe pipeline in the images and returns
    (ok, seconds, log path); `client` is an MlflowClient of the rehearsal's MLflow. Returns (failures, what it
    measured: the killed run, the rerun's accuracy and n_resumed)."""
    since = int(time.time() * 1000)
    result: dict = {}
    EXIT_CODES.clear()
    thread = threading.Thread(target=lambda: result.update(first=run_pipeline()), daemon=True)
    t0 = time.perf_counter()
    thread.start()
    checkpoint = first_checkpoint(work, timeout=900)
    if checkpoint is None:
        thread.join()
        return [f"kill check: no checkpoint row under {work}/probe within 900 s"], {}
    container = probe_container(docker_client, gpu_image)
    if container is None:
        thread.join()
        return [f"kill check: the checkpoint {checkpoint} appeared but no probe container runs (finished already?)"], {}
    rows_before = sum(1 for _ in checkpoint.open())
    seen = signal_like_the_emissary(container)
    times["kill: first checkpoint"] = time.perf_counter() - t0
    print(
        f"  kill check: SIGTERM to the process group of {container.name} at {rows_before} checkpoint rows; processes:", flush=True
    )
    for line in seen:
        print(f"    {line[:160]}", flush=True)
    thread.join()
    ok, seconds, log_path = result["first"]
    times["kill: killed run"] = seconds
    failures = []
    codes = [code for image, code in EXIT_CODES if image == gpu_image]
    if ok:
        failures.append(f"kill check: the pipeline succeeded although its probe step was signalled (log {log_path})")
    if not codes or codes[-1] == 0:
        failures.append(f"kill check: the probe container exited {codes[-1:]}: it was not stopped")
    if SIGNALLED not in log_path.read_text(errors="replace"):
        failures.append(f"kill check: no step says {SIGNALLED!r}: SIGTERM reached no Python step (log {log_path})")
    killed = probe_runs(runs_since(client, experiment, since))
    statuses = [r.info.status for r in killed]
    if statuses != ["KILLED"]:
        failures.append(f"kill check: the probe step's MLflow run is {statuses}, not ['KILLED']")
    print(
        f"  kill check: pipeline {'succeeded' if ok else 'failed'} in {seconds:.1f} s; probe container exit {codes}; probe runs {statuses}",
        flush=True,
    )
    ok2, seconds2, log2 = run_pipeline()
    times["kill: rerun"] = seconds2
    before = {r.info.run_id for r in killed}
    rerun = [r for r in probe_runs(runs_since(client, experiment, since)) if r.info.run_id not in before]
    measured = {"rows_before_kill": rows_before, "killed_status": statuses, "exit_codes": codes}
    if not ok2 or len(rerun) != 1 or rerun[0].info.status != "FINISHED":
        failures.append(
            f"kill check: the rerun {'succeeded' if ok2 else 'failed'}; probe runs {[r.info.status for r in rerun]} (log {log2})"
        )
        return failures, measured
    metrics = rerun[0].data.metrics
    measured |= {"n_resumed": metrics.get("n_resumed"), "accuracy": metrics.get("accuracy"), "rerun_s": seconds2}
    print(
        f"  kill check: rerun FINISHED in {seconds2:.1f} s; n_resumed {metrics.get('n_resumed')}; accuracy {metrics.get('accuracy')}",
        flush=True,
    )
    if not metrics.get("n_resumed"):
        failures.append(f"kill check: the rerun resumed nothing (n_resumed {metrics.get('n_resumed')}; log {log2})")
    return failures, measured
