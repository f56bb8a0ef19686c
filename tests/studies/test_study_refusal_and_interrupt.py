"""Issue 28 item 7, the study cases: a study refused on its data leaves no MLflow run and no files
(its data is read by `Study.prepare` before the run opens, as a probe's is), and an interrupted
study says what is true of its folder (it used to say "finished items are kept" and kept nothing)."""

from __future__ import annotations

import json
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from factprobe.cli import main
from factprobe.config import ConfigBase, option
from factprobe.errors import DataError
from factprobe.run_folder import claim, holds
from factprobe.signals import Terminated
from factprobe.studies import registry
from factprobe.studies.base import Study

OLD_LIE = "finished items are kept"


@dataclass
class StepsConfig(ConfigBase):
    steps: int = option(0, "claimed step folders to write before the interruption")
    bad_data: bool = option(False, "prepare refuses the data")
    stop: str = option("", "'int': Ctrl-C inside run; 'term': SIGTERM inside run; '': finish")


class StepsStudy(Study):
    """Writes `steps` probe-like step folders (claimed, with a checkpoint), then is interrupted."""

    name = "steps"
    description = "a tiny study with step folders"
    config_class = StepsConfig
    uses_base = False
    ran = 0
    seen = None

    def prepare(self, ctx):
        if ctx.cfg.bad_data:
            raise DataError("items.jsonl:3: the answer is not one of the options")
        return {"items": 3}

    def run(self, ctx):
        StepsStudy.ran += 1
        StepsStudy.seen = getattr(ctx, "prepared", None)
        for i in range(ctx.cfg.steps):
            with claim(ctx.out / "model" / f"probe{i}", "probe", "qa") as folder:
                (folder / "run_config.json").write_text(json.dumps({"config": {"probe": "qa"}}))
                (folder / "checkpoint.jsonl").write_text("{}\n")
        if ctx.cfg.stop == "int":
            raise KeyboardInterrupt
        if ctx.cfg.stop == "term":
            raise Terminated("received signal SIGTERM")
        return {"done": 1}


@pytest.fixture
def steps(monkeypatch):
    mod = types.ModuleType("tests_steps_study")
    mod.STUDY = StepsStudy()
    monkeypatch.setitem(sys.modules, "tests_steps_study", mod)
    monkeypatch.setattr(registry, "_REGISTRY", {"steps": mod.STUDY})  # this study only
    monkeypatch.setattr(registry, "_loaded", True)
    StepsStudy.ran = 0
    return mod.STUDY


def all_runs(uri: str) -> list:
    c = MlflowClient(uri)
    ids = [e.experiment_id for e in c.search_experiments()]
    return c.search_runs(ids) if ids else []


# ------------------------------------------------------------------ refused on its data: no run, no files
def test_a_study_refused_by_prepare_opens_no_mlflow_run_and_writes_nothing(steps, tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    out = tmp_path / "s"
    rc = main(["study", "steps", "--bad-data", "--out", str(out), "--no-progress", "--tracking-uri", uri])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and err == ["error: items.jsonl:3: the answer is not one of the options"], err
    assert StepsStudy.ran == 0
    assert not (tmp_path / "mlruns.db").exists() or all_runs(uri) == []
    assert not (out / "study_config.json").exists() and holds(out) is None  # a corrected run of any kind may use it


@pytest.mark.slow  # an MLflow sqlite store: ~9 s
def test_prepare_runs_before_the_run_and_hands_over_what_it_read(steps, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    assert main(["study", "steps", "--out", str(tmp_path / "s"), "--no-progress", "--tracking-uri", uri]) == 0
    (run,) = all_runs(uri)
    assert run.info.status == "FINISHED" and StepsStudy.ran == 1 and StepsStudy.seen == {"items": 3}


@pytest.mark.slow  # the real icl-examples study through the command line (no model is loaded): ~5 s
def test_icl_examples_refused_on_its_data_leaves_no_failed_run(tmp_path, capsys):
    """Before: the MLflow run opened before the items were read, and ended FAILED."""
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    out = tmp_path / "s"
    rc = main(
        [
            "study",
            "icl-examples",
            "--model",
            str(tmp_path / "no-model"),
            "--relations",
            "P999",
            "--out",
            str(out),
            "--no-progress",
            "--tracking-uri",
            uri,
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "unknown relation(s) P999" in err, err
    assert not (tmp_path / "mlruns.db").exists() or all_runs(uri) == []
    assert not (out / "study_config.json").exists()


@pytest.mark.slow  # the real icl-sequence study through the command line (no model is loaded): ~5 s
def test_icl_sequence_refused_on_its_data_leaves_no_failed_run(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    rc = main(
        [
            "study",
            "icl-sequence",
            "--model",
            str(tmp_path / "no-model"),
            "--relations",
            "P36",
            "--length",
            "100000",
            "--out",
            str(tmp_path / "s"),
            "--no-progress",
            "--tracking-uri",
            uri,
        ]
    )
    err = capsys.readouterr().err
    assert rc != 0 and "relation P36" in err and "100000 requested" in err, err
    assert not (tmp_path / "mlruns.db").exists() or all_runs(uri) == []


# ------------------------------------------------------------------ interrupted: say what is kept
def test_an_interrupted_study_without_step_folders_says_nothing_is_kept(steps, tmp_path, capsys):
    out = tmp_path / "s"
    rc = main(["study", "steps", "--stop", "int", "--out", str(out), "--no-progress", "--no-track"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 130
    assert err == [
        (
            f"interrupted; the study did not finish and nothing of it is kept for a rerun: rerunning it into {out} "
            "computes it all again"
        )
    ], err
    assert not (out / "metrics.json").exists()


def test_an_interrupted_study_with_step_folders_says_they_are_kept_and_a_rerun_resumes(steps, tmp_path, capsys):
    out = tmp_path / "s"
    rc = main(["study", "steps", "--steps", "2", "--stop", "term", "--out", str(out), "--no-progress", "--no-track"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 143 and len(err) == 1 and OLD_LIE not in err[0], err
    assert err[0] == (
        f"interrupted; the study did not finish; its 2 step folder(s) under {out} (e.g. "
        f"{Path('model') / 'probe0'}) are kept, and rerunning it into {out} resumes them"
    )
    assert all(holds(out / "model" / f"probe{i}")[0] == "probe" for i in range(2))


@pytest.mark.slow  # an MLflow sqlite store: ~9 s
def test_an_interrupted_study_ends_its_mlflow_run_killed(steps, tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    assert main(["study", "steps", "--stop", "int", "--out", str(tmp_path / "s"), "--no-progress", "--tracking-uri", uri]) == 130
    (run,) = all_runs(uri)
    assert run.info.status == "KILLED"
