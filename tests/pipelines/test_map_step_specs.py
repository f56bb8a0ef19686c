"""Issue 39 items 2 and 4: the knowledge-map step in the compiled pipelines (pipelines/probe.py
`DagConfig.knowledge_map`).

- `nightly_sweep` always ends with a map of the merged run folders, diffed against the previous night's
  map (`against_previous`), after the report; the comparison step (which may fail the run on an alert)
  waits for it, so a failing comparison never costs the map;
- `probe` has a `knowledge_map` parameter (default false): the map step runs under an If on it;
- a DAG built on `probe_dag` maps the collected run folders (`knowledge-map-runs`); one whose probe list
  is a single fixed probe gets no map step at all (a map compares two or more probes).

Compiled here, in this Python (tests/pipelines/test_compiled_specs.py snapshots every pipeline)."""

from __future__ import annotations

import os

import pytest

from tests.pipelines.pipeline_fixtures import load_compiled

pytestmark = pytest.mark.slow  # compiles pipelines: seconds


def _compile(pipe, tmp_path, monkeypatch):
    from kfp import compiler

    for key in [k for k in os.environ if k.startswith("FACTPROBE_")]:
        monkeypatch.delenv(key)
    path = tmp_path / f"p-{len(list(tmp_path.iterdir()))}.yaml"
    compiler.Compiler().compile(pipe, str(path))
    return load_compiled(path)


def _named(name, tmp_path, monkeypatch):
    from factprobe_ops.pipelines.catalogue import get_pipeline

    return _compile(get_pipeline(name), tmp_path, monkeypatch)


def _probe_dag_pipeline(probes, knowledge_map: bool):
    """A pipeline built on `probe_dag` with a fixed probe list (as `coherency` and `regression` are)."""
    from factprobe_ops.pipelines.params import config_params, make_pipeline
    from factprobe_ops.pipelines.platform import building
    from factprobe_ops.pipelines.probe import DagConfig, models_param, probe_dag

    def body(values):
        probe_dag(
            DagConfig.from_values("probe", values, values["models"], probes, config_params(probes), knowledge_map=knowledge_map)
        )

    with building():
        return make_pipeline(
            "probe", "factprobe-map-test", "A map test.", "A map test.", [models_param()], "ui", body, config_params(probes)
        )


def test_the_nightly_sweep_maps_the_merged_runs_against_the_previous_night(tmp_path, monkeypatch):
    c = _named("nightly_sweep", tmp_path, monkeypatch)
    tasks = c.tasks()
    owner, km = tasks["knowledge-map"]
    assert owner == tasks["report"][0]  # beside the report, in the tracked scaffold
    assert km["inputs"]["artifacts"]["results"] == {
        "taskOutputArtifact": {"outputArtifactKey": "results", "producerTask": "merge-results"}
    }
    assert km["inputs"]["parameters"]["against_previous"] == {"runtimeValue": {"constant": True}}
    assert km["inputs"]["parameters"]["context"] == {
        "taskOutputParameter": {"outputParameterKey": "Output", "producerTask": "start-run"}
    }
    assert "report" in km["dependentTasks"]
    # the comparison (it may exit non-zero on an alert) runs after the map
    assert "knowledge-map" in tasks["nightly-compare"][1]["dependentTasks"]
    assert "knowledge-map" in c.step_names() and "knowledge-map-runs" not in c.step_names()


def test_the_probe_pipeline_maps_under_its_knowledge_map_parameter(tmp_path, monkeypatch):
    from factprobe_ops.pipelines.catalogue import get_pipeline, pipeline_parameters

    assert pipeline_parameters(get_pipeline("probe"))["knowledge_map"] == (bool, False)
    c = _named("probe", tmp_path, monkeypatch)
    tasks = c.tasks()
    owner, km = tasks["knowledge-map"]
    (cond,) = [t for n, (_, t) in tasks.items() if t.get("componentRef", {}).get("name") == owner]
    assert cond["triggerPolicy"]["condition"] == "inputs.parameter_values['pipelinechannel--knowledge_map'] == true"
    assert cond["taskInfo"]["name"] == "knowledge-map-asked"
    assert "report" in cond["dependentTasks"]
    assert km["inputs"]["parameters"]["against_previous"] == {"runtimeValue": {"constant": False}}
    assert c.spec["root"]["inputDefinitions"]["parameters"]["knowledge_map"]["defaultValue"] is False


def test_a_probe_dag_maps_its_collected_runs(tmp_path, monkeypatch):
    c = _compile(_probe_dag_pipeline(["ic-lke", "hgp"], True), tmp_path, monkeypatch)
    tasks = c.tasks()
    _, km = tasks["knowledge-map-runs"]
    loop = next(n for n, (_, t) in tasks.items() if "parameterIterator" in t)
    assert km["inputs"]["artifacts"]["results"] == {
        "taskOutputArtifact": {"outputArtifactKey": "pipelinechannel--probe-model-results", "producerTask": loop}
    }
    assert c.spec["components"]["comp-knowledge-map-runs"]["inputDefinitions"]["artifacts"]["results"]["isArtifactList"]
    assert "report" in km["dependentTasks"]


@pytest.mark.parametrize(("probes", "knowledge_map"), [(["coherency"], True), (["ic-lke", "hgp"], False)])
def test_no_map_step_for_one_fixed_probe_or_when_switched_off(tmp_path, monkeypatch, probes, knowledge_map):
    c = _compile(_probe_dag_pipeline(probes, knowledge_map), tmp_path, monkeypatch)
    assert not {"knowledge-map", "knowledge-map-runs"} & c.step_names()
