"""The `finetune_known_unknown` pipeline (yuan2024 section 5, Tables 2-4): fine-tune one base model on
known, unknown, mixed, counterfactual and regular facts and compare zero-shot QA and IC-LKE
before and after.

1. `finetune-base-table` (GPU): the base model's known/unknown table, reused when `known_unknown`
   names one (a path or `runs:/<MLflow run id>`), else made by the `qa` probe over the train split;
   in parallel `finetune-evaluate-base` (GPU): zero-shot QA on the evaluation facts and IC-LKE on
   the same relations for the base model.
2. `finetune-sets` (CPU): every setting's training set, logged as MLflow datasets with digests;
   overlap with the evaluation facts is refused.
3. `ParallelFor` over the settings: `finetune-train` on the GPU node pool in the training image
   (`FACTPROBE_IMAGE_TRAIN`), /dev/shm as a memory-backed emptyDir, the model cache PVC for
   checkpoints (a preempted pod resumes), retried like every GPU step; with `num_nodes > 1` instead
   `finetune-trainjob` (CPU) writes the Kubeflow Trainer TrainJob over that many nodes and, with
   `trainjob_submit`, creates it and waits (pipelines/trainjob.py). A local build (`factprobe
   pipeline run`) always trains in the step: the local runner cannot merge If/Else outputs
   (`dsl.OneOf`), and a TrainJob needs a cluster; `num_nodes` is ignored there.
4. `finetune-evaluate-adapter` (GPU): the same evaluation for each adapter.
5. `finetune-report` (CPU): one table, a row for the base and one per setting, with paired
   bootstrap intervals against the base; figures and table on the MLflow parent run.

A run below the paper's budget (40 steps, effective batch 512) or a local run is a smoke test:
its steps say so, and its runs carry `factprobe.smoke_test=true` with the reasons.

Compile: `factprobe pipeline compile finetune_known_unknown`.
Run locally (a CPU smoke test; `make run-finetune-pipeline`):
`factprobe pipeline run finetune_known_unknown --param source=countryinfo --param relations=P30,P37
--param max_facts_per_relation=5 --param qa_train_per_relation=20 --param known_shots=4 --param choices=5
--param examples=10 --param train_size=6 --param max_steps=2 --param batch_size=4 --param grad_accum=1
--param save_steps=1` (add `--param known_unknown=PATH` to reuse a table, `--param settings=known,regular`
for fewer settings).
"""
from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any

from kfp import dsl

from components.data_build import data_build
from components.finalize_run import finalize_run
from components.finetune import (
    finetune_base_table,
    finetune_evaluate_adapter,
    finetune_evaluate_base,
    finetune_report,
    finetune_sets,
    finetune_train,
    finetune_trainjob,
)
from components.start_run import start_run

from .params import Param, config_dict, config_params, make_pipeline
from .platform import cpu_step, gpu_step, local_build, model_step, train_step

NAME = "finetune_known_unknown"
PROBES = ["qa", "ic-lke"]
#: FinetuneConfig fields set per step or by the pipeline itself, not parameters
FT_PER_STEP = ("model", "train_set", "known_unknown", "out", "train_set_dir")


def finetune_params() -> list[Param]:
    """A parameter per FinetuneConfig field that no probe already has (the data options are shared:
    the training sets come from the QA dataset the evaluation uses), with the field's help."""
    from factprobe.finetune import FinetuneConfig
    from factprobe.probes.config import HELP, PIPELINE, field_type

    taken = {p.name for p in config_params()}
    out = []
    for f in fields(FinetuneConfig):
        if f.name in taken or f.name in FT_PER_STEP or not f.metadata.get(PIPELINE, True):
            continue
        typ, optional = field_type(FinetuneConfig, f.name)
        default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
        if optional or typ is list:
            typ, default = str, "" if default is None else (",".join(default) if isinstance(default, list) else str(default))
        text = f.metadata.get(HELP, "")
        text = "Fine-tuning: " + text + (" (empty: not set)" if typ is str and optional else "")
        out.append(Param(f.name, typ, default, text))
    return out


def finetune_dict(values: dict[str, Any]) -> dict[str, Any]:
    """The fine-tuning options of a run: every FinetuneConfig field the pipeline has (own or shared)."""
    from factprobe.finetune import FinetuneConfig

    return {n: values[n] for n in FinetuneConfig.field_names() if n in values and n not in FT_PER_STEP}


def _body(values: dict[str, Any]) -> None:
    job = dsl.PIPELINE_JOB_ID_PLACEHOLDER
    config, ft = config_dict(values), finetune_dict(values)
    model, uri, trigger, work = values["model"], values["tracking_uri"], values["trigger"], values["work_root"]
    final = cpu_step(finalize_run(pipeline=NAME, kfp_run_id=job, tracking_uri=uri), s3=False)
    final.set_display_name("finalize-mlflow-run")
    with dsl.ExitHandler(final, name="track-and-probe"):
        parent = cpu_step(start_run(pipeline=NAME, kfp_run_id=job, trigger=trigger, tracking_uri=uri,
                                    models=[model], probes=PROBES, config={**config, **ft}), s3=False)
        parent.set_display_name("start-mlflow-run")
        build = cpu_step(data_build(config=config, probes=PROBES, pipeline=NAME, parent_run_id=parent.output,
                                    tracking_uri=uri), memory="8G")
        common = {"parent_run_id": parent.output, "tracking_uri": uri, "kfp_run_id": job, "trigger": trigger,
                  "pipeline": NAME}
        table = gpu_step(finetune_base_table(items=build.outputs["items"], model=model, config=config,
                                             settings=values["settings"], known_unknown=values["known_unknown"],
                                             work_root=work, **common))
        table.set_display_name("base-known-unknown")
        base = gpu_step(finetune_evaluate_base(items=build.outputs["items"], model=model, config=config, work_root=work,
                                               **common))
        base.set_display_name("evaluate-base")
        sets = cpu_step(finetune_sets(table=table.outputs["table"], model=model, settings=values["settings"], ft=ft,
                                      parent_run_id=parent.output, tracking_uri=uri, kfp_run_id=job, trigger=trigger,
                                      pipeline=NAME), s3=False)
        sets.set_display_name("training-sets")
        with dsl.ParallelFor(sets.outputs["Output"], name="settings") as cell:
            cell_common = {**common, "parent_run_id": cell.parent_run_id}
            if local_build():
                # The local runner cannot merge the outputs of If/Else branches (dsl.OneOf: "Expected 1
                # artifact in ArtifactSelectorSpec"), and a TrainJob needs a cluster: train in the step.
                tr = train_step(finetune_train(table=table.outputs["table"], sets=sets.outputs["sets"], model=model, setting=cell.setting, ft=ft,
                                               work_root=work, **cell_common))
                tr.set_display_name("finetune")
                adapter = tr.outputs["adapter"]
            else:
                with dsl.If(values["num_nodes"] > 1, name="multi-node"):
                    tj = model_step(cpu_step(finetune_trainjob(
                        table=table.outputs["table"], model=model, setting=cell.setting, ft=ft,
                        num_nodes=values["num_nodes"], submit=values["trainjob_submit"],
                        namespace=values["trainjob_namespace"], tracking_uri=uri, work_root=work, kfp_run_id=job,
                        trigger=trigger)))
                    tj.set_display_name("trainjob")
                with dsl.Else(name="one-node"):
                    tr = train_step(finetune_train(table=table.outputs["table"], sets=sets.outputs["sets"], model=model, setting=cell.setting,
                                                   ft=ft, work_root=work, **cell_common))
                    tr.set_display_name("finetune")
                adapter = dsl.OneOf(tj.outputs["adapter"], tr.outputs["adapter"])
            ev = gpu_step(finetune_evaluate_adapter(items=build.outputs["items"], adapter=adapter, model=model,
                                                    setting=cell.setting, config=config, work_root=work, **cell_common))
            ev.set_display_name("evaluate-adapter")
        rep = cpu_step(finetune_report(base_qa=base.outputs["qa_results"], base_mc=base.outputs["mc_results"],
                                       qa_results=dsl.Collected(ev.outputs["qa_results"]),
                                       mc_results=dsl.Collected(ev.outputs["mc_results"]),
                                       ft=ft, parent_run_id=parent.output,
                                       tracking_uri=uri, trigger=trigger, pipeline=NAME), s3=False)
        rep.set_display_name("finetune-report")


def build():
    """The pipeline (built from the registry, FinetuneConfig and the cluster settings in effect)."""
    from factprobe.finetune import TRAIN_SETS

    own = [
        Param("model", str, "smollm2-135m-instruct", "Base model to fine-tune: built-in alias (smollm2-135m-instruct, "
              "gemma-3-270m), Hugging Face hub id or a folder on a mounted volume."),
        Param("settings", list, list(TRAIN_SETS), f"Training sets, one fine-tuning each: {', '.join(TRAIN_SETS)}."),
        Param("num_nodes", int, 1, "GPU nodes per fine-tuning: 1 trains in the pipeline step; more writes a Kubeflow "
              "Trainer TrainJob over that many nodes (created only with trainjob_submit)."),
        Param("trainjob_submit", bool, False, "Create the TrainJob (num_nodes > 1) and wait for it; false only writes "
              "its manifest."),
        Param("trainjob_namespace", str, "kubeflow", "Namespace of the TrainJob (the pipeline's namespace)."),
    ]
    return make_pipeline(
        NAME, "factprobe-finetune-known-unknown",
        "Fine-tuning on known, unknown, mixed, counterfactual and regular facts (yuan2024 section 5): LoRA under "
        "DeepSpeed per setting, zero-shot QA and IC-LKE before and after, one table with paired bootstrap intervals, "
        "logged to MLflow.",
        "Fine-tune one model on known/unknown/mixed/counterfactual/regular facts and compare before and after.",
        own + finetune_params(), "ui", _body,
    )
