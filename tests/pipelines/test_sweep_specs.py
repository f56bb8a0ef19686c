"""Issue 30 items 3 and 4 in the compiled sweeps (`probe`, `nightly_sweep`; pipelines/probe.py
`sweep_dag`): each unit's pod requests its model's resources (the unit-resources step's outputs, as
resource placeholders), the fan-out has a parallelism cap, the units' folders are merged before the
report, and shards / one_load are pipeline parameters.

Compiled here, in this Python, for the two pipelines only (tests/pipelines/test_compiled_specs.py
checks every pipeline's platform settings and snapshots)."""

from __future__ import annotations

import os

import pytest

from factprobe.errors import ConfigError
from tests.pipelines.pipeline_fixtures import load_compiled

SWEEPS = ("probe", "nightly_sweep")
PLACEHOLDER = "{{$.inputs.parameters['pipelinechannel--unit-resources-%s']}}"


def _compile(name, tmp_path, monkeypatch, local=False, **env):
    from kfp import compiler

    from factprobe_ops.pipelines.catalogue import get_pipeline

    for key in [k for k in os.environ if k.startswith("FACTPROBE_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    path = tmp_path / f"{name}-{len(list(tmp_path.iterdir()))}.yaml"
    compiler.Compiler().compile(get_pipeline(name, local=local), str(path))
    return load_compiled(path)


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    try:
        root = tmp_path_factory.mktemp("sweeps")
        return {n: _compile(n, root, mp) for n in SWEEPS}
    finally:
        mp.undo()


def _loop(c):
    ((name, task),) = [(k, t) for k, (_, t) in c.tasks().items() if "parameterIterator" in t]
    return name, task


@pytest.mark.slow  # compiles two pipelines: a few seconds
@pytest.mark.parametrize("name", SWEEPS)
def test_each_unit_requests_its_models_resources(sweeps, name):
    c = sweeps[name]
    tasks = c.tasks()
    _, loop = _loop(c)
    inner = loop["componentRef"]["name"]
    assert tasks["unit-resources"][0] == tasks["probe-model"][0] == inner
    item = loop["parameterIterator"]["itemInput"]
    assert tasks["unit-resources"][1]["inputs"]["parameters"]["unit"] == {"componentInputParameter": item}
    assert tasks["probe-model"][1]["inputs"]["parameters"]["unit"] == {"componentInputParameter": item}
    resources = c.executors[c.executor_of("probe-model")]["container"]["resources"]
    assert resources["accelerator"]["resourceCount"] == PLACEHOLDER % "gpus"
    assert resources["resourceCpuRequest"] == resources["resourceCpuLimit"] == PLACEHOLDER % "cpu"
    assert resources["resourceMemoryRequest"] == resources["resourceMemoryLimit"] == PLACEHOLDER % "memory"
    probe_task = tasks["probe-model"][1]
    for field in ("gpus", "cpu", "memory"):
        assert probe_task["inputs"]["parameters"][f"pipelinechannel--unit-resources-{field}"] == {
            "taskOutputParameter": {"outputParameterKey": field, "producerTask": "unit-resources"}
        }
    assert "unit-resources" in probe_task["dependentTasks"]  # the local runner waits for it too
    # the defaults of a model that names no resources: one GPU (FACTPROBE_GPU_COUNT), gpu_step's CPU and memory
    plan = tasks["plan-units"][1]["inputs"]["parameters"]
    assert plan["defaults"]["runtimeValue"]["constant"] == {"gpus": 1, "cpu": "4", "memory": "32G"}
    assert plan["shards"] == {"componentInputParameter": "pipelinechannel--shards"}
    assert plan["one_load"] == {"componentInputParameter": "pipelinechannel--one_load"}
    assert loop["inputs"]["parameters"][loop["parameterIterator"]["items"]["inputParameter"]] == {
        "taskOutputParameter": {"outputParameterKey": "Output", "producerTask": "plan-units"}
    }


@pytest.mark.slow
@pytest.mark.parametrize("name", SWEEPS)
def test_units_are_merged_before_the_report(sweeps, name):
    c = sweeps[name]
    tasks = c.tasks()
    loop_name, _ = _loop(c)
    merge = tasks["merge-results"][1]["inputs"]["artifacts"]
    assert merge["units"] == {
        "taskOutputArtifact": {"outputArtifactKey": "pipelinechannel--probe-model-results", "producerTask": loop_name}
    }
    assert merge["items"] == {"taskOutputArtifact": {"outputArtifactKey": "items", "producerTask": "data-build"}}
    readers = ["report", "nightly-compare"] if name == "nightly_sweep" else ["report"]
    for step in readers:
        assert tasks[step][1]["inputs"]["artifacts"]["results"] == {
            "taskOutputArtifact": {"outputArtifactKey": "results", "producerTask": "merge-results"}
        }


@pytest.mark.slow
def test_the_fan_out_has_a_parallelism_cap(sweeps, tmp_path, monkeypatch):
    from factprobe_ops.pipelines.probe import DEFAULT_PARALLELISM

    for name in SWEEPS:
        assert _loop(sweeps[name])[1]["iteratorPolicy"] == {"parallelismLimit": DEFAULT_PARALLELISM}
    assert _loop(_compile("probe", tmp_path, monkeypatch, FACTPROBE_PARALLELISM="3"))[1]["iteratorPolicy"] == {
        "parallelismLimit": 3
    }
    # a local build keeps kfp's local runner cap (which the thread policy counts on)
    assert "iteratorPolicy" not in _loop(_compile("probe", tmp_path, monkeypatch, local=True))[1]
    with pytest.raises(ConfigError, match="FACTPROBE_PARALLELISM='many'"):
        _compile("probe", tmp_path, monkeypatch, FACTPROBE_PARALLELISM="many")


@pytest.mark.slow
def test_an_older_backend_is_warned_that_per_model_resources_need_2_5(sweeps):
    from factprobe_ops.pipelines.kfp_compat import check_backend, compat_platform_spec, required_features

    c = sweeps["probe"]
    platform = {"platforms": {"kubernetes": c.platform}}
    assert any(f.name.startswith("resources from pipeline values") for f in required_features(c.spec, platform))
    compat = compat_platform_spec(platform)
    warning = check_backend("2.4.1", c.spec, compat, "http://kfp", compat=True)
    assert "resources from pipeline values" in warning and "honoured from 2.5.0" in warning
