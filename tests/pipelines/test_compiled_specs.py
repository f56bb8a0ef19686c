"""The compiled pipeline YAML (what the Kubeflow UI uploads and `factprobe pipeline submit` sends).

Pipelines are compiled in a fresh Python with no FACTPROBE_* variables (pipeline_fixtures.py), then
the pipeline spec and the Kubernetes platform spec are checked: GPU placement, secrets, retries,
the ExitHandler, ParallelFor + Collected, images, parameter docs, the regression gate's If, and
a snapshot of the whole spec.

Regenerate the snapshots after an intended change:
    UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest tests/pipelines/test_compiled_specs.py
"""

from __future__ import annotations

import copy
import difflib
import functools
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

# ruff: noqa: F811 - the shared fixtures are imported by name and requested as test parameters
from tests.pipelines.pipeline_fixtures import (  # noqa: F401 (fixtures)
    OVERRIDDEN,
    compiled,
    compiled_overridden_all,
    start_compile_jobs,
)

REPO = Path(__file__).resolve().parents[2]
# Start both compiles (fresh interpreters, seconds each) at collection so they overlap other tests.
start_compile_jobs()
SNAPSHOTS = Path(__file__).parent / "snapshots"

GPU_STEPS = {
    "probe-model",
    "probe-known-unknown",
    "probe-with-known-unknown",
    "finetune-base-table",
    "finetune-evaluate-base",
    "finetune-evaluate-adapter",
    "finetune-train",
    "probe-belief",
    "run-study",
    "run-study-2",
    "run-study-3",
}
#: GPU steps in the training image (FACTPROBE_IMAGE_TRAIN); tests/pipelines/test_finetune_pipeline.py checks them
TRAIN_STEPS = {"finetune-train"}
CPU_STEPS = {
    "data-build",
    "report",
    "start-run",
    "finalize-run",
    "plan-matrix",
    "read-models",
    "nightly-compare",
    "regression-gate-step",
    "fail-run",
    "counterfactual-report",
    "finetune-sets",
    "finetune-report",
    "finetune-trainjob",
    "belief-plan",
    "belief-report",
    "plan-study",
    "plan-units",
    "unit-resources",
    "merge-results",
    "knowledge-map",  # issue 39: the sweeps' map step (tests/pipelines/test_map_step_specs.py)
    "pack-config",
    "pack-config-2",  # the fine-tuning pipeline packs its probe config, its fine-tuning dict and their union
    "pack-config-3",
}
#: the `pack-config` steps of each pipeline (pipelines/params.py `packed`): they run first, before
#: the parent MLflow run opens, and log nothing
PACKS_OF = {"finetune_known_unknown": {"pack-config", "pack-config-2", "pack-config-3"}, "study": set()}
# read facts from s3://; MLflow artifacts are proxied by the server
S3_STEPS = {
    "data-build",
    "probe-model",
    "probe-known-unknown",
    "probe-with-known-unknown",
    "finetune-base-table",
    "finetune-evaluate-base",
    "finetune-evaluate-adapter",
    "finetune-train",
    "finetune-trainjob",
    "probe-belief",
    "run-study",
    "run-study-2",
    "run-study-3",
}
STEPS_OF = {
    "probe": {
        "start-run",
        "pack-config",
        "plan-units",
        "data-build",
        "unit-resources",
        "probe-model",
        "merge-results",
        "report",
        "knowledge-map",
        "finalize-run",
    },
    "nightly_sweep": {
        "read-models",
        "start-run",
        "pack-config",
        "plan-units",
        "data-build",
        "unit-resources",
        "probe-model",
        "merge-results",
        "report",
        "knowledge-map",
        "nightly-compare",
        "finalize-run",
    },
    "regression": {
        "start-run",
        "pack-config",
        "plan-matrix",
        "data-build",
        "probe-model",
        "report",
        "regression-gate-step",
        "fail-run",
        "finalize-run",
    },
    "counterfactual_icl": {
        "start-run",
        "pack-config",
        "plan-matrix",
        "data-build",
        "probe-known-unknown",
        "probe-with-known-unknown",
        "counterfactual-report",
        "finalize-run",
    },
    "coherency": {"start-run", "pack-config", "plan-matrix", "data-build", "probe-model", "report", "finalize-run"},
    "finetune_known_unknown": {
        "start-run",
        "pack-config",
        "data-build",
        "finetune-base-table",
        "finetune-evaluate-base",
        "finetune-sets",
        "finetune-train",
        "finetune-trainjob",
        "finetune-evaluate-adapter",
        "finetune-report",
        "finalize-run",
        "pack-config-2",
        "pack-config-3",
    },
    "belief": {"start-run", "pack-config", "belief-plan", "data-build", "probe-belief", "belief-report", "finalize-run"},
    # the study steps (issue 20): one component per task, `run-study`, `run-study-2`, ...
    "design_space": {
        "start-run",
        "pack-config",
        "plan-matrix",
        "data-build",
        "probe-model",
        "report",
        "finalize-run",
        "run-study",
        "run-study-2",
        "run-study-3",
    },
    "findings": {"start-run", "pack-config", "run-study", "finalize-run"},
    # the generic study pipeline (issue 31 item 2): any registered study, one loop cell per model
    "study": {"start-run", "plan-study", "run-study", "finalize-run"},
}
#: the pipelines built on `probe_dag` (pipelines/probe.py): a models x probes loop of `probe-model`
PROBE_DAG = ("regression", "coherency")
#: the sweeps (`sweep_dag`): units of work with per-model resources, merged (tests/pipelines/test_sweep_specs.py)
SWEEPS = ("probe", "nightly_sweep")
#: a sweep's probe step takes its resources from the unit-resources step
UNIT_RESOURCE = "{{$.inputs.parameters['pipelinechannel--unit-resources-%s']}}"
NAMES = tuple(STEPS_OF)
CPU_IMAGE = "ghcr.io/factprobe/factprobe-cpu:0.1.0"
GPU_IMAGE = "ghcr.io/factprobe/factprobe-gpu:0.1.0"
TRAIN_IMAGE = "ghcr.io/factprobe/factprobe-train:0.1.0"


@functools.cache
def built(name: str):
    """The pipeline `name` as `factprobe pipeline compile` builds it (pipelines are built on request)."""
    from factprobe_ops.pipelines.catalogue import get_pipeline

    return get_pipeline(name)


def declared_parameters(name: str) -> dict[str, object]:
    """{parameter: default} of the built pipeline function (generated from the registry, pipelines/params.py)."""
    return {n: p.default for n, p in inspect.signature(built(name).pipeline_func).parameters.items()}


def documented_parameters(name: str) -> dict[str, str]:
    """{parameter: description} from the `Args:` section of the pipeline function's docstring."""
    doc = built(name).pipeline_func.__doc__ or ""
    args = doc.split("Args:", 1)[1] if "Args:" in doc else ""
    out, current = {}, None
    for line in args.splitlines():
        m = re.match(r"^\s{4}(\w+):\s*(.*)$", line)
        if m:
            current = m.group(1)
            out[current] = m.group(2).strip()
        elif current and line.strip():
            out[current] += " " + line.strip()
    return out


def multiline_string_defaults(name: str) -> list[str]:
    return [k for k, v in declared_parameters(name).items() if isinstance(v, str) and "\n" in v]


def _header_bug(name: str):
    """kfp 2.17 writes string defaults into the YAML comment header unescaped: a default with a
    newline makes the file unparseable (by the KFP client, by the UI's upload). Known for
    nightly_sweep's `models_yaml`; the mark goes away by itself once the default is one line."""
    bad = multiline_string_defaults(name)
    return pytest.mark.xfail(
        bool(bad),
        strict=True,
        raises=yaml.YAMLError,
        reason=f"multi-line string default(s) {bad} in pipelines/{name}.py "
        "break kfp's YAML comment header (see the report: use a one-line default)",
    )


#: secrets a pod may start without (pipelines/platform.py with_hf_token, with_served_api_key)
OPTIONAL_SECRETS = {"hf-token", "vllm-api-key", "team-vllm"}


def secrets_of(c, executor: str) -> dict[str, dict[str, str]]:
    """{secret name: {env var: secret key}} mapped into an executor's container."""
    out = {}
    for entry in c.k8s_executors.get(executor, {}).get("secretAsEnv", []):
        out[entry["secretName"]] = {k["envVar"]: k["secretKey"] for k in entry["keyToEnv"]}
        # only the Hugging Face token and a served model's API key are optional (pods start without them;
        # pipelines/platform.py with_hf_token, with_served_api_key)
        assert entry.get("optional") is (entry["secretName"] in OPTIONAL_SECRETS), (
            f"{executor}: secret {entry['secretName']} optional={entry.get('optional')}"
        )
    return out


def gpu_steps(c) -> list[str]:
    """The GPU steps of a compiled pipeline (every pipeline has at least one)."""
    found = sorted(c.step_names() & GPU_STEPS)
    assert found, f"{c.name} has no GPU step"
    return found


def loop_task(c) -> tuple[str, dict]:
    loops = [(n, t) for n, (_, t) in c.tasks().items() if "parameterIterator" in t]
    assert len(loops) == 1, f"{c.name}: expected one ParallelFor, got {[n for n, _ in loops]}"
    return loops[0]


# --- the file itself ----------------------------------------------------------------------------


def test_every_pipeline_is_checked_and_compiled_by_default(compiled):
    """`factprobe pipeline compile` (no names) writes every pipeline of `factprobe_ops.pipelines.catalogue.PIPELINES`,
    and every one of them is checked here."""
    from factprobe_ops.pipelines.catalogue import PIPELINES

    assert set(NAMES) == set(PIPELINES)
    assert set(compiled) == set(PIPELINES)


@pytest.mark.parametrize("name", [pytest.param(n, marks=_header_bug(n)) for n in NAMES])
def test_compiled_file_loads_like_the_kfp_client(compiled, name):
    """kfp.Client and the UI parse the whole file (header included) with a YAML loader."""
    c = compiled[name]
    docs = [d for d in yaml.safe_load_all(c.text) if d is not None]
    assert docs[0] == c.spec
    assert docs[1]["platforms"]["kubernetes"] == c.platform


@pytest.mark.parametrize("name", NAMES)
def test_pipeline_has_its_steps_and_a_platform_spec(compiled, name):
    c = compiled[name]
    assert c.spec["pipelineInfo"]["name"] == f"factprobe-{name.replace('_', '-')}"
    assert c.spec["pipelineInfo"].get("description")
    assert c.step_names() == STEPS_OF[name]
    assert set(c.k8s_executors) == {c.executor_of(s) for s in STEPS_OF[name]}, "every step needs a platform entry"


# --- GPU placement ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_probe_step_requests_one_gpu_on_the_gpu_pool(compiled, name):
    """Every model step (probe-model; counterfactual_icl's two probe steps) gets the settings of
    `gpu_step`: one GPU, the GPU node pool's selector and toleration, the GPU image's resources."""
    c = compiled[name]
    for step in gpu_steps(c):
        ex = c.executor_of(step)
        resources = c.executors[ex]["container"]["resources"]
        accel = resources["accelerator"]
        want = (UNIT_RESOURCE % "gpus", UNIT_RESOURCE % "cpu", UNIT_RESOURCE % "memory") if name in SWEEPS else ("1", "4", "32G")
        assert accel["resourceType"] == "nvidia.com/gpu" and accel["resourceCount"] == want[0], step
        assert accel.get("type", "nvidia.com/gpu") == "nvidia.com/gpu" and accel.get("count", "1") == "1", step
        assert (resources["resourceCpuLimit"], resources["resourceMemoryLimit"]) == want[1:], step
        k8s = c.k8s_executors[ex]
        assert k8s["nodeSelector"]["labels"] == {"factprobe.io/node-pool": "gpu"}, step
        # a sweep's unit reads its placement from the unit-resources step (tests/pipelines/test_served_key_and_gpu_placement.py);
        # the static GPU pool stays beside the reference
        static = [{k: v for k, v in tol.items() if k != "tolerationJson"} for tol in k8s["tolerations"]]
        assert {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"} in static, step
        assert ("nodeSelectorJson" in k8s["nodeSelector"]) == (name in SWEEPS and step == "probe-model"), step


@pytest.mark.parametrize("name", NAMES)
def test_cpu_steps_request_no_accelerator_and_stay_off_the_gpu_pool(compiled, name):
    c = compiled[name]
    cpu_steps = c.step_names() - GPU_STEPS
    assert cpu_steps <= CPU_STEPS, f"unclassified steps {cpu_steps - CPU_STEPS}: add them to CPU_STEPS or GPU_STEPS"
    for step in cpu_steps:
        ex = c.executor_of(step)
        resources = c.executors[ex]["container"]["resources"]
        assert "accelerator" not in resources, f"{step} requests an accelerator"
        assert resources.get("resourceCpuLimit") and resources.get("resourceMemoryLimit"), f"{step} has no limits"
        k8s = c.k8s_executors.get(ex, {})
        assert "nodeSelector" not in k8s, f"{step} has a node selector {k8s.get('nodeSelector')}"
        assert not k8s.get("tolerations"), f"{step} tolerates the GPU taint"


# --- secrets ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_every_step_gets_mlflow_credentials_and_only_s3_steps_get_s3_credentials(compiled, name):
    c = compiled[name]
    for step in c.step_names():
        secrets = secrets_of(c, c.executor_of(step))
        assert secrets.get("mlflow-credentials") == {
            "MLFLOW_TRACKING_USERNAME": "MLFLOW_TRACKING_USERNAME",
            "MLFLOW_TRACKING_PASSWORD": "MLFLOW_TRACKING_PASSWORD",
        }, step
        if step in S3_STEPS:
            assert secrets.get("s3-credentials") == {
                "AWS_ACCESS_KEY_ID": "AWS_ACCESS_KEY_ID",
                "AWS_SECRET_ACCESS_KEY": "AWS_SECRET_ACCESS_KEY",
            }, step
        else:
            assert "s3-credentials" not in secrets, f"{step} does not touch S3 but gets its credentials"


CREDENTIAL_PARAM = re.compile(r"pass|secret|token|cred|key", re.IGNORECASE)
#: parameters whose names look like credentials but are not (checked by name, one by one)
NOT_CREDENTIALS = {
    "token_budget",  # most query tokens per packed forward (BaseConfig)
    "max_new_tokens",  # most tokens generated per answer (QA / counterfactual probes)
    "max_answer_tokens",  # most tokens generated per answer and per sample (belief-icl)
}
CREDENTIAL_LITERALS = [
    re.compile(r"\b[a-z][a-z0-9+.-]*://[^/\s:@'\"]+:[^/\s@'\"]+@"),  # user:password@ in a URL
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),  # AWS access key id
    re.compile(r"(MLFLOW_TRACKING_PASSWORD|AWS_SECRET_ACCESS_KEY|MLFLOW_TRACKING_TOKEN)\s*[=:]\s*\S"),
    re.compile(r"CHANGE_ME|minioadmin", re.IGNORECASE),
]


@pytest.mark.parametrize("name", NAMES)
def test_no_credentials_in_parameters_or_yaml(compiled, name):
    c = compiled[name]
    params = c.spec["root"]["inputDefinitions"]["parameters"]
    suspicious = [p for p in params if CREDENTIAL_PARAM.search(p) and p not in NOT_CREDENTIALS]
    assert not suspicious, f"credentials come from secrets, never parameters: {suspicious}"
    for pattern in CREDENTIAL_LITERALS:
        assert not pattern.search(c.text), f"{pattern.pattern!r} found in the compiled YAML"
    for ex, spec in c.executors.items():
        env = {e["name"] for e in spec["container"].get("env", [])}
        assert not {n for n in env if CREDENTIAL_PARAM.search(n)}, f"{ex} sets a credential as a literal env var"


@pytest.mark.parametrize("name", NAMES)
def test_every_step_runs_as_the_image_user_not_root(compiled, name):
    c = compiled[name]
    for step in c.step_names():
        ex = c.executor_of(step)
        assert c.k8s_executors[ex]["securityContext"] == {"runAsUser": "1000", "runAsGroup": "1000", "runAsNonRoot": True}, step
        assert c.k8s_executors[ex]["podMetadata"]["labels"]["factprobe.io/role"] == "pipeline-step", step
        env = {e["name"]: e.get("value") for e in c.executors[ex]["container"].get("env", [])}
        # No FACTPROBE_S3_ENDPOINT at compile time: boto3 talks to AWS S3 itself.
        assert "AWS_ENDPOINT_URL" not in env, step
        # OpenMP waits passively in every pod (issue 30 item 5): spinning threads burn the pod's CPU quota.
        assert env.get("OMP_WAIT_POLICY") == "PASSIVE", step


# --- retries and caching ------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_gpu_probe_is_retried_and_nothing_else(compiled, name):
    """`set_retry(num_retries=2, backoff_duration="60s", backoff_factor=2.0)` compiles to the
    task's `retryPolicy` (kfp 2.17 fills in backoffMaxDuration 3600s)."""
    c = compiled[name]
    tasks = c.tasks()
    for step in gpu_steps(c):  # task names are the component names here
        assert tasks[step][1]["retryPolicy"] == {
            "maxRetryCount": 2,
            "backoffDuration": "60s",
            "backoffFactor": 2.0,
            "backoffMaxDuration": "3600s",
        }, step
    assert sorted(t for t, (_, spec) in tasks.items() if "retryPolicy" in spec) == gpu_steps(c)


@pytest.mark.parametrize("name", NAMES)
def test_no_step_is_cached(compiled, name):
    """Every step has MLflow side effects (a cached start-run would hand out an old run id)."""
    for tname, (_, task) in compiled[name].tasks().items():
        if "componentRef" in task and "executorLabel" in compiled[name].spec["components"][task["componentRef"]["name"]]:
            assert task.get("cachingOptions", {}).get("enableCache", False) is False, f"{tname} is cached"


@pytest.mark.parametrize("name", NAMES)
def test_no_list_or_struct_parameter_is_placed_inside_a_constant(compiled, name):
    """A placeholder inside a constant (e.g. a dict option) is replaced as text: a list or struct
    parameter there gives the step invalid JSON (the findings pipeline's `models` once did). Such a
    parameter must reach its step as an input of its own."""
    c = compiled[name]
    dags = {"root": c.spec["root"], **{k: v for k, v in c.spec["components"].items() if "dag" in v}}
    placeholder = re.compile(r"\{\{\$\.inputs\.parameters\['([^']+)'\]\}\}")

    def strings(value):
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for v in value.values():
                yield from strings(v)
        elif isinstance(value, list):
            for v in value:
                yield from strings(v)

    for tname, (owner, task) in c.tasks().items():
        declared = dags[owner].get("inputDefinitions", {}).get("parameters", {})
        for pname, value in task.get("inputs", {}).get("parameters", {}).items():
            constant = value.get("runtimeValue", {}).get("constant")
            for text in strings(constant):
                for ref in placeholder.findall(text):
                    kind = declared.get(ref, {}).get("parameterType") or task["inputs"]["parameters"].get(ref, {}).get(
                        "parameterType"
                    )
                    upstream = task["inputs"]["parameters"].get(ref, {})
                    if kind is None and "componentInputParameter" in upstream:
                        kind = declared.get(upstream["componentInputParameter"], {}).get("parameterType")
                    assert kind not in ("LIST", "STRUCT"), f"{name}: task {tname} input {pname} embeds {ref} ({kind})"


# --- DAG structure ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_exit_handler_finalizes_the_mlflow_run(compiled, name):
    c = compiled[name]
    root = c.spec["root"]["dag"]["tasks"]
    # Everything after the parent MLflow run opens runs inside the handler; nightly_sweep reads its
    # models list first (no run exists yet, so a bad list leaves nothing to finalize).
    before = {"read-models"} if name == "nightly_sweep" else set()
    # ... and the config's lists and empty optional numbers are packed first (tests/pipelines/test_parameter_types.py)
    before |= PACKS_OF.get(name, {"pack-config"})
    assert set(root) == {"exit-handler-1", "finalize-run"} | before
    handler = root["exit-handler-1"]
    assert handler["taskInfo"]["name"] == "track-and-probe"
    final = root["finalize-run"]
    assert final["triggerPolicy"] == {"strategy": "ALL_UPSTREAM_TASKS_COMPLETED"}
    assert final["dependentTasks"] == ["exit-handler-1"]
    assert final["inputs"]["parameters"]["status"] == {"taskFinalStatus": {"producerTask": "exit-handler-1"}}
    assert final["inputs"]["parameters"]["kfp_run_id"] == {"runtimeValue": {"constant": "{{$.pipeline_job_uuid}}"}}
    assert final["inputs"]["parameters"]["pipeline"] == {"runtimeValue": {"constant": name}}
    assert (
        c.spec["components"]["comp-finalize-run"]["inputDefinitions"]["parameters"]["status"]["parameterType"]
        == "TASK_FINAL_STATUS"
    )
    inside = c.spec["components"][handler["componentRef"]["name"]]["dag"]["tasks"]
    assert "start-run" in inside and inside["start-run"]["taskInfo"]["name"] == "start-mlflow-run"
    # The finalizer finds the parent run by the KFP run id start-run tagged it with.
    assert inside["start-run"]["inputs"]["parameters"]["kfp_run_id"] == final["inputs"]["parameters"]["kfp_run_id"]


#: the run context's parts (tracking/context.py): no step takes them one by one
LOOSE_TRACKING_INPUTS = {"tracking_uri", "parent_run_id", "kfp_run_id", "trigger", "pipeline"}
#: the steps that may: start-run builds the context; finalize-run (the exit task) runs even when
#: start-run failed, so it takes the tracking URI parameter and the KFP run id itself
CONTEXT_BUILDERS = {"comp-start-run", "comp-finalize-run"}
#: the steps that log nothing to MLflow (no context)
UNTRACKED = {"comp-read-models", "comp-fail-run", "comp-unit-resources"}


@pytest.mark.parametrize("name", NAMES)
def test_one_run_context_crosses_the_steps(compiled, name):
    """Every step but start-run and finalize-run takes the run context as ONE `context` input
    (start-run's output, or inside a loop the cell's), none of its parts one by one."""
    c = compiled[name]
    for comp, spec in c.spec["components"].items():
        if "executorLabel" not in spec or comp in CONTEXT_BUILDERS:
            continue
        params = set(spec.get("inputDefinitions", {}).get("parameters", {}))
        assert not params & LOOSE_TRACKING_INPUTS, f"{name}: {comp} takes {sorted(params & LOOSE_TRACKING_INPUTS)}"
        if comp not in UNTRACKED and not comp.startswith("comp-pack-config"):
            assert "context" in params, f"{name}: {comp} takes no run context"
    start = c.spec["components"]["comp-start-run"]["outputDefinitions"]["parameters"]["Output"]
    assert start["parameterType"] == "STRING"
    for step, (_, task) in c.tasks().items():
        given = task.get("inputs", {}).get("parameters", {}).get("context")
        if given is None or "componentInputParameter" in given:  # inside a loop: the cell's, checked below
            continue
        assert given == {"taskOutputParameter": {"outputParameterKey": "Output", "producerTask": "start-run"}}, step


@pytest.mark.parametrize("name", PROBE_DAG)
def test_parallel_for_over_the_plan_and_collected_results(compiled, name):
    c = compiled[name]
    tasks = c.tasks()
    loop_name, loop = loop_task(c)
    assert loop["taskInfo"]["name"] == "models-x-probes"
    items = loop["parameterIterator"]["items"]["inputParameter"]
    assert loop["inputs"]["parameters"][items] == {
        "taskOutputParameter": {"outputParameterKey": "Output", "producerTask": "plan-matrix"}
    }
    assert tasks["probe-model"][0] == loop["componentRef"]["name"], "the probe runs inside the loop"
    probe_inputs = tasks["probe-model"][1]["inputs"]
    item = loop["parameterIterator"]["itemInput"]
    for field in ("model", "probe", "context"):
        assert probe_inputs["parameters"][field] == {
            "componentInputParameter": item,
            "parameterExpressionSelector": f'parseJson(string_value)["{field}"]',
        }
    assert probe_inputs["artifacts"]["items"] == {"componentInputArtifact": "pipelinechannel--data-build-items"}
    assert loop["inputs"]["artifacts"]["pipelinechannel--data-build-items"]["taskOutputArtifact"] == {
        "outputArtifactKey": "items",
        "producerTask": "data-build",
    }
    # Collected: the loop DAG outputs the list of all probe results, and consumers take a list.
    loop_comp = c.spec["components"][loop["componentRef"]["name"]]
    out = loop_comp["dag"]["outputs"]["artifacts"]["pipelinechannel--probe-model-results"]
    assert out == {"artifactSelectors": [{"outputArtifactKey": "results", "producerSubtask": "probe-model"}]}
    assert loop_comp["outputDefinitions"]["artifacts"]["pipelinechannel--probe-model-results"]["isArtifactList"] is True
    consumers = {
        "probe": {"report": "results"},
        "nightly_sweep": {"report": "results", "nightly-compare": "results"},
        "regression": {"report": "results", "regression-gate-step": "candidate"},
        "coherency": {"report": "results"},
    }[name]
    for step, arg in consumers.items():
        assert tasks[step][1]["inputs"]["artifacts"][arg] == {
            "taskOutputArtifact": {"outputArtifactKey": "pipelinechannel--probe-model-results", "producerTask": loop_name}
        }
        assert c.spec["components"][f"comp-{step}"]["inputDefinitions"]["artifacts"][arg]["isArtifactList"] is True


def test_nightly_sweep_reads_models_and_compares_after_the_report_and_the_map(compiled):
    c = compiled["nightly_sweep"]
    tasks = c.tasks()
    assert tasks["read-models"][0] == "root"
    handler = c.spec["root"]["dag"]["tasks"]["exit-handler-1"]
    assert handler["dependentTasks"] == ["pack-config", "read-models"]
    assert handler["inputs"]["parameters"]["pipelinechannel--read-models-Output"] == {
        "taskOutputParameter": {"outputParameterKey": "Output", "producerTask": "read-models"}
    }
    for step in ("plan-units", "start-run"):  # the units and the run's params use the list read
        assert tasks[step][1]["inputs"]["parameters"]["models"] == {
            "componentInputParameter": "pipelinechannel--read-models-Output"
        }
    # the report, then the knowledge map, then the comparison (which may fail the run on an alert)
    assert "report" in tasks["knowledge-map"][1]["dependentTasks"]
    assert "knowledge-map" in tasks["nightly-compare"][1]["dependentTasks"]


def test_regression_fails_the_run_when_the_gate_says_fail(compiled):
    c = compiled["regression"]
    tasks = c.tasks()
    conditions = [(n, t) for n, (_, t) in tasks.items() if "condition" in t.get("triggerPolicy", {})]
    assert len(conditions) == 1
    _, cond = conditions[0]
    assert cond["taskInfo"]["name"] == "gate-failed"
    assert (
        cond["triggerPolicy"]["condition"] == "inputs.parameter_values['pipelinechannel--regression-gate-step-Output'] == 'FAIL'"
    )
    assert cond["inputs"]["parameters"]["pipelinechannel--regression-gate-step-Output"] == {
        "taskOutputParameter": {"outputParameterKey": "Output", "producerTask": "regression-gate-step"}
    }
    assert tasks["fail-run"][0] == cond["componentRef"]["name"], "fail-run only runs inside the If"
    assert (
        c.spec["components"]["comp-regression-gate-step"]["outputDefinitions"]["parameters"]["Output"]["parameterType"]
        == "STRING"
    )
    # One candidate x one probe: one-element lists around the scalar parameters, resolved by the
    # KFP driver from placeholders.
    plan = tasks["plan-matrix"][1]["inputs"]["parameters"]
    assert plan["models"] == {"runtimeValue": {"constant": ["{{$.inputs.parameters['pipelinechannel--candidate']}}"]}}
    assert plan["probes"] == {"runtimeValue": {"constant": ["{{$.inputs.parameters['pipelinechannel--probe_name']}}"]}}
    assert plan["pipelinechannel--candidate"] == {"componentInputParameter": "pipelinechannel--candidate"}


def test_counterfactual_icl_chains_qa_table_and_counterfactual_per_model(compiled):
    """Per model (a ParallelFor over the plan): QA over every split with k = 0 and k = known_shots
    writes the known/unknown table; the counterfactual step of the same iteration reads that table;
    one counterfactual-report takes both steps' results collected over every model."""
    c = compiled["counterfactual_icl"]
    tasks = c.tasks()
    loop_name, loop = loop_task(c)
    assert loop["taskInfo"]["name"] == "models"
    items = loop["parameterIterator"]["items"]["inputParameter"]
    assert loop["inputs"]["parameters"][items] == {
        "taskOutputParameter": {"outputParameterKey": "Output", "producerTask": "plan-matrix"}
    }
    item = loop["parameterIterator"]["itemInput"]
    # one loop cell per model: the plan expands the models with the counterfactual probe only
    plan = tasks["plan-matrix"][1]["inputs"]["parameters"]
    assert plan["probes"] == {"runtimeValue": {"constant": ["counterfactual"]}}
    assert plan["models"] == {"componentInputParameter": "pipelinechannel--models"}
    build = tasks["data-build"][1]["inputs"]["parameters"]
    assert build["probes"] == {"runtimeValue": {"constant": ["qa", "counterfactual"]}}  # one "qa" dataset kind
    assert "plan-matrix" in tasks["data-build"][1]["dependentTasks"]
    qa, cf = tasks["probe-known-unknown"], tasks["probe-with-known-unknown"]
    assert qa[0] == cf[0] == loop["componentRef"]["name"], "both probe steps run inside the loop"
    assert (qa[1]["taskInfo"]["name"], cf[1]["taskInfo"]["name"]) == ("qa-known-unknown", "counterfactual-icl")
    for _, task in (qa, cf):
        inputs = task["inputs"]
        for field in ("model", "context"):
            assert inputs["parameters"][field] == {
                "componentInputParameter": item,
                "parameterExpressionSelector": f'parseJson(string_value)["{field}"]',
            }
        assert inputs["artifacts"]["items"] == {"componentInputArtifact": "pipelinechannel--data-build-items"}
    assert qa[1]["inputs"]["parameters"]["probe"] == {"runtimeValue": {"constant": "qa"}}
    assert cf[1]["inputs"]["parameters"]["probe"] == {"runtimeValue": {"constant": "counterfactual"}}
    # QA: every split, zero-shot first (its eval EM is the zero-shot line), then the regular
    # known_shots-shot block whose answers make the table (the pipeline's known_shots, resolved by the driver)
    assert qa[1]["inputs"]["parameters"]["overrides"] == {
        "runtimeValue": {"constant": {"split": "all", "shots": [0, "{{$.inputs.parameters['pipelinechannel--known_shots']}}"]}}
    }
    assert loop["inputs"]["parameters"]["pipelinechannel--known_shots"] == {
        "componentInputParameter": "pipelinechannel--known_shots"
    }  # the handler's input, from the pipeline's known_shots
    handler = c.spec["root"]["dag"]["tasks"]["exit-handler-1"]
    assert handler["inputs"]["parameters"]["pipelinechannel--known_shots"] == {"componentInputParameter": "known_shots"}
    # counterfactual: the pipeline's shots (Figure 7's k) and the table of the same iteration
    assert cf[1]["inputs"]["parameters"]["overrides"] == {"runtimeValue": {"constant": {}}}
    assert cf[1]["inputs"]["artifacts"]["table"] == {
        "taskOutputArtifact": {"outputArtifactKey": "table", "producerTask": "probe-known-unknown"}
    }
    assert cf[1]["dependentTasks"] == ["probe-known-unknown"]
    # Collected: both results lists leave the loop and reach the report
    loop_comp = c.spec["components"][loop["componentRef"]["name"]]
    rep = tasks["counterfactual-report"][1]
    for step, arg in (("probe-known-unknown", "qa_results"), ("probe-with-known-unknown", "counterfactual_results")):
        key = f"pipelinechannel--{step}-results"
        assert loop_comp["dag"]["outputs"]["artifacts"][key] == {
            "artifactSelectors": [{"outputArtifactKey": "results", "producerSubtask": step}]
        }
        assert loop_comp["outputDefinitions"]["artifacts"][key]["isArtifactList"] is True
        assert rep["inputs"]["artifacts"][arg] == {"taskOutputArtifact": {"outputArtifactKey": key, "producerTask": loop_name}}
        assert c.spec["components"]["comp-counterfactual-report"]["inputDefinitions"]["artifacts"][arg]["isArtifactList"] is True
    assert rep["inputs"]["parameters"]["context"] == {
        "taskOutputParameter": {"outputParameterKey": "Output", "producerTask": "start-run"}
    }
    start = tasks["start-run"][1]["inputs"]["parameters"]
    assert start["probes"] == {"runtimeValue": {"constant": ["qa", "counterfactual"]}}


def test_coherency_probes_every_model_with_the_coherency_probe(compiled):
    tasks = compiled["coherency"].tasks()
    for step in ("plan-matrix", "data-build", "start-run"):
        assert tasks[step][1]["inputs"]["parameters"]["probes"] == {"runtimeValue": {"constant": ["coherency"]}}, step
    assert tasks["plan-matrix"][1]["inputs"]["parameters"]["models"] == {"componentInputParameter": "pipelinechannel--models"}


# --- images -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_default_images(compiled, name):
    c = compiled[name]
    for step in c.step_names():
        image = c.executors[c.executor_of(step)]["container"]["image"]
        assert image == (TRAIN_IMAGE if step in TRAIN_STEPS else GPU_IMAGE if step in GPU_STEPS else CPU_IMAGE), step


@pytest.mark.parametrize("name", OVERRIDDEN)
def test_environment_overrides_reach_the_compiled_spec(compiled_overridden_all, name):
    """Every FACTPROBE_* knob, set before compiling (fresh Python), lands in the spec (of every GPU step)."""
    c = compiled_overridden_all[name]
    for step in c.step_names():
        image = c.executors[c.executor_of(step)]["container"]["image"]
        assert image == (
            "registry.example.com/team/fp-gpu:test-1" if step in GPU_STEPS else "registry.example.com/team/fp-cpu:test-1"
        ), step
        secrets = secrets_of(c, c.executor_of(step))
        assert "team-mlflow" in secrets and "mlflow-credentials" not in secrets, step
        assert ("team-s3" in secrets) == (step in S3_STEPS) and "s3-credentials" not in secrets, step
        if step in GPU_STEPS:  # a served model's API key (FACTPROBE_SERVED_KEY_SECRET)
            assert secrets.get("team-vllm") == {"FACTPROBE_OPENAI_API_KEY": "VLLM_API_KEY"} and "vllm-api-key" not in secrets, (
                step
            )
        env = {e["name"]: e["value"] for e in c.executors[c.executor_of(step)]["container"].get("env", [])}
        assert env.get("AWS_ENDPOINT_URL") == "http://minio.factprobe.svc.cluster.local:9000", step
    for step in gpu_steps(c):
        ex = c.executor_of(step)
        accel = c.executors[ex]["container"]["resources"]["accelerator"]
        assert (accel["resourceType"], accel["resourceCount"]) == (
            "nvidia.com/mig-1g.10gb",
            UNIT_RESOURCE % "gpus" if name in SWEEPS else "2",
        ), step
        if name in SWEEPS:  # FACTPROBE_GPU_COUNT is the units' default
            assert c.tasks()["plan-units"][1]["inputs"]["parameters"]["defaults"]["runtimeValue"]["constant"]["gpus"] == 2
        assert c.k8s_executors[ex]["nodeSelector"]["labels"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}, step
        assert [{k: v for k, v in tol.items() if k != "tolerationJson"} for tol in c.k8s_executors[ex]["tolerations"]] == [
            {"key": "gpu-team", "operator": "Equal", "value": "reserved", "effect": "NoExecute"}
        ], step
        if name in SWEEPS:  # ... and is what the unit-resources step hands to a unit with GPUs
            placement = c.tasks()["unit-resources"][1]["inputs"]["parameters"]["placement"]["runtimeValue"]["constant"]
            assert placement == {
                "node_selector": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
                "tolerations": [{"key": "gpu-team", "operator": "Equal", "value": "reserved", "effect": "NoExecute"}],
            }
    # compile always builds the cluster graph, retries included
    assert sorted(t for t, (_, spec) in c.tasks().items() if "retryPolicy" in spec) == gpu_steps(c)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_local_builds_have_no_retries(name, tmp_path, monkeypatch):
    """`factprobe pipeline run` builds with `get_pipeline(name, local=True)`: no retries, so a local run
    fails fast instead of backing off for minutes. A cluster build (the default) keeps them; no
    environment variable switches that (FACTPROBE_LOCAL_RUN is gone)."""
    from kfp import compiler

    from factprobe_ops.pipelines.catalogue import get_pipeline
    from tests.pipelines.pipeline_fixtures import load_compiled

    monkeypatch.setenv("FACTPROBE_LOCAL_RUN", "1")  # a leftover of the old switch changes nothing
    retried, gpu = {}, {}
    for local in (True, False):
        path = tmp_path / f"{name}.yaml"
        compiler.Compiler().compile(get_pipeline(name, local=local), str(path))
        c = load_compiled(path)
        retried[local] = sorted(t for t, (_, spec) in c.tasks().items() if "retryPolicy" in spec)
        gpu[local] = gpu_steps(c)
    assert gpu[True] == gpu[False]
    assert retried == {True: [], False: gpu[False]}


def test_cluster_settings_are_read_when_building_not_at_import():
    """A malformed FACTPROBE_* knob does not break importing the pipeline modules (the CLI, the
    tests); building a pipeline names the variable."""
    code = (
        "import factprobe_ops.pipelines.probe, factprobe_ops.pipelines.nightly_sweep, factprobe_ops.pipelines.regression, factprobe_ops.pipelines.counterfactual_icl, "
        "factprobe_ops.pipelines.coherency, factprobe_ops.pipelines.platform, factprobe_ops.components.config\n"
        "from factprobe_ops.pipelines.catalogue import get_pipeline\n"
        "try:\n    get_pipeline('probe')\nexcept ValueError as e:\n    print('build refused:', e)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FACTPROBE_")}
    env["FACTPROBE_GPU_COUNT"] = "two"
    p = subprocess.run([sys.executable, "-c", code], check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "build refused:" in p.stdout and "FACTPROBE_GPU_COUNT" in p.stdout


# --- parameters ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_parameters_have_defaults_and_descriptions(compiled, name):
    params = compiled[name].spec["root"]["inputDefinitions"]["parameters"]
    declared, documented = declared_parameters(name), documented_parameters(name)
    assert set(params) == set(declared) == set(documented), "every parameter is declared and documented"
    for p, spec in params.items():
        assert spec.get("isOptional") is True, f"{p} is required"
        if declared[p] is None:  # an optional number left empty (Optional[int] = None): no default in the form
            assert "defaultValue" not in spec and spec["parameterType"] == "NUMBER_INTEGER", p
        else:
            assert "defaultValue" in spec, f"{p} has no default"
            assert spec["defaultValue"] == declared[p], p  # ints come back as floats: 100.0 == 100
        assert spec.get("description") == documented[p], p
    assert params["options"]["defaultValue"] == "" and params["options"]["parameterType"] == "STRING"
    assert (
        "trigger" in params
        and params["trigger"]["defaultValue"]
        == {
            "probe": "ui",
            "nightly_sweep": "nightly",
            "regression": "ci",
            "counterfactual_icl": "ui",
            "coherency": "ui",
            "finetune_known_unknown": "ui",
            "belief": "ui",
            "design_space": "ui",
            "findings": "ui",
            "study": "ui",
        }[name]
    )


#: parameters per compiled pipeline (issue 19 item 2: 50-79 before, every config field of every probe)
PARAM_COUNTS = {
    "probe": 22,  # + knowledge_map (issue 39)
    "nightly_sweep": 24,
    "regression": 22,
    "counterfactual_icl": 19,  # + exemplar_draws (issue 37 item 1)
    "coherency": 15,
    "finetune_known_unknown": 24,
    "belief": 20,
    "design_space": 23,
    "findings": 15,
    "study": 6,
}


@pytest.mark.parametrize("name", NAMES)
def test_no_pipeline_shows_more_than_25_parameters(compiled, name):
    """The Kubeflow UI form of each pipeline holds only its own options (pipelines/params.py)."""
    from factprobe_ops.pipelines.params import MAX_PARAMS

    params = compiled[name].spec["root"]["inputDefinitions"]["parameters"]
    assert MAX_PARAMS == 25 and len(params) <= MAX_PARAMS, sorted(params)
    assert len(params) == PARAM_COUNTS[name], sorted(params)


@pytest.mark.parametrize(
    "name, own, not_own",
    [
        (
            "coherency",
            {"max_candidates", "coherency_templates", "relations"},
            {"eic_interleave", "belief_qa_templates", "samples", "tuple_separator", "vocab_file"},
        ),
        ("counterfactual_icl", {"known_shots", "shots", "train_data"}, {"split", "known_unknown", "choices"}),
        ("belief", {"samples", "max_templates"}, {"setting", "instruction", "choices"}),
        ("probe", {"examples", "choices", "probes"}, {"templates", "samples", "device", "token_budget"}),
        (
            "finetune_known_unknown",
            {"known_unknown", "known_shots", "max_steps", "lora_r"},
            {"save_steps", "choices", "zero_stage"},
        ),
    ],
)
def test_parameters_are_the_options_of_the_probes_run(compiled, name, own, not_own):
    params = set(compiled[name].spec["root"]["inputDefinitions"]["parameters"])
    assert own <= params and not (not_own & params), (own - params, not_own & params)


def test_make_pipeline_refuses_more_than_25_parameters():
    from factprobe_ops.pipelines.params import Param, make_pipeline

    many = [Param(f"p{i}", int, i, f"parameter {i}") for i in range(22)]
    with pytest.raises(ValueError, match="26 parameters, more than 25"):
        make_pipeline("too_many", "too-many", "d", "s", many, "ui", lambda values: None)


# --- snapshot -----------------------------------------------------------------------------------

SNAPSHOT_HEADER = (
    "# Normalised `factprobe pipeline compile {name}` (pipeline spec, then platform spec; sdkVersion\n"
    "# dropped, keys sorted). Regenerate after an intended change:\n"
    "#   UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest tests/pipelines/test_compiled_specs.py\n"
)


def normalised(c) -> str:
    spec = copy.deepcopy(c.spec)
    spec.pop("sdkVersion", None)
    text = yaml.safe_dump_all(
        [spec, {"platforms": {"kubernetes": c.platform}}], sort_keys=True, width=100, default_flow_style=False, allow_unicode=True
    )
    return SNAPSHOT_HEADER.format(name=c.name) + text.replace(str(REPO), "<repo>")


@pytest.mark.parametrize("name", NAMES)
def test_snapshot(compiled, name):
    actual = normalised(compiled[name])
    path = SNAPSHOTS / f"{name}.yaml"
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(actual)
        return
    assert path.exists(), f"no snapshot {path}; create it with UPDATE_SNAPSHOTS=1"
    expected = path.read_text()
    if actual != expected:
        diff = "".join(
            list(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True), f"snapshots/{name}.yaml", "compiled"))[
                :120
            ]
        )
        pytest.fail(f"compiled {name} differs from its snapshot (UPDATE_SNAPSHOTS=1 if intended):\n{diff}")
