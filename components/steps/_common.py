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


def run_config(config: dict, **fields):
    """The `RunConfig` of one step from the pipeline's config dict (plus per-step fields such as
    probe and model). The dict holds every probe's options; those of other probes are ignored."""
    from factprobe.probes.config import BaseConfig, RunConfig
    from factprobe.probes.registry import get_probe

    merged = {**config, **fields}
    own = set(BaseConfig.field_names()) | set(get_probe(merged["probe"]).config_class.field_names()) | {"probe"}
    return RunConfig.from_dict({k: v for k, v in merged.items() if k in own})
