"""The tracked-pipeline scaffold every pipeline shares: an MLflow parent run opened by a first
step and finalized by an ExitHandler whatever happens, with the pipeline's own steps in between.

    with tracked(NAME, values, models, probes, config) as run:
        ...steps, each taking `context=run.context` (or, inside a loop, the cell's `context`),
        and reading run.work_root / run.options...

The start step builds the pipeline run's one `RunContext` (tracking/context.py: tracking URI,
pipeline, trigger, KFP run id, user, git commit, and the MLflow parent run it opens) and outputs
it as JSON; every later step takes that one `context` input instead of loose tracking inputs. The
finalize step is the exception: it is the exit task, which runs even when the start step failed,
so it takes the pipeline name, the KFP run id and the `tracking_uri` pipeline parameter itself.

The finalize step is the exit task (it runs after every step inside, failed or not); the start
step is the first task inside. Task names and order are those of the compiled specs
(`finalize-run`, `start-run`, both with their display names).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kfp import dsl

from factprobe_ops.components.finalize_run import finalize_run
from factprobe_ops.components.start_run import start_run

from .platform import cpu_step


@dataclass(frozen=True)
class RunScope:
    """What the steps inside the scaffold share: the pipeline's name, the start task (its output is
    the run context JSON), and the work_root parameter and the `options` JSON text (pipeline
    channels)."""

    pipeline: str
    start: Any
    work_root: Any
    options: Any

    @property
    def context(self) -> Any:
        """The run context (JSON) every step takes: the start step's output."""
        return self.start.output

    def step_args(self, context: Any = None) -> dict[str, Any]:
        """The tracking argument of a step: `context`, the start step's output by default (inside a
        loop, the cell's `context`: see pipelines/probe.py for why)."""
        return {"context": self.context if context is None else context}


@contextmanager
def tracked(pipeline: str, values: dict[str, Any], models: Any, probes: Any, config: dict[str, Any]) -> Iterator[RunScope]:
    """Open the scaffold in the pipeline being defined: the finalize exit task, then inside its
    ExitHandler the start step (parent run tagged with `models`, `probes` and `config` as its
    params). `values` are the pipeline's parameters ({name: channel}): tracking_uri, trigger and
    work_root are read from it. Yields the `RunScope` the pipeline's steps use."""
    job = dsl.PIPELINE_JOB_ID_PLACEHOLDER
    uri, trigger = values["tracking_uri"], values["trigger"]
    final = cpu_step(finalize_run(pipeline=pipeline, kfp_run_id=job, tracking_uri=uri), s3=False)
    final.set_display_name("finalize-mlflow-run")
    with dsl.ExitHandler(final, name="track-and-probe"):
        parent = cpu_step(
            start_run(
                pipeline=pipeline,
                kfp_run_id=job,
                trigger=trigger,
                tracking_uri=uri,
                models=models,
                probes=probes,
                config=config,
                options=values["options"],
            ),
            s3=False,
        )
        parent.set_display_name("start-mlflow-run")
        yield RunScope(pipeline, parent, values["work_root"], values["options"])
