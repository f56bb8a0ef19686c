"""One real local KFP run of the `findings` pipeline (pipelines/findings.py) on a tiny RANDOM llama
with the `tiny` budget (plumbing: the list parameter `models` reaching the study step, the study's
probes and studies, the findings table logged to MLflow; its numbers are no result)."""

import json

import pytest

from tests.pipelines.pipeline_fixtures import run_local_pipeline

pytestmark = [pytest.mark.pipeline, pytest.mark.slow]


def test_findings_runs_locally_and_logs_the_table(tmp_path, tiny_model_path):
    from factprobe.models.testing import widen_tiny_llama

    model = widen_tiny_llama(tiny_model_path("llama"), tmp_path / "wide")  # a window for the tiny budget's sequences
    p, c, (parent, *children) = run_local_pipeline(
        "findings",
        [
            "--param",
            f'models=["{model}"]',
            "--param",
            "relations=P36",
            "--param",
            "budget=tiny",
            "--param",
            "max_facts_per_relation=3",
            "--param",
            "device=cpu",
        ],
        tmp_path,
    )
    (child,) = children
    assert child.info.status == "FINISHED" and child.data.tags["factprobe.study"] == "findings"
    cfg = json.loads(child.data.params["config_json"])
    assert cfg["params"]["models"] == [str(model)] and cfg["params"]["relations"] == ["P36"]  # the list reached the step
    claims = {k.split("/")[2] for k in child.data.metrics if k.startswith("findings/") and k.endswith("/verdict")}
    assert {"coherency_poor", "c1_c2", "fluctuation", "counterfactual_known", "incorrect_block_random"} <= claims, claims
    arts = {a.path for d in ("figures", "results", "tables") for a in c.list_artifacts(child.info.run_id, d)}
    assert {"figures/findings.png", "results/findings.md", "results/metrics.json", "tables/findings.json"} <= arts, arts
    assert "findings: tiny-random-llama: ic-lke (1/11)" in p.stdout, p.stdout[-2000:]  # a line as each stage starts
    assert "findings: tiny-random-llama: icl-sequence-incorrect-block (11/11)" in p.stdout, p.stdout[-2000:]
