"""The compiled `design_space` and `findings` pipelines (pipelines/design_space.py, pipelines/findings.py):
what is their own: the per-model loop of the probe and three study steps, the cross-model report, the
studies' options among their parameters, and bad study options refused up front. The checks every
compiled pipeline gets (steps, platform spec, GPU placement, secrets, parameter counts, snapshots) run
on them in tests/pipelines/test_compiled_specs.py.
"""

from __future__ import annotations

import pytest

from tests.pipelines import test_compiled_specs as specs
from tests.pipelines.pipeline_fixtures import compiled  # noqa: F401 (fixture)


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
        ("icl-examples", None),
        ("icl-sequence", "incorrect"),
        ("icl-sequence", "unknown"),
    ]
    assert sorted(t["taskInfo"]["name"] for t in studies.values()) == [
        "icl-examples",
        "icl-sequence-incorrect",
        "icl-sequence-unknown",
    ]
    for name in [*studies, "probe-model"]:
        owner, task = tasks[name]
        assert owner == loop["componentRef"]["name"], f"{name} runs once per model, inside the loop"
        for field in ("model", "context"):
            assert task["inputs"]["parameters"][field] == {
                "componentInputParameter": item,
                "parameterExpressionSelector": f'parseJson(string_value)["{field}"]',
            }
    # the sequence is drawn from every fact of a relation: the steps unset the probe's fact cap; the training
    # data is kept, as a second source of truth for what is "incorrect" or "fictitious"
    for t in studies.values():
        if constant(t, "study") == "icl-sequence":
            assert constant(t, "params")["max_facts_per_relation"] == "" and "train_data" not in constant(t, "params")
    owner, rep = tasks["report"]
    assert owner != loop["componentRef"]["name"] and rep["taskInfo"]["name"] == "cross-model-report"
    # the report collects every model's IC-LKE run (dsl.Collected over the loop)
    assert rep["inputs"]["artifacts"]["results"]["taskOutputArtifact"] == {
        "outputArtifactKey": "pipelinechannel--probe-model-results",
        "producerTask": loop_name,
    }


def test_findings_is_one_study_step_over_the_models_list(compiled):  # noqa: F811
    c = compiled["findings"]
    (task,) = study_tasks(c).values()
    assert constant(task, "study") == "findings" and task["taskInfo"]["name"] == "findings"
    # the list reaches the step as an input of its own: inside the params dict it was text, invalid JSON
    assert task["inputs"]["parameters"]["params"]["runtimeValue"]["constant"] == {}
    assert task["inputs"]["parameters"]["models"] == {"componentInputParameter": "pipelinechannel--models"}


@pytest.mark.parametrize(
    "name, own",
    [
        (
            "design_space",
            {"models", "relations", "source", "choices", "examples", "n", "draws", "length", "replace", "placement"},
        ),
        ("findings", {"models", "relations", "budget", "max_facts_per_relation", "seed"}),
    ],
)
def test_parameters_are_at_most_25_documented_and_include_the_studies_options(compiled, name, own):  # noqa: F811
    from factprobe_ops.pipelines.params import MAX_PARAMS

    params = compiled[name].spec["root"]["inputDefinitions"]["parameters"]
    documented = specs.documented_parameters(name)
    assert len(params) <= MAX_PARAMS and own <= set(params), sorted(params)
    assert set(params) == set(documented) and all(documented.values()), "every parameter is documented"
    for p, spec in params.items():
        assert spec.get("isOptional") is True and spec.get("description") == documented[p], p
        # an optional number left empty (findings' choices: the budget's) has no default in the form
        assert "defaultValue" in spec or spec["parameterType"] == "NUMBER_INTEGER", p
    assert "kind" not in params  # each icl-sequence step sets its own
    assert params["trigger"]["defaultValue"] == "ui" and params["options"]["defaultValue"] == ""


@pytest.mark.slow  # builds both pipelines and every study config (~7 s)
def test_bad_study_options_are_refused_before_anything_runs():
    from factprobe.errors import ConfigError
    from factprobe_ops.pipelines.catalogue import get_pipeline, parse_params

    with pytest.raises(ConfigError, match="placement: unknown value 'middle'"):
        parse_params(get_pipeline("design_space"), ["placement=middle"], "design_space")
    with pytest.raises(ConfigError, match="draws"):
        parse_params(get_pipeline("design_space"), ["draws=0"], "design_space")
    with pytest.raises(ConfigError, match="budget: unknown value 'huge'"):
        parse_params(get_pipeline("findings"), ["budget=huge"], "findings")
