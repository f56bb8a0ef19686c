"""KFP components. Steps of a sweep after its units of work: the merge of their folders into one run folder per (model, probe), and the report and nightly comparison over that merged folder (the logic is in components/steps/merge.py, report.py and nightly_compare.py)."""

from kfp import dsl
from kfp.dsl import HTML, Dataset, Input, Markdown, Metrics, Output

from .config import CPU_IMAGE


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def merge_results(units: Input[list[Dataset]], items: Input[Dataset], context: str, results: Output[Dataset]):
    """Join the units' probe folders into one run folder per (model, probe): fact shards merged (results in item order, the probe's metrics over all rows) and logged as the run's probe run, a failed shard failing its run."""
    from factprobe_ops.components.steps.merge import run_merge

    run_merge([u.path for u in units], results.path, items.path, context)


# Named `report` and `nightly_compare` on purpose: the tasks keep their names in the sweeps' specs.
@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def report(results: Input[Dataset], context: str, html_report: Output[HTML], summary: Output[Markdown], metrics: Output[Metrics]):
    """Aggregate all models and probes of the merged run folders: each probe's figures and tables and summary tables."""
    from factprobe_ops.components.steps.merge import merged_runs
    from factprobe_ops.components.steps.report import headline_scalars, run_report

    by_run = run_report(merged_runs(results.path), html_report.path, summary.path, context)
    for name, value in headline_scalars(by_run).items():
        metrics.log_metric(name, value)


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def nightly_compare(
    results: Input[Dataset], context: str, max_drop: float, alpha: float, fail_on_alert: bool, changes: Output[Markdown]
):
    """Compare each model of the merged run folders with its previous nightly run (paired tests), tag alerts, fail on them if asked."""
    from factprobe_ops.components.steps.merge import merged_runs
    from factprobe_ops.components.steps.nightly_compare import run_nightly_compare

    run_nightly_compare(
        merged_runs(results.path), changes.path, context, max_drop=max_drop, alpha=alpha, fail_on_alert=fail_on_alert
    )
