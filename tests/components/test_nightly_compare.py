"""The nightly comparison at component level: the paired test flags a real drop and not noise, and a
failed model is named, tagged as an alert and fails the step after the report is written."""

import json

import pandas as pd
import pytest

from factprobe_ops.components.steps.nightly_compare import ALERT_FAILED, diff_summaries, paired_change, run_nightly_compare
from factprobe_ops.tracking.context import RunContext


def table(correct: list[bool], relation: str = "P36") -> pd.DataFrame:
    return pd.DataFrame({"fact_id": [f"{relation}:{i}" for i in range(len(correct))], "relation": relation, "correct": correct})


def test_a_large_paired_drop_is_flagged():
    last_night = table([True] * 150 + [False] * 50)  # 75 %
    tonight = table([True] * 100 + [False] * 100)  # 50 %: 50 facts flipped right -> wrong
    out = paired_change(tonight, last_night, max_drop=0.02, alpha=0.05)
    assert out["n"] == 200 and out["diff"] == pytest.approx(-0.25)
    assert out["p_value"] < 1e-10 and out["diff_ci"][1] < 0 and out["drop"] is True


def test_noise_is_not_a_drop():
    """Four facts flip each way: same accuracy, nothing to flag."""
    last = [True] * 100 + [False] * 100
    now = list(last)
    for i in range(4):
        now[i], now[100 + i] = False, True
    out = paired_change(table(now), table(last), max_drop=0.02, alpha=0.05)
    assert out["diff"] == 0.0 and out["drop"] is False and out["p_value"] == pytest.approx(1.0)


def test_a_small_significant_drop_within_the_tolerance_is_not_flagged():
    last = [True] * 2000 + [False] * 2000
    now = [False] * 40 + [True] * 1960 + [False] * 2000  # -1 point, 40 one-way flips: significant, but < 2 points
    out = paired_change(table(now), table(last), max_drop=0.02, alpha=0.05)
    assert out["p_value"] < 0.05 and out["drop"] is False


def test_tables_without_shared_facts_are_not_comparable():
    out = paired_change(table([True] * 3, "P36"), table([True] * 3, "P19"), 0.02, 0.05)
    assert "error" in out and "drop" not in out


def test_a_model_that_disappeared_or_appeared_has_no_delta():
    rows = diff_summaries({"ic-lke:a": {"accuracy": 0.5}}, {"ic-lke:b": {"accuracy": 0.4}})
    assert rows == [
        {"run": "ic-lke:a", "relation": "*", "metric": "accuracy", "previous": None, "current": 0.5, "delta": None},
        {"run": "ic-lke:b", "relation": "*", "metric": "accuracy", "previous": 0.4, "current": None, "delta": None},
    ]


def test_each_probe_is_compared_on_its_own_declared_metrics():
    """The headline metric overall and the relation metric per relation, as the probe declares
    them (qa: em), not `accuracy`; a probe without a relation metric (coherency) has no relation rows."""
    rows = diff_summaries(
        {
            "qa:m": {"em": 0.5, "accuracy": 0.9, "per_relation": {"P36": {"em": 0.25}}},
            "coherency:m": {"coherency": 0.7, "per_relation": {"P36": {"coherency": 0.7}}},
        },
        {
            "qa:m": {"em": 0.25, "accuracy": 0.9, "per_relation": {"P36": {"em": 0.5}}},
            "coherency:m": {"coherency": 0.6, "per_relation": {"P36": {"coherency": 0.6}}},
        },
    )
    assert rows == [
        {
            "run": "coherency:m",
            "relation": "*",
            "metric": "coherency",
            "previous": 0.6,
            "current": 0.7,
            "delta": pytest.approx(0.1),
        },
        {"run": "qa:m", "relation": "*", "metric": "em", "previous": 0.25, "current": 0.5, "delta": 0.25},
        {"run": "qa:m", "relation": "P36", "metric": "em", "previous": 0.5, "current": 0.25, "delta": -0.25},
    ]


def _ok_dir(tmp_path, model):
    d = tmp_path / model
    d.mkdir()
    (d / "run_config.json").write_text(json.dumps({"config": {"probe": "ic-lke", "model": model}, "results_key": "k"}))
    (d / "metrics.json").write_text(json.dumps({"accuracy": 0.5, "per_relation": {"P36": {"accuracy": 0.5}}}))
    return str(d)


def _failed_dir(tmp_path, model):
    d = tmp_path / "failed"
    d.mkdir()
    (d / "failed.json").write_text(json.dumps({"model": model, "probe": "ic-lke", "error": "ModelError: no such model"}))
    return str(d)


def test_a_failed_model_is_named_and_fails_the_step_after_the_report(tmp_path):
    dirs = [_ok_dir(tmp_path, "good"), _failed_dir(tmp_path, "broken")]
    md = tmp_path / "changes.md"
    with pytest.raises(SystemExit, match=r"nightly alert \(failed_models\): ic-lke:broken failed: ModelError: no such model"):
        run_nightly_compare(dirs, str(md), RunContext(tracking_uri="none"))
    text = md.read_text()
    assert f"**ALERT: {ALERT_FAILED}**" in text and "FAILED: ic-lke on broken: ModelError: no such model" in text
    assert "| ic-lke:good |" in text  # the good model is still in the table
    run_nightly_compare(dirs, str(md), RunContext(tracking_uri="none"), fail_on_alert=False)  # reported, not raised


def test_report_skips_failed_folders_and_lists_them(tmp_path):
    from factprobe_ops.components.steps.report import load_failures, load_results

    dirs = [_ok_dir(tmp_path, "good"), _failed_dir(tmp_path, "broken")]
    assert list(load_results(dirs)) == ["ic-lke:good"]
    assert load_failures(dirs) == [{"model": "broken", "probe": "ic-lke", "error": "ModelError: no such model"}]


def _identity(digest="sha256:" + "1" * 64, dtype="float32", inputs=()):
    return {
        "model_revision": "local-sha256:0",
        "data_digest": digest,
        "config_key": "k",
        "numerics": {"dtype": dtype, "device": "cpu", "transformers": "5.0.0"},
        "inputs": [{"name": n, "location": loc, "digest": digest} for n, loc in inputs],
    }


def test_a_previous_night_on_other_data_is_not_paired():
    """issue 28 item 3: same config key, but the data files changed in between: the paired test would
    compare other items (a 'significant drop' that is the data's), so the pair is refused and says why."""
    last_night = table([True] * 150 + [False] * 50)
    tonight = table([True] * 100 + [False] * 100)
    out = paired_change(
        tonight,
        last_night,
        0.02,
        0.05,
        identities=(_identity("sha256:" + "2" * 64, inputs=[("data", "/d/v2")]), _identity(inputs=[("data", "/d/v1")])),
    )
    assert "drop" not in out
    assert out["error"] == (
        "not compared: other data than the previous night (data digest sha256:111111111111 "
        "(previous) vs sha256:222222222222 (tonight); inputs that differ: data /d/v1 (previous) "
        "vs /d/v2 (tonight))"
    )


def test_other_numerics_or_no_identity_are_paired_with_a_note():
    last = table([True] * 150 + [False] * 50)
    now = table([True] * 100 + [False] * 100)
    out = paired_change(now, last, 0.02, 0.05, identities=(_identity(dtype="bfloat16"), _identity()))
    assert out["drop"] is True and out["note"] == (
        "numerics changed (dtype float32 (previous) vs bfloat16 (tonight)): part of the change may come from the numerics"
    )
    out = paired_change(now, last, 0.02, 0.05, identities=(_identity(), None))
    assert out["drop"] is True and out["note"].startswith("the previous run records no measurement identity")
    assert "note" not in paired_change(now, last, 0.02, 0.05, identities=(_identity(), _identity()))
