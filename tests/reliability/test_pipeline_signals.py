"""Issue 18 item 12: SIGTERM (or Ctrl-C) on `factprobe pipeline run` ends the run cleanly.

One real local run of the probe pipeline on a tiny random gpt2 per store mode (the loopback
tracking server, and `FACTPROBE_SERVE_LOCAL_STORE=0` where every step opens the sqlite file):
SIGTERM while a step runs, then exit code 143 and one line saying what was stopped, no process of
the run left, and no MLflow run RUNNING: the parent and the runs that were running are KILLED."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FX = REPO / "tests" / "fixtures" / "mc_snapshot"


def _processes_mentioning(text: str) -> list[int]:
    """Pids of live processes whose command line holds `text` (the test's own folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmd and state != "Z":
            found.append(int(entry.name))
    return found


def _runs(db: Path) -> dict[str, tuple[str, dict[str, str]]]:
    """run id -> (status, tags), read straight from the sqlite store."""
    if not db.exists():
        return {}
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        runs = {rid: (status, {}) for rid, status in con.execute("select run_uuid, status from runs")}
        for key, value, rid in con.execute("select key, value, run_uuid from tags"):
            if rid in runs:
                runs[rid][1][key] = value
    except sqlite3.OperationalError:  # the store is still being created
        return {}
    finally:
        con.close()
    return runs


@pytest.mark.pipeline
@pytest.mark.slow
@pytest.mark.parametrize("serve", ["1", "0"], ids=["loopback-server", "sqlite-in-steps"])
def test_item12_sigterm_stops_the_steps_and_marks_every_run_killed(tmp_path, tiny_model_path, serve):
    """issue 18 item 12: SIGTERM on `pipeline run` -> steps stopped as process groups, parent and
    step runs KILLED (never RUNNING), the loopback server stopped last, exit 143 with one line."""
    model = tiny_model_path("gpt2")
    env = {**os.environ, "FACTPROBE_WORK": str(tmp_path / "work"), "FACTPROBE_SERVE_LOCAL_STORE": serve, "PYTHONUNBUFFERED": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "factprobe.cli",
            "pipeline",
            "run",
            "probe",
            "--param",
            f'models=["{model}"]',
            "--param",
            'probes=["ic-lke"]',
            "--param",
            "source=triples",
            "--param",
            f"data={FX / 'test.jsonl'}",
            "--param",
            "choices=5",
            "--param",
            "examples=4",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    out: list[str] = []
    err: list[str] = []
    readers = [
        threading.Thread(target=lambda s=s, b=b: b.extend(iter(s.readline, "")), daemon=True)
        for s, b in ((proc.stdout, out), (proc.stderr, err))
    ]
    for r in readers:
        r.start()
    db = tmp_path / "mlruns.db"
    try:
        # wait until the probe step runs (its MLflow run exists and is RUNNING), or at least started
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:
            if any(re.match(r"\s+probe-model\s+started", line) for line in out):
                break
            time.sleep(0.5)
        assert proc.poll() is None, "".join(out + err)[-3000:]
        assert any(re.match(r"\s+probe-model\s+started", line) for line in out), "".join(out + err)[-3000:]
        step_deadline = time.monotonic() + 120
        while time.monotonic() < step_deadline:
            running = {
                rid for rid, (status, tags) in _runs(db).items() if status == "RUNNING" and tags.get("factprobe.step") == "probe"
            }
            if running:
                break
            time.sleep(0.2)
        running_before = {rid for rid, (status, _) in _runs(db).items() if status == "RUNNING"}

        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=180)
        for r in readers:
            r.join(timeout=10)
        text = "".join(out + err)
        assert rc == 143, text[-3000:]
        last = "".join(err).strip().splitlines()[-1]
        assert "SIGTERM" in last and "KILLED" in last, last

        # the steps (their own process groups) and the loopback server are gone
        assert _processes_mentioning(str(tmp_path)) == [], text[-3000:]

        runs = _runs(db)
        assert runs, text[-3000:]
        assert not [rid for rid, (status, _) in runs.items() if status == "RUNNING"], runs
        (parent,) = [rid for rid, (_, tags) in runs.items() if tags.get("factprobe.role") == "parent"]
        assert runs[parent][0] == "KILLED", runs
        assert running_before and all(runs[rid][0] == "KILLED" for rid in running_before), (running_before, runs)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pid in _processes_mentioning(str(tmp_path)):  # steps left behind by a failed run of this test
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
