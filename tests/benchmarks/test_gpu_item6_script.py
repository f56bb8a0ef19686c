"""scripts/gpu_item6.py, the one-call GPU check (issue 30 item 6; issue 40 item 6: it measures what a user
gets), run small on the CPU so that a session lent a device spends none of its minutes on a broken script:
the 7B-shaped speed section at a tiny shape on a tiny random model's tokenizer. It times IC-LKE's run through
the probe's own runner and batching (`factprobe.framework.runner.run_probe`), repeated, with every number it
reports there (utilisation and MFU are "n/a on CPU"). The split-model section (CPU + disk offload here)
takes minutes on 2 cores for saving and offloading 0.5 GB: it was run by hand (`--skip exactness`: max |d| 0,
8/8 greedy identical), and the loader's split path itself is tested in tests/lm."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FACTS = 10


def _repeated(timing: dict) -> bool:
    """A timing of at least 3 samples, all reported, with their median."""
    return len(timing["samples"]) >= 3 and timing["median"] == statistics.median(timing["samples"])


@pytest.mark.slow
def test_gpu_item6_times_the_probes_own_run_repeatedly_and_reports_every_number(tiny_model_path, tmp_path):
    from factprobe.api import load_config
    from factprobe.framework.config import RunConfig
    from factprobe.framework.registry import get_probe

    out, work = tmp_path / "item6.json", tmp_path / "work"
    cmd = [sys.executable, str(REPO / "scripts" / "gpu_item6.py"), "--device", "cpu", "--tiny", "--skip", "exactness,sharded"]
    cmd += ["--models", str(tiny_model_path("llama")), "--facts", str(FACTS), "--options", "5", "--prefix-examples", "4"]
    cmd += ["--naive-facts", "1", "--hflm-batch", "4", "--work", str(work), "--out", str(out)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900, check=False, env=env)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-3000:])
    res = json.loads(out.read_text())
    assert res["failed"] == [] and "RANDOM" in res["weights"]
    speed = res["speed7b"]
    fp, split = speed["factprobe"], speed["factprobe"]["cpu_gpu_split"]
    assert speed["max_abs_diff_factprobe_vs_naive"] <= 1e-4 and speed["max_abs_diff_between_runs"] <= 1e-6
    assert speed["facts"] == FACTS and speed["options"] == 5 and "run_probe" in speed["path"]

    # every timing is repeated (median of >= 3, every sample reported)
    assert speed["repeats"] >= 3
    for timing in (fp["seconds"], split["forward_wall_s"], split["outside_forward_wall_s"], split["process_cpu_s"]):
        assert _repeated(timing), timing
    for timing in (split["cpu_inside_forward_s"], split["cpu_outside_forward_s"]):
        assert _repeated(timing), timing
    assert len(speed["naive_per_option"]["samples_per_fact"]) >= 3
    assert len(speed["hflm"]["samples_per_fact"]) >= 3, speed["hflm"]

    # utilisation, memory, throughput, MFU and the CPU/GPU split (on the CPU: n/a where only a GPU has it)
    assert fp["gpu_utilisation"] == "n/a on CPU" and fp["mfu"] == "n/a on CPU" and speed["peak_flops"] == "n/a on CPU"
    assert len(fp["peak_memory"]) == speed["repeats"] and all(m["peak_rss_bytes"] > 0 for m in fp["peak_memory"])
    assert fp["forwarded_tokens"] > 0 and fp["forwarded_tokens_per_s"] > 0 and fp["request_tokens_per_s"] > 0
    assert 0 < split["outside_forward_share_of_wall"] < 1 and split["cpu_outside_forward_ms_per_fact"] > 0
    assert fp["seconds"]["median"] > split["forward_wall_s"]["median"] > 0

    # the timed path is the probe's: its batches (from the probe's own batching of the run's items), one
    # relation prefix, and the forwards its scorer reports in the run's metrics.json; never one call for all
    cfg = RunConfig.from_dict(load_config(work / "run1"))
    probe = get_probe("ic-lke")
    prepared = probe.prepare(cfg)
    # the runner fills the scorer's token budget (Probe.batches_for, issue 40 item 2): every fact in some batch,
    # never more batches than fixed groups of `batch_size` would make
    fixed = [len(b) for items in prepared.items.values() for b in probe.batches(cfg, items)]
    assert sum(b["facts"] for b in speed["batches"]) == FACTS
    assert 1 <= len(speed["batches"]) <= len(fixed)
    assert all(b["forwards"] >= 1 for b in speed["batches"])
    assert speed["forwards_outside_batches"] == len(prepared.items)  # each relation's shared prefix, once
    assert (
        speed["forwards"]
        == speed["forwards_reported_by_run"]
        == len(prepared.items) + sum(b["forwards"] for b in speed["batches"])
    )
    assert fp["forwarded_tokens"] == speed["tokens_reported_by_run"]
    assert speed["forwards_per_run"] == [speed["forwards"]] * speed["repeats"]
