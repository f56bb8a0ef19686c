"""Where factprobe finds shared data and keeps its model cache.

- Data root: env `FACTPROBE_DATA`, else `../shared/data` relative to the repository root
  (the checkout that contains this package). Data is read in place, never copied.
- Cache root: env `FACTPROBE_CACHE`, else `~/.cache/factprobe`.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def data_root() -> Path:
    """Root folder of the real probing data (LAMA, LPAQA, Nobel, ...)."""
    env = os.environ.get("FACTPROBE_DATA")
    return Path(env).expanduser().resolve() if env else (REPO_ROOT.parent / "shared" / "data").resolve()


def cache_root() -> Path:
    """Root folder for converted models and other derived, re-creatable files."""
    env = os.environ.get("FACTPROBE_CACHE")
    root = Path(env).expanduser() if env else Path.home() / ".cache" / "factprobe"
    return root
