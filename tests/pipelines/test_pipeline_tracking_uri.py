"""`factprobe pipeline run --param tracking_uri=...` logs to the given store AND prints it (issue 42
item 3): the summary line used to name `./mlruns.db`, a store the run never touched."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.pipeline
def test_pipeline_run_prints_the_tracking_uri_it_was_given(tmp_path):
    """A real local run of the probe pipeline that stops in data-build (an unknown relation, before any
    model loads): the last stdout line names the given store, the runs are in it, and no ./mlruns.db appears."""
    from mlflow.tracking import MlflowClient

    store = f"sqlite:///{tmp_path / 'elsewhere' / 'runs.db'}"
    (tmp_path / "elsewhere").mkdir()
    env = {**os.environ, "FACTPROBE_WORK": str(tmp_path / "work")}
    env.pop("MLFLOW_TRACKING_URI", None)
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "factprobe.cli",
            "pipeline",
            "run",
            "probe",
            "--param",
            'models=["smollm2-135m-instruct"]',
            "--param",
            "relations=P999",
            "--param",
            f"tracking_uri={store}",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    last = p.stdout.strip().splitlines()[-1]
    assert last.startswith("pipeline probe FAILED in ") and last.endswith(f"; MLflow: {store}"), last
    assert not (tmp_path / "mlruns.db").exists()
    c = MlflowClient(store)
    runs = c.search_runs([c.get_experiment_by_name("factprobe/probe").experiment_id])
    assert any(r.data.tags.get("factprobe.role") == "parent" for r in runs)
