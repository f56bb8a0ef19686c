"""Issue 31 item 1: the per-fact verdict is the one contract of every gate.

Two plug-in probes, registered here in-process as `FACTPROBE_PROBE_MODULES` would load them, reach
`compare`, `regress`, `baseline promote`, the nightly paired test (the step function, no KFP) and
the cross-model maps (the `compare` command and the report step) without any gate naming them:

- `hit-rate` (tests/probes/novel_metric_probe.py): verdict `hit`, headline `hit_rate`, higher is better;
- `miss-rate` (tests/probes/miss_rate_probe.py): verdict `miss`, headline `miss_rate`, LOWER is better,
  so a fact is right when `miss` is False and a rise of the miss rate is what the gates flag.

Neither table has a `correct` column. Runs are hand-made folders (results.jsonl, run_config.json,
metrics.json with a measurement identity) and MLflow runs in a sqlite store under tmp_path.

40 facts, 20 in each of R1 and R2. The gate fails on a 20-fact one-way swing (McNemar exact p ~ 2e-6;
the hit rate falls by 0.5, the miss rate rises by 0.5: every gate reports the headline itself, in its
direction, issue 42 item 2) and passes a swing the other way; read the wrong way round (the verdict
taken as "right" whatever the direction), the miss-rate cases flip: a rise of the miss rate would pass.
"""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from factprobe.cli import main
from factprobe.errors import ConfigError

FACTS = [(f"R{1 + i // 20}|f{i}", f"R{1 + i // 20}") for i in range(40)]
IDENTITY = {
    "model_revision": "local-sha256:0",
    "data_digest": "sha256:" + "0" * 64,
    "config_key": "k",
    "numerics": {"dtype": "float32", "device": "cpu", "transformers": "5.0.0"},
    "inputs": [],
}
#: probe -> (verdict column, headline metric)
PLUGINS = {"hit-rate": ("hit", "hit_rate"), "miss-rate": ("miss", "miss_rate")}


def flags(n_true: int, shift: int = 0) -> list[bool]:
    """A verdict per fact: True for `n_true` facts of each relation, starting `shift` facts into it."""
    return [shift <= i % 20 < shift + n_true for i in range(40)]


def rows(probe: str, values: list[bool]) -> list[dict]:
    column = PLUGINS[probe][0]
    return [{"fact_id": f, "relation": rel, "subject": f, "gold": "o", column: v} for (f, rel), v in zip(FACTS, values)]


def metrics(probe: str, values: list[bool], model: str) -> dict:
    """metrics.json as the plug-in writes it, with the data digest and identity a probe run records."""
    metric = PLUGINS[probe][1]
    per = {rel: {metric: sum(v for (_, r), v in zip(FACTS, values) if r == rel) / 20, "n": 20} for rel in ("R1", "R2")}
    return {
        "probe": probe,
        "model": model,
        "n": 40,
        metric: sum(values) / 40,
        "per_relation": per,
        "data_digest": IDENTITY["data_digest"],
        "identity": IDENTITY,
    }


def folder(path, probe: str, values: list[bool], model: str = "org/m", key: str = "k"):
    """A finished run folder of `probe` as `factprobe probe` leaves it."""
    path.mkdir(parents=True)
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows(probe, values)))
    (path / "run_config.json").write_text(
        json.dumps({"config": {"probe": probe, "model": model}, "results_key": key, "identity": IDENTITY})
    )
    (path / "metrics.json").write_text(json.dumps(metrics(probe, values, model)))
    return path


@pytest.fixture
def plugins():
    """Both plug-ins registered in this process (as FACTPROBE_PROBE_MODULES would), and removed after."""
    from factprobe.framework import registry

    from ..probes import miss_rate_probe, novel_metric_probe

    registry.load_probes()
    probes = [registry.register(m.PROBE) for m in (novel_metric_probe, miss_rate_probe)]
    yield probes
    for p in probes:
        registry._REGISTRY.pop(p.name, None)


@pytest.fixture
def store(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return MlflowClient(uri), uri


def log_probe_run(
    client, experiment: str, probe: str, values: list[bool], logged: dict, tags: dict | None = None, tmp=None
) -> str:
    """A FINISHED MLflow probe run of `probe`: identity tags, the metrics `logged`, tables/per_fact.parquet
    and results/metrics.json, as a probe step logs them."""
    exp = client.get_experiment_by_name(experiment)
    exp_id = exp.experiment_id if exp else client.create_experiment(experiment, artifact_location=(tmp / "art").as_uri())
    r = client.create_run(
        exp_id,
        tags={
            "factprobe.probe": probe,
            "factprobe.data_digest": IDENTITY["data_digest"],
            "factprobe.numerics": json.dumps(IDENTITY["numerics"]),
            **(tags or {}),
        },
    )
    rid = r.info.run_id
    for k, v in logged.items():
        client.log_metric(rid, k, v)
    d = tmp / f"logged-{rid}"
    (d / "tables").mkdir(parents=True)
    (d / "results").mkdir()
    pd.DataFrame(rows(probe, values)).to_parquet(d / "tables" / "per_fact.parquet")
    (d / "results" / "metrics.json").write_text(json.dumps(metrics(probe, values, "org/m")))
    client.log_artifact(rid, str(d / "tables" / "per_fact.parquet"), "tables")
    client.log_artifact(rid, str(d / "results" / "metrics.json"), "results")
    client.set_terminated(rid)
    return rid


# ------------------------------------------------------------------ compare
def test_compare_reads_each_plugins_verdict_in_its_direction(plugins, tmp_path, capsys):
    """hit-rate is compared as hit_rate; miss-rate as not_miss, the share of facts not missed
    (1 - miss_rate), with a line saying so: B's miss rate .75 against A's .25 is a drop of 0.5."""
    a = folder(tmp_path / "hit-a", "hit-rate", flags(15))
    b = folder(tmp_path / "hit-b", "hit-rate", flags(5))
    assert main(["compare", str(a), str(b), "--json", "--n-boot", "200"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert (res["metric"], res["hit_rate_a"], res["hit_rate_b"], res["diff"]) == ("hit_rate", 0.75, 0.25, -0.5)
    assert "verdict_note" not in res

    a = folder(tmp_path / "miss-a", "miss-rate", flags(5))  # miss rate .25
    b = folder(tmp_path / "miss-b", "miss-rate", flags(15))  # miss rate .75: worse
    assert main(["compare", str(a), str(b), "--json", "--n-boot", "200"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert (res["metric"], res["not_miss_a"], res["not_miss_b"], res["diff"]) == ("not_miss", 0.75, 0.25, -0.5)
    assert res["mcnemar"]["b10"] == 20 and res["mcnemar"]["b01"] == 0  # 20 facts right in A, missed in B
    assert res["subsumption_b_given_a"] == 1.0  # what B gets right (10 facts), A gets right too
    assert main(["compare", str(a), str(b), "--n-boot", "200"]) == 0
    out = capsys.readouterr().out
    assert (
        "compared: not_miss, the share of facts without `miss` (a lower miss_rate is better, so a rise of it is a "
        "drop here)" in out
    )
    assert "not_miss A 0.7500   B 0.2500   B - A = -0.5000" in out


def test_compare_refuses_an_unregistered_plugin_in_one_line(tmp_path, capsys):
    """A run of a plug-in that is not loaded here is refused naming how to load it (no registry entry)."""
    a = folder(tmp_path / "a", "hit-rate", flags(15))
    (a / "run_config.json").write_text(json.dumps({"config": {"probe": "not-loaded", "model": "m"}, "results_key": "k"}))
    assert main(["compare", str(a), str(a)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1
        and "is a not-loaded run, a probe not registered here (load its module with FACTPROBE_PROBE_MODULES" in err[0]
    ), err


# ------------------------------------------------------------------ regress
@pytest.mark.parametrize(
    "probe, baseline, worse, better",
    [
        ("hit-rate", flags(15), flags(5), flags(20)),  # hit rate .75 -> .25 (worse), -> 1.0 (better)
        ("miss-rate", flags(5), flags(15), flags(0)),  # miss rate .25 -> .75 (worse), -> 0 (better)
    ],
)
def test_regress_gates_a_plugin_in_its_headlines_direction(plugins, tmp_path, capsys, probe, baseline, worse, better):
    base = folder(tmp_path / "base", probe, baseline)
    for name, values, rc, verdict in (("worse", worse, 1, "FAIL"), ("better", better, 0, "PASS"), ("same", baseline, 0, "PASS")):
        cand = folder(tmp_path / name, probe, values)
        out = tmp_path / f"gate-{name}"
        assert main(["regress", "--candidate", str(cand), "--baseline", str(base), "--no-track", "--out", str(out)]) == rc
        text = capsys.readouterr().out
        assert f"regression gate: {verdict}" in text, text
        decision = json.loads((out / "gate.json").read_text())
        column, metric = PLUGINS[probe]
        higher = probe == "hit-rate"
        assert decision["decision"] == verdict and decision["verdict"] == {
            "column": column,
            "metric": metric,
            "higher_is_better": higher,
        }
        assert decision["metric"] == metric and decision["direction"] == ("higher" if higher else "lower") + " is better"
        assert f"  {metric:<17} candidate " in text and "accuracy" not in text
    worse = json.loads((tmp_path / "gate-worse" / "gate.json").read_text())
    assert worse["diff"] == (-0.5 if probe == "hit-rate" else 0.5)  # the headline's own change


def test_the_pipeline_gate_step_gates_a_lower_is_better_plugin(plugins, tmp_path):
    """The regression pipeline's gate step (no KFP): the same contract as `regress`."""
    from factprobe_ops.components.steps.regression_gate import run_gate
    from factprobe_ops.tracking.context import RunContext

    base = folder(tmp_path / "base", "miss-rate", flags(5))
    worse = folder(tmp_path / "worse", "miss-rate", flags(15))
    out = run_gate(str(worse), str(base), 0.02, 0.05, str(tmp_path / "gate.md"), RunContext(tracking_uri="none"))
    assert out["decision"] == "FAIL" and out["diff"] == 0.5 and out["metric"] == "miss_rate"  # the miss rate rose
    assert "(lower is better)" in (tmp_path / "gate.md").read_text()
    better = folder(tmp_path / "better", "miss-rate", flags(0))
    assert (
        run_gate(str(better), str(base), 0.02, 0.05, str(tmp_path / "g2.md"), RunContext(tracking_uri="none"))["decision"]
        == "PASS"
    )


# ------------------------------------------------------------------ baseline promote (and regress against it)
def test_promote_a_plugin_run_and_gate_against_it(plugins, store, tmp_path, capsys):
    """Plug-in runs with their headline metric and per-fact table are promoted; regress then finds the
    baseline by its tag or run id and gates a candidate folder; a run without its headline is refused
    naming the metric."""
    from factprobe_ops.tracking.baseline import BASELINE_TAG, promote

    client, _ = store
    hit = log_probe_run(
        client, "factprobe/probe", "hit-rate", flags(15), {"hit_rate": 0.75, "headline/hit_rate": 0.75}, tmp=tmp_path
    )
    assert main(["baseline", "promote", hit]) == 0 and client.get_run(hit).data.tags[BASELINE_TAG] == "true"
    worse = folder(tmp_path / "worse", "hit-rate", flags(5))
    assert main(["regress", "--candidate", str(worse), "--baseline", f"{BASELINE_TAG}=true", "--no-track"]) == 1
    assert "regression gate: FAIL" in capsys.readouterr().out

    miss = log_probe_run(client, "factprobe/probe", "miss-rate", flags(5), {"miss_rate": 0.25}, tmp=tmp_path)
    assert promote(miss) == [] and client.get_run(miss).data.tags[BASELINE_TAG] == "true"
    for values, rc in ((flags(15), 1), (flags(0), 0)):
        cand = folder(tmp_path / f"miss-{rc}", "miss-rate", values)
        assert main(["regress", "--candidate", str(cand), "--baseline", miss, "--no-track"]) == rc
    assert "  miss_rate         candidate " in capsys.readouterr().out
    no_headline = log_probe_run(client, "factprobe/probe", "miss-rate", flags(5), {"n": 40}, tmp=tmp_path)
    with pytest.raises(ConfigError, match=re.escape(f"run {no_headline} has no `miss_rate` metric (the miss-rate headline)")):
        promote(no_headline)


# ------------------------------------------------------------------ the nightly paired test
@pytest.mark.parametrize(
    "probe, last, tonight, drop",
    [
        ("hit-rate", flags(15), flags(5), True),
        ("hit-rate", flags(5), flags(15), False),
        ("miss-rate", flags(5), flags(15), True),  # the miss rate rose: a drop
        ("miss-rate", flags(15), flags(5), False),  # the miss rate fell: an improvement
    ],
)
def test_nightly_paired_test_reads_the_verdict_in_its_direction(plugins, probe, last, tonight, drop):
    from factprobe_ops.components.steps.nightly_compare import paired_change

    out = paired_change(pd.DataFrame(rows(probe, tonight)), pd.DataFrame(rows(probe, last)), 0.02, 0.05, probe=probe)
    assert "error" not in out, out
    higher = probe == "hit-rate"
    assert out["drop"] is drop and out["diff"] == (-0.5 if drop == higher else 0.5) and out["n"] == 40  # the headline's change
    assert out["metric"] == PLUGINS[probe][1] and out["direction"] == ("higher" if higher else "lower") + " is better"


def test_nightly_does_not_pair_a_probe_without_a_verdict(plugins):
    from factprobe_ops.components.steps.nightly_compare import paired_change

    table = pd.DataFrame([{"fact_id": f, "relation": rel, "em": 1.0, "setting": "closed-book"} for f, rel in FACTS])
    out = paired_change(table, table, 0.02, 0.05, probe="qa")
    assert out == {"note": "not paired fact by fact: qa runs (closed-book QA recall (yuan2024)), with no verdict per fact"}


def test_the_nightly_step_flags_a_plugins_drop(plugins, store, tmp_path):
    """run_nightly_compare over tonight's folders of both plug-ins, each paired with its previous night's
    probe run in the nightly_sweep experiment: the miss rate rose (a significant drop, the step fails
    after logging), the hit rate held."""
    from factprobe_ops.components.steps.nightly_compare import ALERT_DROP, run_nightly_compare
    from factprobe_ops.tracking.context import RunContext

    client, uri = store
    exp = client.create_experiment("factprobe/nightly_sweep", artifact_location=(tmp_path / "art").as_uri())
    last_sweep = client.create_run(exp).info.run_id
    for probe, values in (("hit-rate", flags(15)), ("miss-rate", flags(5))):
        metric = PLUGINS[probe][1]
        log_probe_run(
            client,
            "factprobe/nightly_sweep",
            probe,
            values,
            {metric: sum(values) / 40},
            tags={"mlflow.parentRunId": last_sweep, "factprobe.config_key": f"k-{probe}", "factprobe.step": "probe"},
            tmp=tmp_path,
        )
    client.set_terminated(last_sweep)
    tonight = client.create_run(exp).info.run_id
    dirs = [
        str(folder(tmp_path / "hit", "hit-rate", flags(15), key="k-hit-rate")),
        str(folder(tmp_path / "miss", "miss-rate", flags(15), key="k-miss-rate")),
    ]
    md = tmp_path / "nightly.md"
    with pytest.raises(SystemExit, match=r"nightly alert \(significant_drop\): miss-rate:org/m: miss_rate \+0\.500 \(lower"):
        run_nightly_compare(dirs, str(md), RunContext(tracking_uri=uri, parent_run_id=tonight))
    run = client.get_run(tonight).data
    assert run.tags["factprobe.alert"] == ALERT_DROP
    assert run.metrics["nightly_drop/miss-rate/org/m"] == 1.0 and run.metrics["nightly_drop/hit-rate/org/m"] == 0.0
    assert run.metrics["delta/miss-rate/org/m"] == 0.5  # the headline itself: the miss rate rose by 0.5
    text = md.read_text()
    assert "| miss-rate:org/m | miss_rate (lower is better) |" in text and "| YES |" in text


# ------------------------------------------------------------------ the cross-model maps
def test_cross_model_maps_read_the_verdict_in_its_direction(plugins, tmp_path, capsys):
    """Three models of each plug-in: `compare A B C` and the report step map the share of right facts,
    named hit_rate, and not_miss for the lower-is-better probe (1 - the miss rate)."""
    from factprobe_ops.components.steps.report import cross_model_parts, load_runs

    share = {"org/a": 5, "org/b": 10, "org/c": 15}  # facts of each relation with a True verdict
    for probe, (column, metric) in PLUGINS.items():
        dirs = [str(folder(tmp_path / probe / m.split("/")[1], probe, flags(n), model=m)) for m, n in share.items()]
        assert main(["compare", *dirs, "--json"]) == 0
        res = json.loads(capsys.readouterr().out)
        right = {m: n / 20 if probe == "hit-rate" else 1 - n / 20 for m, n in share.items()}
        named = metric if probe == "hit-rate" else f"not_{column}"
        assert res["metric"] == named and {m["model"]: m["accuracy"] for m in res["models"]} == right
        (part,) = cross_model_parts(load_runs(dirs))
        table = {r["model"]: r for r in part.tables[f"cross_model_{probe}"]}
        assert {m: table[m][named] for m in share} == right and {m: table[m]["R1"] for m in share} == right
        assert [stem for stem, _ in part.figures.values()] == [f"cross_model_heatmap_{probe}", f"cross_model_pearson_{probe}"]


def test_cross_model_maps_note_a_table_without_the_verdict(plugins, tmp_path):
    """A run whose rows lack the declared verdict becomes a note row, not a failed report."""
    from factprobe_ops.components.steps.report import cross_model_parts, load_runs

    dirs = [folder(tmp_path / n, "hit-rate", flags(5), model=f"org/{n}") for n in ("a", "b")]
    lines = (dirs[1] / "results.jsonl").read_text().splitlines()
    (dirs[1] / "results.jsonl").write_text(
        "".join(json.dumps({k: v for k, v in json.loads(x).items() if k != "hit"}) + "\n" for x in lines)
    )
    (notes,) = cross_model_parts(load_runs([str(d) for d in dirs]))
    (note,) = notes.tables["cross_model_notes"]
    assert note["probe"] == "hit-rate" and "has no 'hit' column in its per-fact table" in note["note"]


def test_a_pipelines_experiment_marks_its_headline_in_its_direction(plugins):
    """The parent run of a pipeline marks the experiment's primary metric with the first probe's headline and its
    direction: a lower-is-better plug-in is not sorted as if greater were better."""
    from factprobe_ops.components.steps.start_run import headline_family, headline_greater

    assert headline_greater(["miss-rate"]) is False and headline_family(["miss-rate"])
    assert headline_greater(["hit-rate"]) is True and headline_greater(["ic-lke"]) is True
    assert headline_greater([]) is True
