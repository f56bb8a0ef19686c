"""The tracking layer's hooks into the science's commands, importable only where MLflow is installed.

Entry points (pyproject.toml): `factprobe.probe_hooks` -> `ProbeTracking` (cli.py) and `factprobe.study_hooks`
-> `StudyTracking` (study_run.py). They run inside `factprobe probe` and `factprobe study`, so without the
`tracking` extra this module's import fails with ModuleNotFoundError('mlflow') and factprobe leaves the hooks out
(factprobe/plugins.py): the science runs untracked, with no tracking options and no warning on every run. MLflow
is only looked up here, not imported (that costs seconds at start-up); the hooks import it when a run opens.
"""

from __future__ import annotations

from importlib.util import find_spec
from typing import Any

if find_spec("mlflow") is None:
    raise ModuleNotFoundError(
        "No module named 'mlflow' (the tracking hooks need pip install 'factprobe[tracking]')", name="mlflow"
    )


def __getattr__(name: str) -> Any:
    """`ProbeTracking` and `StudyTracking`, imported on first use."""
    if name == "ProbeTracking":
        from .cli import ProbeTracking

        return ProbeTracking
    if name == "StudyTracking":
        from .study_run import StudyTracking

        return StudyTracking
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
