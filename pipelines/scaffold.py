"""The tracked-pipeline scaffold every pipeline shares: an MLflow parent run opened by a first
step and finalized by an ExitHandler whatever happens, with the pipeline's own steps in between.

    with tracked(NAME, values, models, probes, config) as run:
        ...steps, reading run.parent (the start step: its output is the parent run id), run.job,
        run.tracking_uri, run.trigger, run.work_root...

The finalize step is the exit task (it runs after every step inside, failed or not); the start
step is the first task inside. Task names and order are those of the compiled specs
(`finalize-run`, `start-run`, both with their display names).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

from kfp import dsl

from components.finalize_run import finalize_run
from components.start_run import start_run

from .platform import cpu_step


@dataclass(frozen=True)
class RunScope:
    """What the steps inside the scaffold share: the pipeline's name, the start task (its output is
    the MLflow parent run id), the KFP run id placeholder, and the tracking / trigger / work_root
    parameters and the `options` JSON text (pipeline channels)."""

    pipeline: str
    parent: Any
    job: str
    tracking_uri: Any
    trigger: Any
    work_root: Any
    options: Any

    def step_args(self, parent_run_id: Any = None) -> dict[str, Any]:
        """The tracking arguments of a probe-like step: parent run (default: the start step's
        output; inside a loop, the cell's), tracking URI, KFP run id, trigger and pipeline."""
        return {"parent_run_id": self.parent.output if parent_run_id is None else parent_run_id,
                "tracking_uri": self.tracking_uri, "kfp_run_id": self.job, "trigger": self.trigger,
                "pipeline": self.pipeline}


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
        parent = cpu_step(start_run(pipeline=pipeline, kfp_run_id=job, trigger=trigger, tracking_uri=uri,
                                    models=models, probes=probes, config=config, options=values["options"]), s3=False)
        parent.set_display_name("start-mlflow-run")
        yield RunScope(pipeline, parent, job, uri, trigger, values["work_root"], values["options"])
