"""Issue 18 items 21a and 21c: a capped `--shots` is labelled with the k used; `compare` on runs that
are not multiple-choice facts says what it compares, in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from factprobe.framework.config import RunConfig
from factprobe.framework.runner import run_probe
from factprobe.models import load_model
from tests.probes.test_qa import widened_tiny_llama

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny(tiny_model_path, tmp_path_factory):
    return load_model(str(widened_tiny_llama(tiny_model_path, tmp_path_factory.mktemp("wide"))))


def qa_cfg(model, **kw) -> RunConfig:
    d = {
        "probe": "qa",
        "model": str(model.path),
        "relations": "P36,P1376",
        "max_facts_per_relation": 2,
        "qa_train_per_relation": 1,
        "max_new_tokens": 3,
    }  # a train split of 2 items
    d.update(kw)
    return RunConfig.from_dict(d)


@pytest.fixture(scope="module")
def qa_runs(tiny, tmp_path_factory):
    """Two QA runs: `--shots 0,5` on a train split of 2 (k = 5 capped at 2), and `--shots 0`."""
    root = tmp_path_factory.mktemp("qa")
    a = run_probe(qa_cfg(tiny, shots="0,5"), root / "a", loaded=tiny, progress=False, log=lambda m: None)
    b = run_probe(qa_cfg(tiny, shots="0"), root / "b", loaded=tiny, progress=False, log=lambda m: None)
    return root, a, b


def test_capped_shots_are_labelled_with_the_k_used(qa_runs) -> None:
    """issue 18 item 21a: 5 shots asked, 2 exemplars exist: metrics and MLflow names say 2, keep what was asked."""
    from factprobe_ops.tracking.probe_logging import metric_dict

    root, a, _ = qa_runs
    m = json.loads((root / "a" / "metrics.json").read_text())
    assert {r["shots"] for r in a.results.to_dict("records") if r["shots_asked"] == 5} == {2}
    assert m["shots"] == [0, 2] and m["shots_asked"] == [0, 5] and m["shots_capped"] == {"5": 2}
    assert set(m["per_shots"]) == {"0", "2"} and m["per_shots"]["2"]["shots_asked"] == 5
    names = metric_dict(m)
    assert "em/shots/2" in names and "em/shots/5" not in names
    assert "5" in m["shots_note"] and any("capped at 2" in n for n in m["notes"])


def _compare(a: Path, b: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "factprobe.cli", "compare", str(a), str(b)], capture_output=True, text=True, timeout=180, cwd=REPO
    )


def test_compare_on_qa_runs_says_what_it_compares(qa_runs) -> None:
    """issue 18 item 21c: `compare` on two QA runs: one line saying compare joins multiple-choice runs
    by fact_id and what these runs are (not a missing column or duplicate-key message)."""
    root, _, _ = qa_runs
    r = _compare(root / "a", root / "b")
    err = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode != 0 and "Traceback" not in r.stderr and len(err) == 1, r.stderr
    assert err[0].startswith("error: ") and "qa run" in err[0] and "multiple-choice" in err[0]
    assert "ic-lke" in err[0] and "fact_id" in err[0]


@pytest.mark.slow
def test_compare_on_belief_rows_says_what_it_compares(tmp_path) -> None:
    """issue 18 item 21c: a BELIEF folder (per (pair, template) rows, skipped pairs without a verdict) is
    refused in one line naming what it is (it was a ValueError traceback); a folder without
    run_config.json is judged by its rows."""
    rows = [
        {
            "key": "f1#t1",
            "row_type": "fact",
            "fact_id": "f1",
            "relation": "P36",
            "template_id": "t1",
            "template": "[X] [Y].",
            "correct": True,
            "skipped": None,
        },
        {
            "key": "f2#t1",
            "row_type": "fact",
            "fact_id": "f2",
            "relation": "P36",
            "template_id": "t1",
            "template": "[X] [Y].",
            "correct": None,
            "skipped": "multi-token",
        },
    ]
    run = tmp_path / "belief"
    run.mkdir()
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "run_config.json").write_text(json.dumps({"config": {"probe": "belief-mlm"}}))
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "results.jsonl").write_text((run / "results.jsonl").read_text())
    for a, what in ((run, "belief-mlm run"), (bare, "correct")):
        r = _compare(a, a)
        err = [line for line in r.stderr.splitlines() if line.strip()]
        assert r.returncode != 0 and "Traceback" not in r.stderr and len(err) == 1, r.stderr
        assert err[0].startswith("error: ") and what in err[0] and "multiple-choice" in err[0]


@pytest.mark.slow
def test_unmarked_slow_tests_are_named_at_the_end_of_the_run(tmp_path) -> None:
    """Issue 19 item 5: an unmarked test slower than the threshold is listed in the terminal summary
    (tests/conftest.py), a `slow` one and a quick one are not; so `make test-fast` cannot quietly grow."""
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_runtest_logreport, pytest_runtest_makereport, pytest_terminal_summary  # noqa: F401\n"
    )
    (tmp_path / "test_sleepers.py").write_text(
        "import time\nimport pytest\n\n\ndef test_unmarked_sleeper():\n    time.sleep(0.5)\n\n\n"
        "@pytest.mark.slow\ndef test_marked_sleeper():\n    time.sleep(0.5)\n\n\ndef test_quick():\n    pass\n"
    )
    env = {**os.environ, "FACTPROBE_TEST_SLOW_S": "0.3", "PYTHONPATH": str(REPO)}
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "-W",
            "ignore::pytest.PytestUnknownMarkWarning",
            "--rootdir",
            str(tmp_path),
            str(tmp_path),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    summary = p.stdout.split("unmarked tests slower than 0.3 s (mark them slow or make them faster)", 1)
    assert len(summary) == 2, p.stdout[-3000:]
    listed = summary[1]
    assert "test_sleepers.py::test_unmarked_sleeper" in listed
    assert "test_marked_sleeper" not in listed and "test_quick" not in listed
