"""Language-model engine: loading, scoring, generation.

Every command's output is its own: what the libraries under the engine print on their own is kept
out here, where the science package loads them (`quiet_libraries`, run when this package is
imported and again by each command with its `--no-progress`). Nothing is imported for it: the
filters and levels are set on Python's `warnings` and `logging`, and on the environment variables
the libraries read when they load.

- transformers 5.x renames the decoder's `past_key_values` argument to `cache` and says so on
  every forward that uses the old name (a FutureWarning in some releases, a `[transformers]` log
  line in others). The scorer and the generator keep the old name, which every architecture
  accepts (also ones not yet migrated). `is_gradient_checkpointing` (the Trainer asks it, 5.24)
  is deprecated the same way. Neither tells a user anything.
- transformers' own log lines ("Token indices sequence length is longer ...": the scorer splits
  long contexts itself), DeepSpeed's (`[real_accelerator]` "Setting accelerator to CPU", on
  stdout) and accelerate's ("[RANK 0] Gradient accumulation steps mismatch ...") are WARNINGs:
  their loggers show ERROR and above only. accelerate's "OMP_NUM_THREADS/MKL_NUM_THREADS unset"
  UserWarning is filtered (factprobe sets the threads itself: factprobe/threads.py).
- With `progress=False` (`--no-progress`) the libraries' progress bars ("Loading weights",
  "Writing model shards") are off too.
- DeepSpeed `print`s "DeepSpeed <op> built successfully" whenever it loads a CPU op (the process
  group's shared-memory comm): `without_library_lines()` drops such stdout lines around the code
  that sets DeepSpeed up, passing every other line through as it is written.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

#: (message regex, category) of the library warnings that are never shown
IGNORED_WARNINGS: tuple[tuple[str, type[Warning]], ...] = (
    (r"`past_key_values`(/`cache_params`)? (is|are) deprecated", FutureWarning),
    (r"`is_gradient_checkpointing` is deprecated", FutureWarning),
    (r"OMP_NUM_THREADS/MKL_NUM_THREADS unset", UserWarning),
)
#: library loggers that show only ERROR and above
QUIET_LOGGERS = ("transformers", "DeepSpeed", "accelerate", "huggingface_hub")
#: what `quiet_libraries(progress=False)` sets so that a library loaded later starts without bars
_NO_BARS_ENV = "HF_HUB_DISABLE_PROGRESS_BARS"


class _ErrorsOnly(logging.Filter):
    """Lets through records of ERROR and above. A filter on the logger itself, because DeepSpeed
    resets its logger's level (to WARNING) when it loads."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR


_ERRORS_ONLY = _ErrorsOnly()
#: `_NO_BARS_ENV` was set by `quiet_libraries`, not by the user (so `progress=True` may remove it)
_env_set_here = False


def quiet_libraries(progress: bool | None = None) -> None:
    """Keep the libraries' own warnings, log lines and (with `progress=False`) progress bars out of
    a command's output; `progress=True` turns the libraries' bars back on, None leaves them as they
    are. Idempotent; imports nothing (a library already loaded is set directly)."""
    for message, category in IGNORED_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # read when transformers configures its logger
    for name in QUIET_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(logging.ERROR)
        if _ERRORS_ONLY not in logger.filters:
            logger.addFilter(_ERRORS_ONLY)
    tf_logging = sys.modules.get("transformers.utils.logging")
    if tf_logging is not None:
        tf_logging.set_verbosity_error()
    if progress is None:
        return
    global _env_set_here
    if progress and _env_set_here:
        os.environ.pop(_NO_BARS_ENV, None)
        _env_set_here = False
    elif not progress and os.environ.get(_NO_BARS_ENV) != "1":
        os.environ[_NO_BARS_ENV] = "1"
        _env_set_here = True
    if tf_logging is not None and not progress:
        tf_logging.disable_progress_bar()
    elif tf_logging is not None and os.environ.get(_NO_BARS_ENV) != "1":  # a user's own setting is kept
        tf_logging.enable_progress_bar()


#: whole stdout lines that libraries `print` and `without_library_lines` drops
LIBRARY_LINES = re.compile(r"DeepSpeed \S+ built successfully\n?")


class _LineFilter:
    """A text stream that writes to `target` every whole line except those `LIBRARY_LINES` matches."""

    def __init__(self, target: TextIO):
        self.target, self.pending = target, ""

    def write(self, text: str) -> int:
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            if not LIBRARY_LINES.fullmatch(line + "\n"):
                self.target.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        self.target.flush()

    def close_out(self) -> None:
        """Write what is left of an unfinished last line."""
        if self.pending and not LIBRARY_LINES.fullmatch(self.pending):
            self.target.write(self.pending)
        self.pending = ""

    def __getattr__(self, name: str):  # isatty, encoding, fileno, ...
        return getattr(self.target, name)


@contextmanager
def without_library_lines() -> Iterator[None]:
    """Within the block, stdout lines that a library prints on its own (`LIBRARY_LINES`) are dropped;
    every other line reaches stdout as it is written."""
    real = sys.stdout
    stream = _LineFilter(real)
    sys.stdout = stream  # type: ignore[assignment]
    try:
        yield
    finally:
        stream.close_out()
        if sys.stdout is stream:
            sys.stdout = real


quiet_libraries()
