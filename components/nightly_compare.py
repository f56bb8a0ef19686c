"""KFP component. Step: compare this nightly sweep with the previous nightly run of the same configuration (the logic is in components/steps/nightly_compare.py)."""
from kfp import dsl
from kfp.dsl import Dataset, Input, Markdown, Output
from .config import CPU_IMAGE


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def nightly_compare(results: Input[list[Dataset]], parent_run_id: str, tracking_uri: str, changes: Output[Markdown]):
    """Compare with the previous nightly run of the same configuration and log what changed."""
    from components.steps.nightly_compare import run_nightly_compare

    run_nightly_compare([r.path for r in results], changes.path, parent_run_id, tracking_uri)
