"""KFP component. Step: compare this nightly sweep with the previous nightly run of each model (the logic is in components/steps/nightly_compare.py)."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Markdown, Output

from .config import CPU_IMAGE


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def nightly_compare(
    results: Input[list[Dataset]], context: str, max_drop: float, alpha: float, fail_on_alert: bool, changes: Output[Markdown]
):
    """Compare each model with its previous nightly run (paired tests), tag alerts, fail on them if asked."""
    from factprobe_ops.components.steps.nightly_compare import run_nightly_compare

    run_nightly_compare(
        [r.path for r in results], changes.path, context, max_drop=max_drop, alpha=alpha, fail_on_alert=fail_on_alert
    )
