"""The study step of the design_space / findings pipelines (components/steps/study.py): one study run
with the pipeline's run context, into a stable work folder, logged as a child of the parent run with
the study's metrics, figures and tables; a new pipeline run reusing the finished folder computes
nothing and still gets its child run; the step's own params win over the pipeline's config. Uses
the tiny curve study of tests/tracking/test_study_tracking.py (no model)."""

from __future__ import annotations

import json

import pytest
from mlflow.tracking import MlflowClient

from factprobe.errors import ConfigError
from factprobe_ops.components.steps.study import run_study_step, study_step_config
from factprobe_ops.tracking.context import RunContext
from factprobe_ops.tracking.run import TrackedRun
from tests.tracking.test_study_tracking import CurveStudy, curve  # noqa: F401 (fixture)


def parent_context(uri: str, kfp_run_id: str) -> RunContext:
    ctx = RunContext.start(uri, pipeline="design_space", kfp_run_id=kfp_run_id)
    run = TrackedRun.from_context(ctx, run_name="parent", child=False)
    run.__enter__()
    return ctx.with_parent(run.run_id)


@pytest.mark.slow  # two MLflow parent runs and two logged study runs in sqlite (~10 s)
def test_the_step_logs_a_child_run_and_a_reused_folder_computes_nothing(curve, tmp_path, monkeypatch):  # noqa: F811
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    calls = []
    monkeypatch.setattr(CurveStudy, "run", lambda self, ctx, _run=CurveStudy.run: calls.append(1) or _run(self, ctx))
    ctx = parent_context(uri, "kfp-1")
    # the pipeline's config dict carries other steps' options too (a probe's `choices`): ignored here
    config = {"points": "3", "choices": 10, "options": ""}
    info = run_study_step(str(tmp_path / "out1"), "curve", "", config, {"points": 5}, ctx.to_json(), str(tmp_path / "work"))
    assert info["scalars"] == {"top": 0.4, "acc_1": 0.25} and "metrics.json" in info["files"]
    assert json.loads((tmp_path / "out1" / "metrics.json").read_text())["top"] == 0.4  # params win: points=5
    assert (tmp_path / "out1" / "curve.png").exists() and (tmp_path / "out1" / "positions.jsonl").exists()
    c = MlflowClient(uri)
    child = c.get_run(info["run_id"])
    assert child.info.status == "FINISHED" and child.data.tags["mlflow.parentRunId"] == ctx.parent_run_id
    assert child.data.tags["factprobe.step"] == "study" and child.data.tags["factprobe.kfp_run_id"] == "kfp-1"
    assert child.data.metrics["top"] == 0.4
    assert {"figures/curve.png"} <= {a.path for a in c.list_artifacts(info["run_id"], "figures")}
    assert {"tables/curve.json", "tables/positions.parquet"} <= {a.path for a in c.list_artifacts(info["run_id"], "tables")}
    # a second pipeline run, same configuration and work root: nothing computed, its own child run
    ctx2 = parent_context(uri, "kfp-2")
    again = run_study_step(str(tmp_path / "out2"), "curve", "", config, {"points": 5}, ctx2.to_json(), str(tmp_path / "work"))
    assert len(calls) == 1 and again["scalars"] == info["scalars"] and again["run_id"] != info["run_id"]
    assert c.get_run(again["run_id"]).data.tags["mlflow.parentRunId"] == ctx2.parent_run_id


def test_untracked_context_logs_nothing_and_bad_values_are_one_line(curve, tmp_path):  # noqa: F811
    ctx = RunContext.start("none", pipeline="design_space")
    info = run_study_step(str(tmp_path / "out"), "curve", "", {"options": ""}, {}, ctx.to_json(), str(tmp_path / "w"))
    assert info["run_id"] == "" and info["scalars"]["top"] == pytest.approx(0.2)
    with pytest.raises(ConfigError, match="points"):
        study_step_config("curve", "", {"points": "many", "options": ""})
