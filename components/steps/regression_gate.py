"""Step: the CI regression gate: candidate results against a baseline run, on the same facts."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tracking.context import RunContext


def run_gate(candidate_dir: str, baseline: str, max_drop: float, alpha: float, md_path: str,
             context: RunContext | str) -> dict:
    """Gate decision (factprobe.metrics.comparison.regression_gate) of the candidate's results
    against `baseline` (run id, tag filter or results folder, looked up on the tracking URI of
    `context`, the pipeline run's `RunContext` or its JSON). Logs the decision to the parent run and writes a Markdown report. Returns {"decision": "PASS"|"FAIL", ...}. Raises ConfigError
    for a `max_drop` / `alpha` out of range and for runs the gate cannot gate (not multiple choice)."""
    from factprobe.io import atomic_write_text
    from factprobe.metrics.comparison import align_templates, regression_gate
    from tracking.baseline import check_gate_settings, check_gate_table
    from tracking.compare import _from_results_file, resolve_run
    from tracking.conventions import tag
    from tracking.context import RunContext
    from tracking.run import TrackedRun

    from pathlib import Path

    max_drop, alpha = check_gate_settings(max_drop, alpha, ("max_drop", "alpha"))
    ctx = RunContext.from_json(context)
    uri = ctx.uri
    base_df, base_desc = resolve_run(baseline, uri)
    check_gate_table(base_df, base_desc, "baseline")
    cand_df = _from_results_file(Path(candidate_dir))
    check_gate_table(cand_df, {"ref": candidate_dir}, "candidate")
    cand_df, base_df, _ = align_templates(cand_df, base_df)
    d = regression_gate(cand_df, base_df, max_drop=float(max_drop), alpha=float(alpha))
    decision = "PASS" if d.passed else "FAIL"
    atomic_write_text(md_path, f"# Regression gate: {decision}\n\n```\n{d.report()}\n```\n")
    if ctx.tracked:
        run = TrackedRun.parent_of(ctx)
        run.__enter__()
        run.set_tags({tag("gate"): decision, tag("baseline"): baseline})
        run.log_metrics({"gate/diff": d.diff, "gate/p_value": d.p_value, "gate/passed": float(d.passed), "gate/n": d.n})
        run.log_text(d.report(), "gate/report.txt")
    return {"decision": decision, "diff": d.diff, "p_value": d.p_value, "n": d.n, "report": d.report()}
