"""`factprobe probe` opens its MLflow run on a background thread while the probe scores (issue 31
item 10: importing mlflow and opening the store cost 4-6 s before the first forward), and the run
still ends FINISHED, FAILED or KILLED as it did when it was opened first; `--require-tracking` still
opens it before anything is scored (tracking/cli.py, `ProbeTracking`)."""

from __future__ import annotations

import threading

import pytest

from factprobe.cli import main

pytestmark = pytest.mark.slow


@pytest.fixture
def gate(monkeypatch):
    """The MLflow run's opening waits (up to 20 s) until the probe has started scoring; `seen` says
    whether scoring started while the opening was pending (True only when it is opened in the background)."""
    from factprobe.framework import runner
    from factprobe_ops.tracking.context import RunContext

    scoring = threading.Event()
    seen: dict[str, bool] = {}
    real_start, real_score = RunContext.start.__func__, runner.score_naming_long_items

    def start(cls, *a, **k):
        seen["scoring_while_opening"] = scoring.wait(20)
        return real_start(cls, *a, **k)

    def score(*a, **k):
        scoring.set()
        if seen.get("fail"):
            raise seen["fail"]  # type: ignore[misc]
        return real_score(*a, **k)

    monkeypatch.setattr(RunContext, "start", classmethod(start))
    monkeypatch.setattr(runner, "score_naming_long_items", score)
    return seen


def _argv(tiny_model_path, tmp_path, *extra):
    return [
        "probe",
        "ic-lke",
        "--model",
        str(tiny_model_path("gpt2")),
        "--relations",
        "P36",
        "--max-facts-per-relation",
        "2",
        "--choices",
        "5",
        "--examples",
        "2",
        "--no-progress",
        "--out",
        str(tmp_path / "o"),
        "--tracking-uri",
        f"sqlite:///{tmp_path / 'mlruns.db'}",
        *extra,
    ]


def _runs(tmp_path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlruns.db'}")
    return client.search_runs([client.get_experiment_by_name("factprobe/probe").experiment_id])


def test_the_run_is_opened_while_the_probe_scores_and_logged_in_full(gate, tiny_model_path, tmp_path, capsys):
    assert main(_argv(tiny_model_path, tmp_path)) == 0
    assert gate["scoring_while_opening"], "the MLflow run was opened before scoring started"
    (run,) = _runs(tmp_path)
    assert run.info.status == "FINISHED" and run.data.metrics["n"] == 2 and run.data.params["probe"] == "ic-lke"
    assert f"MLflow run {run.info.run_id}" in capsys.readouterr().out


@pytest.mark.parametrize("error, status", [(RuntimeError("boom"), "FAILED"), (KeyboardInterrupt(), "KILLED")])
def test_a_run_that_dies_while_its_mlflow_run_opens_ends_failed_or_killed(gate, tiny_model_path, tmp_path, error, status):
    gate["fail"] = error
    if isinstance(error, KeyboardInterrupt):
        assert main(_argv(tiny_model_path, tmp_path)) == 130
    else:
        with pytest.raises(RuntimeError, match="boom"):
            main(_argv(tiny_model_path, tmp_path))
    assert gate["scoring_while_opening"]
    (run,) = _runs(tmp_path)
    assert run.info.status == status


def test_require_tracking_opens_the_run_before_scoring(tiny_model_path, tmp_path, capsys, monkeypatch):
    """An unreachable store with --require-tracking: exit 1 in one line, and nothing is scored."""
    from factprobe.framework import runner

    scored = []
    monkeypatch.setattr(runner, "score_naming_long_items", lambda *a, **k: scored.append(1) or [])
    argv = _argv(tiny_model_path, tmp_path)[:-1] + ["http://127.0.0.1:9", "--require-tracking"]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and "http://127.0.0.1:9" in err[-1] and not scored
