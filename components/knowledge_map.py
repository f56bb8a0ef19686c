"""KFP components. Step: the knowledge map, which facts each model knows under every probe, of a sweep's merged run folders (`knowledge_map`, optionally diffed against the previous night's map) or of a probe step's collected run folders (`knowledge_map_runs`); the logic is in components/steps/knowledge_map.py."""

from kfp import dsl
from kfp.dsl import HTML, Dataset, Input, Markdown, Output

from .config import CPU_IMAGE


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def knowledge_map(
    results: Input[Dataset],
    context: str,
    map_folder: Output[Dataset],
    map_html: Output[HTML],
    summary: Output[Markdown],
    against_previous: bool = False,
) -> bool:
    """Join the per-fact verdicts of every finished run (probes x models) into the knowledge map; log it to MLflow; with `against_previous`, diff each model's map against the previous run's of this pipeline (the previous night); return whether a map was built."""
    from factprobe_ops.components.steps.knowledge_map import run_knowledge_map
    from factprobe_ops.components.steps.merge import merged_runs

    out = run_knowledge_map(
        merged_runs(results.path), map_folder.path, map_html.path, summary.path, context, against_previous=against_previous
    )
    return bool(out["built"])


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def knowledge_map_runs(
    results: Input[list[Dataset]], context: str, map_folder: Output[Dataset], map_html: Output[HTML], summary: Output[Markdown]
) -> bool:
    """Join the per-fact verdicts of every finished run folder of a probe step's collected outputs into the knowledge map; log it to MLflow; return whether one was built."""
    from factprobe_ops.components.steps.knowledge_map import run_knowledge_map

    out = run_knowledge_map([r.path for r in results], map_folder.path, map_html.path, summary.path, context)
    return bool(out["built"])
