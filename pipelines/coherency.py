"""The `coherency` pipeline (youssef2024): build the data, run the `coherency` probe (both rounds in
one probe run) for every model in a list, and report (per-relation / per-cardinality coherency).

It is `probe_dag` (pipelines/probe.py) with the probe fixed to `coherency`: start and finalize the
MLflow parent run, plan, data build, one GPU step per model, the generic `report`.

Compile: `factprobe pipeline compile` (writes build/pipelines/coherency.yaml).
Run locally: `factprobe pipeline run coherency --param models='["smollm2-135m-instruct"]'
--param source=lama --param relations=P36,P19 --param max_candidates=20`.
"""

from __future__ import annotations

from typing import Any

from .params import config_params, make_pipeline
from .probe import DagConfig, models_param, probe_dag

NAME = "coherency"
PROBE = "coherency"  # the one probe this pipeline runs (factprobe_ops.pipelines.cli.pipeline_probes validates with it)


def _body(values: dict[str, Any]) -> None:
    probe_dag(DagConfig.from_values(NAME, values, values["models"], [PROBE], config_params([PROBE])))


def build():
    """The pipeline (built from the registry and the cluster settings in effect; see factprobe_ops.pipelines.platform.building)."""
    return make_pipeline(
        NAME,
        "factprobe-coherency",
        "Factual coherency (youssef2024): subject -> object -> subject and back, for several models; per-relation "
        "and per-cardinality coherency logged to MLflow.",
        "Probe the factual coherency of several models.",
        [models_param()],
        "ui",
        _body,
        config_params([PROBE]),
    )
