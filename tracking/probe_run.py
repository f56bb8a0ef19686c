"""The MLflow run around one probe run (CLI, pipeline step, regress candidate)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .context import RunContext
from .conventions import tag
from .probe_logging import CONFIG_PARAM
from .run import TrackedRun


@contextmanager
def probe_run(
    cfg,
    context: RunContext,
    enabled: bool = True,
    required: bool = False,
    run_name: str | None = None,
    extra_tags: dict | None = None,
    step_key: str | None = None,
    warn: Callable[[str], None] | None = None,
) -> Iterator[TrackedRun]:
    """A TrackedRun for one probe in `context` (a child of its parent run when it has one), with
    its parameters and identifying tags already logged. `enabled=False` switches tracking off;
    `warn` replaces the run's one-line stderr warnings (`TrackedRun`)."""
    tags = {
        tag("model"): cfg.base.model,
        tag("probe"): cfg.probe,
        tag("trigger"): context.trigger or "local",
        tag("source"): cfg.base.source,
        tag("config_key"): cfg.results_key(),
        **(extra_tags or {}),
    }
    run = TrackedRun.from_context(
        context,
        run_name=run_name or f"{cfg.probe}-{cfg.base.model}",
        tags=tags,
        step_key=step_key,
        required=required,
        child=bool(context.parent_run_id),
        warn=warn,
    )
    run.enabled = run.enabled and enabled
    with run:
        # Every field as its own parameter (for the UI), and the whole config as JSON: the one
        # `RunConfig.from_dict` reads it back (tracking/compare.py), no Python repr parsing.
        run.log_params({**{k: v for k, v in cfg.to_dict().items() if k != "out"}, CONFIG_PARAM: cfg.to_json()})
        yield run
