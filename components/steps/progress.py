"""Progress lines of long steps, for pod logs and `factprobe pipeline run`.

A pod's log is not a terminal: a tqdm bar there is one ever-growing line of carriage returns.
`ProgressLog` is an `on_batch(done, total)` callback (factprobe.framework.runner.run_probe) that
prints one line at most every `every_s` seconds, and always the last one:

    progress: ic-lke gemma-3-270m: 120/400 rows (30%), 4.1 rows/s, about 68 s left

`factprobe pipeline run` shows these lines under the step's name (pipelines/cli.py, PROGRESS_PREFIX).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

PROGRESS_PREFIX = "progress: "


class ProgressLog:
    """Callable `(done, total) -> None`; `done` counts rows finished so far including resumed ones."""

    def __init__(
        self, label: str, every_s: float = 30.0, stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.label = label
        self.every_s = every_s
        self.stream = stream or sys.stdout
        self.clock = clock
        self._start: float | None = None
        self._first_done = 0
        self._last_print: float | None = None

    def line(self, done: int, total: int, now: float) -> str:
        """The progress line for `done` of `total` rows at time `now` (rate over this process's rows)."""
        pct = 100.0 * done / total if total else 100.0
        text = f"{PROGRESS_PREFIX}{self.label}: {done}/{total} rows ({pct:.0f}%)"
        elapsed = now - (self._start if self._start is not None else now)
        new = done - self._first_done
        if elapsed > 0 and new > 0:
            rate = new / elapsed
            text += f", {rate:.1f} rows/s"
            if done < total:
                text += f", about {(total - done) / rate:.0f} s left"
        return text

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        if self._start is None:  # the rate counts from the first batch on (model loading excluded)
            self._start, self._first_done = now, done
        due = self._last_print is None or now - self._last_print >= self.every_s
        if due or done >= total:
            print(self.line(done, total, now), file=self.stream, flush=True)
            self._last_print = now
