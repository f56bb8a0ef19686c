"""Helpers shared by the step adapters (not components themselves)."""

import os

from tracking.conventions import default_tracking_uri


def resolve_tracking_uri(tracking_uri: str) -> str | None:
    """'' -> env/default embedded store; 'none' -> tracking off (None); else the URI itself."""
    if tracking_uri.strip().lower() == "none":
        return None
    return tracking_uri.strip() or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri()


def optional(value: str) -> str | None:
    """Pipeline parameters cannot be None: '' means unset."""
    return value.strip() or None
