"""One real local KFP run of the `design_space` pipeline (pipelines/design_space.py) on a tiny RANDOM
llama with tiny settings (plumbing: plan, data build, the IC-LKE probe and the three study steps in
the per-model loop, the cross-model report, MLflow; its numbers are no result)."""

import json

import pytest

from tests.pipelines.pipeline_fixtures import run_local_pipeline

pytestmark = [pytest.mark.pipeline, pytest.mark.slow]

TINY = [
    "--param",
    "source=lama",
    "--param",
    "relations=P36,P19",
    "--param",
    "max_facts_per_relation=2",
    "--param",
    "choices=5",
    "--param",
    "examples=4",
    "--param",
    "n=0,1,2",
    "--param",
    "draws=2",
    "--param",
    "length=8",
    "--param",
    "replace=2",
    "--param",
    'options={"device": "cpu"}',
]


def test_design_space_runs_locally_and_logs_studies_and_the_report(tmp_path, tiny_model_path):
    model = tiny_model_path("llama")
    _, c, (parent, *children) = run_local_pipeline("design_space", ["--param", f'models=["{model}"]', *TINY], tmp_path)
    (probe,) = [r for r in children if r.data.tags.get("factprobe.step") == "probe"]
    assert probe.data.tags["factprobe.probe"] == "ic-lke" and "accuracy" in probe.data.metrics
    studies = {
        (r.data.tags["factprobe.study"], json.loads(r.data.params["config_json"])["params"].get("kind")): r
        for r in children
        if r.data.tags.get("factprobe.step") == "study"
    }
    assert set(studies) == {("icl-examples", None), ("icl-sequence", "unknown"), ("icl-sequence", "incorrect")}
    for (study, _), r in studies.items():
        cfg = json.loads(r.data.params["config_json"])
        assert cfg["base"]["model"] == str(model) and cfg["base"]["relations"] == ["P36", "P19"]
        figures = {a.path for a in c.list_artifacts(r.info.run_id, "figures")}
        tables = {a.path for a in c.list_artifacts(r.info.run_id, "tables")}
        assert figures and "tables/curve.json" in tables, (study, figures, tables)  # the curve, and its numbers
    assert json.loads(studies[("icl-examples", None)].data.params["config_json"])["params"]["n"] == [0, 1, 2]
    assert "tables/positions.json" in {
        a.path for a in c.list_artifacts(studies[("icl-sequence", "unknown")].info.run_id, "tables")
    }
    assert "figures/accuracy_heatmap.png" in {a.path for a in c.list_artifacts(parent.info.run_id, "figures")}
