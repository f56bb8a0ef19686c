"""The `options` parameter through a real local KFP run (issue 19 item 2): a config field that is
not a parameter of the pipeline (`--param token_budget=64`, into `options`) reaches each probe
step's RunConfig, the parent run's parameters and the data-build run, through the KFP local
runner's placeholder substitution of a JSON string inside the config dict; and the one run context
(start-run's output) reaches the data-build and probe steps, whose runs nest under the parent; the
`knowledge_map` switch runs the map step (under its If), which skips a run of one probe saying why.

A tiny RANDOM model (plumbing only: its numbers are no result)."""

import json
import os
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

pytestmark = [pytest.mark.pipeline]


def test_options_reach_every_step_of_a_local_run(tmp_path, tiny_model_path):
    model = tiny_model_path("gpt2")
    env = {**os.environ, "FACTPROBE_WORK": str(tmp_path / "work")}
    env.pop("MLFLOW_TRACKING_URI", None)
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "factprobe.cli",
            "pipeline",
            "run",
            "probe",
            "--param",
            f'models=["{model}"]',
            "--param",
            'probes=["ic-lke"]',
            "--param",
            "relations=P36",
            "--param",
            "max_facts_per_relation=2",
            "--param",
            "choices=10",
            "--param",
            "examples=10",
            "--param",
            "token_budget=64",
            "--param",
            'options={"device": "cpu"}',
            "--param",
            "knowledge_map=true",
        ],
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    c = MlflowClient(f"sqlite:///{tmp_path / 'mlruns.db'}")
    exp = c.get_experiment_by_name("factprobe/probe")
    runs = c.search_runs([exp.experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get("factprobe.role") == "parent"]
    assert parent.data.params["token_budget"] == "64" and parent.data.params["device"] == "cpu"
    assert "options" not in parent.data.params  # logged as the parameters it sets
    (probe,) = [r for r in runs if r.data.tags.get("factprobe.step") == "probe"]
    cfg = json.loads(probe.data.params["config_json"])
    assert cfg["token_budget"] == 64 and cfg["device"] == "cpu" and cfg["choices"] == 10
    (build,) = [r for r in runs if r.data.tags.get("factprobe.step") == "data-build"]
    assert build.data.params["token_budget"] == "64"
    # one run context (built by start-run, handed on as one JSON input, through the loop cell to the
    # probe step): both step runs nest under the parent and carry its KFP run id, trigger and commit
    tags = parent.data.tags
    for step in (probe, build):
        assert step.data.tags["mlflow.parentRunId"] == parent.info.run_id
        for key in ("factprobe.kfp_run_id", "factprobe.trigger", "factprobe.git_sha"):
            assert step.data.tags[key] == tags[key], key
    # the pipeline's own switch reaches its If (issue 39): the map step runs, and with one probe it
    # skips the map and says why on the parent run instead of failing the pipeline
    (tmp_path / "dl").mkdir()
    skipped = c.download_artifacts(parent.info.run_id, "report/knowledge_map.md", str(tmp_path / "dl"))
    assert "No knowledge map: the finished runs hold one probe (ic-lke)" in open(skipped, encoding="utf-8").read()
