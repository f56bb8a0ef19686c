"""The compiled `design_space` and `findings` pipelines (pipelines/design_space.py, pipelines/findings.py):
the checks every compiled pipeline gets (tests/pipelines/test_compiled_specs.py: steps and platform
spec, GPU placement, secrets, non-root, retries only on GPU steps, no caching, the ExitHandler, one run
context, default images) run on them here, with their own steps; then their parameters (at most 25,
every one documented, the studies' options among them), the per-model loop, and a snapshot.

Regenerate the snapshots after an intended change:
    UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest tests/pipelines/test_design_space_specs.py
"""
from __future__ import annotations

import difflib
import os

import pytest

from tests.pipelines import test_compiled_specs as specs
from tests.pipelines.pipeline_fixtures import compiled  # noqa: F401 (fixture)

#: the study steps: one component per task (`run-study`, `run-study-2`, ...), GPU steps reading S3
STUDY_STEPS = {"design_space": {"run-study", "run-study-2", "run-study-3"}, "findings": {"run-study"}}
STEPS_OF = {
    "design_space": {"start-run", "plan-matrix", "data-build", "probe-model", "report", "finalize-run"}
                    | STUDY_STEPS["design_space"],
    "findings": {"start-run", "finalize-run"} | STUDY_STEPS["findings"],
}
NAMES = tuple(STEPS_OF)
SHARED_CHECKS = ("test_compiled_file_loads_like_the_kfp_client", "test_pipeline_has_its_steps_and_a_platform_spec",
                 "test_probe_step_requests_one_gpu_on_the_gpu_pool",
                 "test_cpu_steps_request_no_accelerator_and_stay_off_the_gpu_pool",
                 "test_every_step_gets_mlflow_credentials_and_only_s3_steps_get_s3_credentials",
                 "test_no_credentials_in_parameters_or_yaml", "test_every_step_runs_as_the_image_user_not_root",
                 "test_gpu_probe_is_retried_and_nothing_else", "test_no_step_is_cached",
                 "test_exit_handler_finalizes_the_mlflow_run", "test_one_run_context_crosses_the_steps",
                 "test_default_images")


@pytest.fixture
def with_study_steps(monkeypatch):
    """The shared checks' step tables, with these pipelines' steps added."""
    study = set().union(*STUDY_STEPS.values())
    monkeypatch.setattr(specs, "GPU_STEPS", specs.GPU_STEPS | study)
    monkeypatch.setattr(specs, "S3_STEPS", specs.S3_STEPS | study)
    for name, steps in STEPS_OF.items():
        monkeypatch.setitem(specs.STEPS_OF, name, steps)


@pytest.mark.parametrize("check", SHARED_CHECKS)
@pytest.mark.parametrize("name", NAMES)
def test_the_checks_every_compiled_pipeline_gets(compiled, with_study_steps, name, check):  # noqa: F811
    getattr(specs, check)(compiled, name)


def study_tasks(c) -> dict[str, dict]:
    """{task name: task spec} of the study steps."""
    return {t: spec for t, (_, spec) in c.tasks().items() if spec["componentRef"]["name"].startswith("comp-run-study")}


def constant(task: dict, name: str):
    return task["inputs"]["parameters"][name]["runtimeValue"]["constant"]


def test_design_space_runs_the_probe_and_three_studies_per_model_and_reports_across_models(compiled):  # noqa: F811
    c = compiled["design_space"]
    tasks = c.tasks()
    loop_name, loop = specs.loop_task(c)
    assert loop["taskInfo"]["name"] == "models"
    item = loop["parameterIterator"]["itemInput"]
    studies = study_tasks(c)
    assert sorted((constant(t, "study"), constant(t, "params").get("kind")) for t in studies.values()) == [
        ("icl-examples", None), ("icl-sequence", "incorrect"), ("icl-sequence", "unknown")]
    assert sorted(t["taskInfo"]["name"] for t in studies.values()) == ["icl-examples", "icl-sequence-incorrect",
                                                                      "icl-sequence-unknown"]
    for name in [*studies, "probe-model"]:
        owner, task = tasks[name]
        assert owner == loop["componentRef"]["name"], f"{name} runs once per model, inside the loop"
        for field in ("model", "context"):
            assert task["inputs"]["parameters"][field] == {"componentInputParameter": item,
                                                           "parameterExpressionSelector": f'parseJson(string_value)["{field}"]'}
    # the sequence is drawn from every fact of a relation: the steps unset the probe's fact cap and training data
    for t in studies.values():
        if constant(t, "study") == "icl-sequence":
            assert constant(t, "params")["max_facts_per_relation"] == "" and constant(t, "params")["train_data"] == ""
    owner, rep = tasks["report"]
    assert owner != loop["componentRef"]["name"] and rep["taskInfo"]["name"] == "cross-model-report"
    # the report collects every model's IC-LKE run (dsl.Collected over the loop)
    assert rep["inputs"]["artifacts"]["results"]["taskOutputArtifact"] == {
        "outputArtifactKey": "pipelinechannel--probe-model-results", "producerTask": loop_name}


def test_findings_is_one_study_step_over_the_models_list(compiled):  # noqa: F811
    c = compiled["findings"]
    (task,) = study_tasks(c).values()
    assert constant(task, "study") == "findings" and task["taskInfo"]["name"] == "findings"
    assert task["inputs"]["parameters"]["params"]["runtimeValue"]["constant"] == {
        "models": "{{$.inputs.parameters['pipelinechannel--models']}}"}


@pytest.mark.parametrize("name, own", [
    ("design_space", {"models", "relations", "source", "choices", "examples", "n", "draws", "length", "replace",
                      "placement"}),
    ("findings", {"models", "relations", "budget", "max_facts_per_relation", "seed"}),
])
def test_parameters_are_at_most_25_documented_and_include_the_studies_options(compiled, name, own):  # noqa: F811
    from pipelines.params import MAX_PARAMS

    params = compiled[name].spec["root"]["inputDefinitions"]["parameters"]
    documented = specs.documented_parameters(name)
    assert len(params) <= MAX_PARAMS and own <= set(params), sorted(params)
    assert set(params) == set(documented) and all(documented.values()), "every parameter is documented"
    for p, spec in params.items():
        assert spec.get("isOptional") is True and "defaultValue" in spec and spec.get("description") == documented[p], p
    assert "kind" not in params  # each icl-sequence step sets its own
    assert params["trigger"]["defaultValue"] == "ui" and params["options"]["defaultValue"] == ""


@pytest.mark.slow  # builds both pipelines and every study config (~7 s)
def test_bad_study_options_are_refused_before_anything_runs():
    from factprobe.errors import ConfigError
    from pipelines.catalogue import get_pipeline, parse_params

    with pytest.raises(ConfigError, match="placement: unknown value 'middle'"):
        parse_params(get_pipeline("design_space"), ["placement=middle"], "design_space")
    with pytest.raises(ConfigError, match="draws"):
        parse_params(get_pipeline("design_space"), ["draws=0"], "design_space")
    with pytest.raises(ConfigError, match="budget: unknown value 'huge'"):
        parse_params(get_pipeline("findings"), ["budget=huge"], "findings")


@pytest.mark.parametrize("name", NAMES)
def test_snapshot(compiled, name):  # noqa: F811
    actual = specs.normalised(compiled[name]).replace("tests/pipelines/test_compiled_specs.py",
                                                      "tests/pipelines/test_design_space_specs.py")
    path = specs.SNAPSHOTS / f"{name}.yaml"
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        path.write_text(actual)
        return
    assert path.exists(), f"no snapshot {path}; create it with UPDATE_SNAPSHOTS=1"
    expected = path.read_text()
    if actual != expected:
        diff = "".join(list(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True),
                                                 f"snapshots/{name}.yaml", "compiled"))[:120])
        pytest.fail(f"compiled {name} differs from its snapshot (UPDATE_SNAPSHOTS=1 if intended):\n{diff}")
