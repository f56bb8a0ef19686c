"""KFP component. Step: build each probe dataset once for every model of a pipeline run (the logic is in components/steps/data_build.py)."""

from kfp import dsl
from kfp.dsl import Dataset, Metrics, Output

from .config import CPU_IMAGE


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def data_build(config: dict, options: str, probes: list, context: str, items: Output[Dataset], stats: Output[Metrics]):
    """Build the items every requested probe needs (one folder per dataset kind) from the run config."""
    from factprobe_ops.components.steps.data_build import run_data_build

    info = run_data_build(items.path, {**config, "options": options}, probes, context)
    items.metadata.update({"digest": info["digest"], "n_items": info["n_items"], "datasets": info["datasets"]})
    stats.log_metric("n_items", info["n_items"])
    stats.log_metric("n_relations", info["n_relations"])
