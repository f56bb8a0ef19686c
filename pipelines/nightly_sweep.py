"""The `nightly_sweep` pipeline: `probe` over the models in a YAML file, compared with last night."""

from kfp import dsl

from components.nightly_compare import nightly_compare
from components.plan import read_models

from .platform import cpu_step
from .probe import probe_dag


@dsl.pipeline(name="factprobe-nightly-sweep", description="Nightly knowledge sweep over a list of models from YAML, compared with the previous nightly run of the same configuration.")
def nightly_sweep(
    # One line on purpose: kfp 2.17 copies string defaults unescaped into the YAML's comment
    # header, and a newline there makes the compiled file unparseable.
    models_yaml: str = "models: [smollm2-135m-instruct, gemma-3-270m]",
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
    trigger: str = "nightly",
    work_root: str = "",
):
    """Probe every model listed in a YAML file and log what changed since the previous nightly run.

    Args:
        models_yaml: Path to a YAML file on a mounted volume, or inline YAML: a list of models or a mapping with a `models:` list.
        probes: Estimators to run for every model: ic-lke, eic-lke, hgp, mmp.
        source: Fact source: countryinfo (built in), lama, nobel, triples or s3.
        data: Path or s3://bucket/prefix of the facts; empty for countryinfo.
        train_data: Folder or s3:// prefix of training facts for in-context examples; empty splits the test facts.
        relations: Comma-separated relation ids; empty for all usable relations.
        max_facts_per_relation: Test facts per relation (0 for all).
        examples: In-context examples per relation.
        choices: Options per question, gold included.
        seed: Seed for distractors, example sampling and splits.
        tracking_uri: MLflow tracking URI ('none' disables tracking and the comparison).
        trigger: MLflow trigger tag (nightly for scheduled runs).
        work_root: Folder for resumable per-probe work; empty for the default cache.
    """
    models = cpu_step(read_models(models_yaml=models_yaml), s3=False)

    def compare_with_previous(parent, probed, rep):
        cmp = cpu_step(nightly_compare(results=dsl.Collected(probed.outputs["results"]), parent_run_id=parent.output, tracking_uri=tracking_uri), s3=False)
        cmp.after(rep)  # the report logs this run's summary first

    probe_dag("nightly_sweep", models.output, probes, source, data, train_data, relations, max_facts_per_relation,
              examples, choices, seed, tracking_uri, trigger, work_root, inside=compare_with_previous)
