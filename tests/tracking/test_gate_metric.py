"""Every gate speaks the probe's metric (issue 42 item 2).

`regress` on a probe whose headline is not accuracy (the issue's `win_rate`) printed "accuracy candidate 0.4408 baseline 0.4490 ...
accuracy changed by -0.0082" while its gate.json said `"compared": "win_rate"`; `GateDecision` named
`acc_candidate` / `acc_baseline`; the nightly step's reason said "accuracy" too. The report, the reason and
gate.json now name the headline and its direction; a lower-is-better headline is reported as itself (a
rise is the regression). Plug-ins: tests/probes/novel_metric_probe.py (`hit_rate`, higher is better) and
tests/probes/miss_rate_probe.py (lower is better), registered in-process."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from factprobe.cli import main

IDENTITY = {
    "model_revision": "local-sha256:0",
    "data_digest": "sha256:" + "0" * 64,
    "config_key": "k",
    "numerics": {"dtype": "float32", "device": "cpu", "transformers": "5.0.0"},
    "inputs": [],
}
PLUGINS = {"hit-rate": ("hit", "hit_rate"), "miss-rate": ("miss", "miss_rate")}  # probe -> (verdict, headline)
N = 100  # facts, 50 in each of R1 and R2


def flags(n_true: int) -> list[bool]:
    """`n_true` facts of each relation have a True verdict."""
    return [i % (N // 2) < n_true for i in range(N)]


def rows(probe: str, values: list[bool]) -> list[dict]:
    column = PLUGINS[probe][0]
    return [
        {"fact_id": f"R{1 + i // (N // 2)}|f{i}", "relation": f"R{1 + i // (N // 2)}", "subject": f"s{i}", "gold": "o", column: v}
        for i, v in enumerate(values)
    ]


def metrics(probe: str, values: list[bool]) -> dict:
    metric = PLUGINS[probe][1]
    half = N // 2
    per = {f"R{r + 1}": {metric: sum(values[r * half : (r + 1) * half]) / half, "n": half} for r in range(2)}
    return {"probe": probe, "model": "org/m", "n": N, metric: sum(values) / N, "per_relation": per, "identity": IDENTITY}


def folder(path, probe: str, values: list[bool], key: str = "k"):
    path.mkdir(parents=True)
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows(probe, values)))
    (path / "run_config.json").write_text(
        json.dumps({"config": {"probe": probe, "model": "org/m"}, "results_key": key, "identity": IDENTITY})
    )
    (path / "metrics.json").write_text(json.dumps({**metrics(probe, values), "data_digest": IDENTITY["data_digest"]}))
    return path


@pytest.fixture
def plugins():
    from factprobe.framework import registry

    from ..probes import miss_rate_probe, novel_metric_probe

    registry.load_probes()
    probes = [registry.register(m.PROBE) for m in (novel_metric_probe, miss_rate_probe)]
    yield probes
    for p in probes:
        registry._REGISTRY.pop(p.name, None)


def regress(tmp_path, capsys, probe, baseline, candidate, name):
    base = folder(tmp_path / f"base-{name}", probe, baseline)
    cand = folder(tmp_path / f"cand-{name}", probe, candidate)
    out = tmp_path / f"gate-{name}"
    rc = main(["regress", "--candidate", str(cand), "--baseline", str(base), "--no-track", "--out", str(out)])
    return rc, capsys.readouterr().out, json.loads((out / "gate.json").read_text())


def test_regress_reports_and_writes_the_hit_rate(plugins, tmp_path, capsys):
    rc, text, gate = regress(tmp_path, capsys, "hit-rate", flags(40), flags(10), "drop")
    assert rc == 1 and "regression gate: FAIL" in text
    assert "  hit_rate          candidate 0.2000  baseline 0.8000  (higher is better)" in text, text
    assert "significant drop -0.6000 of hit_rate beyond the tolerance 0.02" in text
    assert "fail iff diff < -0.02 and p < 0.05 and CI upper < 0" in text
    assert "accuracy" not in text.lower()
    assert (gate["metric"], gate["direction"], gate["candidate_value"], gate["baseline_value"]) == (
        "hit_rate",
        "higher is better",
        0.2,
        0.8,
    )
    assert gate["diff"] == pytest.approx(-0.6) and not [k for k in gate if "acc" in k]

    rc, text, gate = regress(tmp_path, capsys, "hit-rate", flags(25), [i != 0 and v for i, v in enumerate(flags(25))], "tol")
    assert rc == 0 and "reason            hit_rate changed by -0.0100, within the tolerated drop of 0.02" in text, text
    assert "accuracy" not in text.lower() and gate["metric"] == "hit_rate" and gate["decision"] == "PASS"


def test_regress_reports_a_lower_is_better_headline_as_itself(plugins, tmp_path, capsys):
    """The miss rate rose from 0.2 to 0.8: reported as miss_rate rising (+0.6), the direction said."""
    rc, text, gate = regress(tmp_path, capsys, "miss-rate", flags(10), flags(40), "rise")
    assert rc == 1 and "  miss_rate         candidate 0.8000  baseline 0.2000  (lower is better)" in text, text
    assert "significant rise +0.6000 of miss_rate beyond the tolerance 0.02" in text
    assert "fail iff diff > +0.02 and p < 0.05 and CI lower > 0" in text and "accuracy" not in text.lower()
    assert (gate["metric"], gate["direction"], gate["candidate_value"], gate["baseline_value"]) == (
        "miss_rate",
        "lower is better",
        0.8,
        0.2,
    )
    assert gate["diff"] == pytest.approx(0.6) and gate["diff_ci"][0] > 0
    rc, text, gate = regress(tmp_path, capsys, "miss-rate", flags(40), flags(10), "fall")
    assert rc == 0 and "no rise: miss_rate changed by -0.6000" in text and gate["diff"] == pytest.approx(-0.6)


def test_the_nightly_paired_test_speaks_the_hit_rate(plugins):
    from factprobe_ops.components.steps.nightly_compare import paired_change

    out = paired_change(
        pd.DataFrame(rows("hit-rate", flags(10))), pd.DataFrame(rows("hit-rate", flags(40))), 0.02, 0.05, probe="hit-rate"
    )
    assert out["drop"] is True and out["metric"] == "hit_rate" and out["direction"] == "higher is better"
    assert out["diff"] == pytest.approx(-0.6) and "hit_rate" in out["reason"] and "accuracy" not in out["reason"]
    out = paired_change(
        pd.DataFrame(rows("miss-rate", flags(40))), pd.DataFrame(rows("miss-rate", flags(10))), 0.02, 0.05, probe="miss-rate"
    )
    assert out["drop"] is True and out["metric"] == "miss_rate" and out["diff"] == pytest.approx(0.6)
    assert "rise" in out["reason"] and "accuracy" not in out["reason"]


@pytest.mark.slow
def test_the_nightly_step_names_the_hit_rate_in_its_alert_and_table(plugins, tmp_path):
    from factprobe_ops.components.steps.nightly_compare import run_nightly_compare
    from factprobe_ops.tracking.context import RunContext

    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment("factprobe/nightly_sweep", artifact_location=(tmp_path / "art").as_uri())
    last_sweep = client.create_run(exp).info.run_id
    tags = {"mlflow.parentRunId": last_sweep, "factprobe.config_key": "k-hit", "factprobe.step": "probe"}
    prev = client.create_run(
        exp,
        tags={
            "factprobe.probe": "hit-rate",
            "factprobe.data_digest": IDENTITY["data_digest"],
            "factprobe.numerics": json.dumps(IDENTITY["numerics"]),
            **tags,
        },
    ).info.run_id
    logged = tmp_path / "logged"
    (logged / "tables").mkdir(parents=True)
    (logged / "results").mkdir()
    pd.DataFrame(rows("hit-rate", flags(40))).to_parquet(logged / "tables" / "per_fact.parquet")
    (logged / "results" / "metrics.json").write_text(json.dumps(metrics("hit-rate", flags(40))))
    client.log_artifact(prev, str(logged / "tables" / "per_fact.parquet"), "tables")
    client.log_artifact(prev, str(logged / "results" / "metrics.json"), "results")
    client.set_terminated(prev)
    client.set_terminated(last_sweep)
    tonight = client.create_run(exp).info.run_id
    md = tmp_path / "nightly.md"
    with pytest.raises(SystemExit, match=r"nightly alert \(significant_drop\): hit-rate:org/m: hit_rate -0\.600 "):
        run_nightly_compare(
            [str(folder(tmp_path / "hit", "hit-rate", flags(10), key="k-hit"))],
            str(md),
            RunContext(tracking_uri=uri, parent_run_id=tonight),
        )
    assert "hit-rate:org/m: hit_rate -0.600" in client.get_run(tonight).data.tags["factprobe.alert_detail"]
    text = md.read_text()
    assert "| metric |" in text and "| hit_rate (higher is better) |" in text and "accuracy" not in text.lower()
