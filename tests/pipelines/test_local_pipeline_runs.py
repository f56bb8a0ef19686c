"""Real pipeline runs with the KFP local SubprocessRunner, a real model and embedded MLflow."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

pytestmark = [pytest.mark.pipeline, pytest.mark.real_model]

PROBES = 'probes=["ic-lke","hgp"]'
SMALL = ["--param", "relations=P36", "--param", "max_facts_per_relation=2", "--param", "choices=10", "--param", "examples=10"]


def pipeline(tmp_path, *args):
    env = {**os.environ, "FACTPROBE_WORK": str(tmp_path / "work")}
    env.pop("MLFLOW_TRACKING_URI", None)
    p = subprocess.run(
        [sys.executable, "-m", "factprobe.cli", "pipeline", "run", *args],
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return p.returncode, p.stdout + p.stderr


def client(tmp_path):
    return MlflowClient(f"sqlite:///{tmp_path / 'mlruns.db'}")


def runs(c, experiment):
    exp = c.get_experiment_by_name(experiment)
    return c.search_runs([exp.experiment_id]) if exp else []


@pytest.fixture
def probe_run(probe_pipeline_run):
    """The session's real `probe` pipeline run (tests/conftest.py `probe_pipeline_run`): SmolLM2, ic-lke
    and hgp on P36, 2 facts (SMALL)."""
    return probe_pipeline_run


def test_terminal_shows_one_line_per_step_and_the_log_path(probe_run):
    """Without --verbose: a start and an end line per step, the probes' headlines, the log's path."""
    import re

    out = (probe_run / "terminal.txt").read_text()
    assert len(out.splitlines()) < 40, out
    assert re.search(r"probe-model\s+SUCCESS\s+\d+\.\d s  (ic-lke|hgp) smollm2-135m-instruct: accuracy \d\.\d{3}", out), out
    (log_path,) = re.findall(r"full log \(--verbose prints it here\): (\S+)", out)
    assert "Executing task" in open(log_path, encoding="utf-8").read()


def test_probe_pipeline_logs_parent_and_children(probe_run):
    c = client(probe_run)
    all_runs = runs(c, "factprobe/probe")
    (parent,) = [r for r in all_runs if r.data.tags.get("factprobe.role") == "parent"]
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["factprobe.trigger"] == "local" and parent.data.tags["factprobe.kfp_run_id"]
    children = [r for r in all_runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    steps = sorted(r.data.tags.get("factprobe.step", "") for r in children)
    assert steps == ["data-build", "probe", "probe"]
    assert all(r.info.status == "FINISHED" for r in children)
    probes = {r.data.tags["factprobe.probe"]: r for r in children if r.data.tags.get("factprobe.step") == "probe"}
    assert set(probes) == {"ic-lke", "hgp"}
    for name, r in probes.items():
        assert "accuracy" in r.data.metrics and "accuracy/P36" in r.data.metrics and r.inputs.dataset_inputs
        # one config dict through the pipeline: each step's RunConfig is logged whole, with its probe's fields only
        cfg = json.loads(r.data.params["config_json"])
        assert cfg["probe"] == name and cfg["relations"] == ["P36"] and cfg["max_facts_per_relation"] == 2
        assert cfg["choices"] == 10 and ("examples" in cfg) == (name == "ic-lke") and ("templates" in cfg) == (name == "hgp")
    arts = {a.path for a in c.list_artifacts(parent.info.run_id, "figures")}
    assert "figures/accuracy_heatmap.png" in arts
    assert any(k.startswith("accuracy/ic-lke/") for k in parent.data.metrics)


def test_report_outputs_exist(probe_run):
    html = list((probe_run / "build" / "kfp-local").rglob("html_report"))
    assert html and "<img" in html[0].read_text()


def test_data_build_writes_a_folder_per_kind_and_probe_logs_every_scalar(probe_run):
    (root,) = (probe_run / "build" / "kfp-local").glob("factprobe-probe-*")
    meta = json.loads((root / "data-build" / "items" / "mc" / "meta.json").read_text())
    assert meta["kind"] == "mc" and meta["n_items"] == 2 and meta["info"]["distractor_pool_size"]["P36"] > 10
    c = client(probe_run)
    logged = {}
    for out in root.glob("for-loop-*/probe-model/executor_output.json"):
        arts = json.loads(out.read_text())["artifacts"]
        ((probe, run_id),) = arts["results"]["artifacts"][0]["metadata"]["mlflow_run_ids"].items()  # one probe a unit
        metrics = arts["metrics"]["artifacts"][0]["metadata"]
        logged[run_id] = {k.split(".", 1)[1]: v for k, v in metrics.items() if k.startswith(f"{probe}.")}
    assert len(logged) == 2
    for run_id, kfp_metrics in logged.items():
        scalars = {k for k in c.get_run(run_id).data.metrics if "/" not in k}
        assert {"accuracy", "macro_accuracy", "prob_mass", "n", "tokens_forwarded", "n_resumed"} <= set(kfp_metrics)
        assert set(kfp_metrics) == scalars  # every scalar metric, not only acc / prob_mass / n


def test_nightly_sweep_compares_each_model_with_its_own_previous_night(tmp_path, tiny_model_path):
    """Three nights on a tiny RANDOM model (plumbing: its numbers are no result), the second with a
    model that cannot load besides it.

    - night 1: nothing to compare with (`previous_run` none);
    - night 2: the broken model fails its own probe step only: the report covers the other model and
      names the failure, the alert tag is set, the run exits 1 after everything is logged; the good
      model is compared with its own probe run of night 1 (delta 0: its facts resumed from the work
      folder); the broken one gets no child run (refused before start, issue 18 item 2);
    - a models.yaml that does not parse fails the run;
    - night 3, the broken model dropped: the good model is compared with its run of night 2 (each
      model is its own key), and no alert is raised.

    Two probes (ic-lke, hgp), so each night ends with a knowledge map (issue 39), before the comparison:
    night 1 has no previous night's map, nights 2 and 3 diff the good model's map against the night before
    (no fact changed: the facts resumed), also on night 2, whose comparison fails the run."""
    good = tiny_model_path("gpt2")
    name, broken = good.name, "/nonexistent/broken-model"
    models = tmp_path / "models.yaml"

    def night(*entries: str) -> tuple[int, str]:
        models.write_text("models:\n" + "".join(f"  - {e}\n" for e in entries))
        return pipeline(tmp_path, "nightly_sweep", "--param", f"models_yaml={models}", "--param", PROBES, *SMALL)

    def map_run(parent):
        (found,) = [
            r
            for r in runs(c, "factprobe/nightly_sweep")
            if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id
            and r.data.tags.get("factprobe.step") == "knowledge-map"
        ]
        assert found.info.status == "FINISHED" and found.data.tags["factprobe.knowledge_map_probes"] == "ic-lke,hgp"
        return found

    def night_diff(parent) -> str:
        return Path(c.download_artifacts(parent.info.run_id, "report/nightly_knowledge_map.md", str(tmp_path))).read_text()

    def parents() -> list:
        return sorted(
            (r for r in runs(c, "factprobe/nightly_sweep") if r.data.tags.get("factprobe.role") == "parent"),
            key=lambda r: r.info.start_time,
        )

    def probe_children(parent) -> dict:
        return {
            (r.data.tags.get("factprobe.probe"), r.data.tags.get("factprobe.model")): r
            for r in runs(c, "factprobe/nightly_sweep")
            if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id and r.data.tags.get("factprobe.step") == "probe"
        }

    c = client(tmp_path)
    rc, log = night(str(good))
    assert rc == 0, log[-3000:]
    (first,) = parents()
    assert first.data.tags["factprobe.previous_run"] == "none"
    first_map = map_run(first)
    assert first.data.tags["factprobe.previous_knowledge_map"] == "none"
    assert "no previous night's map of ic-lke, hgp: tonight's is the reference" in night_diff(first)

    rc, log = night(str(good), broken)
    assert rc == 1, log[-3000:]
    assert "nightly-compare" in log and "failed_models" in log and broken in log
    first, second = parents()
    assert second.data.tags["factprobe.alert"] == "failed_models"
    assert f"ic-lke:{broken} failed" in second.data.tags["factprobe.alert_detail"]
    assert second.data.tags["factprobe.failed_models"] == f"hgp:{broken}, ic-lke:{broken}"
    # the map leaves the failed steps out and is diffed against night 1's, before the failing comparison
    second_map = map_run(second)
    assert second_map.data.tags["factprobe.knowledge_map_models"] == name
    assert second.data.tags["factprobe.previous_knowledge_map"] == first_map.info.run_id
    assert second.data.metrics[f"knowledge_map_diff/{name}/unchanged"] == 2.0  # both facts, resumed
    assert second.data.metrics[f"knowledge_map_diff/{name}/robust_gain"] == 0.0
    assert f"| {name} | {first_map.info.run_id} |" in night_diff(second)
    previous_probes = [c.get_run(r) for r in second.data.tags["factprobe.previous_run"].split(",")]
    assert len(previous_probes) == 2 and {r.data.tags["mlflow.parentRunId"] for r in previous_probes} == {first.info.run_id}
    assert second.data.tags["factprobe.previous_sweep"] == first.info.run_id
    assert second.data.metrics[f"delta/ic-lke/{name}"] == 0.0 and f"accuracy/ic-lke/{name}" in second.data.metrics
    summary = json.loads(Path(c.download_artifacts(second.info.run_id, "summary/summary.json", str(tmp_path))).read_text())
    assert sorted(k.split(":", 1)[0] for k in summary) == ["hgp", "ic-lke"]  # the good model only
    assert all(name in k for k in summary)
    changes = Path(c.download_artifacts(second.info.run_id, "report/nightly_changes.md", str(tmp_path))).read_text()
    assert f"FAILED: ic-lke on {broken}" in changes
    children = probe_children(second)
    assert sorted(p for p, m in children if name in (m or "")) == ["hgp", "ic-lke"]
    assert all(r.info.status == "FINISHED" for r in children.values())
    assert broken not in {m for _, m in children}

    bad = tmp_path / "bad.yaml"
    bad.write_text("models: [smollm2\n")
    rc, log = pipeline(tmp_path, "nightly_sweep", "--param", f"models_yaml={bad}", *SMALL)
    assert rc == 2 and "does not parse" in log  # refused before the run starts (issue 30: checks.check_sweep_values)

    rc, log = night(str(good))
    assert rc == 0, log[-3000:]
    third = parents()[-1]
    assert set(third.data.tags["factprobe.previous_run"].split(",")) == {r.info.run_id for r in children.values()}
    assert third.data.tags["factprobe.previous_knowledge_map"] == second_map.info.run_id
    assert third.data.tags["factprobe.previous_sweep"] == second.info.run_id
    assert third.data.metrics[f"delta/ic-lke/{name}"] == 0.0
    assert third.data.metrics[f"nightly_drop/ic-lke/{name}"] == 0.0
    assert "factprobe.alert" not in third.data.tags and third.data.metrics["nightly/alert"] == 0.0


def test_regression_pipeline_passes_model_against_its_own_run(probe_run):
    c = client(probe_run)
    (child,) = [
        r
        for r in runs(c, "factprobe/probe")
        if r.data.tags.get("factprobe.probe") == "ic-lke" and r.data.tags.get("factprobe.step") == "probe"
    ]
    rc, log = pipeline(
        probe_run, "regression", "--param", "candidate=smollm2-135m-instruct", "--param", f"baseline={child.info.run_id}", *SMALL
    )
    assert rc == 0, log[-3000:]
    (parent,) = [r for r in runs(c, "factprobe/regression") if r.data.tags.get("factprobe.role") == "parent"]
    assert parent.data.tags["factprobe.gate"] == "PASS" and parent.info.status == "FINISHED"


# --- counterfactual_icl and coherency -----------------------------------------------------------

MODEL = "smollm2-135m-instruct"
# QA over LAMA T-REx with LPAQA training facts: 2 relations x 3 eval facts, 6 train facts each;
# Figure 7's k = 1, 2 and a 2-shot regular block (a few seconds of generation per step on 2 cores).
CF_SMALL = [
    "--param",
    f'models=["{MODEL}"]',
    "--param",
    "source=lama",
    "--param",
    "relations=P36,P19",
    "--param",
    "max_facts_per_relation=3",
    "--param",
    "shots=1,2",
    "--param",
    "known_shots=2",
    "--param",
    "qa_train_per_relation=6",
]


def children_of(all_runs, parent) -> dict[str, list]:
    """{step tag (probe runs: the probe's name): [runs]} of the parent's child runs."""
    out: dict[str, list] = {}
    for r in all_runs:
        if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id:
            step = r.data.tags.get("factprobe.step", "")
            out.setdefault(r.data.tags["factprobe.probe"] if step == "probe" else step, []).append(r)
    return out


@pytest.fixture(scope="module")
def counterfactual_run(tmp_path_factory, real_model_path, real_data_root):
    real_model_path(MODEL)
    tmp = tmp_path_factory.mktemp("counterfactual-icl-pipeline")
    rc, log = pipeline(tmp, "counterfactual_icl", *CF_SMALL, "--param", f"train_data={real_data_root / 'lpaqa' / 'trex_train'}")
    assert rc == 0, log[-3000:]
    c = client(tmp)
    all_runs = runs(c, "factprobe/counterfactual_icl")
    (parent,) = [r for r in all_runs if r.data.tags.get("factprobe.role") == "parent"]
    return tmp, c, parent, children_of(all_runs, parent)


def test_counterfactual_icl_pipeline_logs_parent_and_children(counterfactual_run):
    _, _, parent, children = counterfactual_run
    assert parent.info.status == "FINISHED" and parent.data.tags["factprobe.trigger"] == "local"
    assert {k: len(v) for k, v in children.items()} == {"data-build": 1, "qa": 1, "counterfactual": 1}
    assert all(r.info.status == "FINISHED" for rs in children.values() for r in rs)
    (qa,), (cf,) = children["qa"], children["counterfactual"]
    # the QA step: every split, zero-shot then the regular known_shots-shot block
    qa_cfg = json.loads(qa.data.params["config_json"])
    assert qa_cfg["split"] == "all" and qa_cfg["shots"] == [0, 2]
    # the counterfactual step: Figure 7's k from the pipeline, the QA step's table, no pool pass
    cf_cfg = json.loads(cf.data.params["config_json"])
    assert cf_cfg["shots"] == [1, 2] and cf_cfg["known_shots"] == 2 and cf_cfg["known_unknown"].endswith("/table")
    for r in (qa, cf):  # the known/unknown table is a dataset input of both runs
        inputs = {d.dataset.name: {t.value for t in d.tags} for d in r.inputs.dataset_inputs}
        assert "known_unknown" in inputs[f"known_unknown-{MODEL}"], inputs
    n_pool = qa.data.metrics["known_unknown/n_known/train"] + qa.data.metrics["known_unknown/n_unknown/train"]
    assert n_pool == 12  # 2 relations x 6 train facts
    assert cf.data.metrics["n_known_train"] + cf.data.metrics["n_unknown_train"] == n_pool
    assert cf.data.metrics["n_known_train"] == qa.data.metrics["known_unknown/n_known/train"]


def test_counterfactual_icl_hands_the_table_on_and_skips_the_pool(counterfactual_run):
    import pandas as pd

    tmp = counterfactual_run[0]
    (root,) = (tmp / "build" / "kfp-local").glob("factprobe-counterfactual-icl-*")
    (loop,) = root.glob("for-loop-*")
    table = pd.read_parquet(loop / "probe-known-unknown" / "table")
    assert set(table["model"]) == {MODEL} and set(table["split"]) == {"train", "eval"}
    assert set(table["shots"]) == {2}  # the regular 2-shot answers decide, not the zero-shot ones
    meta = json.loads((loop / "probe-known-unknown" / "executor_output.json").read_text())["artifacts"]["table"]
    assert meta["artifacts"][0]["metadata"]["n_known"] + meta["artifacts"][0]["metadata"]["n_unknown"] == 12
    rows = [json.loads(line) for line in (loop / "probe-with-known-unknown" / "results" / "results.jsonl").open()]
    assert rows and {r["split"] for r in rows} == {"eval"}, "the counterfactual step asked the pool again"


def test_counterfactual_icl_report_draws_figure7_across_models(counterfactual_run, tmp_path):
    _, c, parent, children = counterfactual_run
    figures = {a.path for a in c.list_artifacts(parent.info.run_id, "figures")}
    assert {"figures/figure7_em_vs_k.png", "figures/figure6_regular_vs_counterfactual.png"} <= figures
    tables = {a.path for a in c.list_artifacts(parent.info.run_id, "tables")}
    assert {"tables/counterfactual_icl.json", "tables/qa.json"} <= tables
    m = parent.data.metrics
    for setting in ("known-unshuffle", "known-shuffle", "unknown-unshuffle", "unknown-shuffle"):
        for k in (1, 2):
            assert f"em/counterfactual/{MODEL}/{setting}/k{k}" in m
    # zero-shot EM: the QA run's top-level EM (its k = 0 answers over the eval split), in the table
    (qa,) = children["qa"]
    assert m[f"em/qa/{MODEL}"] == qa.data.metrics["em"]
    table = json.loads(
        Path(c.download_artifacts(parent.info.run_id, "tables/counterfactual_icl.json", str(tmp_path))).read_text()
    )
    rows = [dict(zip(table["columns"], row)) for row in table["data"]]
    (zero,) = [r for r in rows if r["setting"] == "zero-shot"]
    assert zero["model"] == MODEL and zero["n"] == qa.data.metrics["n"]
    assert zero["em"] == pytest.approx(qa.data.metrics["em"], abs=1e-9)
    assert {(r["setting"], r["shots"]) for r in rows} >= {
        ("regular", 2),
        ("counterfactual", 2),
        ("known-shuffle", 1),
        ("unknown-unshuffle", 2),
    }


def test_counterfactual_icl_unknown_model_fails_with_one_line_naming_the_step(tmp_path, real_model_path, real_data_root):
    rc, log = pipeline(
        tmp_path,
        "counterfactual_icl",
        *CF_SMALL,
        "--param",
        'models=["no-such-model-xyz"]',
        "--param",
        f"train_data={real_data_root / 'lpaqa' / 'trex_train'}",
    )
    assert rc == 1
    errors = [line for line in log.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, errors
    assert errors[0].startswith("error: step 'probe-known-unknown' failed: ModelError: unknown model 'no-such-model-xyz'")
    all_runs = runs(client(tmp_path), "factprobe/counterfactual_icl")
    assert all_runs and all(r.info.status != "RUNNING" for r in all_runs)
    (parent,) = [r for r in all_runs if r.data.tags.get("factprobe.role") == "parent"]
    assert parent.info.status == "FAILED"


def test_coherency_pipeline_logs_both_rounds_and_reports(tmp_path, real_model_path):
    real_model_path(MODEL)
    rc, log = pipeline(
        tmp_path,
        "coherency",
        "--param",
        f'models=["{MODEL}"]',
        "--param",
        "source=lama",
        "--param",
        "relations=P36,P19",
        "--param",
        "max_facts_per_relation=3",
        "--param",
        "max_candidates=20",
    )
    assert rc == 0, log[-3000:]
    c = client(tmp_path)
    all_runs = runs(c, "factprobe/coherency")
    (parent,) = [r for r in all_runs if r.data.tags.get("factprobe.role") == "parent"]
    children = children_of(all_runs, parent)
    assert parent.info.status == "FINISHED"
    assert {k: len(v) for k, v in children.items()} == {"data-build": 1, "coherency": 1}
    assert all(r.info.status == "FINISHED" for rs in children.values() for r in rs)
    (child,) = children["coherency"]
    assert json.loads(child.data.params["config_json"])["max_candidates"] == 20
    # both rounds in one probe run, per relation too
    for key in ("coherency", "coherency_round1", "coherency_round2", "correct_round1", "correct_round2"):
        assert key in child.data.metrics, key
        assert f"{key}/coherency/{MODEL}" in parent.data.metrics, key
    assert {"coherency_round1/P36", "coherency_round2/P19"} <= set(child.data.metrics)
    assert child.data.metrics["n_items"] == parent.data.metrics[f"n_items/coherency/{MODEL}"] > 0
    assert "figures/coherency.png" in {a.path for a in c.list_artifacts(parent.info.run_id, "figures")}
    assert "tables/coherency.json" in {a.path for a in c.list_artifacts(parent.info.run_id, "tables")}
