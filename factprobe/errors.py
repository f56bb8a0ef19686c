"""Exceptions that carry one clear, user-facing message, and the exit code the CLI uses.

Every error a user can cause (bad file, unknown relation, unknown model, ...) is raised as a
subclass of `FactprobeError`. The CLI prints `error: {err}` on one line and exits with
`err.exit_code`; it never shows a traceback for these:

| class                       | exit code | meaning                                                   |
|-----------------------------|-----------|-----------------------------------------------------------|
| `FactprobeError` and most   | 2         | the user's input, options or data are wrong               |
| subclasses                  |           |                                                           |
| `ServiceError` (and         | 1         | a service we depend on failed or refused us: the MLflow   |
| `factprobe_ops.tracking.run.TrackingError`|           | tracking server, the loopback server of a local run, ...   |
| and its subclasses)         |           |                                                           |
| `DiskFullError`             | 1         | a disk filled up while results were written (names path)  |

`str(err)` never shows credentials: user:password in URLs and secret query parameters are
masked (`factprobe.redact.redact`), so a message can be printed or logged as it is.
"""

from __future__ import annotations

from .redact import redact


class FactprobeError(Exception):
    """Base class: the message alone must tell the user what is wrong and where."""

    exit_code: int = 2

    def __str__(self) -> str:
        return redact(super().__str__())


class DataError(FactprobeError, ValueError):
    """Malformed, missing or inconsistent input data. The message names the file and line."""


class ConfigError(FactprobeError, ValueError):
    """An invalid option: unknown relation, unknown model alias, bad --choices, ..."""


class ModelError(FactprobeError, RuntimeError):
    """A model cannot be resolved, fetched, converted or loaded."""


class ContextTooLongError(FactprobeError, ValueError):
    """A prompt does not fit the model's context window even after truncation."""


class ServiceError(FactprobeError, RuntimeError):
    """A service factprobe depends on is unreachable, rejected us, or failed mid-run (exit 1).

    `factprobe_ops.tracking.run.TrackingError` (MLflow) derives from it; factprobe itself never imports tracking."""

    exit_code = 1


class TrainingDivergedError(FactprobeError, RuntimeError):
    """Fine-tuning produced a non-finite loss, gradient norm or weights. The message names the
    step; nothing of the run is kept as a result (exit 2: usually the learning rate)."""


class DiskFullError(FactprobeError, RuntimeError):
    """No space left on the device while writing results or checkpoints; the message names the
    path (exit 1: the environment, not the input)."""

    exit_code = 1
