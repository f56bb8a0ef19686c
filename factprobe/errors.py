"""Exceptions that carry one clear, user-facing message.

Every error a user can cause (bad file, unknown relation, unknown model, ...) is raised as a
subclass of `FactprobeError`. The CLI prints `str(err)` on one line and exits 2; it never shows
a traceback for these.
"""
from __future__ import annotations


class FactprobeError(Exception):
    """Base class: the message alone must tell the user what is wrong and where."""


class DataError(FactprobeError, ValueError):
    """Malformed, missing or inconsistent input data. The message names the file and line."""


class ConfigError(FactprobeError, ValueError):
    """An invalid option: unknown relation, unknown model alias, bad --choices, ..."""


class ModelError(FactprobeError, RuntimeError):
    """A model cannot be resolved, fetched, converted or loaded."""


class ContextTooLongError(FactprobeError, ValueError):
    """A prompt does not fit the model's context window even after truncation."""
