"""The `regression` pipeline: probe a candidate model and gate it against a baseline run."""

from __future__ import annotations

from typing import Any

from kfp import dsl

from factprobe_ops.components.regression_gate import fail_run, regression_gate_step
from factprobe_ops.tracking.baseline import gateable_probes

from .params import Param, make_pipeline
from .platform import cpu_step
from .probe import DagConfig, probe_config_params, probe_dag


def _body(values: dict[str, Any]) -> None:
    def gate(run, probed, rep):
        # One candidate x one probe: the collected list has exactly one entry.
        g = cpu_step(
            regression_gate_step(
                candidate=dsl.Collected(probed.outputs["results"]),
                baseline=values["baseline"],
                max_drop=values["max_drop"],
                alpha=values["alpha"],
                context=run.context,
            ),
            s3=False,
        )
        with dsl.If(g.outputs["Output"] == "FAIL", name="gate-failed"):
            cpu_step(fail_run(message=values["baseline"]), s3=False)

    probe_dag(
        DagConfig.from_values(
            "regression", values, [values["candidate"]], [values["probe_name"]], probe_config_params(), inside=gate
        )
    )


def build():
    """The pipeline (built from the registry and the cluster settings in effect; see factprobe_ops.pipelines.platform.building)."""
    return make_pipeline(
        "regression",
        "factprobe-regression",
        "CI regression gate: probe a candidate model and fail if it is significantly worse than a baseline run on the same facts.",
        "Probe `candidate`, compare it fact by fact with `baseline`, and fail the run when the gate fails.",
        [
            Param(
                "candidate",
                str,
                "smollm2-135m-instruct",
                "Model to test: alias, hub id, PEFT adapter folder or folder on a mounted volume.",
            ),
            Param(
                "baseline",
                str,
                "factprobe.baseline=true",
                "MLflow run id of the baseline probe run, or a tag filter key=value (latest finished match).",
            ),
            Param(
                "probe_name",
                str,
                "ic-lke",
                f"Probe: {', '.join(gateable_probes())} (use the baseline's; the gate "
                "compares the runs fact by fact on the probe's per-fact verdict).",
            ),
            Param("max_drop", float, 0.02, "Tolerated drop of the share of right facts (absolute, e.g. 0.02 = 2 points)."),
            Param("alpha", float, 0.05, "Significance level of McNemar's test."),
        ],
        "ci",
        _body,
        probe_config_params(),
    )
