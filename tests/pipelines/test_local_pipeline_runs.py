"""Real pipeline runs with the KFP local SubprocessRunner, a real model and embedded MLflow."""
import json
import os
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

pytestmark = [pytest.mark.pipeline, pytest.mark.real_model]

SMALL = ["--param", "relations=P36", "--param", "max_facts_per_relation=2", "--param", "choices=10",
         "--param", "examples=10"]


def pipeline(tmp_path, *args):
    env = {**os.environ, "FACTPROBE_WORK": str(tmp_path / "work")}
    env.pop("MLFLOW_TRACKING_URI", None)
    p = subprocess.run([sys.executable, "-m", "factprobe.cli", "pipeline", "run", *args], check=False, cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=900)
    return p.returncode, p.stdout + p.stderr


def client(tmp_path):
    return MlflowClient(f"sqlite:///{tmp_path / 'mlruns.db'}")


def runs(c, experiment):
    exp = c.get_experiment_by_name(experiment)
    return c.search_runs([exp.experiment_id]) if exp else []


@pytest.fixture(scope="module")
def probe_run(tmp_path_factory, real_model_path):
    real_model_path("smollm2-135m-instruct")
    tmp = tmp_path_factory.mktemp("probe-pipeline")
    rc, log = pipeline(tmp, "probe", "--param", 'models=["smollm2-135m-instruct"]', "--param", 'probes=["ic-lke","hgp"]', *SMALL)
    assert rc == 0, log[-3000:]
    return tmp


def test_probe_pipeline_logs_parent_and_children(probe_run):
    c = client(probe_run)
    all_runs = runs(c, "factprobe/probe")
    (parent,) = [r for r in all_runs if r.data.tags.get("factprobe.role") == "parent"]
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["factprobe.trigger"] == "local" and parent.data.tags["factprobe.kfp_run_id"]
    children = [r for r in all_runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    steps = sorted(r.data.tags.get("factprobe.step", "") for r in children)
    assert steps == ["data-build", "probe", "probe"]
    assert all(r.info.status == "FINISHED" for r in children)
    probes = {r.data.tags["factprobe.probe"]: r for r in children if r.data.tags.get("factprobe.step") == "probe"}
    assert set(probes) == {"ic-lke", "hgp"}
    for name, r in probes.items():
        assert "acc" in r.data.metrics and "acc/P36" in r.data.metrics and r.inputs.dataset_inputs
        # one config dict through the pipeline: each step's RunConfig is logged whole, with its probe's fields only
        cfg = json.loads(r.data.params["config_json"])
        assert cfg["probe"] == name and cfg["relations"] == ["P36"] and cfg["max_facts_per_relation"] == 2
        assert cfg["choices"] == 10 and ("examples" in cfg) == (name == "ic-lke") and ("templates" in cfg) == (name == "hgp")
    arts = {a.path for a in c.list_artifacts(parent.info.run_id, "figures")}
    assert "figures/accuracy_heatmap.png" in arts
    assert any(k.startswith("acc/ic-lke/") for k in parent.data.metrics)


def test_report_outputs_exist(probe_run):
    html = list((probe_run / "build" / "kfp-local").rglob("html_report"))
    assert html and "<img" in html[0].read_text()


def test_data_build_writes_a_folder_per_kind_and_probe_logs_every_scalar(probe_run):
    (root,) = (probe_run / "build" / "kfp-local").glob("factprobe-probe-*")
    meta = json.loads((root / "data-build" / "items" / "mc" / "meta.json").read_text())
    assert meta["kind"] == "mc" and meta["n_items"] == 2 and meta["info"]["distractor_pool_size"]["P36"] > 10
    c = client(probe_run)
    logged = {}
    for out in root.glob("for-loop-*/probe-model/executor_output.json"):
        arts = json.loads(out.read_text())["artifacts"]
        run_id = arts["results"]["artifacts"][0]["metadata"]["mlflow_run_id"]
        logged[run_id] = arts["metrics"]["artifacts"][0]["metadata"]
    assert len(logged) == 2
    for run_id, kfp_metrics in logged.items():
        scalars = {k for k in c.get_run(run_id).data.metrics if "/" not in k}
        assert {"acc", "macro_acc", "prob_mass", "n", "tokens_forwarded", "n_resumed"} <= set(kfp_metrics)
        assert set(kfp_metrics) == scalars  # every scalar metric, not only acc / prob_mass / n


def test_failed_step_marks_runs_failed(tmp_path, real_model_path):
    real_model_path("smollm2-135m-instruct")
    rc, log = pipeline(tmp_path, "probe", "--param", 'models=["smollm2-135m-instruct"]', "--param", "relations=P999")
    assert rc == 1 and "data-build" in log and "P999" in log
    all_runs = runs(client(tmp_path), "factprobe/probe")
    assert all_runs and all(r.info.status != "RUNNING" for r in all_runs)
    (parent,) = [r for r in all_runs if r.data.tags.get("factprobe.role") == "parent"]
    assert parent.info.status == "FAILED"


def test_nightly_sweep_compares_with_previous_night(tmp_path, real_model_path):
    real_model_path("smollm2-135m-instruct")
    models = tmp_path / "models.yaml"
    models.write_text("models:\n  - name: smollm2-135m-instruct\n")
    for _ in range(2):
        rc, log = pipeline(tmp_path, "nightly_sweep", "--param", f"models_yaml={models}", *SMALL)
        assert rc == 0, log[-3000:]
    parents = sorted((r for r in runs(client(tmp_path), "factprobe/nightly_sweep") if r.data.tags.get("factprobe.role") == "parent"),
                     key=lambda r: r.info.start_time)
    assert len(parents) == 2
    assert parents[0].data.tags["factprobe.previous_run"] == "none"
    assert parents[1].data.tags["factprobe.previous_run"] == parents[0].info.run_id
    assert parents[1].data.metrics["delta/ic-lke/smollm2-135m-instruct"] == 0.0
    # the second night resumed every fact from the work folder instead of scoring again
    bad = tmp_path / "bad.yaml"
    bad.write_text("models: [smollm2\n")
    rc, log = pipeline(tmp_path, "nightly_sweep", "--param", f"models_yaml={bad}", *SMALL)
    assert rc == 1 and "does not parse" in log


def test_regression_pipeline_passes_model_against_its_own_run(probe_run):
    c = client(probe_run)
    (child,) = [r for r in runs(c, "factprobe/probe") if r.data.tags.get("factprobe.probe") == "ic-lke"
                and r.data.tags.get("factprobe.step") == "probe"]
    rc, log = pipeline(probe_run, "regression", "--param", "candidate=smollm2-135m-instruct",
                       "--param", f"baseline={child.info.run_id}", *SMALL)
    assert rc == 0, log[-3000:]
    (parent,) = [r for r in runs(c, "factprobe/regression") if r.data.tags.get("factprobe.role") == "parent"]
    assert parent.data.tags["factprobe.gate"] == "PASS" and parent.info.status == "FINISHED"
