"""References to input files: a local path, or a URI that a plug-in resolves to a local path.

The science never talks to a tracking server itself. A file option that may name an artifact of
an earlier run (`--known-unknown runs:/<run id>`) goes through `resolve_ref`, and the operations
layer contributes the resolver for its scheme through the `factprobe.ref_resolvers` entry-point
group (`factprobe_ops.tracking.refs` resolves `runs:/<run id>[/<artifact path>]` against MLflow). Anything
without a registered scheme is a local path, returned unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path

from .errors import ConfigError

ENTRY_POINT_GROUP = "factprobe.ref_resolvers"
_RESOLVERS: dict[str, Callable[[str], Path]] = {}
_loaded = False


def register_resolver(scheme: str, resolve: Callable[[str], Path]) -> None:
    """Resolve references starting with `scheme` (e.g. "runs:/") with `resolve(ref) -> local path`."""
    _RESOLVERS[scheme] = resolve


def _resolvers() -> dict[str, Callable[[str], Path]]:
    global _loaded
    if not _loaded:
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            scheme = ep.name if ep.name.endswith(":/") else f"{ep.name}:/"
            _RESOLVERS.setdefault(scheme, ep.load())
        _loaded = True
    return _RESOLVERS


def resolve_ref(ref: str | Path) -> Path:
    """The local path of `ref`: a registered URI scheme is resolved (downloaded), anything else is
    taken as a path. Raises ConfigError for a URI-looking reference (`scheme:/...`) whose scheme
    no installed resolver handles."""
    text = str(ref)
    for scheme, resolve in _resolvers().items():
        if text.startswith(scheme):
            return Path(resolve(text))
    head = text.split(":/", 1)[0]
    if ":/" in text and head.isidentifier() and len(head) > 1:
        known = ", ".join(sorted(_resolvers())) or "none installed"
        raise ConfigError(f"{text}: no resolver for {head}:/ references (known: {known})")
    return Path(text)
