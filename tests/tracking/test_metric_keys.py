"""Hostile ids never cost a run its metrics (issue 41 item 8): a relation or item id that MLflow cannot
take in a metric name (`../../etc`, `a/b`, `rel:colon?*`) made MLflow refuse the WHOLE metrics batch; the
run stayed RUNNING and the CLI exited 0. Names are sanitised (tracking/metric_keys.py), two
ids never share a name, the mapping is logged as `tables/metric_keys.json`, and a logging failure after
the run began ends the run FAILED and the CLI with exit 1."""

from __future__ import annotations

import json

import pytest
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from mlflow.utils.validation import _validate_metric_name

from factprobe_ops.tracking.metric_keys import KeyMap, safe_id, safe_ids, safe_metric_key, valid_metric_key

HOSTILE = ["../../etc", "a/b", "rel:colon?*", "", ".", "..", "/abs", "x//y", "tr/", "100%", "ü-ok", "a" * 300]


def mlflow_takes(name: str) -> bool:
    try:
        _validate_metric_name(name)
    except MlflowException:
        return False
    return len(name) <= 250


@pytest.mark.parametrize("rel", HOSTILE)
def test_every_sanitised_name_is_one_mlflow_takes(rel):
    key = safe_metric_key(f"accuracy/{rel}")
    assert mlflow_takes(key) and valid_metric_key(key), key
    seg = safe_id(rel)
    assert "/" not in seg and mlflow_takes(f"accuracy/{seg}"), seg


def test_valid_names_are_kept_and_the_check_agrees_with_mlflow():
    for name in ("accuracy", "accuracy/P36", "em/shots/0", "acc_1", "n/P 36:x", "known_unknown/n_known/train"):
        assert valid_metric_key(name) and safe_metric_key(name) == name and mlflow_takes(name)
    for name in ("accuracy/../../etc", "a//b", "a/./b", "/a", "..a", "a?", "tr/", "x" * 251):
        assert not valid_metric_key(name) and not mlflow_takes(name), name
    assert safe_metric_key("accuracy/../../etc") == "accuracy/_../_../etc"
    assert safe_id("a/b") == "a_b" and safe_id("rel:colon?*") == "rel:colon__" and safe_id("100%") == "100pct"


def test_two_ids_that_sanitise_alike_get_two_names():
    names = safe_ids(["a_b", "a/b", "a?b", "P36"])
    assert names["a_b"] == "a_b" and names["P36"] == "P36"  # safe ids keep their names
    assert len(set(names.values())) == 4 and all(v.startswith("a_b-") for k, v in names.items() if k in ("a/b", "a?b"))
    keys = KeyMap()
    first = keys.names(["x/a?", "x/a_"])
    assert first["x/a_"] == "x/a_" and first["x/a?"] != "x/a_" and mlflow_takes(first["x/a?"])
    assert keys.name("x/a?") == first["x/a?"]  # the same original keeps its name across batches
    assert keys.renamed == {"x/a?": first["x/a?"]}


@pytest.fixture
def uri(tmp_path):
    return f"sqlite:///{tmp_path / 'mlruns.db'}"


def _key_map(client, run_id, tmp_path) -> list[dict]:
    path = client.download_artifacts(run_id, "tables/metric_keys.json", str(tmp_path / f"dl-{run_id}"))
    table = json.loads(open(path).read())
    return [dict(zip(table["columns"], row)) for row in table["data"]]


@pytest.mark.slow
def test_a_tracked_run_logs_every_metric_under_a_name_mlflow_takes(uri, tmp_path):
    from factprobe_ops.tracking.run import TrackedRun

    with TrackedRun(pipeline="t", tracking_uri=uri) as run:
        run.log_metrics({"accuracy": 0.5, "accuracy/../../etc": 0.25, "accuracy/_../_../etc": 0.75, "em/x?": 1.0})
    c = MlflowClient(uri)
    r = c.get_run(run.run_id)
    assert r.info.status == "FINISHED" and run.failure is None
    assert len(r.data.metrics) == 4 and r.data.metrics["accuracy"] == 0.5 and r.data.metrics["em/x_"] == 1.0
    assert r.data.metrics["accuracy/_../_../etc"] == 0.75  # the valid original keeps its name ...
    mapping = {m["original"]: m["logged"] for m in _key_map(c, run.run_id, tmp_path)}
    assert r.data.metrics[mapping["accuracy/../../etc"]] == 0.25  # ... the sanitised one is told apart
    assert mapping["accuracy/../../etc"].startswith("accuracy/_../_../etc-") and mapping["em/x?"] == "em/x_"


@pytest.mark.slow
def test_a_probe_run_with_hostile_relation_ids_logs_them_all(uri, tmp_path):
    """`metric_dict` makes each relation one name segment (`a/b` would otherwise read as relation `a`,
    metric group `b`); both maps are logged."""
    from factprobe_ops.tracking.probe_logging import metric_dict
    from factprobe_ops.tracking.run import TrackedRun

    per = {rel: {"accuracy": i / 10, "n": 3} for i, rel in enumerate(["../../etc", "a/b", "a_b", "rel:colon?*", "P36"])}
    m = {"probe": "mc-items", "accuracy": 0.5, "n": 15, "per_relation": per}
    renamed: dict[str, str] = {}
    flat = metric_dict(m, renamed=renamed)
    assert flat["accuracy/P36"] == 0.4 and flat["accuracy/a_b"] == 0.2 and flat["accuracy/rel:colon__"] == 0.3
    assert renamed["../../etc"] == "_.._.._etc" and renamed["a/b"].startswith("a_b-") and "P36" not in renamed
    assert flat[f"accuracy/{renamed['a/b']}"] == 0.1 and all(valid_metric_key(k) for k in flat)
    with TrackedRun(pipeline="t", tracking_uri=uri) as run:
        run.log_metrics(flat)
        run.record_renamed_ids(renamed)
    c = MlflowClient(uri)
    r = c.get_run(run.run_id)
    assert r.info.status == "FINISHED" and len(r.data.metrics) == len(flat)
    rows = _key_map(c, run.run_id, tmp_path)
    assert {"kind": "id", "original": "a/b", "logged": renamed["a/b"]} in rows


@pytest.mark.slow
def test_a_failed_metrics_batch_ends_the_run_failed_and_says_so(uri, capsys):
    """A logging call that fails after the run began (a store that refuses the batch, a server gone)
    no longer leaves the run RUNNING: it is marked FAILED and `failure` holds the line."""
    from factprobe_ops.tracking.run import TrackedRun

    with TrackedRun(pipeline="t", tracking_uri=uri) as run:
        real = run._client.log_batch

        def refuse(run_id, params, metrics, step, ts):
            if metrics:
                raise RuntimeError("INVALID_PARAMETER_VALUE: the store refused the batch")
            return real(run_id, params, metrics, step, ts)

        run._client.log_batch = refuse
        run.log_metrics({"accuracy": 0.5})
    assert MlflowClient(uri).get_run(run.run_id).info.status == "FAILED"
    assert run.failure and "logging metrics failed" in run.failure and f"run {run.run_id} is marked FAILED" in run.failure
    assert capsys.readouterr().err.count("warning: ") == 1


@pytest.mark.slow
def test_cli_probe_with_hostile_ids_logs_everything_and_a_failed_logging_exits_1(tmp_path, tiny_model_path, monkeypatch, capsys):
    """End to end: mc-items on items whose relations are `../../etc`, `a/b`, `rel:colon?*` logs a FINISHED
    run with every relation's accuracy; when logging then fails, the run is FAILED and the CLI exits 1 in
    one `error:` line naming the folder the results are in."""
    from factprobe.cli import main

    items = [
        {
            "id": f"{rel}-{i}",
            "relation": rel,
            "prompt": f"Land {i} has capital [Y]",
            "options": [f"C{i}", f"T{i}"],
            "answer": f"C{i}",
        }
        for rel in ("../../etc", "a/b", "rel:colon?*")
        for i in range(2)
    ]
    (tmp_path / "items.jsonl").write_text("".join(json.dumps(x) + "\n" for x in items))
    store = f"sqlite:///{tmp_path / 'mlruns.db'}"
    argv = ["probe", "mc-items", "--model", str(tiny_model_path("gpt2")), "--data", str(tmp_path / "items.jsonl")]
    argv += ["--no-progress", "--tracking-uri", store]
    assert main([*argv, "--out", str(tmp_path / "ok")]) == 0
    c = MlflowClient(store)
    exp = c.get_experiment_by_name("factprobe/probe").experiment_id
    (run,) = c.search_runs([exp])
    assert run.info.status == "FINISHED"
    assert {"accuracy/_.._.._etc", "accuracy/a_b", "accuracy/rel:colon__"} <= set(run.data.metrics)
    assert {m["original"] for m in _key_map(c, run.info.run_id, tmp_path)} >= {"../../etc", "a/b", "rel:colon?*"}
    capsys.readouterr()

    from factprobe_ops.tracking import library_client

    def refuse(self, run_id, params, metrics, step, ts):
        raise RuntimeError("the store refused the batch")

    monkeypatch.setattr(library_client.LibraryTrackingClient, "log_batch", refuse)
    assert main([*argv, "--out", str(tmp_path / "broken")]) == 1
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error: ")]
    assert len(err) == 1 and "logging parameters failed" in err[0] and str(tmp_path / "broken") in err[0], err
    (failed,) = [r for r in c.search_runs([exp]) if r.info.run_id != run.info.run_id]
    assert failed.info.status == "FAILED"
    assert (tmp_path / "broken" / "results.jsonl").exists()
