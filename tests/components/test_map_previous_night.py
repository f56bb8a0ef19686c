"""Issue 39 items 2 and 4: the sweeps' map step (components/steps/knowledge_map.py) skips a sweep of one
probe and says why, and the nightly sweep's map is diffed against the previous night's
(components/steps/map_previous.py, tracking/map_logging.py), in a real embedded sqlite MLflow store.
Hand-made run folders (tests/knowledge_maps/runs.py): the numbers are chosen by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from factprobe_ops.components.steps.knowledge_map import run_knowledge_map
from factprobe_ops.tracking.context import RunContext
from tests.knowledge_maps.runs import TABLE, write_runs

OFF = RunContext(tracking_uri="none").to_json()


def test_a_sweep_of_one_probe_skips_the_map_and_says_why(tmp_path, capsys):
    dirs = write_runs(tmp_path / "a", "model-a", probes=("ic-lke",)) + write_runs(tmp_path / "b", "model-b", probes=("ic-lke",))
    md = tmp_path / "m.md"
    out = run_knowledge_map(dirs, str(tmp_path / "map"), str(tmp_path / "m.html"), str(md), OFF)
    assert out["built"] is False and "one probe (ic-lke)" in out["reason"] and "two or more probes" in out["reason"]
    assert "No knowledge map: the finished runs hold one probe (ic-lke)" in md.read_text()
    assert "knowledge map skipped: the finished runs hold one probe" in capsys.readouterr().out
    assert not (tmp_path / "map" / "map_inputs.json").exists()


def test_without_tracking_the_nightly_map_says_there_is_nothing_to_compare_with(tmp_path):
    md = tmp_path / "m.md"
    out = run_knowledge_map(write_runs(tmp_path / "n"), str(tmp_path / "map"), str(tmp_path / "m.html"), str(md), OFF, True)
    assert out["built"] and "tracking is off: no previous night's map to compare with" in md.read_text()


#: night 2: P1|f4 (known under no probe) is known under all three (a robust gain); P1|f3 (qa only) is
#: known under ic-lke too (a gain one probe sees); the other four facts are unchanged
NIGHT_2 = {
    **TABLE,
    "P1|f4": ("P1", True, 0.9, [(True, 0.8)], True),
    "P1|f3": ("P1", True, 0.6, [(False, 0.1)], True),
}


@pytest.mark.slow  # an embedded sqlite MLflow store: its schema migrations take seconds
def test_the_nightly_map_is_diffed_against_the_previous_nights(tmp_path):
    from mlflow.tracking import MlflowClient

    from factprobe_ops.tracking.run import TrackedRun

    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    client = MlflowClient(uri)

    def night(n: int, table: dict, digest: str | None = None) -> tuple[str, dict, str]:
        kw = {"digest": digest} if digest else {}
        dirs = write_runs(tmp_path / f"night{n}", table=table, **kw)
        md = tmp_path / f"m{n}.md"
        with TrackedRun(pipeline="nightly_sweep", run_name=f"night {n}", tracking_uri=uri) as parent:
            ctx = RunContext(tracking_uri=uri, pipeline="nightly_sweep", parent_run_id=parent.run_id)
            out = run_knowledge_map(dirs, str(tmp_path / f"map{n}"), str(tmp_path / "m.html"), str(md), ctx.to_json(), True)
        assert out["built"]
        return parent.run_id, out, md.read_text()

    def logged(run_id: str, path: str) -> str:
        return Path(client.download_artifacts(run_id, path, str(tmp_path / "dl"))).read_text()

    first, _, md = night(1, TABLE)
    assert "model-a: no previous night's map of ic-lke, hgp, qa: tonight's is the reference" in md
    run = client.get_run(first)
    assert run.data.tags["factprobe.previous_knowledge_map"] == "none"
    assert "tonight's is the reference" in logged(first, "report/nightly_knowledge_map.md")
    (map1,) = client.search_runs([run.info.experiment_id], f"tags.mlflow.parentRunId = '{first}'")
    assert map1.data.tags["factprobe.knowledge_map_probes"] == "ic-lke,hgp,qa"

    second, _, md = night(2, NIGHT_2)
    run = client.get_run(second)
    assert run.data.tags["factprobe.previous_knowledge_map"] == map1.info.run_id
    assert "## Knowledge map against the previous night" in md and f"| model-a | {map1.info.run_id} |" in md
    (row,) = json.loads(logged(second, "tables/nightly_knowledge_map.json"))["data"]
    cols = json.loads(logged(second, "tables/nightly_knowledge_map.json"))["columns"]
    row = dict(zip(cols, row, strict=True))
    assert row["previous_sweep"] == first and row["n_facts"] == 6
    assert (row["robust gain"], row["gain"], row["n_gain_one_probe"], row["unchanged"]) == (1, 1, 1, 4)
    assert (row["robust loss"], row["loss"], row["became_robust"], row["no_longer_robust"]) == (0, 0, 1, 0)
    m = run.data.metrics
    assert m["knowledge_map_diff/model-a/robust_gain"] == 1.0 and m["knowledge_map_diff/model-a/became_robust"] == 1.0

    # night 3 probed other data under one probe's name: the diff is refused and named, never paired
    third, _, md = night(3, NIGHT_2, digest="sha256:" + "9" * 64)
    assert client.get_run(third).data.tags["factprobe.previous_knowledge_map"] == "none"
    assert "model-a: not compared with previous map run" in md and "read other data in the two maps" in md
