"""Issue 39 items 1 and 3: the knowledge map on small hand-made runs, every number computed by hand.

Model a, three probes, six facts over two relations (tests/knowledge_maps/runs.py): ic-lke = [1,1,0,0,1,0],
hgp (majority of templates; a tie is wrong) = [1,0,0,0,1,1], qa (eval split only) = [1,1,1,0,0,0].
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats as sps

from factprobe.cli import main
from factprobe.errors import ConfigError, DataError
from factprobe.knowledge_maps import knowledge_map
from factprobe.knowledge_maps.stats import kappa

from .runs import TABLE, rows_of, write_run, write_runs


def t_ci(values):
    v = np.asarray(values, dtype=float)
    h = sps.t.ppf(0.975, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size)
    return v.mean() - h, v.mean() + h


def test_shares_kappa_and_eta_by_hand(tmp_path):
    km = knowledge_map(write_runs(tmp_path / "runs"), tmp_path / "map")
    shares = km.shares.set_index("category")
    # per relation (P1: 4 facts, P2: 2 facts): every 1/4, 0; majority 2/4, 1/2; none 1/4, 0; disputed 2/4, 2/2
    for cat, per_rel, pooled in (
        ("every", [0.25, 0.0], 1 / 6),
        ("majority", [0.5, 0.5], 3 / 6),
        ("none", [0.25, 0.0], 1 / 6),
        ("disputed", [0.5, 1.0], 4 / 6),
    ):
        row = shares.loc[cat]
        assert row["value"] == pytest.approx(np.mean(per_rel)) and row["pooled"] == pytest.approx(pooled), cat
        lo, hi = t_ci(per_rel) if len(set(per_rel)) > 1 else (per_rel[0], per_rel[0])
        assert row["ci_low"] == pytest.approx(max(lo, 0.0)) and row["ci_high"] == pytest.approx(min(hi, 1.0)), cat
        assert row["n_relations"] == 2 and row["n_facts"] == 6
    pairs = km.pairs.set_index(["probe_a", "probe_b"])
    ic_hgp = pairs.loc[("ic-lke", "hgp")]
    # pooled 2x2: both f1,f5; ic only f2; hgp only f6; neither f3,f4 -> po 4/6, pe 1/2, kappa 1/3
    assert (ic_hgp["n_both"], ic_hgp["n_a_only"], ic_hgp["n_b_only"], ic_hgp["n_neither"]) == (2, 1, 1, 2)
    assert ic_hgp["kappa_pooled"] == pytest.approx(1 / 3)
    assert ic_hgp["eta_a_given_b_pooled"] == pytest.approx(2 / 3) and ic_hgp["eta_b_given_a_pooled"] == pytest.approx(2 / 3)
    # per relation: P1 kappa 0.5, eta(ic|hgp) 1/2, eta(hgp|ic) 1; P2 kappa 0, eta(ic|hgp) 1, eta(hgp|ic) 1/2
    assert ic_hgp["kappa"] == pytest.approx(0.25)
    assert ic_hgp["eta_a_given_b"] == pytest.approx(0.75) and ic_hgp["eta_b_given_a"] == pytest.approx(0.75)
    lo, hi = t_ci([0.5, 0.0])
    assert ic_hgp["kappa_ci_low"] == pytest.approx(max(lo, -1)) and ic_hgp["kappa_ci_high"] == pytest.approx(min(hi, 1))
    by_rel = km.pairs_by_relation.set_index(["relation", "probe_a", "probe_b"])
    assert by_rel.loc[("P1", "ic-lke", "hgp"), "kappa"] == pytest.approx(0.5)
    assert by_rel.loc[("P2", "ic-lke", "hgp"), "eta_b_given_a"] == pytest.approx(0.5)
    # ic-lke / qa: both f1,f2; ic only f5; qa only f3; neither f4,f6: pa = pb = 1/2, po 4/6 -> kappa 1/3
    assert pairs.loc[("ic-lke", "qa"), "kappa_pooled"] == pytest.approx(1 / 3)


def test_the_numbers_agree_with_sklearn_and_the_paper_eta_of_metrics(tmp_path):
    """The map's kappa is sklearn's Cohen's kappa, its eta the one `compare` and the cross-model maps use."""
    from sklearn.metrics import cohen_kappa_score

    from factprobe.metrics.comparison import subsumption_by_relation

    km = knowledge_map(write_runs(tmp_path / "runs"), tmp_path / "map")
    v = km.verdicts
    for a, b in (("ic-lke", "hgp"), ("ic-lke", "qa"), ("hgp", "qa")):
        row = km.pairs.set_index(["probe_a", "probe_b"]).loc[(a, b)]
        assert row["kappa_pooled"] == pytest.approx(cohen_kappa_score(v[a], v[b]))
        eta = subsumption_by_relation(v[a].to_numpy(), v[b].to_numpy(), v["relation"].to_numpy())
        assert row["eta_a_given_b_pooled"] == pytest.approx(eta["eta_pooled"])
        assert row["eta_a_given_b"] == pytest.approx(eta["eta_relation_mean"], nan_ok=True)
    assert np.isnan(kappa(np.array([3, 0, 0, 0])))  # both probes right everywhere: expected agreement 1, undefined


def test_disputed_facts_sorted_by_disagreement_then_gold_probability_spread(tmp_path):
    km = knowledge_map(write_runs(tmp_path / "runs"), tmp_path / "map")
    d = km.disputed
    # every disputed fact splits 2/1 or 1/2 (disagreement 2/3); spreads: f6 0.5, f2 0.4, f5 0.1, f3 0.0
    assert list(d["fact_id"]) == ["P2|f6", "P1|f2", "P2|f5", "P1|f3"]
    assert d["disagreement"].to_numpy() == pytest.approx([2 / 3] * 4)
    f2 = d.set_index("fact_id").loc["P1|f2"]
    assert (f2["ic-lke"], f2["hgp"], f2["qa"]) == (True, False, True)
    assert f2["ic-lke:gold_prob"] == pytest.approx(0.9) and f2["hgp:gold_prob"] == pytest.approx(0.5)
    assert np.isnan(f2["qa:gold_prob"])  # qa has no gold probability
    assert km.summary["models"][0]["n_disputed"] == 4


def test_across_models_the_facts_every_model_knows_and_the_sharing_rate(tmp_path):
    b = dict(TABLE)
    b["P2|f5"] = ("P2", True, 0.7, [(True, 0.6)], True)  # model b knows f5 under every probe too
    refs = write_runs(tmp_path / "runs") + write_runs(tmp_path / "runs", "model-b", b)
    km = knowledge_map(refs, tmp_path / "map")
    assert list(km.known_everywhere["fact_id"]) == ["P1|f1"]
    rate = km.sharing.set_index(["model_a", "model_b"])["rate"]
    assert rate[("model-a", "model-b")] == pytest.approx(1.0)  # a's robust {f1}: b knows it
    assert rate[("model-b", "model-a")] == pytest.approx(0.5)  # b's robust {f1, f5}: a knows f1
    assert km.summary["cross_model"]["n_known_everywhere"] == 1


def test_a_fact_missing_from_one_probe_is_counted_apart(tmp_path):
    refs = write_runs(tmp_path / "runs", probes=("ic-lke", "hgp"))
    qa_rows = [r for r in rows_of("qa") if r["fact_id"] != "P1|f4"]
    refs.append(str(write_run(tmp_path / "runs" / "qa-model-a", "qa", "model-a", qa_rows)))
    km = knowledge_map(refs, tmp_path / "map")
    assert km.summary["n_facts"] == 5 and km.summary["n_partial"] == 1
    part = km.partial_facts
    assert part.to_dict("records") == [{"fact_id": "P1|f4", "relation": "P1", "n_runs": 2, "missing_from": "qa:model-a"}]
    runs = km.runs.set_index("probe")
    assert runs.loc["ic-lke", "n_partial"] == 1 and runs.loc["qa", "n_partial"] == 0
    assert km.shares.set_index("category").loc["none", "pooled"] == 0.0  # f4 (known under none) is not in the shares
    assert "P1|f4" not in set(km.verdicts["fact_id"])


def test_runs_of_one_probe_on_other_data_are_refused(tmp_path, capsys):
    refs = write_runs(tmp_path / "runs") + write_runs(tmp_path / "runs", "model-b", probes=("hgp", "qa"))
    other = write_run(tmp_path / "runs" / "ic-lke-model-b", "ic-lke", "model-b", rows_of("ic-lke"), digest="sha256:" + "9" * 64)
    rc = main(["map", *refs, str(other), "--out", str(tmp_path / "map")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0, err
    assert err.startswith("error: ic-lke runs on different data: ic-lke:model-a") and "sha256:999999999999" in err
    assert not (tmp_path / "map").exists()


def test_two_runs_of_one_probe_on_one_model_are_refused_naming_both(tmp_path):
    refs = write_runs(tmp_path / "runs")
    again = write_run(tmp_path / "again", "hgp", "model-a", rows_of("hgp"))
    with pytest.raises(ConfigError, match=f"two runs of hgp on model-a: {refs[1]} and {again}"):
        knowledge_map([*refs, str(again)], tmp_path / "map")


def test_runs_of_one_model_on_other_weights_and_models_with_other_probes_are_refused(tmp_path):
    refs = write_runs(tmp_path / "runs", probes=("ic-lke", "hgp"))
    qa = write_run(tmp_path / "runs" / "qa", "qa", "model-a", rows_of("qa"), revision="local-sha256:" + "b" * 64)
    with pytest.raises(DataError, match="runs of model-a read different weights"):
        knowledge_map([*refs, str(qa)], tmp_path / "m1")
    other = write_runs(tmp_path / "runs", "model-b", probes=("ic-lke",))
    with pytest.raises(ConfigError, match="model-a was probed by hgp, ic-lke and model-b by ic-lke"):
        knowledge_map([*refs, *other], tmp_path / "m2")


def test_a_map_is_reused_for_the_same_inputs_and_refused_for_others(tmp_path, capsys):
    refs = write_runs(tmp_path / "runs")
    out = tmp_path / "map"
    assert main(["map", *refs, "--out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    inputs = json.loads((out / "map_inputs.json").read_text())
    assert {r["probe"] for r in inputs["runs"]} == {"ic-lke", "hgp", "qa"}
    assert all(r["data_digest"] and r["model_revision"] and r["table_sha256"] for r in inputs["runs"])
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    assert main(["map", *reversed(refs), "--out", str(out)]) == 0  # the same inputs, in another order
    assert "already held this map (same inputs): reused" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == before
    rows = rows_of("qa")
    rows[0]["correct"] = not rows[0]["correct"]
    write_run(tmp_path / "runs" / "qa-model-a", "qa", "model-a", rows)  # the qa run changed on disk
    assert main(["map", *refs, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "holds a knowledge map of other inputs (qa:model-a differs in table_sha256)" in err and "use another --out" in err
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == before


def test_a_probe_the_map_cannot_read_is_refused_and_a_folder_of_runs_keeps_the_readable_ones(tmp_path, capsys):
    refs = write_runs(tmp_path / "study" / "model-a")
    mlm = write_run(
        tmp_path / "study" / "model-a" / "belief-mlm", "belief-mlm", "model-a", rows_of("ic-lke"), digest="sha256:" + "4" * 64
    )
    with pytest.raises(ConfigError, match="is a belief-mlm run"):
        knowledge_map([*refs, str(mlm)], tmp_path / "m1")
    (tmp_path / "study" / "study_config.json").write_text("{}")
    km = knowledge_map([str(tmp_path / "study")], tmp_path / "m2")
    assert km.probes == ["ic-lke", "hgp", "qa"]
    assert any("left out belief-mlm:model-a" in n for n in km.notes)


def test_an_mlflow_run_id_goes_through_the_run_reference_resolver(tmp_path, monkeypatch):
    """A bare run id is `runs:/<id>`, resolved by the installed resolver plug-in (`factprobe.refs`)."""
    from factprobe import refs as refs_mod

    folders = write_runs(tmp_path / "runs")
    ids = {f"{i:032x}": f for i, f in enumerate(folders, start=1)}
    monkeypatch.setattr(refs_mod, "_RESOLVERS", {"runs:/": lambda ref: tmp_path / ids[ref[len("runs:/") :]]})
    monkeypatch.setattr(refs_mod, "_loaded", True)
    km = knowledge_map(list(ids), tmp_path / "map")
    assert km.summary["n_facts"] == 6 and sorted(r["ref"] for r in km.summary["runs"]) == sorted(ids)
