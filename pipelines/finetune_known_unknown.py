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
   `trainjob_submit`, creates it and waits (components/steps/trainjob_manifest.py). A local build (`factprobe
   pipeline run`) always trains in the step: the local runner cannot merge If/Else outputs
   (`dsl.OneOf`), and a TrainJob needs a cluster; `num_nodes` is ignored there.
4. `finetune-evaluate-adapter` (GPU): the same evaluation for each adapter.
5. `finetune-report` (CPU): one table, a row for the base and one per setting, with paired
   bootstrap intervals against the base; figures and table on the MLflow parent run.

The pipeline trains every parameter by default (`lora_r` = 0), as yuan2024 does and as `factprobe finetune`
does; `--param lora_r=8` makes a cheaper LoRA run (README "Paper settings").

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

from typing import Any

from kfp import dsl

from factprobe_ops.components.data_build import data_build
from factprobe_ops.components.finetune import (
    finetune_base_table,
    finetune_evaluate_adapter,
    finetune_evaluate_base,
    finetune_report,
    finetune_sets,
    finetune_train,
    finetune_trainjob,
)

from .params import Param, config_params, dataclass_params, make_pipeline, packed
from .platform import cpu_step, data_step, gpu_step, local_build, model_step, train_step
from .scaffold import tracked

NAME = "finetune_known_unknown"
PROBES = ["qa", "ic-lke"]
#: FinetuneConfig fields set per step or by the pipeline itself, not parameters
FT_PER_STEP = ("model", "train_set", "known_unknown", "out", "train_set_dir")
#: the probe options of this pipeline's own steps: the base table's shots, and the table to reuse
#: (counterfactual's fields, read by finetune-base-table) and the QA train facts per relation
PROBE_OPTIONS = ("known_unknown", "known_shots", "qa_train_per_relation")
#: the fine-tuning options shown as parameters; every other FinetuneConfig field goes in `options`
FT_ESSENTIALS = ("train_size", "max_steps", "learning_rate", "batch_size", "grad_accum", "lora_r")


def ft_config_params() -> list[Param]:
    """Base essentials, then the probe options of this pipeline's steps (`PROBE_OPTIONS`)."""
    base = config_params([])
    names = {b.name for b in base}
    return base + [p for p in config_params(["counterfactual"]) if p.name in PROBE_OPTIONS and p.name not in names]


#: pipeline defaults that differ from `factprobe finetune`'s ({field: (default, sentence added to its
#: description)}): none since the command trains every parameter by default too, as yuan2024 does (section 5)
FT_PIPELINE_DEFAULTS: dict = {}


def finetune_params() -> list[Param]:
    """The fine-tuning parameters (`FT_ESSENTIALS`), with the field's help after "Fine-tuning: ";
    `FT_PIPELINE_DEFAULTS` replaces a default (and says so in the description)."""
    from dataclasses import replace

    from factprobe.finetune import FinetuneConfig

    out = []
    for p in dataclass_params(FinetuneConfig, FT_ESSENTIALS, prefix="Fine-tuning: "):
        if p.name in FT_PIPELINE_DEFAULTS:
            default, why = FT_PIPELINE_DEFAULTS[p.name]
            p = replace(p, default=default, help=p.help + why)
        out.append(p)
    return out


def finetune_dict(values: dict[str, Any]) -> dict[str, Any]:
    """The fine-tuning options of a run: every FinetuneConfig field the pipeline has as a parameter
    (own or shared). The `options` JSON travels beside it (each component adds it back)."""
    from factprobe.finetune import FinetuneConfig

    return {n: values[n] for n in FinetuneConfig.field_names() if n in values and n not in FT_PER_STEP}


def _body(values: dict[str, Any]) -> None:
    config_values = {p.name: values[p.name] for p in ft_config_params()}
    ft_values = finetune_dict(values)
    # the dicts as the steps take them (a cluster build's lists and optional numbers through `pack-config`)
    config, ft = packed(config_values), packed(ft_values)
    model = values["model"]
    with tracked(NAME, values, [model], PROBES, packed({**config_values, **ft_values})) as run:
        work = run.work_root
        build = data_step(data_build(config=config, options=run.options, probes=PROBES, context=run.context))
        common = run.step_args()
        table = gpu_step(
            finetune_base_table(
                items=build.outputs["items"],
                model=model,
                config=config,
                options=run.options,
                settings=values["settings"],
                known_unknown=values["known_unknown"],
                work_root=work,
                **common,
            )
        )
        table.set_display_name("base-known-unknown")
        base = gpu_step(
            finetune_evaluate_base(
                items=build.outputs["items"], model=model, config=config, options=run.options, work_root=work, **common
            )
        )
        base.set_display_name("evaluate-base")
        sets = cpu_step(
            finetune_sets(
                table=table.outputs["table"], model=model, settings=values["settings"], ft=ft, options=run.options, **common
            ),
            s3=False,
        )
        sets.set_display_name("training-sets")
        with dsl.ParallelFor(sets.outputs["Output"], name="settings") as cell:
            cell_common = run.step_args(cell.context)
            if local_build():
                # The local runner cannot merge the outputs of If/Else branches (dsl.OneOf: "Expected 1
                # artifact in ArtifactSelectorSpec"), and a TrainJob needs a cluster: train in the step.
                tr = train_step(
                    finetune_train(
                        table=table.outputs["table"],
                        sets=sets.outputs["sets"],
                        model=model,
                        setting=cell.setting,
                        ft=ft,
                        options=run.options,
                        work_root=work,
                        **cell_common,
                    )
                )
                tr.set_display_name("finetune")
                adapter = tr.outputs["adapter"]
            else:
                with dsl.If(values["num_nodes"] > 1, name="multi-node"):
                    tj = model_step(
                        cpu_step(
                            finetune_trainjob(
                                table=table.outputs["table"],
                                model=model,
                                setting=cell.setting,
                                ft=ft,
                                options=run.options,
                                num_nodes=values["num_nodes"],
                                submit=values["trainjob_submit"],
                                namespace=values["trainjob_namespace"],
                                work_root=work,
                                **cell_common,
                            )
                        )
                    )
                    tj.set_display_name("trainjob")
                with dsl.Else(name="one-node"):
                    tr = train_step(
                        finetune_train(
                            table=table.outputs["table"],
                            sets=sets.outputs["sets"],
                            model=model,
                            setting=cell.setting,
                            ft=ft,
                            options=run.options,
                            work_root=work,
                            **cell_common,
                        )
                    )
                    tr.set_display_name("finetune")
                adapter = dsl.OneOf(tj.outputs["adapter"], tr.outputs["adapter"])
            ev = gpu_step(
                finetune_evaluate_adapter(
                    items=build.outputs["items"],
                    adapter=adapter,
                    model=model,
                    setting=cell.setting,
                    config=config,
                    options=run.options,
                    work_root=work,
                    **cell_common,
                )
            )
            ev.set_display_name("evaluate-adapter")
        rep = cpu_step(
            finetune_report(
                base_qa=base.outputs["qa_results"],
                base_mc=base.outputs["mc_results"],
                qa_results=dsl.Collected(ev.outputs["qa_results"]),
                mc_results=dsl.Collected(ev.outputs["mc_results"]),
                ft=ft,
                options=run.options,
                context=run.context,
            ),
            s3=False,
        )
        rep.set_display_name("finetune-report")


def build():
    """The pipeline (built from the registry, FinetuneConfig and the cluster settings in effect)."""
    from factprobe.finetune import TRAIN_SETS

    own = [
        Param(
            "model",
            str,
            "smollm2-135m-instruct",
            "Base model to fine-tune: built-in alias (smollm2-135m-instruct, "
            "gemma-3-270m), Hugging Face hub id or a folder on a mounted volume.",
        ),
        Param("settings", list, list(TRAIN_SETS), f"Training sets, one fine-tuning each: {', '.join(TRAIN_SETS)}."),
        Param(
            "num_nodes",
            int,
            1,
            "GPU nodes per fine-tuning: 1 trains in the pipeline step; more writes a Kubeflow "
            "Trainer TrainJob over that many nodes (created only with trainjob_submit).",
        ),
        Param(
            "trainjob_submit", bool, False, "Create the TrainJob (num_nodes > 1) and wait for it; false only writes its manifest."
        ),
        Param("trainjob_namespace", str, "kubeflow", "Namespace of the TrainJob (the pipeline's namespace)."),
    ]
    return make_pipeline(
        NAME,
        "factprobe-finetune-known-unknown",
        "Fine-tuning on known, unknown, mixed, counterfactual and regular facts (yuan2024 section 5): full-parameter "
        "training (the paper's; lora_r > 0 for LoRA) under DeepSpeed per setting, zero-shot QA and IC-LKE before and "
        "after, one table with paired bootstrap intervals, logged to MLflow.",
        "Fine-tune one model on known/unknown/mixed/counterfactual/regular facts and compare before and after.",
        own,
        "ui",
        _body,
        ft_config_params() + finetune_params(),
    )
