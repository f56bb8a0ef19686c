"""The `nightly_sweep` pipeline: `probe` over the models in a YAML file, compared with last night."""
from __future__ import annotations

from typing import Any

from kfp import dsl

from components.nightly_compare import nightly_compare
from components.plan import read_models

from .params import Param, make_pipeline, probes_param
from .platform import cpu_step
from .probe import DagConfig, probe_dag


def _body(values: dict[str, Any]) -> None:
    models = cpu_step(read_models(models_yaml=values["models_yaml"]), s3=False)
    uri = values["tracking_uri"]

    def compare_with_previous(parent, probed, rep):
        cmp = cpu_step(nightly_compare(results=dsl.Collected(probed.outputs["results"]), parent_run_id=parent.output,
                                       tracking_uri=uri), s3=False)
        cmp.after(rep)  # the report logs this run's summary first

    probe_dag(DagConfig.from_values("nightly_sweep", values, models.output, values["probes"], inside=compare_with_previous))


def build():
    """The pipeline (built from the registry and the cluster settings in effect; see pipelines.platform.building)."""
    return make_pipeline(
        "nightly_sweep", "factprobe-nightly-sweep",
        "Nightly knowledge sweep over a list of models from YAML, compared with the previous nightly run of the same configuration.",
        "Probe every model listed in a YAML file and log what changed since the previous nightly run.",
        # One line on purpose: kfp 2.17 copies string defaults unescaped into the YAML's comment
        # header, and a newline there makes the compiled file unparseable.
        [Param("models_yaml", str, "models: [smollm2-135m-instruct, gemma-3-270m]",
               "Path to a YAML file on a mounted volume, or inline YAML: a list of models or a mapping with a `models:` list."),
         probes_param()],
        "nightly", _body,
    )
