"""A lock file that excludes processes on *different hosts* sharing a filesystem (NFS, CephFS, ...).

`fcntl.flock` only excludes processes of one kernel on many network filesystems (NFS without a
working lock manager, several CSI drivers), so pods on two nodes sharing a PersistentVolumeClaim
could both hold it. This lock is a file created with `O_CREAT | O_EXCL`, which is atomic on
every POSIX filesystem and on NFSv3+:

- the holder writes a token (`host:pid:random`, then an optional ` label` naming what it does)
  into it and refreshes its mtime every `heartbeat` seconds from a daemon thread;
- a waiter polls; a lock whose mtime is older than `stale_after` seconds (its holder died
  without removing it: a preempted pod), or whose holder ran on this host under a pid that no
  longer exists (killed, even by SIGKILL: taken over at once), is broken by renaming it to a
  unique name, an atomic operation exactly one waiter wins, and the waiters race for a new lock;
- on exit the holder removes the file if it still holds its own token.

`stale_after` must exceed `heartbeat` by far (clocks of the hosts may differ by a few seconds;
NFS sets the mtime from the server's clock). Usage::

    with lock_file(root / ".smollm2.build-lock", on_wait=lambda owner: print("waiting for", owner)):
        ...  # build once

Why not `filelock` (checked 2026-11-29, filelock 4.3.1, issue 42 item 7): its `SoftFileLease` (since 3.30)
now does most of what this module does: a marker file created atomically, a heartbeat thread, takeover of
an expired claim and of a dead holder on the same host, and two things this module does not: a process
start token against recycled pids, and expiry measured on each peer's monotonic clock (no cross-host clock
skew). It does not carry what the holder is doing. Every refusal built on this lock names it (`holder()`:
"runs/x is in use by host:pid: probe ic-lke on smollm2 ...", the model cache's "waiting for ... building
gemma-3-270m"), and a second file beside its marker would not be written atomically with the claim, so a
waiter could name the previous holder's work. That is why this module stays; a filelock release whose marker
takes an owner label would replace it. It moved out of the engine room (`factprobe.lm`): a lock is not an
engine.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

STALE_AFTER_S = 120.0
HEARTBEAT_S = 10.0


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (FileNotFoundError, UnicodeDecodeError):
        return None


def holder(token: str | None) -> tuple[str, int | None, str]:
    """(host, pid, label) of a lock file's content (`host:pid:random label`); ("", None, "")
    when it is not one (empty: being written)."""
    head, _, label = (token or "").strip().partition(" ")
    host, _, rest = head.partition(":")
    pid, _, _ = rest.partition(":")
    return (host, int(pid), label) if host and pid.isdigit() else ("", None, "")


def _dead_here(token: str | None) -> bool:
    """True when `token`'s holder ran on this host and its pid no longer exists."""
    host, pid, _ = holder(token)
    if pid is None or host != socket.gethostname() or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # EPERM: alive, another user's
        return False
    return False


def _break_if_stale(path: Path, stale_after: float) -> bool:
    """Remove `path` when its mtime is older than `stale_after` or its holder is a dead process
    of this host; True when the caller should retry at once (the lock is gone or was broken here)."""
    try:
        age = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return True
    seen = _read(path)
    if age < stale_after and not _dead_here(seen):
        return False
    moved = path.with_name(f"{path.name}.stale-{uuid.uuid4().hex[:8]}")
    try:
        os.rename(path, moved)  # atomic: of several waiters, one moves it
    except FileNotFoundError:
        return True
    if _read(moved) != seen:  # a new holder took the lock between our stat and the rename: give it back
        try:
            os.link(moved, path)
        except FileExistsError:
            pass
    moved.unlink(missing_ok=True)
    return True


@contextmanager
def lock_file(
    path: str | Path,
    stale_after: float = STALE_AFTER_S,
    heartbeat: float = HEARTBEAT_S,
    poll: float = 0.5,
    timeout: float | None = None,
    on_wait: Callable[[str], None] | None = None,
    label: str = "",
) -> Iterator[str]:
    """Hold the lock file `path` inside the block (see the module docstring); yields the token.

    `on_wait(owner)` is called once when the lock is busy (owner: the holder's token). Raises
    TimeoutError after `timeout` seconds of waiting (None: wait as long as the holder lives).
    `label` (no line breaks) is written after the token, for a refused waiter to read (`holder`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
    if label:
        token += " " + " ".join(label.split())
    start = time.monotonic()
    told = False
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if _break_if_stale(path, stale_after):
                continue
            if not told and on_wait is not None:
                on_wait(_read(path) or "another process")
                told = True
            if timeout is not None and time.monotonic() - start > timeout:
                raise TimeoutError(
                    f"lock {path} is held by {_read(path) or 'another process'} (waited {timeout:.0f} s)"
                ) from None
            time.sleep(poll)
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(token)
            fh.flush()
            os.fsync(fh.fileno())
        break
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(heartbeat):
            if _read(path) != token:
                return  # broken by a waiter (we stalled for longer than stale_after)
            try:
                os.utime(path)
            except FileNotFoundError:
                return

    thread = threading.Thread(target=beat, name=f"lock-heartbeat-{path.name}", daemon=True)
    thread.start()
    try:
        yield token
    finally:
        stop.set()
        thread.join(timeout=heartbeat + 1)
        if _read(path) == token:
            path.unlink(missing_ok=True)
