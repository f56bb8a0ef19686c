"""KFP component. Step: the CI regression gate: candidate results against a baseline run, on the same facts (the logic is in components/steps/regression_gate.py)."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Markdown, Metrics, Output

from .config import CPU_IMAGE


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def regression_gate_step(
    candidate: Input[list[Dataset]],
    baseline: str,
    max_drop: float,
    alpha: float,
    context: str,
    report: Output[Markdown],
    gate: Output[Metrics],
) -> str:
    """Compare the candidate with the baseline fact by fact (paired bootstrap + McNemar); return PASS or FAIL."""
    from factprobe_ops.components.steps.regression_gate import run_gate

    if len(candidate) != 1:
        raise ValueError(f"the regression gate expects one candidate result, got {len(candidate)}")
    out = run_gate(candidate[0].path, baseline, max_drop, alpha, report.path, context)
    gate.log_metric("diff", out["diff"])
    gate.log_metric("p_value", out["p_value"])
    gate.log_metric("passed", 1.0 if out["decision"] == "PASS" else 0.0)
    return out["decision"]


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def fail_run(message: str):
    """Fail the pipeline run on purpose (the gate said FAIL), so CI and the UI show it red."""
    raise SystemExit(f"regression gate failed: {message}")
