"""Committed result files name no absolute path of the machine they ran on (benchmarks/portable_paths.py)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ABSOLUTE = re.compile(r"(^|[\s\"'=:(])/(work|root|home|tmp|var|opt|mnt|Users)/")


def _strings(v):
    if isinstance(v, str):
        yield v
    elif isinstance(v, dict):
        for k, x in v.items():
            yield from _strings(k)
            yield from _strings(x)
    elif isinstance(v, list):
        for x in v:
            yield from _strings(x)


def test_committed_results_hold_no_absolute_path():
    files = sorted((REPO / "benchmarks" / "results").glob("*.json")) + sorted((REPO / "docs").rglob("*.json"))
    bad = [f"{f.relative_to(REPO)}: {s}" for f in files for s in _strings(json.loads(f.read_text())) if ABSOLUTE.search(s)]
    assert not bad, "absolute paths in committed results:\n" + "\n".join(bad[:20])


def test_portable_rewrites_repo_cache_and_tmp_paths(tmp_path, monkeypatch):
    monkeypatch.setenv("FACTPROBE_CACHE", str(tmp_path / "cache"))
    sys.path.insert(0, str(REPO / "benchmarks"))
    from portable_paths import portable

    got = portable({"out": str(REPO / "benchmarks" / "results" / "x.json"), "m": [str(tmp_path / "cache" / "models" / "a")]})
    assert got["out"] == "benchmarks/results/x.json"
    assert not any(ABSOLUTE.search(s) for s in _strings(got)), got
