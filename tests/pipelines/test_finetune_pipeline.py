"""The `finetune_known_unknown` pipeline as compiled, the model cache mounts of every pipeline, the
multi-node TrainJob, and the report step on hand-made per-fact results.

The compiled spec comes from the shared fresh-Python compile (tests/pipelines/pipeline_fixtures.py);
other settings are compiled here in a fresh Python too. The real local run is documented in the
pipeline's docstring and README (it takes minutes: not a test).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

# ruff: noqa: F811 - the shared fixtures are imported by name and requested as test parameters
from tests.pipelines.pipeline_fixtures import (  # noqa: F401 (fixtures)
    _CompileJob,
    clean_env,
    compiled,
    start_compile_jobs,
)

start_compile_jobs()
NAME = "finetune_known_unknown"
TRAIN_IMAGE = "ghcr.io/factprobe/factprobe-train:0.1.0"
#: steps that load a model or resume without a GPU (the GPU steps all do)
CPU_MODEL_STEPS = {"finetune-trainjob"}
PVC = {
    "constant": "factprobe-cache",
    "mountPath": "/mnt/factprobe",
    "pvcNameParameter": {"runtimeValue": {"constant": "factprobe-cache"}},
}
STORAGE_ENV = {
    "FACTPROBE_CACHE": "/mnt/factprobe/cache",
    "FACTPROBE_WORK": "/mnt/factprobe/work",
    "HF_HOME": "/mnt/factprobe/hf",
    "TORCH_EXTENSIONS_DIR": "/mnt/factprobe/torch_extensions",
    "FACTPROBE_DATA": "/mnt/factprobe/data",
}


def _env(c, step: str) -> dict[str, str]:
    return {e["name"]: e["value"] for e in c.executors[c.executor_of(step)]["container"].get("env", [])}


# --- the model cache PVC on every pipeline ------------------------------------------------------


def model_steps(c) -> set[str]:
    """The steps that load a model or resume: every GPU step, and the TrainJob step (it waits for
    the job and hands on the adapter it wrote to the PVC)."""
    gpu = {s for s in c.step_names() if "accelerator" in c.executors[c.executor_of(s)]["container"].get("resources", {})}
    return gpu | (c.step_names() & CPU_MODEL_STEPS)


def test_every_step_that_loads_a_model_or_builds_data_mounts_the_pvc_and_no_other_does(compiled):
    for name, c in compiled.items():
        assert model_steps(c), name
        for step in c.step_names():
            k8s = c.k8s_executors[c.executor_of(step)]
            if step in model_steps(c):
                assert k8s.get("pvcMount") == [PVC], (name, step)
                assert {k: v for k, v in _env(c, step).items() if k in STORAGE_ENV} == STORAGE_ENV, (name, step)
                hf = [s for s in k8s["secretAsEnv"] if s["secretName"] == "hf-token"]
                assert len(hf) == 1 and hf[0]["optional"] is True, (name, step)
                assert hf[0]["keyToEnv"] == [{"secretKey": "HF_TOKEN", "envVar": "HF_TOKEN"}], (name, step)
            elif step.startswith(("data-build", "plan-units")):  # read the data root on the claim (test_data_on_claim.py)
                assert k8s.get("pvcMount") == [PVC], (name, step)
                assert {k: v for k, v in _env(c, step).items() if k in STORAGE_ENV} == STORAGE_ENV, (name, step)
            else:
                assert "pvcMount" not in k8s and not set(_env(c, step)) & set(STORAGE_ENV), (name, step)


# --- the training step --------------------------------------------------------------------------


def test_training_step_gpu_pool_shm_pvc_retries_and_training_image(compiled):
    from factprobe_ops.pipelines.platform import GPU_RETRIES

    c = compiled[NAME]
    ex = c.executor_of("finetune-train")
    container = c.executors[ex]["container"]
    assert container["image"] == TRAIN_IMAGE
    accel = container["resources"]["accelerator"]
    assert (accel["resourceType"], accel["resourceCount"]) == ("nvidia.com/gpu", "1")
    k8s = c.k8s_executors[ex]
    assert k8s["nodeSelector"]["labels"] == {"factprobe.io/node-pool": "gpu"}
    assert k8s["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}]
    assert k8s["emptyDirMounts"] == [{"medium": "Memory", "mountPath": "/dev/shm", "sizeLimit": "16Gi", "volumeName": "dshm"}]
    assert k8s["pvcMount"] == [PVC]
    retry = c.tasks()["finetune-train"][1]["retryPolicy"]
    assert retry["maxRetryCount"] == GPU_RETRIES and retry["backoffDuration"] == "60s"
    # only the training step has /dev/shm; the evaluation and the probes run in the GPU image
    assert [s for s in c.step_names() if "emptyDirMounts" in c.k8s_executors[c.executor_of(s)]] == ["finetune-train"]
    assert c.executors[c.executor_of("finetune-evaluate-adapter")]["container"]["image"].endswith("factprobe-gpu:0.1.0")


def test_dag_table_sets_loop_over_settings_evaluate_and_report(compiled):
    c = compiled[NAME]
    tasks = c.tasks()
    loops = [(n, t) for n, (_, t) in tasks.items() if "parameterIterator" in t]
    assert len(loops) == 1
    loop_name, loop = loops[0]
    assert loop["taskInfo"]["name"] == "settings"
    items = loop["parameterIterator"]["items"]["inputParameter"]
    assert loop["inputs"]["parameters"][items] == {
        "taskOutputParameter": {"outputParameterKey": "Output", "producerTask": "finetune-sets"}
    }
    # base table and base evaluation both read the data build, in parallel
    for step in ("finetune-base-table", "finetune-evaluate-base"):
        assert tasks[step][1]["dependentTasks"] == ["data-build", "start-run"], step
    assert tasks["finetune-sets"][1]["inputs"]["artifacts"]["table"] == {
        "taskOutputArtifact": {"outputArtifactKey": "table", "producerTask": "finetune-base-table"}
    }
    # one node: the training step; several: the TrainJob step (If / Else on num_nodes)
    conds = {t["taskInfo"]["name"]: t for _, (_, t) in tasks.items() if "condition" in t.get("triggerPolicy", {})}
    assert set(conds) == {"multi-node", "one-node"}
    assert conds["multi-node"]["triggerPolicy"]["condition"] == "int(inputs.parameter_values['pipelinechannel--num_nodes']) > 1"
    assert tasks["finetune-train"][0] == conds["one-node"]["componentRef"]["name"]
    assert tasks["finetune-trainjob"][0] == conds["multi-node"]["componentRef"]["name"]
    # the evaluation takes the adapter of whichever branch ran (dsl.OneOf)
    ev = tasks["finetune-evaluate-adapter"]
    assert ev[0] == loop["componentRef"]["name"]
    assert "taskOutputArtifact" in ev[1]["inputs"]["artifacts"]["adapter"]
    for field in ("setting", "context"):
        assert ev[1]["inputs"]["parameters"][field]["parameterExpressionSelector"] == f'parseJson(string_value)["{field}"]'
    # the report collects both evaluations over every setting, and the base model's
    rep = tasks["finetune-report"][1]["inputs"]["artifacts"]
    for arg in ("qa_results", "mc_results"):
        assert rep[arg]["taskOutputArtifact"]["producerTask"] == loop_name
        assert c.spec["components"]["comp-finetune-report"]["inputDefinitions"]["artifacts"][arg]["isArtifactList"] is True
    assert rep["base_qa"] == {"taskOutputArtifact": {"outputArtifactKey": "qa_results", "producerTask": "finetune-evaluate-base"}}
    # the evaluation: zero-shot QA + IC-LKE from one data build of both kinds
    assert tasks["data-build"][1]["inputs"]["parameters"]["probes"] == {"runtimeValue": {"constant": ["qa", "ic-lke"]}}


def test_finetune_essentials_are_parameters_with_their_defaults_and_the_rest_are_options(compiled):
    """The UI shows the fine-tuning essentials (issue 19 item 2: at most 25 parameters); every
    other FinetuneConfig field is still settable, through `options` (or `--param`, which puts it there)."""
    from factprobe.finetune import FinetuneConfig
    from factprobe_ops.pipelines.catalogue import option_fields
    from factprobe_ops.pipelines.finetune_known_unknown import FT_ESSENTIALS, FT_PER_STEP

    params = compiled[NAME].spec["root"]["inputDefinitions"]["parameters"]
    cfg = FinetuneConfig()
    for field in FT_ESSENTIALS:
        assert field in params and params[field]["description"].startswith("Fine-tuning: "), field
    for field in ("max_steps", "learning_rate"):
        assert params[field]["defaultValue"] == getattr(cfg, field), field  # the paper's defaults (appendix B.2) reach the UI
    # the paper trains every parameter: the pipeline's lora_r is 0 (full), as the command's default (issue 29)
    assert params["lora_r"]["defaultValue"] == 0 == cfg.lora_r
    assert "0 trains every parameter" in params["lora_r"]["description"]
    assert not FinetuneConfig(lora_r=int(params["lora_r"]["defaultValue"])).use_lora
    rest = [f for f in FinetuneConfig.field_names() if f not in FT_PER_STEP and f not in params]
    assert rest and set(rest) <= option_fields(NAME)
    assert params["settings"]["defaultValue"] == ["known", "unknown", "mixed", "counterfactual", "regular"]
    assert params["num_nodes"]["defaultValue"] == 1 and params["trainjob_submit"]["defaultValue"] is False


def _compile(tmp_path: Path, **env: str):
    job = _CompileJob(tmp_path / "out", (NAME,), clean_env(**env))
    return job.result()[NAME]


@pytest.mark.slow
def test_settings_reach_the_spec_and_an_empty_pvc_name_mounts_nothing(tmp_path):
    c = _compile(
        tmp_path / "a",
        FACTPROBE_IMAGE_TRAIN="registry.example.com/team/fp-train:t1",
        FACTPROBE_PVC="team-cache",
        FACTPROBE_PVC_MOUNT="/data/fp",
        FACTPROBE_SHM_SIZE="32Gi",
        FACTPROBE_HF_SECRET="team-hf",
    )
    ex = c.executor_of("finetune-train")
    assert c.executors[ex]["container"]["image"] == "registry.example.com/team/fp-train:t1"
    assert c.k8s_executors[ex]["pvcMount"][0]["constant"] == "team-cache"
    assert c.k8s_executors[ex]["pvcMount"][0]["mountPath"] == "/data/fp"
    assert _env(c, "finetune-train")["FACTPROBE_WORK"] == "/data/fp/work"
    assert c.k8s_executors[ex]["emptyDirMounts"][0]["sizeLimit"] == "32Gi"
    assert any(s["secretName"] == "team-hf" for s in c.k8s_executors[ex]["secretAsEnv"])
    bare = _compile(tmp_path / "b", FACTPROBE_PVC="")
    assert not [s for s in bare.step_names() if "pvcMount" in bare.k8s_executors[bare.executor_of(s)]]


@pytest.mark.slow
def test_local_build_mounts_nothing_and_points_nowhere():
    """The local runner has no volumes: a local build sets no PVC and no cache variables; it trains in
    the step (no TrainJob branch)."""
    import tempfile

    from kfp import compiler

    from factprobe_ops.pipelines.catalogue import get_pipeline
    from tests.pipelines.pipeline_fixtures import load_compiled

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"{NAME}.yaml"
        compiler.Compiler().compile(get_pipeline(NAME, local=True), str(path))
        c = load_compiled(path)
    for step in c.step_names():
        assert "pvcMount" not in c.k8s_executors.get(c.executor_of(step), {}), step
        assert not set(_env(c, step)) & set(STORAGE_ENV), step
    # the local runner cannot merge If/Else outputs (dsl.OneOf): one node, the adapter straight to the evaluation
    tasks = c.tasks()
    assert "finetune-trainjob" not in c.step_names()
    assert not [t for _, (_, t) in tasks.items() if "condition" in t.get("triggerPolicy", {})]
    assert tasks["finetune-evaluate-adapter"][1]["inputs"]["artifacts"]["adapter"] == {
        "taskOutputArtifact": {"outputArtifactKey": "adapter", "producerTask": "finetune-train"}
    }


# --- smoke test verdict -------------------------------------------------------------------------


def test_smoke_test_verdict():
    from factprobe_ops.components.steps.finetune import smoke_banner, smoke_reasons, smoke_tags

    assert smoke_reasons({"max_steps": 40, "batch_size": 8, "effective_batch": 512, "grad_accum": ""}, "ui") == []
    reasons = smoke_reasons({"max_steps": 2, "batch_size": 4, "grad_accum": "1", "effective_batch": 512}, "local")
    assert reasons == ["max_steps=2 < 40", "effective batch 4 < 512 (per device)", "local CPU run"]
    assert smoke_tags({"max_steps": 2}, "ui")["factprobe.smoke_test"] == "true"
    assert smoke_tags({"max_steps": 40}, "ui")["factprobe.smoke_test"] == "false"
    assert smoke_banner({"max_steps": 2}, "ui").startswith("SMOKE TEST, not a reproduction")


# --- the multi-node TrainJob ---------------------------------------------------------------------


def _manifest(**ft):
    from factprobe_ops.components.config import cluster_config
    from factprobe_ops.components.steps.trainjob_manifest import trainjob_manifest

    cfg = {
        "model": "smollm2-135m-instruct",
        "train_set": "known",
        "known_unknown": "/mnt/factprobe/work/t.parquet",
        "out": "/mnt/factprobe/work/finetune/run/known",
        **ft,
    }
    return trainjob_manifest("ft-known-abc123", cfg, cluster_config(), num_nodes=4, gpus_per_node=8)


def test_trainjob_args_are_real_finetune_options():
    """The TrainJob's command line parses as `factprobe finetune` options into the same config."""
    from factprobe.cli import build_parser
    from factprobe.config import namespace_to_dict
    from factprobe.finetune import FinetuneConfig

    m = _manifest(max_steps=7, zero_stage=3, offload_param=True, packing=True, relations=["P36", "P19"])
    ns = build_parser().parse_args(["finetune", *m["spec"]["trainer"]["args"]])
    cfg = FinetuneConfig.from_dict(namespace_to_dict(ns, (FinetuneConfig,)))
    assert (cfg.train_set, cfg.max_steps, cfg.zero_stage, cfg.offload_param, cfg.packing, cfg.relations, cfg.out) == (
        "known",
        7,
        3,
        True,
        True,
        ["P36", "P19"],
        "/mnt/factprobe/work/finetune/run/known",
    )


def test_trainjob_manifest_validates_and_places_every_node(monkeypatch):
    from factprobe_ops.components.steps.trainjob_manifest import validate_trainjob

    for var in ("FACTPROBE_PVC", "FACTPROBE_IMAGE_TRAIN", "FACTPROBE_GPU_NODE_LABEL", "FACTPROBE_GPU_TOLERATION"):
        monkeypatch.delenv(var, raising=False)
    m = _manifest(max_steps=7)
    validate_trainjob(m)
    assert (m["apiVersion"], m["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    spec = m["spec"]
    assert spec["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
        "name": "torch-distributed",
    }
    trainer = spec["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"], trainer["image"]) == (4, 8, TRAIN_IMAGE)
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "8"
    assert trainer["command"] == ["torchrun", "-m", "factprobe.cli", "finetune"]
    args = trainer["args"]
    assert args[args.index("--train-set") + 1] == "known" and args[args.index("--max-steps") + 1] == "7"
    (rj,) = spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert rj["name"] == "node"
    pod = rj["template"]["spec"]["template"]
    assert pod["metadata"]["labels"] == {"factprobe.io/role": "pipeline-step"}
    ps = pod["spec"]
    assert ps["nodeSelector"] == {"factprobe.io/node-pool": "gpu"}
    assert ps["tolerations"] == [{"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in ps["volumes"]
    assert {"name": "factprobe-cache", "persistentVolumeClaim": {"claimName": "factprobe-cache"}} in ps["volumes"]
    (container,) = ps["containers"]
    assert {"mountPath": "/mnt/factprobe", "name": "factprobe-cache"} in container["volumeMounts"]
    env = {e["name"]: e for e in container["env"]}
    assert env["FACTPROBE_WORK"]["value"] == "/mnt/factprobe/work"
    assert env["MLFLOW_TRACKING_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "key": "MLFLOW_TRACKING_PASSWORD",
        "name": "mlflow-credentials",
        "optional": False,
    }
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["optional"] is True


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda m: m["spec"]["trainer"].__setitem__("numNodez", 2), "does not know: spec.trainer.numNodez"),
        (lambda m: m["spec"]["trainer"].__setitem__("numNodes", "two"), "valid integer"),
        (lambda m: m["metadata"].__setitem__("name", "FT_known"), "DNS-1035"),
        (lambda m: m["spec"]["trainer"].__setitem__("numNodes", 0), "numNodes=0"),
        (
            lambda m: m["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"][
                "spec"
            ]["template"]["spec"]["volumes"].pop(),
            "mounts volume 'factprobe-cache'",
        ),
        (
            lambda m: m["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"][
                "spec"
            ]["template"]["spec"]["tolerations"][0].__setitem__("operator", "Sometimes"),
            "operator",
        ),
        (lambda m: m["spec"]["trainer"]["resourcesPerNode"]["limits"].__setitem__("cpu", "lots"), "not a Kubernetes quantity"),
        (lambda m: m.__setitem__("kind", "PyTorchJob"), "not a trainer.kubeflow.org/v1alpha1 TrainJob"),
    ],
)
def test_bad_trainjob_manifests_are_refused(edit, message):
    from factprobe_ops.components.steps.trainjob_manifest import validate_trainjob

    m = _manifest()
    edit(m)
    with pytest.raises(ValueError, match=message):
        validate_trainjob(m)


def test_trainjob_step_writes_the_manifest_without_submitting(tmp_path):
    from factprobe_ops.components.steps.finetune_trainjob import run_trainjob_step
    from factprobe_ops.components.steps.trainjob_manifest import validate_trainjob
    from factprobe_ops.tracking.context import RunContext

    table = tmp_path / "table.parquet"
    table.write_bytes(b"")  # regular needs no table
    info = run_trainjob_step(
        str(table),
        str(tmp_path / "manifest.yaml"),
        str(tmp_path / "adapter"),
        "smollm2-135m-instruct",
        "regular",
        {"max_steps": 3, "source": "countryinfo"},
        2,
        False,
        "kubeflow",
        RunContext(tracking_uri="http://mlflow.factprobe.svc.cluster.local:5000", kfp_run_id="2f6c-run", trigger="ui"),
        str(tmp_path / "work"),
    )
    assert info == {"name": "ft-regular-2f6crun", "submitted": False, "out": info["out"]}
    m = yaml.safe_load((tmp_path / "manifest.yaml").read_text())
    validate_trainjob(m)
    args = m["spec"]["trainer"]["args"]
    assert args[args.index("--out") + 1] == info["out"] and info["out"].startswith(str(tmp_path / "work" / "finetune"))
    assert "--known-unknown" not in args
    env = {
        e["name"]: e.get("value")
        for e in m["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"][
            "spec"
        ]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["MLFLOW_TRACKING_URI"] == "http://mlflow.factprobe.svc.cluster.local:5000"
    assert (tmp_path / "adapter" / "NOT_TRAINED.txt").is_file()


# --- the report step on hand-made per-fact results ----------------------------------------------


def _eval_dir(root: Path, setting: str, qa_rows: list[dict], mc_rows: list[dict]) -> tuple[str, str]:
    qa, mc = root / setting / "qa", root / setting / "mc"
    for d, rows in ((qa, qa_rows), (mc, mc_rows)):
        d.mkdir(parents=True)
        (d / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (d / "finetune_setting.json").write_text(json.dumps({"setting": setting, "model": "m"}))
    return str(qa), str(mc)


def test_report_table_matches_the_per_fact_results(tmp_path):
    from factprobe_ops.components.steps.finetune_report import run_finetune_report
    from factprobe_ops.tracking.context import RunContext

    def qa(fid, em, f1, split="eval", shots=0):
        return {"fact_id": fid, "relation": "P36", "split": split, "shots_asked": shots, "em": em, "f1": f1, "contains": em}

    def mc(fid, ok):
        return {"fact_id": fid, "relation": "P36", "correct": ok}

    # base: EM 1/4 on the zero-shot eval rows (a 10-shot row and a train row are not evaluation rows)
    base = _eval_dir(
        tmp_path,
        "base",
        [
            qa("a", 1, 1.0),
            qa("b", 0, 0.5),
            qa("c", 0, 0.0),
            qa("d", 0, 0.0),
            qa("a", 0, 0.0, shots=10),
            qa("t", 1, 1.0, split="train"),
        ],
        [mc("a", True), mc("b", False)],
    )
    known = _eval_dir(
        tmp_path, "known", [qa("a", 1, 1.0), qa("b", 1, 1.0), qa("c", 1, 1.0), qa("d", 0, 0.5)], [mc("a", True), mc("b", True)]
    )
    Path(known[0], "finetune_loss_history.json").write_text(json.dumps([{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5}]))
    table = run_finetune_report(
        [base[0], known[0]],
        [base[1], known[1]],
        str(tmp_path / "r.html"),
        str(tmp_path / "r.md"),
        {"max_steps": 2},
        RunContext(tracking_uri="none", trigger="local"),
    )
    assert table["setting"].tolist() == ["base", "known"]
    b, k = table.iloc[0], table.iloc[1]
    assert (b["em"], b["f1"], b["iclke_acc"], b["qa_n"]) == (0.25, 0.375, 0.5, 4)
    assert (k["em"], k["f1"], k["iclke_acc"]) == (0.75, 0.875, 1.0)
    assert (k["em_diff"], k["f1_diff"], k["iclke_acc_diff"]) == pytest.approx((0.5, 0.5, 0.5))
    md = (tmp_path / "r.md").read_text()
    assert md.startswith("**SMOKE TEST, not a reproduction") and "| base | 25.00 | 37.50 | 25.00 | 50.00 | 4 | 2 |" in md
    assert "<img" in (tmp_path / "r.html").read_text()
    assert isinstance(table, pd.DataFrame)


# --- the training-sets step ---------------------------------------------------------------------


def test_sets_step_saves_each_set_for_the_training_step_and_refuses_bad_settings(tmp_path):
    from factprobe.errors import ConfigError
    from factprobe.finetune.sets import TrainSet, build_train_set
    from factprobe_ops.components.steps.finetune_sets import run_sets_step
    from factprobe_ops.tracking.context import RunContext

    ft = {
        "source": "countryinfo",
        "relations": "P30,P37",
        "qa_train_per_relation": "20",
        "train_size": "6",
        "seed": 0,
        "max_steps": 2,
    }
    empty = tmp_path / "table.parquet"
    empty.write_bytes(b"")
    off = RunContext(tracking_uri="none")
    cells = run_sets_step(str(tmp_path / "sets"), str(empty), "smollm2-135m-instruct", ["regular", "counterfactual"], ft, off)
    assert cells == [{"setting": "regular", "context": off.to_json()}, {"setting": "counterfactual", "context": off.to_json()}]
    for kind in ("regular", "counterfactual"):
        saved = TrainSet.load(tmp_path / "sets" / kind)  # checks the digest against the examples
        again = build_train_set(
            kind, model="smollm2-135m-instruct", source="countryinfo", relations=["P30", "P37"], qa_train_per_relation=20, size=6
        )
        assert (saved.kind, len(saved), saved.digest) == (kind, 6, again.digest)
    sets = json.loads((tmp_path / "sets" / "sets.json").read_text())
    assert sets["regular"]["digest"] == TrainSet.load(tmp_path / "sets" / "regular").digest
    with pytest.raises(ConfigError, match="choose from known, unknown, mixed, counterfactual, regular"):
        run_sets_step(str(tmp_path / "x"), str(empty), "smollm2-135m-instruct", ["known", "famous"], ft, off)
    with pytest.raises(ConfigError, match="listed twice"):
        run_sets_step(str(tmp_path / "x"), str(empty), "smollm2-135m-instruct", ["regular", "regular"], ft, off)
    with pytest.raises(ConfigError, match="needs the base model's known/unknown table"):
        run_sets_step(str(tmp_path / "x"), str(empty), "smollm2-135m-instruct", ["known"], ft, off)
