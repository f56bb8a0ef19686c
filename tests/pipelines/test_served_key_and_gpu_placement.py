"""A served model on the cluster (issue 38 item 3, issue 41 item 9), on the compiled `probe` sweep:

- a unit with `gpus: 0` (a served model: an HTTP client) runs without the GPU pool's node selector and
  toleration, on CPU resources; units with GPUs keep them. The probe step's node selector and tolerations
  are read from the `unit-resources` step's outputs (kfp-kubernetes `add_node_selector_json` /
  `add_toleration_json`), with the static GPU ones kept beside them for `--compat`;
- the steps that load a model get the served endpoint's API key from the Secret `vllm-api-key` (the key
  the vLLM server of k8s/overlays/vllm-serve requires) as FACTPROBE_OPENAI_API_KEY, optional, never as a
  parameter.

Compiles the `probe` pipeline only, in this Python, without FACTPROBE_* variables.
"""

from __future__ import annotations

import copy
import json
import os

import pytest

from tests.pipelines.pipeline_fixtures import load_compiled

GPU_LABEL = {"factprobe.io/node-pool": "gpu"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}
OUTPUT = {"taskOutputParameter": {"producerTask": "unit-resources", "outputParameterKey": "%s"}}


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    from kfp import compiler

    from factprobe_ops.pipelines.catalogue import get_pipeline

    mp = pytest.MonkeyPatch()
    try:
        for key in [k for k in os.environ if k.startswith("FACTPROBE_")]:
            mp.delenv(key)
        path = tmp_path_factory.mktemp("probe") / "probe.yaml"
        compiler.Compiler().compile(get_pipeline("probe"), str(path))
        return load_compiled(path)
    finally:
        mp.undo()


def _ref(key: str) -> dict:
    return json.loads(json.dumps(OUTPUT) % key)


def pod_placement(executor: dict, outputs: dict) -> tuple[dict, list]:
    """The node selector and tolerations the KFP driver (2.14+, kubeflow/pipelines#11860) gives the pod of
    `executor`: a `nodeSelectorJson` reference replaces the static labels; a toleration entry with a
    `tolerationJson` reference contributes the resolved dict or every item of the resolved list instead of
    its static fields. `outputs` holds the producer step's output values."""

    def resolve(ref):
        return outputs[ref["taskOutputParameter"]["outputParameterKey"]]

    selector = executor.get("nodeSelector") or {}
    labels = resolve(selector["nodeSelectorJson"]) if "nodeSelectorJson" in selector else selector.get("labels", {})
    tolerations = []
    for tol in executor.get("tolerations") or []:
        if "tolerationJson" in tol:
            value = resolve(tol["tolerationJson"])
            tolerations += value if isinstance(value, list) else [value]
        else:
            tolerations.append(tol)
    return labels, tolerations


@pytest.mark.slow  # compiles one pipeline: seconds
def test_unit_placement_comes_from_the_unit_resources_step(probe):
    tasks = probe.tasks()
    executor = probe.k8s_executors[probe.executor_of("probe-model")]
    assert executor["nodeSelector"] == {"labels": GPU_LABEL, "nodeSelectorJson": _ref("node_selector")}
    assert executor["tolerations"] == [{**GPU_TOLERATION, "tolerationJson": _ref("tolerations")}]
    # the GPU pool handed to the unit-resources step is the cluster setting
    size = tasks["unit-resources"][1]["inputs"]["parameters"]
    assert size["placement"]["runtimeValue"]["constant"] == {"node_selector": GPU_LABEL, "tolerations": [GPU_TOLERATION]}
    assert "unit-resources" in tasks["probe-model"][1]["dependentTasks"]


@pytest.mark.slow
def test_a_served_unit_runs_off_the_gpu_pool_and_a_gpu_unit_on_it(probe):
    """The units of a models list with a served model (`gpus: 0`) and a local one (`gpus: 2`), through the
    unit-resources step's own code, into the pod the driver builds from the compiled spec."""
    from factprobe_ops.components.steps.plan import run_plan_units, unit_placement, unit_resources

    models = [{"name": "meta-llama/Llama-2-7b-hf", "endpoint": "http://factprobe-vllm.kubeflow.svc:8000/v1", "gpus": 0}]
    models += [{"name": "smollm2-135m-instruct", "gpus": 2, "cpu": "8", "memory": "48G"}]
    served, local = run_plan_units(models, ["ic-lke"], defaults={"gpus": 1, "cpu": "4", "memory": "32G"})
    placement = probe.tasks()["unit-resources"][1]["inputs"]["parameters"]["placement"]["runtimeValue"]["constant"]
    executor = probe.k8s_executors[probe.executor_of("probe-model")]
    resources = probe.executors[probe.executor_of("probe-model")]["container"]["resources"]
    assert resources["accelerator"]["resourceCount"].endswith("['pipelinechannel--unit-resources-gpus']}}")

    node_selector, tolerations = unit_placement(served, placement)
    assert unit_resources(served)[0] == "0"  # no GPU requested: nvidia.com/gpu 0, CPU and memory as given
    assert pod_placement(executor, {"node_selector": node_selector, "tolerations": tolerations}) == ({}, [])

    node_selector, tolerations = unit_placement(local, placement)
    assert unit_resources(local) == ("2", "8", "48G")
    assert pod_placement(executor, {"node_selector": node_selector, "tolerations": tolerations}) == (
        GPU_LABEL,
        [GPU_TOLERATION],
    )


@pytest.mark.slow
def test_compat_keeps_the_static_gpu_placement(probe):
    from factprobe_ops.pipelines.kfp_compat import compat_notes, compat_platform_spec, minimum_backend, required_features

    platform = {"platforms": {"kubernetes": probe.platform}}
    assert any("nodeSelectorJson" in f.name for f in required_features(probe.spec, platform))
    old = compat_platform_spec(copy.deepcopy(platform))
    executor = old["platforms"]["kubernetes"]["deploymentSpec"]["executors"][probe.executor_of("probe-model")]
    assert executor["nodeSelector"] == {"labels": GPU_LABEL} and executor["tolerations"] == [GPU_TOLERATION]
    assert minimum_backend(probe.spec, old) <= (2, 1, 0)
    assert any("gpus: 0" in note for note in compat_notes(platform))


@pytest.mark.slow
def test_model_steps_read_the_served_key_from_its_secret_never_a_parameter(probe):
    from factprobe.lm.served import KEY_VARIABLES

    for step in probe.step_names():
        entries = probe.k8s_executors[probe.executor_of(step)].get("secretAsEnv", [])
        served = [e for e in entries if e["secretName"] == "vllm-api-key"]
        if step == "probe-model":
            (entry,) = served
            assert entry["keyToEnv"] == [{"secretKey": "VLLM_API_KEY", "envVar": KEY_VARIABLES[0]}]
            assert entry["optional"] is True  # clusters without a served model run without the Secret
        else:
            assert not served, f"{step} loads no model but gets the served key"
    params = probe.spec["root"]["inputDefinitions"]["parameters"]
    assert not [p for p in params if "key" in p.lower() or "api" in p.lower()]
