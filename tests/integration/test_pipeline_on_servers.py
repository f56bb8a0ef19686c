"""The `probe` pipeline (real KFP DAG, local SubprocessRunner) against a real MLflow server whose
runs live in PostgreSQL and whose artifacts live in S3 (moto).

Checked through the MLflow API, then underneath it: the bucket through boto3 and the database
through psycopg2, so a client-side fallback (local files, sqlite) cannot pass for the server.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd
import pytest

from .helpers import explain, read_jsonl, run_factprobe
from .servers import BUCKET, client_env

pytestmark = [pytest.mark.server, pytest.mark.timeout(600), pytest.mark.pipeline, pytest.mark.real_model, pytest.mark.slow]

MODEL = "smollm2-135m-instruct"
RELATIONS = ["P36", "P1376"]
FACTS_PER_RELATION = 2


class PipelineRun(NamedTuple):
    experiment_id: str
    parent: Any  # mlflow.entities.Run
    children: list
    pipeline_root: Path


@pytest.fixture(scope="module")
def pipeline_run(servers, tmp_path_factory):
    """Run `factprobe pipeline run probe` once against the servers and read back its runs."""
    from mlflow.tracking import MlflowClient

    tmp = tmp_path_factory.mktemp("pipeline")
    uri = servers.mlflow.uri
    env = client_env(uri)
    env["FACTPROBE_WORK"] = str(tmp / "work")
    t0 = int(time.time() * 1000)
    proc = run_factprobe(
        [
            "pipeline",
            "run",
            "probe",
            "--param",
            f"models={json.dumps([MODEL])}",
            "--param",
            f"max_facts_per_relation={FACTS_PER_RELATION}",
            "--param",
            f"relations={','.join(RELATIONS)}",
            # small prompts keep the CPU run short; the tracking path is the same at any size
            "--param",
            "examples=10",
            "--param",
            "choices=10",
            "--tracking-uri",
            uri,
            "--pipeline-root",
            str(tmp / "kfp"),
        ],
        env=env,
        cwd=tmp,
        timeout=480,
    )
    assert proc.returncode == 0, explain(proc)
    assert "succeeded" in proc.stdout + proc.stderr, explain(proc)

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_USERNAME", env["MLFLOW_TRACKING_USERNAME"])
        mp.setenv("MLFLOW_TRACKING_PASSWORD", env["MLFLOW_TRACKING_PASSWORD"])
        client = MlflowClient(uri)
        exp = client.get_experiment_by_name("factprobe/probe")
        assert exp is not None, "experiment factprobe/probe was not created"
        parents = [
            r
            for r in client.search_runs([exp.experiment_id], filter_string="tags.`factprobe.role` = 'parent'")
            if r.info.start_time >= t0
        ]
        assert len(parents) == 1, [p.info.run_name for p in parents]
        parent = parents[0]
        children = client.search_runs([exp.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    return PipelineRun(exp.experiment_id, parent, children, tmp / "kfp")


def _child(children, step):
    found = [c for c in children if c.data.tags.get("factprobe.step") == step]
    assert len(found) == 1, f"expected one {step} child run, got {[c.info.run_name for c in children]}"
    return found[0]


def test_parent_and_child_runs(pipeline_run):
    _, parent, children, _ = pipeline_run
    tags = parent.data.tags
    assert parent.info.status == "FINISHED"
    assert tags["factprobe.trigger"] == "local"
    assert tags.get("factprobe.kfp_run_id"), tags
    assert tags.get("factprobe.git_sha"), tags
    assert tags.get("factprobe.model") == MODEL
    assert {c.info.status for c in children} == {"FINISHED"}, [(c.info.run_name, c.info.status) for c in children]
    assert sorted(c.data.tags.get("factprobe.step") for c in children) == ["data-build", "probe"]
    # the report step logs the cross-model summary to the parent
    assert f"accuracy/ic-lke/{MODEL}" in parent.data.metrics


def test_probe_child_metrics_params_dataset(pipeline_run):
    _, parent, children, _ = pipeline_run
    probe = _child(children, "probe")
    data = _child(children, "data-build")
    assert probe.info.run_name == f"ic-lke-{MODEL}"
    assert probe.data.params["model"] == MODEL
    assert probe.data.tags["factprobe.kfp_run_id"] == parent.data.tags["factprobe.kfp_run_id"]
    m = probe.data.metrics
    for key in ("accuracy", "accuracy/P36", "accuracy/P1376", "prob_mass", "n"):
        assert key in m, sorted(m)
    assert 0.0 <= m["accuracy"] <= 1.0
    assert m["n"] == FACTS_PER_RELATION * len(RELATIONS)
    digest = probe.data.tags["factprobe.dataset_digest"]
    assert digest
    for run in (probe, data):
        inputs = run.inputs.dataset_inputs
        assert inputs, f"{run.info.run_name}: no dataset input"
        # the content digest `sha256:<hex>`, as MLflow keeps a dataset digest: its first 36 hex digits
        assert inputs[0].dataset.digest == digest.removeprefix("sha256:")[:36]
    assert data.data.metrics["n_items"] == FACTS_PER_RELATION * len(RELATIONS)


def test_artifacts_are_in_the_s3_bucket(pipeline_run, servers):
    exp_id, parent, children, _ = pipeline_run
    probe = _child(children, "probe")
    assert probe.info.artifact_uri.startswith("mlflow-artifacts:"), probe.info.artifact_uri  # proxied by the server
    s3 = servers.s3.client()

    def keys(run_id):
        prefix = f"{exp_id}/{run_id}/artifacts/"
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
        return {o["Key"][len(prefix) :] for page in pages for o in page.get("Contents", [])}

    child_keys = keys(probe.info.run_id)
    for name in (
        "tables/per_fact.parquet",
        "tables/per_fact.json",
        "tables/per_relation.json",
        "results/results.jsonl",
        "results/metrics.json",
        "figures/per_relation_accuracy.png",
    ):
        assert name in child_keys, sorted(child_keys)
    parent_keys = keys(parent.info.run_id)
    for name in ("figures/accuracy_heatmap.png", "summary/summary.json", "tables/summary.json"):
        assert name in parent_keys, sorted(parent_keys)

    prefix = f"{exp_id}/{probe.info.run_id}/artifacts/"
    body = s3.get_object(Bucket=BUCKET, Key=prefix + "tables/per_fact.parquet")["Body"].read()
    table = pd.read_parquet(io.BytesIO(body))
    assert len(table) == FACTS_PER_RELATION * len(RELATIONS)
    assert table["fact_id"].is_unique
    assert set(table["relation"]) == set(RELATIONS)
    rows = [
        json.loads(x)
        for x in s3.get_object(Bucket=BUCKET, Key=prefix + "results/results.jsonl")["Body"].read().decode().splitlines()
        if x.strip()
    ]
    assert sorted(r["fact_id"] for r in rows) == sorted(table["fact_id"])
    png = s3.get_object(Bucket=BUCKET, Key=prefix + "figures/per_relation_accuracy.png")["Body"].read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_runs_live_in_postgres(pipeline_run, servers):
    _, parent, children, _ = pipeline_run
    ids = [parent.info.run_id] + [c.info.run_id for c in children]
    probe = _child(children, "probe")
    with servers.postgres.connect() as conn, conn.cursor() as cur:
        cur.execute("select count(*) from runs")
        assert cur.fetchone()[0] >= 3
        cur.execute("select run_uuid, status from runs where run_uuid = any(%s)", (ids,))
        assert dict(cur.fetchall()) == {i: "FINISHED" for i in ids}
        cur.execute("select value from latest_metrics where run_uuid = %s and key = 'accuracy'", (probe.info.run_id,))
        assert cur.fetchone()[0] == pytest.approx(probe.data.metrics["accuracy"])
        cur.execute("select count(*) from inputs where destination_id = %s", (probe.info.run_id,))
        assert cur.fetchone()[0] >= 1
    conn.close()


def test_results_on_disk_match_the_logged_run(pipeline_run):
    """The KFP output of the probe step is the same per-fact data the server holds."""
    _, _, children, root = pipeline_run
    results = list(root.glob("*/for-loop-*/probe-model/results/*/results.jsonl"))  # one folder per probe of the unit
    assert len(results) == 1, results
    rows = read_jsonl(results[0])
    assert len(rows) == FACTS_PER_RELATION * len(RELATIONS)
    assert len({r["key"] for r in rows}) == len(rows)
    acc = sum(bool(r["correct"]) for r in rows) / len(rows)
    assert acc == pytest.approx(_child(children, "probe").data.metrics["accuracy"])
