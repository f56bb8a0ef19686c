"""Issue 37 item 6: QA and counterfactual record and print a 95% interval for EM, F1 and Contains at
every k, as the multiple-choice probes do (`accuracy_ci` in metrics.json, `accuracy_ci_low/high` in
MLflow, `[lo, hi]` on the screen); QA's screen shows every k it ran, not only the first."""

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from factprobe.framework.config import RunConfig
from factprobe.framework.registry import get_probe
from factprobe.metrics.bootstrap import bootstrap_ci
from factprobe.metrics.qa import summarize_qa
from factprobe.probes.counterfactual import FIGURE7_SETTINGS

PREPARED = SimpleNamespace(dropped={}, info={})


def _row(k: int, i: int, em: float, setting: str = "regular", split: str = "eval") -> dict:
    return {
        "relation": f"P{i % 3}",
        "answer_type": "entity",
        "em": em,
        "f1": min(1.0, em + 0.5 * (i % 2)),
        "contains": float(em or i % 3 == 0),
        "empty": False,
        "popularity": None,
        "split": split,
        "setting": setting,
        "shots": k,
        "shots_asked": k,
        "fact_id": f"f{i}",
        "exemplars": [],
    }


def test_summary_interval_is_the_bootstrap_over_questions():
    em = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    df = pd.DataFrame([_row(0, i, v) for i, v in enumerate(em)])
    s = summarize_qa(df)
    for name in ("em", "f1", "contains"):
        assert s[f"{name}_ci"] == list(bootstrap_ci(df[name].to_numpy(), n_boot=1000, seed=0))
        assert s[f"{name}_ci"][0] <= s[name] <= s[f"{name}_ci"][1]
    assert s["em_ci"][0] < 0.3 < s["em_ci"][1]  # 3 of 10: a wide interval
    assert summarize_qa(df.assign(em=1.0))["em_ci"] == [1.0, 1.0]
    assert summarize_qa(df.iloc[:0])["em_ci"] is None  # no items: no interval, never NaN


def _qa_metrics():
    rows = [_row(0, i, float(i % 4 == 0)) for i in range(12)] + [_row(2, i, float(i % 2 == 0)) for i in range(12)]
    cfg = RunConfig.from_dict({"probe": "qa", "model": "m", "shots": "0,2"})
    return get_probe("qa").metrics(rows, PREPARED, cfg)


def test_qa_records_an_interval_at_every_k():
    m = _qa_metrics()
    assert m["em_ci"] == m["per_shots"]["0"]["em_ci"]
    for k, em in (("0", 0.25), ("2", 0.5)):
        entry = m["per_shots"][k]
        assert entry["em"] == pytest.approx(em)
        for name in ("em", "f1", "contains"):
            lo, hi = entry[f"{name}_ci"]
            assert lo <= entry[name] <= hi and lo < hi
    flat = get_probe("qa").flat_metrics(m)
    assert flat["em_ci_low"] == m["em_ci"][0] and flat["contains_ci_high"] == m["contains_ci"][1]
    assert flat["em_ci_low/shots/2"] == m["per_shots"]["2"]["em_ci"][0]
    assert flat["f1_ci_high/shots/2"] == m["per_shots"]["2"]["f1_ci"][1]


def test_qa_screen_shows_every_k_with_its_intervals():
    m = _qa_metrics()
    probe = get_probe("qa")
    lines = probe.relation_text(m).splitlines()
    assert lines[1].split()[:3] == ["k", "n", "EM"]
    by_k = {line.split()[0]: line for line in lines[2:]}
    assert set(by_k) == {"0", "2"}
    lo, hi = m["per_shots"]["2"]["em_ci"]
    assert by_k["2"].split()[:4] == ["2", "12", "0.500", f"[{lo:.3f},"]
    assert f"{hi:.3f}]" in by_k["2"]
    assert "k=2" not in probe.headline(m) or "table above" in probe.headline(m)
    one = get_probe("qa").metrics(
        [_row(0, i, 1.0) for i in range(4)], PREPARED, RunConfig.from_dict({"probe": "qa", "model": "m", "shots": "0"})
    )
    assert [line.split()[0] for line in probe.relation_text(one).splitlines()[2:]] == ["0"]


def test_counterfactual_records_and_prints_an_interval_per_setting_and_k():
    rng = np.random.default_rng(0)
    rows = [
        _row(k, i, float(rng.random() < 0.4), setting=s)
        for s in (*FIGURE7_SETTINGS, "regular", "counterfactual")
        for k in ((10,) if s in ("regular", "counterfactual") else (10, 15))
        for i in range(16)
    ]
    cfg = RunConfig.from_dict(
        {"probe": "counterfactual", "model": "m", "shots": "10,15", "known_shots": 10, "known_unknown": None}
    )
    probe = get_probe("counterfactual")
    m = probe.metrics(rows, PREPARED, cfg)
    assert m["em_ci"] == m["regular"]["em_ci"]
    for f in m["figure7"]:
        for name in ("em", "f1", "contains"):
            lo, hi = f[f"{name}_ci"]
            assert lo <= f[name] <= hi
    flat = probe.flat_metrics(m)
    cell = m["settings"]["known-shuffle@15"]
    assert flat["em_ci_low/known-shuffle/k15"] == cell["em_ci"][0]
    assert flat["contains_ci_high/known-shuffle/k15"] == cell["contains_ci"][1]
    assert flat["em_ci_low"] == m["em_ci"][0]
    text = probe.relation_text(m)
    f = next(x for x in m["figure7"] if x["setting"] == "unknown-shuffle" and x["shots"] == 15)
    line = next(x for x in text.splitlines() if x.split()[:2] == ["unknown-shuffle", "15"])
    assert f"{f['em']:.3f} [{f['em_ci'][0]:.3f}, {f['em_ci'][1]:.3f}]" in line
    assert f"{f['contains']:.3f} [{f['contains_ci'][0]:.3f}, {f['contains_ci'][1]:.3f}]" in line


def test_report_tables_carry_the_intervals():
    from factprobe.framework.reporting import ReportRun
    from factprobe.probes.qa_reporting import qa_rows

    m = _qa_metrics()
    run = ReportRun(name="qa:m", probe="qa", model="m", label="m", metrics=m)
    rows = qa_rows([run])
    assert [(r["shots"], r["split"]) for r in rows] == [(0, "eval"), (0, "asked"), (2, "asked")]
    assert (rows[2]["em_ci_low"], rows[2]["em_ci_high"]) == tuple(m["per_shots"]["2"]["em_ci"])
    assert rows[0]["contains_ci_high"] == m["contains_ci"][1]
