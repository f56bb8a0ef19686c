"""KFP component. Step: build the multiple-choice dataset once for every model and probe of a pipeline run (the logic is in components/steps/data_build.py)."""
from kfp import dsl
from kfp.dsl import Dataset, Metrics, Output
from .config import CPU_IMAGE


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def data_build(
    source: str, data: str, train_data: str, relations: str, max_facts_per_relation: int, examples: int,
    choices: int, seed: int, parent_run_id: str, tracking_uri: str, items: Output[Dataset], stats: Output[Metrics],
):
    """Build the multiple-choice test items (gold + distractors) and training facts for in-context examples."""
    from components.steps.data_build import run_data_build

    info = run_data_build(items.path, source, data, train_data, relations, max_facts_per_relation, examples, choices,
                          seed, parent_run_id, tracking_uri)
    items.metadata.update({"digest": info["digest"], "n_items": info["n_items"], "source": source})
    stats.log_metric("n_items", info["n_items"])
    stats.log_metric("n_relations", info["n_relations"])
