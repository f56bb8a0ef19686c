"""scripts/gpu_measure.py (issue 40 item 6): what the GPU script measures, tested on the CPU, the GPU's readers
(NVML, nvidia-smi) through stand-ins, so that a lent device's minutes are never spent on a broken reader."""

from __future__ import annotations

import os
import sys
import time
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "scripts") not in sys.path:
    sys.path.insert(0, str(REPO / "scripts"))

import gpu_measure  # scripts/ is no package: found through sys.path, set above


def test_peak_flops_by_device_name_and_mfu():
    assert gpu_measure.peak_bf16_flops("NVIDIA H200") == 989e12
    assert gpu_measure.peak_bf16_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert gpu_measure.peak_bf16_flops("NVIDIA A100-SXM4-80GB") == 312e12
    assert gpu_measure.peak_bf16_flops("NVIDIA L4") is None
    assert gpu_measure.mfu(7_000_000_000, 1000, 0.5, 989e12) == pytest.approx(2 * 7e9 * 1000 / 0.5 / 989e12)
    assert gpu_measure.mfu(7, 1, 1.0, "n/a on CPU") == "n/a on CPU" and gpu_measure.mfu(7, 1, 1.0, None) == "n/a"


def test_samples_reports_the_median_and_every_sample():
    assert gpu_measure.samples([3.0, 1.0, 2.0]) == {"median": 2.0, "samples": [3.0, 1.0, 2.0]}


def test_utilisation_is_na_on_the_cpu():
    with gpu_measure.UtilisationSampler("cpu") as s:
        pass
    assert s.summary() == "n/a on CPU"


def test_utilisation_is_sampled_from_nvml_on_a_background_thread(monkeypatch):
    calls = {"index": None, "n": 0}

    def rates(_handle):
        calls["n"] += 1
        return types.SimpleNamespace(gpu=40 + calls["n"] % 2 * 20)  # 60, 40, 60, ...

    fake = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda i: calls.update(index=i) or "handle",
        nvmlDeviceGetUtilizationRates=rates,
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with gpu_measure.UtilisationSampler("cuda:1", interval_s=0.01) as s:
        time.sleep(0.2)
    got = s.summary()
    assert calls["index"] == 1 and got["source"] == "pynvml" and got["samples"] >= 3
    assert got["max"] == 60 and 40 <= got["mean"] <= 60 and got["interval_s"] == 0.01


def test_utilisation_falls_back_to_nvidia_smi(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` fails
    args = tmp_path / "args"
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\necho "$@" > {args}\nwhile true; do echo 37; sleep 0.02; done\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    with gpu_measure.UtilisationSampler("cuda:0", interval_s=0.02) as s:
        time.sleep(0.5)
    got = s.summary()
    assert got["source"] == "nvidia-smi" and got["samples"] >= 1 and got["median"] == 37, got
    assert "--query-gpu=utilization.gpu" in args.read_text() and "--id=0" in args.read_text()


def test_utilisation_says_why_when_nothing_answers(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    with gpu_measure.UtilisationSampler("cuda:0") as s:
        pass
    assert "nvidia-smi" in s.summary()["error"]


def test_cpu_peak_memory_sees_an_allocation_in_its_window():
    np = pytest.importorskip("numpy")
    was_reset = gpu_measure.reset_peak_memory("cpu")
    before = gpu_measure.peak_memory("cpu", was_reset)["peak_rss_bytes"]
    block = np.ones(64 * 2**20 // 8)  # 64 MiB, every page written
    after = gpu_measure.peak_memory("cpu", was_reset)
    del block
    assert after["kind"] == "process peak RSS" and after["scope"] in ("since reset", "process lifetime")
    if after["scope"] == "since reset":
        assert after["peak_rss_bytes"] - before >= 60 * 2**20


@pytest.mark.slow
def test_forward_timer_counts_the_forwards_and_tokens_the_scorer_reports(tiny_model_path):
    from factprobe.lm.scorer import ChoiceRequest, Scorer
    from factprobe.models.loading import load_model

    loaded = load_model(str(tiny_model_path("llama")), device="cpu", dtype="float32")
    scorer = Scorer(loaded.model, loaded.tokenizer, device=loaded.device)
    reqs = [ChoiceRequest(f"The capital of {c} is", [" Paris", " Rome", " Lima"]) for c in ("France", "Italy", "Peru")]
    with gpu_measure.ForwardTimer(loaded.model, "cpu") as timer:
        scorer.score_choices(reqs, shared_prefix="The capital of Spain is Madrid.")
    assert timer.forwards == scorer.stats.forwards >= 2 and timer.tokens == scorer.stats.total_tokens
    assert timer.head_calls >= 1 and timer.wall_s > 0 and timer.cpu_s > 0
    body = loaded.model.base_model
    assert "forward" not in body.__dict__ and "forward" not in loaded.model.lm_head.__dict__  # unwrapped on exit
