"""KFP component. Step: the report over the QA and counterfactual ICL runs of every model, passed as two collected lists (Figure 7 across models with the zero-shot QA lines, Figure 6, tables; the logic is run_report in components/steps/report.py)."""

from kfp import dsl
from kfp.dsl import HTML, Dataset, Input, Markdown, Metrics, Output

from .config import CPU_IMAGE


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def counterfactual_report(
    qa_results: Input[list[Dataset]],
    counterfactual_results: Input[list[Dataset]],
    context: str,
    html_report: Output[HTML],
    summary: Output[Markdown],
    metrics: Output[Metrics],
):
    """Aggregate the QA and counterfactual ICL results of all models: cross-model Figure 7 and Figure 6, the counterfactual ICL table."""
    from factprobe_ops.components.steps.report import headline_scalars, run_report

    by_run = run_report(
        [r.path for r in qa_results] + [r.path for r in counterfactual_results], html_report.path, summary.path, context
    )
    for name, value in headline_scalars(by_run).items():
        metrics.log_metric(name, value)
