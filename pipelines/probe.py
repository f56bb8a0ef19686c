"""The `probe` pipeline: build data -> ParallelFor over models x probes -> aggregate and report.

Compile: `factprobe pipeline compile` (writes build/pipelines/probe.yaml for the Kubeflow UI).
Run locally: `factprobe pipeline run probe --param models='["smollm2-135m-instruct"]'`.
"""

from kfp import dsl

from components.data_build import data_build
from components.finalize_run import finalize_run
from components.plan import plan_matrix
from components.probe import probe_model
from components.report import report
from components.start_run import start_run

from .platform import cpu_step, gpu_step

DEFAULT_MODELS = ["smollm2-135m-instruct", "gemma-3-270m"]


def probe_dag(pipeline: str, models, probes, source: str, data: str, train_data: str, relations: str,
              max_facts_per_relation: int, examples: int, choices: int, seed: int, tracking_uri: str, trigger: str,
              work_root: str, inside=None):
    """Add the probe DAG (inside an ExitHandler) to the current pipeline.

    `inside(parent, probe_task, report_task)` may add more steps within the ExitHandler (so the
    parent run is finalized after them); collect the loop's results with
    `dsl.Collected(probe_task.outputs["results"])`. Returns (parent, probe task, report task)."""
    job = dsl.PIPELINE_JOB_ID_PLACEHOLDER
    final = cpu_step(finalize_run(pipeline=pipeline, kfp_run_id=job, tracking_uri=tracking_uri), s3=False)
    final.set_display_name("finalize-mlflow-run")
    with dsl.ExitHandler(final, name="track-and-probe"):
        parent = cpu_step(start_run(pipeline=pipeline, kfp_run_id=job, trigger=trigger, tracking_uri=tracking_uri,
                                    models=models, probes=probes, source=source, data=data, relations=relations,
                                    max_facts_per_relation=max_facts_per_relation, examples=examples, choices=choices,
                                    seed=seed), s3=False)
        parent.set_display_name("start-mlflow-run")
        # The parent run id travels inside each loop item: kfp 2.17's local runner hands a loop
        # item to a task-output argument used inside a ParallelFor over another task's output.
        plan = cpu_step(plan_matrix(models=models, probes=probes, parent_run_id=parent.output), s3=False)
        build = cpu_step(data_build(source=source, data=data, train_data=train_data, relations=relations,
                                    max_facts_per_relation=max_facts_per_relation, examples=examples, choices=choices,
                                    seed=seed, parent_run_id=parent.output, tracking_uri=tracking_uri), memory="8G")
        with dsl.ParallelFor(plan.output, name="models-x-probes") as cell:
            probed = gpu_step(probe_model(items=build.outputs["items"], model=cell.model, probe=cell.probe,
                                          examples=examples, choices=choices, seed=seed, parent_run_id=cell.parent_run_id,
                                          tracking_uri=tracking_uri, work_root=work_root, kfp_run_id=job,
                                          trigger=trigger, pipeline=pipeline))
        rep = cpu_step(report(results=dsl.Collected(probed.outputs["results"]), parent_run_id=parent.output, tracking_uri=tracking_uri,
                              pipeline=pipeline), s3=False)
        if inside is not None:
            inside(parent, probed, rep)
    return parent, probed, rep


@dsl.pipeline(name="factprobe-probe", description="Estimate the factual knowledge of language models with multiple-choice probes (IC-LKE, EIC-LKE, HGP, MMP), logged to MLflow.")
def probe(
    models: list = DEFAULT_MODELS,
    probes: list = ["ic-lke"],
    source: str = "countryinfo",
    data: str = "",
    train_data: str = "",
    relations: str = "",
    max_facts_per_relation: int = 20,
    examples: int = 50,
    choices: int = 100,
    seed: int = 0,
    tracking_uri: str = "http://mlflow.factprobe.svc.cluster.local:5000",
    trigger: str = "ui",
    work_root: str = "",
):
    """Probe several models with several multiple-choice knowledge estimators.

    Args:
        models: Models to probe: built-in aliases (smollm2-135m-instruct, gemma-3-270m), Hugging Face hub ids, or folders on a mounted volume.
        probes: Estimators to run for every model: ic-lke, eic-lke, hgp, mmp.
        source: Fact source: countryinfo (built in), lama, nobel, triples or s3.
        data: Path or s3://bucket/prefix of the facts; empty for countryinfo.
        train_data: Folder or s3:// prefix of training facts for in-context examples; empty splits the test facts.
        relations: Comma-separated relation ids (e.g. P36,P19); empty for all usable relations.
        max_facts_per_relation: Test facts per relation (0 for all).
        examples: In-context examples per relation (wu2024 uses 50).
        choices: Options per question, gold included (wu2024 uses 100).
        seed: Seed for distractors, example sampling and splits.
        tracking_uri: MLflow tracking URI; credentials come from the mlflow-credentials secret. Use 'none' to disable tracking.
        trigger: What launched this run: local, ui, nightly or ci (an MLflow tag).
        work_root: Folder for resumable per-probe work (a mounted volume on the cluster); empty for the default cache.
    """
    probe_dag("probe", models, probes, source, data, train_data, relations, max_facts_per_relation, examples,
              choices, seed, tracking_uri, trigger, work_root)
