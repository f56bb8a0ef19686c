"""SIGTERM handled like SIGINT: Kubernetes evicts a pod with SIGTERM, and a run must then stop the
way Ctrl-C stops it (checkpoint flushed, MLflow run marked KILLED, exit non-zero), not die silently.

    with sigterm_as_interrupt():
        ...   # a SIGTERM raises `Terminated` (a KeyboardInterrupt) here

`Terminated.exit_code` is 143 (128 + SIGTERM), the code a shell reports for a SIGTERM'd process.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Terminated(KeyboardInterrupt):
    """The process received SIGTERM."""

    exit_code = 128 + signal.SIGTERM


def _raise_terminated(signum, frame) -> None:
    raise Terminated(f"received signal {signal.Signals(signum).name}")


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises `Terminated` in the main thread (a no-op elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
