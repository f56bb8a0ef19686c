"""The `regression` pipeline: probe a candidate model and gate it against a baseline run."""

from kfp import dsl

from components.regression_gate import fail_run, regression_gate_step

from .platform import cpu_step
from .probe import probe_dag


@dsl.pipeline(name="factprobe-regression", description="CI regression gate: probe a candidate model and fail if it is significantly worse than a baseline run on the same facts.")
def regression(
    candidate: str = "smollm2-135m-instruct",
    baseline: str = "factprobe.baseline=true",
    probe_name: str = "ic-lke",
    max_drop: float = 0.02,
    alpha: float = 0.05,
    source: str = "countryinfo",
    data: str = "",
    train_data: str = "",
    relations: str = "",
    max_facts_per_relation: int = 20,
    examples: int = 50,
    choices: int = 100,
    seed: int = 0,
    tracking_uri: str = "http://mlflow.factprobe.svc.cluster.local:5000",
    trigger: str = "ci",
    work_root: str = "",
):
    """Probe `candidate`, compare it fact by fact with `baseline`, and fail the run when the gate fails.

    Args:
        candidate: Model to test: alias, hub id or folder on a mounted volume.
        baseline: MLflow run id of the baseline probe run, or a tag filter key=value (latest finished match).
        probe_name: Estimator: ic-lke, eic-lke, hgp or mmp (use the baseline's).
        max_drop: Tolerated accuracy drop (absolute, e.g. 0.02 = 2 points).
        alpha: Significance level of McNemar's test.
        source: Fact source (use the baseline's data parameters so the facts match).
        data: Path or s3:// prefix of the facts.
        train_data: Training facts for in-context examples.
        relations: Comma-separated relation ids.
        max_facts_per_relation: Test facts per relation (0 for all).
        examples: In-context examples per relation.
        choices: Options per question.
        seed: Seed for distractors and examples (use the baseline's).
        tracking_uri: MLflow tracking URI.
        trigger: MLflow trigger tag.
        work_root: Folder for resumable per-probe work.
    """

    def gate(parent, probed, rep):
        # One candidate x one probe: the collected list has exactly one entry.
        g = cpu_step(regression_gate_step(candidate=dsl.Collected(probed.outputs["results"]), baseline=baseline, max_drop=max_drop, alpha=alpha,
                                          parent_run_id=parent.output, tracking_uri=tracking_uri), s3=False)
        with dsl.If(g.outputs["Output"] == "FAIL", name="gate-failed"):
            cpu_step(fail_run(message=baseline), s3=False)

    probe_dag("regression", [candidate], [probe_name], source, data, train_data, relations, max_facts_per_relation,
              examples, choices, seed, tracking_uri, trigger, work_root, inside=gate)
