"""`factprobe compare` pairs runs of different probes over the same facts (issue 9, item 7):
the fact id is the same across probes; a prompt baseline's per-template rows are reduced to one
verdict per fact (majority by default) or paired per template when both runs have templates."""

import json

import pandas as pd
import pytest

from factprobe.cli import main
from factprobe.metrics.comparison import align_templates, collapse_templates, compare_runs


def _write(folder, rows):
    folder.mkdir()
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


IC = [  # one row per fact, as ic-lke writes
    {"fact_id": "P36|Q1|Q10", "relation": "P36", "correct": True},
    {"fact_id": "P36|Q2|Q20", "relation": "P36", "correct": True},
    {"fact_id": "P36|Q3|Q30", "relation": "P36", "correct": False},
]
HGP = [  # one row per (fact, template), as hgp writes
    {"fact_id": "P36|Q1|Q10", "relation": "P36", "template": "t1", "correct": True},
    {"fact_id": "P36|Q1|Q10", "relation": "P36", "template": "t2", "correct": True},
    {"fact_id": "P36|Q1|Q10", "relation": "P36", "template": "t3", "correct": False},  # 2/3 -> right
    {"fact_id": "P36|Q2|Q20", "relation": "P36", "template": "t1", "correct": True},
    {"fact_id": "P36|Q2|Q20", "relation": "P36", "template": "t2", "correct": False},  # 1/2: a tie -> wrong
    {"fact_id": "P36|Q3|Q30", "relation": "P36", "template": "t1", "correct": False},
    {"fact_id": "P36|Q3|Q30", "relation": "P36", "template": "t2", "correct": True},
    {"fact_id": "P36|Q3|Q30", "relation": "P36", "template": "t3", "correct": False},  # 1/3 -> wrong
]


def test_majority_any_all_by_hand():
    df = pd.DataFrame(HGP)
    maj = collapse_templates(df).set_index("fact_id")
    assert maj["correct"].to_dict() == {"P36|Q1|Q10": True, "P36|Q2|Q20": False, "P36|Q3|Q30": False}
    assert maj["n_templates"].tolist() == [3, 2, 3]
    assert maj.loc["P36|Q1|Q10", "template_accuracy"] == pytest.approx(2 / 3)
    assert collapse_templates(df, "any")["correct"].tolist() == [True, True, True]
    assert collapse_templates(df, "all")["correct"].tolist() == [False, False, False]
    with pytest.raises(ValueError, match="majority"):
        collapse_templates(df, "mean")


def test_ic_lke_against_hgp_pairs_every_fact():
    a, b, note = align_templates(pd.DataFrame(IC), pd.DataFrame(HGP))
    assert "run b" in note and "majority" in note
    res = compare_runs(a, b, n_boot=200)
    assert res["n_joined"] == 3 and res["n_only_a"] == 0 and res["n_only_b"] == 0
    assert res["acc_a"] == pytest.approx(2 / 3) and res["acc_b"] == pytest.approx(1 / 3)
    # either order works
    a2, b2, _ = align_templates(pd.DataFrame(HGP), pd.DataFrame(IC))
    assert compare_runs(a2, b2, n_boot=200)["n_joined"] == 3


def test_two_template_runs_pair_per_template():
    mmp = [dict(r, correct=not r["correct"]) for r in HGP]
    a, b, note = align_templates(pd.DataFrame(HGP), pd.DataFrame(mmp))
    assert "per template" in note
    assert compare_runs(a, b, n_boot=200)["n_joined"] == len(HGP)


def test_compare_cli_ic_lke_vs_hgp_folders(tmp_path, capsys):
    ic, hgp = _write(tmp_path / "ic", IC), _write(tmp_path / "hgp", HGP)
    assert main(["compare", str(ic), str(hgp), "--json", "--n-boot", "100"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["n_joined"] == 3 and "majority" in res["templates"]
    assert main(["compare", str(ic), str(hgp), "--templates", "any", "--n-boot", "100"]) == 0
    out = capsys.readouterr().out
    assert "facts joined: 3" in out and "'any' rule" in out


def test_regress_probes_an_adapter_candidate_on_the_given_base_model(tmp_path, monkeypatch):
    """`factprobe regress --base-model B` probes the candidate with the baseline's configuration and
    base model B (without it: the base its adapter_config.json names, i.e. base_model unset)."""
    import argparse
    import json as _json

    from factprobe.framework import runner
    from factprobe_ops.tracking.probe_logging import CONFIG_PARAM
    from factprobe_ops.tracking.regress import _probe_candidate

    seen = []

    def fake_run_probe(cfg, out, on_start=None, prepared=None):
        seen.append(cfg)
        if on_start:
            on_start()
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.jsonl").write_text(_json.dumps({"fact_id": "P36:1", "relation": "P36", "correct": True}) + "\n")

    monkeypatch.setattr(runner, "run_probe", fake_run_probe)
    baseline = {CONFIG_PARAM: _json.dumps({"probe": "ic-lke", "model": "smollm2-135m-instruct", "source": "countryinfo"})}
    for base_model, expected in (("gemma-3-270m", "gemma-3-270m"), (None, None)):
        args = argparse.Namespace(tracking_uri=None, no_track=True, base_model=base_model)
        df = _probe_candidate(str(tmp_path / "adapter"), baseline, tmp_path / f"out-{base_model}", args)
        assert list(df["fact_id"]) == ["P36:1"]
        assert seen[-1].base.model == str(tmp_path / "adapter") and seen[-1].base.base_model == expected
        assert seen[-1].base.source == "countryinfo"
