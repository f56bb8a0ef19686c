"""Issue 39 item 4: the map step in a compiled pipeline and in a local pipeline run (kfp's SubprocessRunner).

A two-step pipeline made here: `make_runs` writes three finished run folders of one model (hand-made
per-fact rows, no model) into a Dataset, as a sweep's merge step leaves them; the map component reads
that folder. The sweep pipelines themselves are wired by their owners (docs/knowledge-map.md). No
`from __future__ import annotations` here: kfp reads the component annotations as objects."""

import json

import pytest
import yaml
from kfp import dsl
from kfp.dsl import Dataset, Output

from factprobe_ops.components.knowledge_map import knowledge_map


@dsl.component(base_image="python:3.11", install_kfp_package=False)
def make_runs(out: Output[Dataset]):
    """Three finished run folders (ic-lke, hgp, qa) of one model on four facts."""
    import json
    from pathlib import Path

    verdicts = {"ic-lke": [1, 1, 0, 0], "hgp": [1, 0, 1, 0], "qa": [1, 1, 1, 0]}
    for probe, right in verdicts.items():
        folder = Path(out.path) / f"{probe}-m"
        folder.mkdir(parents=True)
        metrics = {"probe": probe, "model": "m", "model_revision": "local-sha256:" + "a" * 64, "data_digest": f"sha256:{probe}"}
        (folder / "metrics.json").write_text(json.dumps(metrics))
        rows = [
            {"fact_id": f"P36|f{i}", "relation": "P36", "correct": bool(r), "split": "eval", "gold_prob": 0.5}
            for i, r in enumerate(right)
        ]
        (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@dsl.pipeline(name="knowledge-map-test")
def map_pipeline(context: str):
    runs = make_runs()
    knowledge_map(results=runs.outputs["out"], context=context)


def test_the_map_step_compiles_into_a_pipeline(tmp_path):
    from kfp import compiler

    out = tmp_path / "p.yaml"
    compiler.Compiler().compile(map_pipeline, str(out))
    spec = next(yaml.safe_load_all(out.read_text()))
    task = spec["root"]["dag"]["tasks"]["knowledge-map"]
    assert task["inputs"]["artifacts"]["results"]["taskOutputArtifact"] == {
        "outputArtifactKey": "out",
        "producerTask": "make-runs",
    }
    outputs = spec["components"]["comp-knowledge-map"]["outputDefinitions"]
    assert set(outputs["artifacts"]) == {"map_folder", "map_html", "summary"} and "Output" in outputs["parameters"]


@pytest.mark.pipeline
def test_the_map_step_in_a_local_pipeline_run(tmp_path, monkeypatch):
    from kfp import local

    from factprobe_ops.tracking.context import RunContext

    monkeypatch.chdir(tmp_path)
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"))
    run = map_pipeline(context=RunContext(tracking_uri="none").to_json())
    folder = next(p for p in (tmp_path / "root").rglob("map_folder") if (p / "map_inputs.json").exists())
    summary = json.loads((folder / "knowledge_map.json").read_text())
    # every probe right on f0; f3 none; f1 and f2 disputed
    assert summary["n_facts"] == 4 and summary["models"][0]["shares"]["every"]["pooled"] == 0.25
    assert summary["models"][0]["n_disputed"] == 2
    assert run is not None
