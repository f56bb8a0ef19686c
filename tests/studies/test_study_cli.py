"""The study framework (factprobe/studies/cli.py): claimed folder, atomic metrics, finished reruns,
refused reconfiguration, notes, and the `factprobe study` command line. Uses a tiny study defined
here (no model), registered by monkeypatching the registry."""

from __future__ import annotations

import json
import sys
import types
from dataclasses import dataclass

import pytest

from factprobe.cli import main
from factprobe.config import ConfigBase, option
from factprobe.errors import ConfigError
from factprobe.studies import registry
from factprobe.studies.base import Study
from factprobe.studies.cli import get_study, run_study, study_config


@dataclass
class EchoConfig(ConfigBase):
    times: int = option(2, "how many numbers to write")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check(self.times >= 1, "times", self.times, "must be >= 1")


class EchoStudy(Study):
    name = "echo"
    description = "writes 1..times"
    config_class = EchoConfig
    uses_base = False
    calls = 0

    def run(self, ctx):
        EchoStudy.calls += 1
        if ctx.cfg.times > 5:
            ctx.note("capped times at 5")
        return {"total": sum(range(1, min(ctx.cfg.times, 5) + 1)), "nan": float("nan")}

    def summary(self, metrics):
        return [f"echo total {metrics['total']}"]


@pytest.fixture
def echo(monkeypatch):
    mod = types.ModuleType("tests_echo_study")
    mod.STUDY = EchoStudy()
    monkeypatch.setitem(sys.modules, "tests_echo_study", mod)
    monkeypatch.setattr(registry, "_REGISTRY", {"echo": mod.STUDY})  # this study only
    monkeypatch.setattr(registry, "_loaded", True)
    EchoStudy.calls = 0
    return mod.STUDY


def test_metrics_written_once_and_a_finished_rerun_computes_nothing(echo, tmp_path):
    out = tmp_path / "s"
    cfg = study_config(echo, {"times": 7})
    metrics, _, finished = run_study(echo, cfg, out, progress=False)
    assert not finished and metrics["total"] == 15 and metrics["notes"] == ["capped times at 5"]
    on_disk = json.loads((out / "metrics.json").read_text())
    assert on_disk["total"] == 15 and on_disk["nan"] is None  # NaN written as null
    assert json.loads((out / "study_config.json").read_text()) == {"study": "echo", "params": {"times": 7}}
    again, _, finished = run_study(echo, cfg, out, progress=False)
    assert finished and again["total"] == 15 and EchoStudy.calls == 1


def test_another_configuration_into_a_finished_folder_is_refused(echo, tmp_path):
    out = tmp_path / "s"
    run_study(echo, study_config(echo, {"times": 2}), out, progress=False)
    with pytest.raises(ConfigError, match=r"another configuration \(times: 2 -> 3\)"):
        run_study(echo, study_config(echo, {"times": 3}), out, progress=False)


def test_a_probe_folder_is_refused(echo, tmp_path):
    (tmp_path / "results.jsonl").write_text("")
    with pytest.raises(ConfigError, match="holds a probe run"):
        run_study(echo, study_config(echo, {}), tmp_path, progress=False)


def test_bad_option_and_unknown_study_are_one_line_errors(echo, tmp_path, capsys):
    assert main(["study", "echo", "--times", "0", "--out", str(tmp_path / "x"), "--no-track"]) == 2
    assert capsys.readouterr().err.strip() == "error: times=0: must be >= 1"
    with pytest.raises(ConfigError, match="unknown study 'nope'; known: echo"):
        get_study("nope")


def test_command_line_prints_the_summary(echo, tmp_path, capsys):
    out = tmp_path / "cli"
    assert main(["study", "echo", "--times", "3", "--out", str(out), "--no-progress", "--no-track"]) == 0
    text = capsys.readouterr().out
    assert "echo total 6" in text and f"results in {out}" in text
