"""The `belief` pipeline (BELIEF-ICL): plan, compiled spec (GPU placement, ParallelFor, Collected), the
report step on real probe folders (tiny RANDOM llama, toy data; MLflow in a local sqlite store), and
one real local KFP run (the tiny RANDOM llama: plumbing; marked pipeline/slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml
from mlflow.tracking import MlflowClient

from factprobe.errors import ConfigError
from factprobe.framework.runner import run_probe
from factprobe_ops.components.steps.belief import run_belief_plan, run_belief_report
from factprobe_ops.tracking.context import RunContext
from tests.probes.test_belief_icl import config, tiny, toy_root  # noqa: F401 (fixtures)


def test_plan_is_models_x_settings_x_instructions_and_validates():
    cells = run_belief_plan(["m1", "m2"], ["zero-shot", "4-template"], ["mp", "qa"], "belief-icl", {"source": "lama"}, "ctx")
    assert len(cells) == 8 and cells[0] == {"model": "m1", "setting": "zero-shot", "instruction": "mp", "context": "ctx"}
    assert {(c["model"], c["setting"], c["instruction"]) for c in cells} == {
        (m, s, i) for m in ("m1", "m2") for s in ("zero-shot", "4-template") for i in ("mp", "qa")
    }
    with pytest.raises(ConfigError, match="setting"):
        run_belief_plan(["m1"], ["8-shot"], ["mp"], "belief-icl", {}, "")
    with pytest.raises(ConfigError, match="instructions list is empty"):
        run_belief_plan(["m1"], ["zero-shot"], [], "belief-icl", {}, "")


@pytest.mark.slow
def test_compiled_spec_runs_the_probe_per_cell_on_the_gpu_pool(tmp_path):
    from kfp import compiler

    from factprobe_ops.pipelines.catalogue import get_pipeline

    path = tmp_path / "belief.yaml"
    compiler.Compiler().compile(get_pipeline("belief"), str(path))
    spec, platform = list(yaml.safe_load_all(path.read_text()))
    assert spec["pipelineInfo"]["name"] == "factprobe-belief"
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert {"models", "settings", "instructions", "samples", "draws", "max_templates"} <= set(params)
    assert json.loads(json.dumps(params["settings"]["defaultValue"])) == ["zero-shot", "4-random", "4-relation", "4-template"]
    comps = spec["components"]
    handler = comps["comp-exit-handler-1"]["dag"]["tasks"]
    assert {"start-run", "belief-plan", "data-build", "for-loop-2", "belief-report"} <= set(handler)
    loop = handler["for-loop-2"]
    assert loop["taskInfo"]["name"] == "models-x-settings"
    item = loop["parameterIterator"]["itemInput"]
    probe = comps[loop["componentRef"]["name"]]["dag"]["tasks"]["probe-belief"]
    for field in ("model", "setting", "instruction", "context"):
        assert probe["inputs"]["parameters"][field] == {
            "componentInputParameter": item,
            "parameterExpressionSelector": f'parseJson(string_value)["{field}"]',
        }
    assert comps["comp-belief-report"]["inputDefinitions"]["artifacts"]["results"]["isArtifactList"] is True
    execs = spec["deploymentSpec"]["executors"]
    resources = execs["exec-probe-belief"]["container"]["resources"]
    assert resources["accelerator"]["resourceType"] == "nvidia.com/gpu" and resources["accelerator"]["resourceCount"] == "1"
    assert "accelerator" not in execs["exec-belief-report"]["container"]["resources"]
    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert k8s["exec-probe-belief"]["nodeSelector"]["labels"] == {"factprobe.io/node-pool": "gpu"}
    assert "nodeSelector" not in k8s["exec-belief-report"] and "nodeSelector" not in k8s["exec-belief-plan"]
    assert probe.get("retryPolicy", {}).get("maxRetryCount") == 2


@pytest.mark.slow
def test_report_draws_calibration_and_logs_tables(toy_root, tmp_path, tiny):  # noqa: F811
    dirs = []
    for setting in ("zero-shot", "4-template"):
        out = tmp_path / setting
        run_probe(
            config(toy_root, tmp_path, tiny.path, setting=setting, samples=3),
            out,
            loaded=tiny,
            progress=False,
            log=lambda m: None,
        )
        dirs.append(str(out))
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    c = MlflowClient(uri)
    exp = c.create_experiment("factprobe/belief")
    parent = c.create_run(exp).info.run_id
    rows = run_belief_report(
        dirs,
        str(tmp_path / "r.html"),
        str(tmp_path / "r.md"),
        RunContext(tracking_uri=uri, pipeline="belief", parent_run_id=parent),
    )
    assert [(r["setting"], r["instruction"]) for r in rows] == [("zero-shot", "mp"), ("4-template", "mp")]
    assert all(0 <= r["acc"] <= 1 and -1 <= r["overconf"] <= 1 for r in rows)
    page = (tmp_path / "r.html").read_text()
    assert "data:image/png;base64," in page and "belief_per_template" in page and "belief_sharing" in page
    assert "| model | setting | instruction | acc |" in (tmp_path / "r.md").read_text()
    artifacts = {a.path for d in ("figures", "tables") for a in c.list_artifacts(parent, d)}
    assert {
        "figures/belief_calibration.png",
        "tables/belief_summary.json",
        "tables/belief_per_relation.json",
        "tables/belief_per_template.json",
        "tables/belief_sharing.json",
    } <= artifacts
    metrics = c.get_run(parent).data.metrics
    model = tiny.path.name
    assert metrics[f"acc/{model}/4-template/mp"] == rows[1]["acc"]
    assert f"overconf/{model}/zero-shot/mp" in metrics


@pytest.mark.pipeline
@pytest.mark.slow
def test_belief_pipeline_runs_locally(tmp_path, tiny_model_path):
    """One real local KFP run of the belief pipeline, on the tiny RANDOM llama with a 2048-token window
    (plumbing: plan, cells, report, MLflow; its numbers are no result)."""
    from tests.probes.test_qa import widened_tiny_llama

    model = widened_tiny_llama(tiny_model_path, tmp_path / "models")
    name = model.name
    env = {**os.environ, "FACTPROBE_WORK": str(tmp_path / "work")}
    env.pop("MLFLOW_TRACKING_URI", None)
    args = [
        "--param",
        f'models=["{model}"]',
        "--param",
        'settings=["zero-shot","4-template"]',
        "--param",
        "source=lama",
        "--param",
        "relations=P36",
        "--param",
        "max_facts_per_relation=2",
        "--param",
        "max_templates=5",
        "--param",
        "samples=2",
        "--param",
        "draws=500",
    ]
    p = subprocess.run(
        [sys.executable, "-m", "factprobe.cli", "pipeline", "run", "belief", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    c = MlflowClient(f"sqlite:///{tmp_path / 'mlruns.db'}")
    exp = c.get_experiment_by_name("factprobe/belief")
    all_runs = c.search_runs([exp.experiment_id])
    (parent,) = [r for r in all_runs if r.data.tags.get("factprobe.role") == "parent"]
    assert parent.info.status == "FINISHED"
    children = [r for r in all_runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    probes = [r for r in children if r.data.tags.get("factprobe.probe") == "belief-icl"]
    assert sorted(r.data.params["setting"] for r in probes) == ["4-template", "zero-shot"]
    for key in (f"acc/{name}/zero-shot/mp", f"overconf/{name}/4-template/mp"):
        assert key in parent.data.metrics, sorted(parent.data.metrics)
    assert "figures/belief_calibration.png" in {a.path for a in c.list_artifacts(parent.info.run_id, "figures")}
