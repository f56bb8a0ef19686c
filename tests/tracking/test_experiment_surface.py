"""Issue 21: what the MLflow UI shows first. Experiments open on the runs table with the pipeline's
headline metric as primary metric; probe runs carry one headline metric name per probe family; the
parent run's description is the summary table; a server that refuses experiment tags still logs."""

from __future__ import annotations

import json

import pytest
from mlflow.tracking import MlflowClient

from factprobe_ops.tracking.run import TrackedRun

KIND, PRIMARY, GREATER = (
    "mlflow.experimentKind",
    "mlflow.experiment.primaryMetric.name",
    "mlflow.experiment.primaryMetric.greaterIsBetter",
)


@pytest.fixture
def uri(tmp_path):
    return f"sqlite:///{tmp_path / 'mlruns.db'}"


@pytest.mark.parametrize(
    "pipeline,probes,metric",
    [
        ("probe", ["ic-lke", "qa"], "headline/accuracy"),
        ("counterfactual_icl", ["qa", "counterfactual"], "headline/em"),
        ("coherency", ["coherency"], "headline/coherency"),
        ("belief", ["belief-icl"], "headline/belief_accuracy"),
        ("nightly_sweep", ["no-such-probe", "ic-lke"], "headline/accuracy"),
        ("finetune_known_unknown", ["qa", "ic-lke"], "headline/em"),
    ],
)
def test_experiment_opens_on_runs_with_the_headline_as_primary_metric(uri, pipeline, probes, metric):
    """issue 21 item 1; issue 19: the family is that of the first of the pipeline's probes that
    declares a headline (the start step's `probes`), no pipeline -> family table"""
    from factprobe_ops.components.steps.start_run import run_start

    run_start(pipeline, "kfp-1", "local", uri, json.dumps({"models": ["m"], "probes": probes}))
    tags = MlflowClient(uri).get_experiment_by_name(f"factprobe/{pipeline}").tags
    assert tags[KIND] == "custom_model_development"
    assert tags[PRIMARY] == metric and tags[GREATER] == "true"


def test_existing_experiment_gets_tags_but_user_tags_are_kept(uri):
    """issue 21 item 1: an older experiment is marked on its next run; one the user tagged is not touched."""
    c = MlflowClient(uri)
    c.create_experiment("factprobe/probe")
    user = c.create_experiment("factprobe/coherency", tags={PRIMARY: "my_metric"})
    inferred = c.create_experiment("factprobe/belief", tags={KIND: "genai_development_inferred"})
    for p in ("probe", "coherency", "belief"):
        with TrackedRun(pipeline=p, run_name="r", tracking_uri=uri):
            pass
    assert c.get_experiment_by_name("factprobe/probe").tags[KIND] == "custom_model_development"
    kept = c.get_experiment(user).tags
    assert kept[PRIMARY] == "my_metric" and KIND not in kept
    assert c.get_experiment(inferred).tags[KIND] == "custom_model_development"  # the UI's guess is no user choice


@pytest.mark.slow
def test_refused_experiment_tags_still_log_the_run(uri, capsys, monkeypatch):
    """issue 21 bad input: a server refusing experiment tags (HTTP 403) -> the run is logged, one warning line."""
    from factprobe_ops.tracking.library_client import LibraryTrackingClient
    from factprobe_ops.tracking.rest_client import RestError

    def refuse(self, experiment_id, key, value):
        raise RestError("POST experiments/set-experiment-tag", 403, "PERMISSION_DENIED", "not allowed")

    monkeypatch.setattr(LibraryTrackingClient, "set_experiment_tag", refuse)
    for _ in range(2):
        with TrackedRun(pipeline="probe", run_name="r", tracking_uri=uri, required=True) as run:
            run.log_metrics({"acc": 0.5})
        assert MlflowClient(uri).get_run(run.run_id).data.metrics["acc"] == 0.5
    err = [ln for ln in capsys.readouterr().err.splitlines() if " INFO " not in ln]  # MLflow's own store log
    assert len(err) == 1 and err[0].startswith("warning: ") and "403" in err[0], err


def test_headline_metric_per_probe_family():
    """issue 21 item 3: one metric name per family, whatever the pipeline."""
    from factprobe_ops.tracking.probe_logging import headline

    mc = headline("ic-lke", {"accuracy": 0.5, "accuracy_ci": [0.4, 0.6], "n": 100})
    assert mc == {"name": "headline/accuracy", "metric": "accuracy", "value": 0.5, "ci": [0.4, 0.6], "n": 100}
    assert headline("qa", {"em": 0.25, "n": 40})["name"] == "headline/em"
    assert headline("counterfactual", {"em": 0.25, "n": 40, "figure7": []})["name"] == "headline/em"
    assert headline("coherency", {"coherency": 0.7, "n": 10})["name"] == "headline/coherency"
    assert headline("belief-icl", {"acc": 0.3, "n": 10})["name"] == "headline/belief_accuracy"
    assert headline("belief-mlm", {"acc@1": 0.3, "n": 10})["name"] == "headline/belief_accuracy"
    lo, hi = headline("qa", {"em": 0.25, "n": 40})["ci"]
    assert 0 < lo < 0.25 < hi < 1  # Wilson interval when metrics.json gives none
    assert headline("qa", {"em": None}) is None


def test_parent_run_reads_at_a_glance(uri, tmp_path):
    """issue 21 item 2: summary as the parent's description, Source and Model columns, dataset inputs."""
    import pandas as pd

    from factprobe_ops.components.steps.finalize_run import run_finalize
    from factprobe_ops.components.steps.start_run import run_start
    from factprobe_ops.tracking.context import RunContext
    from factprobe_ops.tracking.probe_logging import record_headline

    pid = RunContext.from_json(
        run_start("probe", "kfp-1", "local", uri, json.dumps({"models": ["m-a", "/x/tiny-b"], "probes": ["ic-lke"]}))
    ).parent_run_id
    for model, acc in (("m-a", 0.5), ("/x/tiny-b", 0.25)):
        with TrackedRun(
            pipeline="probe",
            run_name=model,
            tracking_uri=uri,
            parent_run_id=pid,
            tags={"factprobe.model": model, "factprobe.probe": "ic-lke"},
        ) as run:
            record_headline(run, "ic-lke", {"accuracy": acc, "accuracy_ci": [acc - 0.1, acc + 0.1], "n": 20})
            run.log_input(pd.DataFrame({"fact_id": ["a"]}), name="lama-mc10", source="lama", digest="d1", also_parent=True)
    assert run_finalize("probe", "kfp-1", uri, "SUCCEEDED") == "FINISHED"
    c = MlflowClient(uri)
    parent = c.get_run(pid)
    note = parent.data.tags["mlflow.note.content"]
    assert "| model | probe | metric | value | 95% CI | n |" in note
    assert "| m-a | ic-lke | accuracy | 0.500 | 0.400-0.600 | 20 |" in note
    assert "| tiny-b | ic-lke | accuracy | 0.250 |" in note
    assert parent.data.tags["mlflow.source.name"] and parent.data.tags["mlflow.source.type"] == "JOB"
    models = json.loads(parent.data.tags["mlflow.log-model.history"])
    assert [m["artifact_path"] for m in models] == ["m-a", "tiny-b"]
    assert [d.dataset.name for d in parent.inputs.dataset_inputs] == ["lama-mc10"]
    child = c.search_runs([parent.info.experiment_id], "tags.`factprobe.model` = 'm-a'")[0]
    assert child.data.metrics["headline/accuracy"] == 0.5


def test_built_in_probes_keep_their_metric_and_figure_names():
    """issue 19 item 1: each probe declares its reporting; the MLflow names stay those runs always had."""
    from factprobe.framework.registry import get_probe
    from factprobe_ops.tracking.probe_logging import metric_dict

    mc = {
        "probe": "ic-lke",
        "accuracy": 0.5,
        "accuracy_ci": [0.4, 0.6],
        "macro_accuracy": 0.5,
        "n": 4,
        "per_relation": {"P36": {"accuracy": 0.5, "prob_mass": 0.3, "n": 4, "accuracy_ci": [0.1, 0.9]}},
        "accuracy_at_k": {"5": {"accuracy": 0.75}},
    }
    assert set(metric_dict(mc)) == {
        "accuracy",
        "macro_accuracy",
        "n",
        "accuracy_ci_low",
        "accuracy_ci_high",
        "accuracy/P36",
        "prob_mass/P36",
        "n/P36",
        "accuracy_at_k/5",
    }
    qa = {"probe": "qa", "em": 0.5, "n": 2, "per_relation": {"P36": {"em": 0.5, "n": 2}}, "per_shots": {"0": {"em": 0.5}}}
    assert set(metric_dict(qa)) == {"em", "n", "em/P36", "n/P36", "em/shots/0"}
    cf = {
        "probe": "counterfactual",
        "em": 0.2,
        "n": 2,
        "per_relation": {"P36": {"em": 0.2}},
        "settings": {"known-shuffle@10": {"em": 0.1, "f1": 0.2}},
        "figure7": [{"setting": "known-shuffle", "shots": 10, "em": 0.1}],
    }
    assert {"em/known-shuffle/k10", "f1/known-shuffle/k10", "em/P36"} <= set(metric_dict(cf))
    assert get_probe("counterfactual").stepped_metrics(cf) == {10: {"em_by_k/known-shuffle": 0.1}}
    assert "acc_1" in metric_dict({"probe": "belief-mlm", "acc@1": 0.3})
    coh = {
        "probe": "coherency",
        "coherency": 0.5,
        "coherency_round1": 0.5,
        "coherency_round2": 0.5,
        "per_relation": {"P36": {"coherency_round1": 0.5, "coherency_round2": 0.5}},
        "per_cardinality": {},
    }
    figures = {
        name: list(get_probe(name).run_figures(m, "/tmp/m"))
        for name, m in (("ic-lke", mc), ("qa", qa), ("counterfactual", cf), ("coherency", coh), ("belief-mlm", {"acc@1": 0.3}))
    }
    assert figures == {
        "ic-lke": ["per_relation_accuracy", "accuracy_at_k"],
        "qa": ["per_relation_em"],
        "counterfactual": ["figure7_em_vs_k"],
        "coherency": ["coherency"],
        "belief-mlm": [],
    }
    import matplotlib.pyplot as plt

    plt.close("all")


@pytest.mark.parametrize(
    "error, swallowed",
    [
        ("POST runs/log-inputs: HTTP 400: (sqlite3.IntegrityError) UNIQUE constraint failed: inputs.source_type, ...", True),
        ('(psycopg2.errors.UniqueViolation) duplicate key value violates unique constraint "inputs_pk"', True),
        ("POST runs/log-inputs: HTTP 400: UNIQUE constraint failed: runs.run_uuid", False),
        ("HTTP 503 Service Unavailable", False),
    ],
)
def test_a_dataset_a_sibling_step_logged_on_the_parent_at_the_same_moment_is_not_an_error(error, swallowed):
    """Two steps of one pipeline log the same dataset to the parent at once: the server's second insert breaks the
    inputs table's unique key (seen in a clean-clone run of the belief pipeline). Only that is swallowed."""
    from types import SimpleNamespace

    from factprobe_ops.tracking.run import TrackedRun

    def log_dataset(run_id, record, context):
        raise RuntimeError(error)

    fake = SimpleNamespace(_client=SimpleNamespace(log_dataset=log_dataset), parent_run_id="p")
    if swallowed:
        assert TrackedRun._log_parent_dataset(fake, object(), "test") is None
    else:
        with pytest.raises(RuntimeError, match=error[:20].replace("(", r"\(").replace(")", r"\)")):
            TrackedRun._log_parent_dataset(fake, object(), "test")
