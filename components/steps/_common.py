"""Helpers shared by the step adapters (not components themselves)."""

import os

from tracking.conventions import default_tracking_uri

#: set by a local run (pipelines/local_steps.py): the file where start-run records the parent run,
#: so that a run stopped by Ctrl-C or SIGTERM can mark it KILLED
RUN_RECORD_ENV = "FACTPROBE_RUN_RECORD"


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


def record_parent_run(run_id: str, kfp_run_id: str, pipeline: str) -> None:
    """Append the parent run to the file named by RUN_RECORD_ENV (nothing when it is unset: a
    cluster run), one JSON object a line."""
    import json

    path = os.environ.get(RUN_RECORD_ENV)
    if path and run_id:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"run_id": run_id, "kfp_run_id": kfp_run_id, "pipeline": pipeline}) + "\n")
