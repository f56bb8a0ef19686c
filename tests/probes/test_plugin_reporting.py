"""A plug-in probe owns its reporting (issue 19 item 1).

`tests/probes/novel_metric_probe.py` declares a metric no built-in probe has (`hit_rate`, overall
and per relation) and a per-fact verdict (`hit`); nothing outside that module names it. It runs
through `factprobe probe` (MLflow: metrics, headline, per-fact table, figure), `factprobe compare`
(folders and MLflow run ids), the report step (tables in Markdown, HTML and MLflow, figure,
parent metrics, KFP headline scalars) and the `probe` pipeline. Before the probe owned its
reporting, a report over such runs failed (`TypeError: Invalid shape (0,) for image data`: the
accuracy heatmap of no multiple-choice run).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FX = REPO / "tests" / "fixtures" / "mc_snapshot"
MODULE = "tests.probes.novel_metric_probe"


def _env(tmp_path: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "FACTPROBE_PROBE_MODULES": MODULE,
        "FACTPROBE_WORK": str(tmp_path / "work"),
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


def _cli(tmp_path: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "factprobe.cli", *args],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory, tiny_model_path):
    """Two `factprobe probe hit-rate` runs of a tiny RANDOM model (numbers mean nothing), logged to
    a sqlite MLflow store in the working folder."""
    tmp = tmp_path_factory.mktemp("hit-rate")
    model = tiny_model_path("gpt2")
    outs = []
    for name in ("a", "b"):
        p = _cli(
            tmp,
            "probe",
            "hit-rate",
            "--model",
            str(model),
            "--source",
            "triples",
            "--data",
            str(FX / "test.jsonl"),
            "--out",
            str(tmp / name),
            "--no-progress",
        )
        assert p.returncode == 0, p.stderr[-3000:]
        outs.append(p.stdout)
    return tmp, model, outs


@pytest.fixture
def registered():
    """The plug-in registered in this process too (for the report step called in-process)."""
    from factprobe.framework import registry

    from . import novel_metric_probe

    registry.load_probes()
    registry.register(novel_metric_probe.PROBE)
    yield novel_metric_probe.PROBE
    registry._REGISTRY.pop(novel_metric_probe.PROBE.name, None)


@pytest.mark.slow
def test_cli_run_logs_the_novel_metric_headline_table_and_figure(cli_runs):
    from mlflow.tracking import MlflowClient

    tmp, _, outs = cli_runs
    metrics = json.loads((tmp / "a" / "metrics.json").read_text())
    assert 0 <= metrics["hit_rate"] <= 1 and set(metrics["per_relation"]) == {"P36", "P103"}
    assert f"hit_rate {metrics['hit_rate']:.3f} over {metrics['n']} items" in outs[0]  # the terminal headline
    c = MlflowClient(f"sqlite:///{tmp / 'mlruns.db'}")
    exp = c.get_experiment_by_name("factprobe/probe")
    runs = [r for r in c.search_runs([exp.experiment_id]) if r.data.tags.get("factprobe.probe") == "hit-rate"]
    assert len(runs) == 2
    run = runs[0]
    m = run.data.metrics
    assert m["hit_rate"] == m["headline/hit_rate"] and "hit_rate/P36" in m and "hit_rate/P103" in m
    assert json.loads(run.data.tags["factprobe.headline"])["metric"] == "hit_rate"
    arts = {a.path for d in ("tables", "figures") for a in c.list_artifacts(run.info.run_id, d)}
    assert {"tables/per_fact.parquet", "tables/per_relation.json", "figures/per_relation_hit_rate.png"} <= arts
    import pandas as pd

    table = pd.read_parquet(c.download_artifacts(run.info.run_id, "tables/per_fact.parquet", str(tmp)))
    assert list(table.columns) == ["fact_id", "relation", "subject", "gold", "hit"]
    rel = json.loads(Path(c.download_artifacts(run.info.run_id, "tables/per_relation.json", str(tmp))).read_text())
    assert "hit_rate" in rel["columns"]


@pytest.mark.slow
def test_compare_joins_on_the_probe_verdict_and_names_its_metric(cli_runs):
    from mlflow.tracking import MlflowClient

    tmp, _, _ = cli_runs
    p = _cli(tmp, "compare", str(tmp / "a"), str(tmp / "b"))
    assert p.returncode == 0, p.stderr[-2000:]
    assert "facts joined: 16" in p.stdout and "\nhit_rate A " in p.stdout and "per-relation hit_rate" in p.stdout
    c = MlflowClient(f"sqlite:///{tmp / 'mlruns.db'}")
    exp = c.get_experiment_by_name("factprobe/probe")
    ids = [r.info.run_id for r in c.search_runs([exp.experiment_id]) if r.data.tags.get("factprobe.probe") == "hit-rate"]
    p = _cli(tmp, "compare", ids[0], ids[1], "--json", "--tracking-uri", f"sqlite:///{tmp / 'mlruns.db'}")
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads(p.stdout)
    assert res["metric"] == "hit_rate" and res["n_joined"] == 16 and res["diff"] == 0


@pytest.mark.slow
def test_report_step_shows_the_novel_metric(cli_runs, registered, tmp_path):
    """Only plug-in runs: the report used to fail drawing an empty accuracy heatmap."""
    from mlflow.tracking import MlflowClient

    from factprobe_ops.components.steps.report import headline_scalars, run_report
    from factprobe_ops.tracking.context import RunContext

    src, model, _ = cli_runs
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    c = MlflowClient(uri)
    parent = c.create_run(c.create_experiment("factprobe/probe")).info.run_id
    by_run = run_report(
        [str(src / "a")], str(tmp_path / "r.html"), str(tmp_path / "r.md"), RunContext(tracking_uri=uri, parent_run_id=parent)
    )
    hit = by_run[f"hit-rate:{model}"]["hit_rate"]
    md, page = (tmp_path / "r.md").read_text(), (tmp_path / "r.html").read_text()
    assert "## hit-rate" in md and "| model | relation | hit_rate | n |" in md and "| P36 |" in md
    assert "<th>hit_rate</th>" in page and "data:image/png;base64," in page and "accuracy heatmap" not in page
    arts = {a.path for d in ("tables", "figures") for a in c.list_artifacts(parent, d)}
    assert {"tables/hit-rate.json", "figures/per_relation_hit_rate.png"} <= arts and "figures/accuracy_heatmap.png" not in arts
    table = json.loads(Path(c.download_artifacts(parent, "tables/hit-rate.json", str(tmp_path))).read_text())
    assert "hit_rate" in table["columns"]
    assert c.get_run(parent).data.metrics[f"hit_rate/hit-rate/{model.name}"] == hit
    assert headline_scalars(by_run) == {f"hit_rate-hit-rate-{str(model).replace('/', '_')}": hit}


@pytest.mark.pipeline
def test_the_probe_pipeline_runs_and_reports_the_novel_metric(tmp_path, tiny_model_path):
    """`factprobe pipeline run probe` (a real local KFP run) with the plug-in and a multiple-choice probe."""
    from mlflow.tracking import MlflowClient

    model = tiny_model_path("gpt2")
    p = _cli(
        tmp_path,
        "pipeline",
        "run",
        "probe",
        "--param",
        f'models=["{model}"]',
        "--param",
        'probes=["hit-rate","ic-lke"]',
        "--param",
        "source=triples",
        "--param",
        f"data={FX / 'test.jsonl'}",
        "--param",
        "relations=P36",
        "--param",
        "choices=5",
        "--param",
        "examples=4",
        timeout=900,
    )
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    c = MlflowClient(f"sqlite:///{tmp_path / 'mlruns.db'}")
    exp = c.get_experiment_by_name("factprobe/probe")
    runs = c.search_runs([exp.experiment_id])
    child = [r for r in runs if r.data.tags.get("factprobe.probe") == "hit-rate"][0]
    assert child.info.status == "FINISHED"
    assert child.data.metrics["headline/hit_rate"] == child.data.metrics["hit_rate"] and "hit_rate/P36" in child.data.metrics
    (parent,) = [r for r in runs if r.data.tags.get("factprobe.role") == "parent"]
    tables = {a.path for a in c.list_artifacts(parent.info.run_id, "tables")}
    figures = {a.path for a in c.list_artifacts(parent.info.run_id, "figures")}
    assert {"tables/hit-rate.json", "tables/summary.json"} <= tables
    assert {"figures/per_relation_hit_rate.png", "figures/accuracy_heatmap.png"} <= figures
    assert f"hit_rate/hit-rate/{model.name}" in parent.data.metrics and f"accuracy/ic-lke/{model.name}" in parent.data.metrics


def test_a_verdict_missing_from_the_per_fact_table_is_refused_at_registration():
    from factprobe.errors import ConfigError
    from factprobe.framework.registry import register

    from .novel_metric_probe import HitRate

    class Broken(HitRate):
        name = "hit-rate-broken"
        per_fact_columns = ("fact_id", "relation")

    with pytest.raises(ConfigError, match="fact_verdict 'hit' is not one of its per_fact_columns"):
        register(Broken())
