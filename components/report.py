"""KFP component. Step: aggregate all (model, probe) results; heatmap, per-relation bars, HTML + Markdown report (the logic is in components/steps/report.py)."""
from kfp import dsl
from kfp.dsl import HTML, Dataset, Input, Markdown, Metrics, Output
from .config import CPU_IMAGE


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def report(results: Input[list[Dataset]], parent_run_id: str, tracking_uri: str, pipeline: str,
           html_report: Output[HTML], summary: Output[Markdown], metrics: Output[Metrics]):
    """Aggregate all models and probes: model x relation accuracy heatmap, per-relation bars, summary tables."""
    from components.steps.report import run_report

    by_run = run_report([r.path for r in results], html_report.path, summary.path, parent_run_id, tracking_uri, pipeline)
    for name, m in by_run.items():
        if m.get("accuracy") is not None:
            metrics.log_metric(f"acc-{name.replace(':', '-').replace('/', '_')}", m["accuracy"])
