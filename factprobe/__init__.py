"""factprobe: measure what language models know about facts.

`factprobe.__version__` is the installed distribution's version (the version in pyproject.toml for a
source checkout that is not installed: factprobe/version.py). The Python API (docs/python-api.md) is
reached from here: `factprobe.probe`, `factprobe.load_results`, `factprobe.load_metrics`,
`factprobe.load_config`, `factprobe.compare` and `factprobe.knowledge_map` (factprobe/api.py). They are loaded on first use
(module `__getattr__`), so `import factprobe` imports neither torch nor transformers nor pandas.
"""

from __future__ import annotations

from typing import Any

from .version import __version__

_API = ("probe", "load_results", "load_metrics", "load_config", "compare", "knowledge_map")
#: the API: lazy (__getattr__)
__all__ = ["__version__", "compare", "knowledge_map", "load_config", "load_metrics", "load_results", "probe"]


def __getattr__(name: str) -> Any:
    if name in _API:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'factprobe' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
