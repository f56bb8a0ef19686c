"""Step: the CI regression gate: candidate results against a baseline run, on the same facts."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from factprobe_ops.tracking.context import RunContext


def run_gate(
    candidate_dir: str,
    baseline: str,
    max_drop: float,
    alpha: float,
    md_path: str,
    context: RunContext | str,
    allow_numerics_change: bool = False,
) -> dict:
    """Gate decision (factprobe.metrics.comparison.regression_gate) of the candidate's results
    against `baseline` (run id, results folder, or tag filter matching exactly one run, looked up on
    the tracking URI of `context`, the pipeline run's `RunContext` or its JSON). Logs the decision to
    the parent run and writes a Markdown report, both in the probe's headline metric and its direction
    (`factprobe.metrics.gate.GateDecision`). Returns {"decision": "PASS"|"FAIL", "metric", "direction",
    "candidate_value", "baseline_value", "diff" (of that metric), "p_value", "n", "report"}. Raises
    ConfigError for a `max_drop` / `alpha` out of range, for runs the gate cannot gate (a probe without
    a per-fact verdict; the verdict is gated in its headline's direction, `factprobe.framework.verdict`),
    for a baseline or candidate without a measurement identity, for other numerics (unless
    `allow_numerics_change`), and DataError for other data or a candidate lacking baseline facts, as
    `factprobe regress` does (tracking/regress.py)."""
    from pathlib import Path

    from factprobe.io import atomic_write_text
    from factprobe.metrics.comparison import align_templates
    from factprobe.metrics.gate import regression_gate
    from factprobe_ops.tracking.baseline import check_gate_settings, gate_table
    from factprobe_ops.tracking.context import RunContext
    from factprobe_ops.tracking.conventions import tag
    from factprobe_ops.tracking.regress import check_every_baseline_fact, check_gate_identities, require_identity
    from factprobe_ops.tracking.run import TrackedRun
    from factprobe_ops.tracking.run_tables import _from_results_file, folder_identity, resolve_run, run_provenance

    max_drop, alpha = check_gate_settings(max_drop, alpha, ("max_drop", "alpha"))
    ctx = RunContext.from_json(context)
    uri = ctx.uri
    base_df, base_desc = resolve_run(baseline, uri, unique=True)
    base_df, verdict = gate_table(base_df, base_desc, "baseline")
    cand_df = _from_results_file(Path(candidate_dir))
    cand_desc = {"ref": candidate_dir, "identity": folder_identity(candidate_dir)}
    cand_df, _ = gate_table(cand_df, cand_desc, "candidate")
    base_ident = require_identity(base_desc, "baseline")
    configs = (run_provenance(base_desc)[0], run_provenance(cand_desc)[0])
    note = check_gate_identities(base_ident, require_identity(cand_desc, "candidate"), allow_numerics_change, configs)
    cand_df, base_df, _ = align_templates(cand_df, base_df)
    check_every_baseline_fact(cand_df, base_df)
    d = regression_gate(
        cand_df,
        base_df,
        max_drop=float(max_drop),
        alpha=float(alpha),
        metric=verdict.metric,
        higher_is_better=verdict.higher_is_better,
    )
    decision = "PASS" if d.passed else "FAIL"
    notes = [note] if note else []
    atomic_write_text(
        md_path, f"# Regression gate: {decision}\n\n" + "".join(f"{n}\n\n" for n in notes) + f"```\n{d.report()}\n```\n"
    )
    if ctx.tracked:
        with TrackedRun.parent_of(ctx) as run:  # the parent run: logged into, not ended (the finalize step ends it)
            run.set_tags({tag("gate"): decision, tag("baseline"): baseline, tag("gate_metric"): f"{d.metric} ({d.direction})"})
            run.log_metrics({"gate/diff": d.diff, "gate/p_value": d.p_value, "gate/passed": float(d.passed), "gate/n": d.n})
            run.log_text(d.report(), "gate/report.txt")
    return {
        "decision": decision,
        "metric": d.metric,
        "direction": d.direction,
        "candidate_value": d.candidate_value,
        "baseline_value": d.baseline_value,
        "diff": d.diff,
        "p_value": d.p_value,
        "n": d.n,
        "report": d.report(),
    }
