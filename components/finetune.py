"""KFP components of the `finetune_known_unknown` pipeline (the logic is in components/steps/, one
module per step: finetune_base_table.py, finetune_sets.py, finetune_train.py, finetune_trainjob.py,
finetune_evaluate.py, finetune_report.py; what they share in finetune.py): the base model's known/unknown
table, the training sets, one setting's fine-tuning (one node, or a Kubeflow Trainer TrainJob over several),
the evaluation of the base model and of each adapter, and the before/after report."""

from kfp import dsl
from kfp.dsl import HTML, Artifact, Dataset, Input, Markdown, Metrics, Model, Output

from .config import CPU_IMAGE, GPU_IMAGE, TRAIN_IMAGE


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def finetune_base_table(
    items: Input[Dataset],
    model: str,
    config: dict,
    options: str,
    settings: list,
    known_unknown: str,
    context: str,
    work_root: str,
    table: Output[Dataset],
    results: Output[Dataset],
):
    """The base model's known/unknown table: the one given (path or runs:/<id>) or made by the qa probe over the train split."""
    from factprobe_ops.components.steps.finetune_base_table import run_base_table_step

    info = run_base_table_step(
        items.path, results.path, table.path, model, {**config, "options": options}, settings, known_unknown, context, work_root
    )
    table.metadata.update({"model": model, "format": "parquet", **info})


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def finetune_sets(
    table: Input[Dataset],
    model: str,
    settings: list,
    ft: dict,
    options: str,
    context: str,
    sets: Output[Dataset],
) -> list:
    """Build and log every setting's training set (digests; no overlap with the evaluation facts); return the loop cells."""
    from factprobe_ops.components.steps.finetune_sets import run_sets_step

    return run_sets_step(sets.path, table.path, model, settings, {**ft, "options": options}, context)


@dsl.component(base_image=TRAIN_IMAGE, install_kfp_package=False)
def finetune_train(
    table: Input[Dataset],
    sets: Input[Dataset],
    model: str,
    setting: str,
    ft: dict,
    options: str,
    context: str,
    work_root: str,
    adapter: Output[Model],
    metrics: Output[Metrics],
):
    """Fine-tune the base model on one setting's training set, as built and logged by the sets step (LoRA or full, DeepSpeed ZeRO); resumes from its checkpoint on the PVC."""
    from factprobe_ops.components.steps.finetune_train import run_train_step

    info = run_train_step(
        table.path, adapter.path, model, setting, {**ft, "options": options}, context, work_root, sets_dir=sets.path
    )
    adapter.metadata.update(
        {"setting": setting, "base_model": model, "train_set_digest": info["train_set_digest"], "mlflow_run_id": info["run_id"]}
    )
    for name in ("train_loss", "tokens_per_second", "peak_memory_bytes", "non_padding_fraction"):
        if isinstance(info.get(name), (int, float)):
            metrics.log_metric(name, float(info[name]))


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def finetune_trainjob(
    table: Input[Dataset],
    model: str,
    setting: str,
    ft: dict,
    options: str,
    num_nodes: int,
    submit: bool,
    namespace: str,
    context: str,
    work_root: str,
    manifest: Output[Artifact],
    adapter: Output[Model],
):
    """Multi-node fine-tuning: write the Kubeflow Trainer TrainJob for one setting; with submit, create it, wait, and hand on the adapter."""
    from factprobe_ops.components.steps.finetune_trainjob import run_trainjob_step

    info = run_trainjob_step(
        table.path,
        manifest.path,
        adapter.path,
        model,
        setting,
        {**ft, "options": options},
        num_nodes,
        submit,
        namespace,
        context,
        work_root,
    )
    manifest.metadata.update({"name": info["name"], "submitted": info["submitted"], "setting": setting})
    adapter.metadata.update({"setting": setting, "base_model": model})


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def finetune_evaluate_base(
    items: Input[Dataset],
    model: str,
    config: dict,
    options: str,
    context: str,
    work_root: str,
    qa_results: Output[Dataset],
    mc_results: Output[Dataset],
    metrics: Output[Metrics],
):
    """Zero-shot QA on the evaluation facts and IC-LKE on the same relations for the base model."""
    from factprobe_ops.components.steps.finetune_evaluate import run_evaluate_step

    info = run_evaluate_step(
        items.path, qa_results.path, mc_results.path, model, "base", {**config, "options": options}, context, work_root
    )
    for name, value in info["scalars"].items():
        metrics.log_metric(name, value)


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def finetune_evaluate_adapter(
    items: Input[Dataset],
    adapter: Input[Model],
    model: str,
    setting: str,
    config: dict,
    options: str,
    context: str,
    work_root: str,
    qa_results: Output[Dataset],
    mc_results: Output[Dataset],
    metrics: Output[Metrics],
):
    """Zero-shot QA on the evaluation facts and IC-LKE on the same relations for one fine-tuned adapter."""
    from factprobe_ops.components.steps.finetune_evaluate import model_link, run_evaluate_step
    from factprobe_ops.tracking.context import RunContext

    path = model_link(adapter.path, work_root, RunContext.from_json(context).kfp_run_id, model, setting)
    info = run_evaluate_step(
        items.path,
        qa_results.path,
        mc_results.path,
        path,
        setting,
        {**config, "options": options},
        context,
        work_root,
        training_dir=adapter.path,
    )
    for name, value in info["scalars"].items():
        metrics.log_metric(name, value)


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def finetune_report(
    base_qa: Input[Dataset],
    base_mc: Input[Dataset],
    qa_results: Input[list[Dataset]],
    mc_results: Input[list[Dataset]],
    ft: dict,
    options: str,
    context: str,
    html_report: Output[HTML],
    summary: Output[Markdown],
    metrics: Output[Metrics],
):
    """The before/after table (yuan2024 Tables 2-4) with paired bootstrap intervals against the base, figures, MLflow."""
    import math

    from factprobe_ops.components.steps.finetune_report import run_finetune_report

    table = run_finetune_report(
        [base_qa.path] + [r.path for r in qa_results],
        [base_mc.path] + [r.path for r in mc_results],
        html_report.path,
        summary.path,
        {**ft, "options": options},
        context,
    )
    for _, row in table.iterrows():
        for name in ("em", "f1", "contains", "iclke_acc", "em_diff"):
            if not math.isnan(row[name]):
                metrics.log_metric(f"{name}-{row['setting']}", float(row[name]))
