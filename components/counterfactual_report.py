"""KFP component. Step: the counterfactual ICL report over every model: Figure 7 (EM against k per setting), regular vs counterfactual bars (Figure 6), tables (the logic is run_report in components/steps/report.py)."""
from kfp import dsl
from kfp.dsl import HTML, Dataset, Input, Markdown, Metrics, Output
from .config import CPU_IMAGE


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def counterfactual_report(qa_results: Input[list[Dataset]], counterfactual_results: Input[list[Dataset]], parent_run_id: str,
                          tracking_uri: str, pipeline: str, html_report: Output[HTML], summary: Output[Markdown],
                          metrics: Output[Metrics]):
    """Aggregate the QA and counterfactual ICL results of all models: cross-model Figure 7 and Figure 6, the counterfactual ICL table."""
    from components.steps.report import run_report

    by_run = run_report([r.path for r in qa_results] + [r.path for r in counterfactual_results], html_report.path,
                        summary.path, parent_run_id, tracking_uri, pipeline)
    for name, m in by_run.items():
        if m.get("em") is not None:
            metrics.log_metric(f"em-{name.replace(':', '-').replace('/', '_')}", m["em"])
