"""scripts/gpu_item6.py, the one-call GPU check of issue 30 item 6, run small on the CPU so that a session lent a
device spends none of its minutes on a broken script: the 7B-shaped speed section at a tiny shape (the scorer
equals the naive forward; every number it reports is there). The split-model section (CPU + disk offload here)
takes minutes on 2 cores for saving and offloading 0.5 GB: it was run by hand (`--skip exactness`: max |d| 0, 8/8
greedy identical), and the loader's split path itself is tested in tests/lm."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gpu_item6_runs_small_on_the_cpu_and_reports_every_number(real_model_path, tmp_path):
    out = tmp_path / "item6.json"
    cmd = [sys.executable, str(REPO / "scripts" / "gpu_item6.py"), "--device", "cpu", "--tiny", "--skip", "exactness,sharded"]
    cmd += ["--models", str(real_model_path("smollm2-135m-instruct")), "--facts", "2", "--options", "5"]
    cmd += ["--prefix-examples", "4", "--naive-facts", "1", "--hflm-batch", "4", "--out", str(out)]
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900, check=False)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-3000:])
    res = json.loads(out.read_text())
    assert res["failed"] == [] and "RANDOM" in res["weights"]
    speed = res["speed7b"]
    assert speed["max_abs_diff_factprobe_vs_naive"] <= 1e-4 and speed["facts"] == 2 and speed["options"] == 5
    assert speed["factprobe"]["forwarded_tokens"] > 0 and 0 < speed["factprobe"]["mfu"] < 1
    assert "seconds_per_fact" in speed["hflm"], speed["hflm"]
