"""The MLflow run around one probe run (CLI, pipeline step, regress candidate)."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from .conventions import tag
from .probe_logging import CONFIG_PARAM
from .run import TrackedRun


@contextmanager
def probe_run(cfg, tracking_uri: str | None, enabled: bool = True, required: bool = False, trigger: str = "local",
              parent_run_id: str | None = None, pipeline: str = "probe", run_name: str | None = None,
              extra_tags: dict | None = None, step_key: str | None = None) -> Iterator[TrackedRun]:
    """A TrackedRun for one probe, with its parameters and identifying tags already logged."""
    tags = {tag("model"): cfg.base.model, tag("probe"): cfg.probe, tag("trigger"): trigger, tag("source"): cfg.base.source,
            tag("config_key"): cfg.results_key(), **(extra_tags or {})}
    with TrackedRun(pipeline=pipeline, run_name=run_name or f"{cfg.probe}-{cfg.base.model}", tracking_uri=tracking_uri,
                    tags=tags, parent_run_id=parent_run_id, required=required, enabled=enabled, step_key=step_key) as run:
        # Every field as its own parameter (for the UI), and the whole config as JSON: the one
        # `RunConfig.from_dict` reads it back (tracking/compare.py), no Python repr parsing.
        run.log_params({**{k: v for k, v in cfg.to_dict().items() if k != "out"}, CONFIG_PARAM: cfg.to_json()})
        yield run
