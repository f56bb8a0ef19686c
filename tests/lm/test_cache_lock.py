"""The model cache's build lock across processes (factprobe.file_lock, gguf_cache._build_lock):
two processes at once build an alias once and never overlap; a lock left by a dead holder (a
preempted pod) is broken after `stale_after`; a live one is not."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from factprobe.file_lock import lock_file

REPO = Path(__file__).resolve().parents[2]

# Each process: take the cache's build lock for the alias, and inside it "build" unless a build is
# already there (prepare_alias's double check), logging enter/leave with its pid.
WORKER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from factprobe.models import gguf_cache
    log, built = Path(sys.argv[1]), Path(sys.argv[2])
    Path(sys.argv[3]).touch()  # ready
    while not Path(sys.argv[4]).exists():  # start together
        time.sleep(0.01)
    with gguf_cache._build_lock("smollm2-135m-instruct"):
        with log.open("a") as f:
            f.write(f"enter {os.getpid()}\\n")
        if not built.exists():
            time.sleep(1.0)  # the conversion
            built.write_text(str(os.getpid()))
        with log.open("a") as f:
            f.write(f"leave {os.getpid()}\\n")
""")


def test_two_processes_build_once_and_never_overlap(tmp_path):
    env = {**os.environ, "FACTPROBE_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(REPO)}
    log, built, go = tmp_path / "log", tmp_path / "built", tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(log), str(built), str(tmp_path / f"ready{i}"), str(go)],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready{i}").exists() for i in range(2)):
        assert time.monotonic() < deadline, "workers did not start"
        time.sleep(0.05)
    go.touch()
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    lines = log.read_text().split()
    events = list(zip(lines[0::2], lines[1::2]))
    assert len(events) == 4
    # enter A, leave A, enter B, leave B: the second waits for the first
    assert [e for e, _ in events] == ["enter", "leave", "enter", "leave"], events
    assert events[0][1] == events[1][1] and events[2][1] == events[3][1] != events[0][1]
    assert built.read_text() == events[0][1]  # built once, by the first
    assert "waiting for another process" in outs[[str(p.pid) for p in procs].index(events[2][1])]
    assert not list((tmp_path / "cache" / "models").glob(".*build-lock*")), "the lock file is removed"


def test_a_stale_lock_is_broken_and_a_live_one_is_not(tmp_path):
    path = tmp_path / "x.build-lock"
    path.write_text("deadhost:1:abc")
    old = time.time() - 300
    os.utime(path, (old, old))  # its holder stopped refreshing it 5 minutes ago
    with lock_file(path, stale_after=120, timeout=5) as token:
        assert path.read_text() == token and token != "deadhost:1:abc"
    assert not path.exists()
    assert not list(tmp_path.glob("x.build-lock.stale-*"))
    path.write_text("livehost:2:def")  # fresh mtime: a live holder
    with pytest.raises(TimeoutError, match="livehost:2:def"), lock_file(path, stale_after=120, timeout=0.3, poll=0.05):
        pass
    assert path.read_text() == "livehost:2:def"  # untouched


def test_the_holder_keeps_its_lock_fresh(tmp_path):
    path = tmp_path / "y.build-lock"
    with lock_file(path, heartbeat=0.05):
        first = path.stat().st_mtime_ns
        time.sleep(0.3)
        assert path.stat().st_mtime_ns > first
