"""KFP component. Step: aggregate all (model, probe) results into the report each probe declares (figures, tables, metrics; the logic is in components/steps/report.py)."""

from kfp import dsl
from kfp.dsl import HTML, Dataset, Input, Markdown, Metrics, Output

from .config import CPU_IMAGE


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def report(
    results: Input[list[Dataset]], context: str, html_report: Output[HTML], summary: Output[Markdown], metrics: Output[Metrics]
):
    """Aggregate all models and probes: each probe's figures and tables (e.g. the accuracy heatmap, per-relation bars, Figure 7, calibration plots) and summary tables."""
    from factprobe_ops.components.steps.report import headline_scalars, run_report

    by_run = run_report([r.path for r in results], html_report.path, summary.path, context)
    for name, value in headline_scalars(by_run).items():
        metrics.log_metric(name, value)
