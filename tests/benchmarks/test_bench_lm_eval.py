"""benchmarks/bench_lm_eval.py (issue 40 item 5): its own logic, and a smoke run at the smallest setting on a
tiny RANDOM model (numbers are never results; benchmarks are never timed assertions).

The smoke run checks that the script measures what it says: both sides of the whole command ran as the
commands a user types (`factprobe-lm-eval ... --threads N`, `lm_eval --model hf` with `OMP_NUM_THREADS=N`),
each level has its seconds and ratio, and the log-likelihoods of both sides agree in process and between
the commands' logged samples."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_lm_eval import judge, max_diff, ratio, schedule


def test_schedule_interleaves_hf_and_completes_the_factprobe_runs():
    assert schedule(3, 1) == ["factprobe", "hf", "factprobe", "factprobe"]
    assert schedule(2, 2) == ["factprobe", "hf", "factprobe", "hf"]
    assert schedule(1, 1) == ["factprobe", "hf"]


def test_ratio_is_hf_over_factprobe_of_the_medians():
    assert ratio({"hf": [30.0], "factprobe": [2.0, 3.0, 100.0]}) == 10.0


def test_max_diff_refuses_runs_over_different_documents():
    assert max_diff({0: [-1.0, -2.0]}, {0: [-1.5, -2.0]}) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="different documents"):
        max_diff({0: [-1.0]}, {1: [-1.0]})
    with pytest.raises(ValueError, match="different documents"):
        max_diff({0: [-1.0, -2.0]}, {0: [-1.0]})


def _sampler(diff: float, evaluate_ratio: float | None = None, command_diff: float = 0.0) -> dict:
    out = {
        "max_abs_loglikelihood_diff": diff,
        "accuracy_identical": True,
        "command": {"max_abs_loglikelihood_diff": command_diff},
    }
    if evaluate_ratio is not None:
        out["evaluate"] = {"ratio": evaluate_ratio}
    return out


def test_judge_needs_the_first_n_ratio_and_every_difference_small():
    assert judge({"first_n": _sampler(1e-5, 12.0), "default": _sampler(1e-5, 1.5)})["passed"]
    assert not judge({"first_n": _sampler(1e-5, 9.0), "default": _sampler(1e-5, 30.0)})["passed"]
    assert not judge({"first_n": _sampler(1e-5, 12.0), "default": _sampler(1e-5, 1.5, command_diff=1e-3)})["passed"]
    assert not judge({"first_n": _sampler(2e-4, 12.0)})["passed"]


@pytest.mark.slow  # lm-eval's task index in three processes (about 30 s each here)
def test_the_benchmark_runs_at_its_smallest_setting(tiny_model_path, real_data_root, tmp_path):
    pytest.importorskip("lm_eval")
    out = tmp_path / "lm_eval.json"
    cmd = [sys.executable, str(REPO / "benchmarks" / "bench_lm_eval.py"), "--model", str(tiny_model_path("llama"))]
    cmd += ["--items", "2", "--shots", "2", "--reps", "1", "--samplers", "default", "--out", str(out)]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900, check=False, env=dict(os.environ))
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    res = json.loads(out.read_text())
    entry = res["by_sampler"]["default"]
    assert entry["task"] == "factprobe_capitals_default" and set(res["ratios"]) == {"command", "evaluate", "scoring"}
    for level in ("command", "evaluate", "scoring"):
        assert res["ratios"][level]["default"] == entry[level]["ratio"] > 0 and entry[level]["cpu_ratio"] > 0
        assert all(len(v) == 1 for v in entry[level]["wall_s_all"].values())
    assert entry["max_abs_loglikelihood_diff"] <= 1e-4 and entry["command"]["max_abs_loglikelihood_diff"] <= 1e-4
    assert entry["accuracy_identical"] and entry["tokens_forwarded"]["hf"] > 0 and entry["tokens_forwarded"]["factprobe"] > 0
    commands = entry["command"]["commands"]
    assert commands["factprobe"]["argv"][0] == "factprobe-lm-eval" and commands["factprobe"]["argv"][-2:] == ["--threads", "1"]
    assert commands["hf"]["argv"][:3] == ["lm_eval", "--model", "hf"] and commands["hf"]["env"]["OMP_NUM_THREADS"] == "1"
    assert isinstance(res["machine_loaded"], bool) and res["loadavg_start"] is not None
    assert "whole command" in done.stdout and "simple_evaluate" in done.stdout and "scoring alone" in done.stdout
