"""Issue 39 item 4: the map step of a pipeline and what it logs to MLflow (a real embedded sqlite store).

The step (components/steps/knowledge_map.py) builds the map of a sweep's merged run
folders, leaving out failed steps and probes the map cannot read, logs it into a child run of the
pipeline's parent run (tracking/map_logging.py: metrics, UI tables, figures, the page)
and writes its page and summary; a sweep with nothing to map writes why instead of failing."""

from __future__ import annotations

import json

import pytest

from factprobe_ops.components.steps.knowledge_map import readable_runs, run_knowledge_map
from factprobe_ops.tracking.context import RunContext
from factprobe_ops.tracking.map_logging import map_metrics

from .runs import rows_of, write_run, write_runs


def _merged(tmp_path):
    """A merged sweep folder: three runs the map reads, a failed step and a run of a probe it cannot read."""
    dirs = write_runs(tmp_path / "merged")
    failed = tmp_path / "merged" / "failed"
    failed.mkdir()
    (failed / "failed.json").write_text(json.dumps({"model": "m", "probe": "qa", "error": "boom"}))
    mlm = write_run(tmp_path / "merged" / "belief-mlm", "belief-mlm", "model-a", rows_of("ic-lke"), digest="sha256:" + "4" * 64)
    return [*dirs, str(failed), str(mlm)]


def test_the_step_maps_the_readable_runs_and_says_what_it_left_out(tmp_path):
    dirs = _merged(tmp_path)
    runs, notes = readable_runs(dirs)
    assert runs == dirs[:3] and len(notes) == 2 and "failed probe step" in notes[0] and "belief-mlm run" in notes[1]
    html, md = tmp_path / "map.html", tmp_path / "map.md"
    out = run_knowledge_map(dirs, str(tmp_path / "map"), str(html), str(md), RunContext(tracking_uri="none").to_json())
    assert out["built"] and out["n_facts"] == 6 and out["models"] == ["model-a"]
    assert "known under every probe" in md.read_text() and "belief-mlm run" in md.read_text()
    assert html.read_text().startswith("<!doctype html>") and "Robust shares per model" in html.read_text()
    nothing = run_knowledge_map(dirs[3:], str(tmp_path / "map2"), str(html), str(md), RunContext(tracking_uri="none").to_json())
    assert nothing == {"built": False, "reason": "no finished run whose probe the knowledge map reads"}
    assert "No knowledge map" in md.read_text()


def test_map_metrics_name_every_share_and_pair():
    summary = {
        "n_facts": 6,
        "n_partial": 1,
        "cross_model": {"n_known_everywhere": 1},
        "models": [
            {
                "label": "org/m",
                "shares": {"every": {"value": 0.1, "pooled": 0.2}, "none": {"value": float("nan"), "pooled": 0.3}},
                "pairs": [{"probe_a": "ic-lke", "probe_b": "hgp", "kappa": 0.5, "eta_a_given_b": 0.6, "eta_b_given_a": 0.7}],
            }
        ],
    }
    assert map_metrics(summary) == {
        "knowledge_map/n_facts": 6.0,
        "knowledge_map/n_partial": 1.0,
        "knowledge_map/n_known_everywhere": 1.0,
        "knowledge_map/org_m/every": 0.1,
        "knowledge_map/org_m/every_pooled": 0.2,
        "knowledge_map/org_m/none_pooled": 0.3,
        "knowledge_map/org_m/kappa/ic-lke/hgp": 0.5,
        "knowledge_map/org_m/eta/ic-lke/hgp": 0.6,
        "knowledge_map/org_m/eta/hgp/ic-lke": 0.7,
    }


@pytest.mark.slow  # an embedded sqlite MLflow store: its schema migrations take seconds
def test_the_step_logs_the_map_into_a_child_run_of_the_pipeline(tmp_path):
    from mlflow.tracking import MlflowClient

    from factprobe_ops.tracking.run import TrackedRun

    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    with TrackedRun(pipeline="nightly_sweep", run_name="parent", tracking_uri=uri) as parent:
        ctx = RunContext(tracking_uri=uri, pipeline="nightly_sweep", parent_run_id=parent.run_id)
        out = run_knowledge_map(
            _merged(tmp_path), str(tmp_path / "map"), str(tmp_path / "m.html"), str(tmp_path / "m.md"), ctx.to_json()
        )
    assert out["built"]
    client = MlflowClient(uri)
    experiment = client.get_run(parent.run_id).info.experiment_id
    (child,) = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{parent.run_id}'")
    assert child.info.run_name == "knowledge-map" and child.info.status == "FINISHED"
    m = child.data.metrics
    assert m["knowledge_map/model-a/every_pooled"] == pytest.approx(1 / 6) and m["knowledge_map/n_facts"] == 6
    assert m["knowledge_map/model-a/kappa/ic-lke/hgp"] == pytest.approx(0.25)
    assert child.data.tags["factprobe.knowledge_map_key"] == out["key"]

    def files(path):
        found = []
        for f in client.list_artifacts(child.info.run_id, path):
            found += files(f.path) if f.is_dir else [f.path]
        return found

    logged = set(files("knowledge_map"))
    assert {
        "knowledge_map/knowledge_map.html",
        "knowledge_map/knowledge_map.json",
        "knowledge_map/figures/agreement_model-a.png",
        "knowledge_map/figures/facts_model-a.png",
        "knowledge_map/tables/verdicts.parquet",
        "knowledge_map/tables/disputed.parquet",
        "knowledge_map/shares.json",
        "knowledge_map/pairs.json",
        "knowledge_map/disputed_top.json",
        "knowledge_map/left_out.txt",
    } <= logged, logged
    listed = json.loads(child.data.tags["mlflow.loggedArtifacts"])
    assert {"path": "knowledge_map/shares.json", "type": "table"} in listed
