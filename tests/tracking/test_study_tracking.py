"""MLflow tracking of `factprobe study NAME` (tracking/study_run.py, entry point `factprobe.study_hooks`):
a tiny study defined here (no model) logged into a sqlite MLflow store: parameters, metrics, figures,
files and tables; FAILED when the study raises; KILLED on SIGTERM (a subprocess); an unreachable
server is one warning line and the results stay on disk; a finished-folder rerun logs no second run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from factprobe.cli import main
from factprobe.config import ConfigBase, option
from factprobe.io import atomic_write_text
from factprobe.studies import registry
from factprobe.studies.base import Study

REPO = Path(__file__).resolve().parents[2]
EXPERIMENT = "factprobe/study-curve"


@dataclass
class CurveConfig(ConfigBase):
    points: int = option(3, "points of the curve")
    fail: bool = option(False, "raise inside the study")
    sleep: float = option(0.0, "seconds to sleep before the curve (to be killed)")


class CurveStudy(Study):
    """Writes a curve (metrics `curve`), a jsonl table and a figure."""

    name = "curve"
    description = "a tiny curve"
    config_class = CurveConfig
    uses_base = False

    def run(self, ctx):
        if ctx.cfg.sleep:
            print("sleeping", flush=True)
            time.sleep(ctx.cfg.sleep)
        if ctx.cfg.fail:
            raise RuntimeError("study broke")
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        curve = [{"n": n, "mean": n / 10, "draws": [n / 10, n / 10]} for n in range(ctx.cfg.points)]
        atomic_write_text(ctx.out / "positions.jsonl", "".join(json.dumps({"position": i, "prob": 0.5}) + "\n" for i in range(4)))
        fig, ax = plt.subplots()
        ax.plot([r["n"] for r in curve], [r["mean"] for r in curve])
        fig.savefig(ctx.out / "curve.png")
        plt.close(fig)
        return {"curve": curve, "top": curve[-1]["mean"], "acc@1": 0.25}


STUDY_MODULE = """
import sys, types
from tests.tracking.test_study_tracking import CurveStudy
from factprobe.studies import registry
mod = types.ModuleType("tests_curve_study"); mod.STUDY = CurveStudy(); sys.modules["tests_curve_study"] = mod
registry._REGISTRY.clear(); registry._REGISTRY["curve"] = mod.STUDY; registry._loaded = True
from factprobe.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture
def curve(monkeypatch):
    mod = types.ModuleType("tests_curve_study")
    mod.STUDY = CurveStudy()
    monkeypatch.setitem(sys.modules, "tests_curve_study", mod)
    monkeypatch.setattr(registry, "_REGISTRY", {"curve": mod.STUDY})  # this study only
    monkeypatch.setattr(registry, "_loaded", True)
    return mod.STUDY


def runs_of(uri: str) -> list:
    c = MlflowClient(uri)
    exp = c.get_experiment_by_name(EXPERIMENT)
    return c.search_runs([exp.experiment_id]) if exp else []


@pytest.mark.slow
def test_a_study_run_logs_params_metrics_figures_files_and_tables(curve, tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    out = tmp_path / "s"
    assert main(["study", "curve", "--points", "4", "--out", str(out), "--no-progress", "--tracking-uri", uri]) == 0
    text = capsys.readouterr().out
    (run,) = runs_of(uri)
    assert run.info.status == "FINISHED" and run.info.run_id in text and "mlflow ui" in text
    assert run.data.params["points"] == "4" and json.loads(run.data.params["config_json"])["params"]["points"] == 4
    assert run.data.tags["factprobe.study"] == "curve" and len(run.data.tags["factprobe.config_key"]) == 16
    assert run.data.metrics["top"] == 0.3 and run.data.metrics["acc_1"] == 0.25  # names made safe for MLflow
    c = MlflowClient(uri)
    arts = {a.path for d in ("figures", "results", "tables") for a in c.list_artifacts(run.info.run_id, d)}
    assert {
        "figures/curve.png",
        "results/metrics.json",
        "results/study_config.json",
        "results/positions.jsonl",
        "tables/curve.json",
        "tables/curve.parquet",
        "tables/positions.json",
        "tables/positions.parquet",
    } <= arts
    # the curve as an MLflow table (listed for the UI) with the numbers underneath
    listed = json.loads(run.data.tags["mlflow.loggedArtifacts"])
    assert {"path": "tables/curve.json", "type": "table"} in listed
    table = json.loads(Path(c.download_artifacts(run.info.run_id, "tables/curve.json", str(tmp_path))).read_text())
    assert table["columns"] == ["n", "mean", "draws"] and table["data"][3] == [3, 0.3, [0.3, 0.3]]
    # a finished folder rerun computes nothing and logs no second run
    assert main(["study", "curve", "--points", "4", "--out", str(out), "--no-progress", "--tracking-uri", uri]) == 0
    assert "no new run was logged" in capsys.readouterr().out
    assert len(runs_of(uri)) == 1


def test_experiment_flag_names_the_experiment(curve, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    assert (
        main(["study", "curve", "--out", str(tmp_path / "s"), "--no-progress", "--tracking-uri", uri, "--experiment", "mine"])
        == 0
    )
    c = MlflowClient(uri)
    (run,) = c.search_runs([c.get_experiment_by_name("factprobe/mine").experiment_id])
    assert run.data.tags["factprobe.study"] == "curve" and not runs_of(uri)


def test_no_track_logs_nothing(curve, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    assert main(["study", "curve", "--out", str(tmp_path / "s"), "--no-progress", "--no-track", "--tracking-uri", uri]) == 0
    assert not (tmp_path / "mlruns.db").exists() and (tmp_path / "s" / "metrics.json").exists()


def test_a_failing_study_ends_its_run_failed(curve, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    with pytest.raises(RuntimeError, match="study broke"):
        main(["study", "curve", "--fail", "--out", str(tmp_path / "s"), "--no-progress", "--tracking-uri", uri])
    (run,) = runs_of(uri)
    assert run.info.status == "FAILED"


@pytest.mark.slow
def test_unreachable_server_is_one_warning_line_and_results_stay(curve, tmp_path, capsys):
    out = tmp_path / "s"
    assert main(["study", "curve", "--out", str(out), "--no-progress", "--tracking-uri", "http://127.0.0.1:9"]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("warning: MLflow tracking server http://127.0.0.1:9 unreachable"), err
    assert json.loads((out / "metrics.json").read_text())["top"] == pytest.approx(0.2)


@pytest.mark.slow
def test_sigterm_ends_the_run_killed(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            STUDY_MODULE,
            "study",
            "curve",
            "--sleep",
            "60",
            "--out",
            str(tmp_path / "s"),
            "--no-progress",
            "--tracking-uri",
            uri,
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().startswith("identity: ")  # the study's identity line comes first
        assert proc.stdout.readline().strip() == "sleeping"  # inside study.run, its MLflow run open
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 143, proc.stderr.read()
    (run,) = runs_of(uri)
    assert run.info.status == "KILLED"
    assert not (tmp_path / "s" / "metrics.json").exists()
