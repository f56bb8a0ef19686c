"""The `nightly_sweep` pipeline: `probe` over the models in a YAML file, compared with last night.

The models YAML lists each model's own settings (gpus, memory, cpu, dtype, device_map, endpoint:
components/steps/plan.py `model_entry`; an unknown key is refused); the sweep's units, shards,
one-load setting and parallelism cap are those of `probe` (pipelines/probe.py `sweep_dag`).

One broken model does not cost the others: its probe step records the failure instead of failing
(`run_unit_step(tolerant=True)`), the report covers every other model and names the failure, and the
comparison step (components/steps/nightly_compare.py) compares each model with its own previous
nightly run (paired bootstrap + McNemar), tags the parent run `factprobe.alert` on a significant
drop or a failed model, and then exits non-zero unless `fail_on_alert=false`.

Before the comparison, the sweep's knowledge map (issue 39; pipelines/probe.py `DagConfig.knowledge_map`):
which facts each model knows under every probe, and each model's map diffed against its map of the
previous night (components/steps/map_previous.py: facts gained and lost under every probe, on the
parent run as `report/nightly_knowledge_map.md` and `tables/nightly_knowledge_map.json`). A sweep of
one probe skips the map and says why.
"""

from __future__ import annotations

from typing import Any

from factprobe_ops.components.merge import nightly_compare
from factprobe_ops.components.plan import read_models

from .params import Param, make_pipeline, probes_param
from .platform import cpu_step
from .probe import DagConfig, probe_config_params, sweep_dag, sweep_params


def _body(values: dict[str, Any]) -> None:
    models = cpu_step(read_models(models_yaml=values["models_yaml"]), s3=False)

    def compare_with_previous(run, merged, rep):
        cmp = cpu_step(
            nightly_compare(
                results=merged.outputs["results"],
                context=run.context,
                max_drop=values["max_drop"],
                alpha=values["alpha"],
                fail_on_alert=values["fail_on_alert"],
            ),
            s3=False,
        )
        cmp.after(rep)  # the report and the knowledge map first: a comparison that fails on an alert costs neither

    sweep_dag(
        DagConfig.from_values(
            "nightly_sweep",
            values,
            models.output,
            values["probes"],
            probe_config_params(),
            inside=compare_with_previous,
            knowledge_map=True,
            map_previous=True,
        ),
        tolerant=True,
    )


def build():
    """The pipeline (built from the registry and the cluster settings in effect; see factprobe_ops.pipelines.platform.building)."""
    return make_pipeline(
        "nightly_sweep",
        "factprobe-nightly-sweep",
        "Nightly knowledge sweep over a list of models from YAML, each compared with its previous nightly run.",
        "Probe every model listed in a YAML file and flag significant drops since the previous nightly run.",
        # One line on purpose: kfp 2.17 copies string defaults unescaped into the YAML's comment
        # header, and a newline there makes the compiled file unparseable.
        [
            Param(
                "models_yaml",
                str,
                "models: [smollm2-135m-instruct, gemma-3-270m]",
                "Path to a YAML file on a mounted volume, or inline YAML: a list of models or a mapping with a `models:` list.",
            ),
            probes_param(),
            *sweep_params(),
            Param("max_drop", float, 0.02, "Accuracy drop since the previous night (absolute) that may count as a regression."),
            Param("alpha", float, 0.05, "Significance level of the paired tests (McNemar, paired bootstrap)."),
            Param(
                "fail_on_alert",
                bool,
                True,
                "Fail the run (after reporting) when a model failed or dropped significantly; the alert tag is set either way.",
            ),
        ],
        "nightly",
        _body,
        probe_config_params(),
    )
