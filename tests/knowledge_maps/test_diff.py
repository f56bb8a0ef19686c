"""Issue 39 item 2: `factprobe map --diff A B` on two hand-made nights of one model."""

from __future__ import annotations

import json

import pytest

from factprobe.cli import main
from factprobe.errors import ConfigError, DataError
from factprobe.knowledge_maps import knowledge_map

from .runs import TABLE, write_runs

NIGHT2 = {
    "P1|f1": ("P1", False, 0.1, [(False, 0.1)], False),  # every probe -> none: a robust loss
    "P1|f2": ("P1", True, 0.9, [(True, 0.8), (True, 0.8)], True),  # hgp flips to right: a gain one probe sees; now robust
    "P1|f3": ("P1", True, 0.9, [(False, 0.1)], True),  # ic-lke flips to right: a gain one probe sees
    "P1|f4": ("P1", True, 0.9, [(True, 0.9)], True),  # none -> every probe: a robust gain
    "P2|f5": ("P2", False, 0.2, [(True, 0.6)], True),  # ic-lke to wrong, qa to right: mixed
    "P2|f6": TABLE["P2|f6"],  # unchanged
    "P2|f7": ("P2", True, 0.9, [(True, 0.9)], True),  # a fact of the second night only
}


@pytest.fixture
def nights(tmp_path):
    one = knowledge_map(write_runs(tmp_path / "night1"), tmp_path / "map1")
    two = knowledge_map(write_runs(tmp_path / "night2", table=NIGHT2), tmp_path / "map2")
    return one, two


def test_the_diff_of_two_nights_by_hand(nights, tmp_path, capsys):
    one, two = nights
    assert main(["map", "--diff", str(one.folder), str(two.folder), "--out", str(tmp_path / "diff")]) == 0
    out = capsys.readouterr().out
    assert "robust gain (every probe flips to right): 1; gain some probes see: 2 (2 seen by one probe only)" in out
    assert (
        "robust loss (every probe flips to wrong): 1; loss some probes see: 0 (0 seen by one probe only); mixed: 1; unchanged: 1"
        in out
    )
    s = json.loads((tmp_path / "diff" / "diff.json").read_text())
    assert s["changes"] == {"robust gain": 1, "gain": 2, "robust loss": 1, "loss": 0, "mixed": 1, "unchanged": 1}
    assert (s["n_facts"], s["only_before"], s["only_after"]) == (6, 0, 1)
    assert (s["became_robust"], s["no_longer_robust"]) == (2, 1)  # f2, f4 became robust; f1 no longer
    per = {r["probe"]: r for r in s["per_probe"]}
    assert (per["ic-lke"]["gained"], per["ic-lke"]["lost"]) == (2, 2)  # f3, f4 gained; f1, f5 lost
    assert (per["hgp"]["gained"], per["hgp"]["lost"]) == (2, 1)  # f2, f4; f1
    assert (per["qa"]["gained"], per["qa"]["lost"]) == (2, 1)  # f4, f5; f1
    assert per["every probe (robust)"]["before"] == pytest.approx(1 / 6) and per["every probe (robust)"][
        "after"
    ] == pytest.approx(2 / 6)
    import pandas as pd

    facts = pd.read_parquet(tmp_path / "diff" / "tables" / "diff_facts.parquet").set_index("fact_id")
    assert facts["change"].to_dict() == {
        "P1|f2": "gain",
        "P1|f3": "gain",
        "P2|f5": "mixed",
        "P1|f4": "robust gain",
        "P1|f1": "robust loss",
    }
    assert (facts.loc["P2|f5", "ic-lke:before"], facts.loc["P2|f5", "ic-lke:after"]) == (True, False)
    only = pd.read_parquet(tmp_path / "diff" / "tables" / "diff_only_in_one.parquet")
    assert only.to_dict("records") == [{"fact_id": "P2|f7", "relation": "P2", "only_in": "after"}]


def test_a_diff_of_maps_of_other_probes_or_other_data_is_refused(nights, tmp_path):
    one, _ = nights
    fewer = knowledge_map(write_runs(tmp_path / "n3", probes=("ic-lke", "hgp")), tmp_path / "map3")
    with pytest.raises(ConfigError, match="a diff compares the same probes"):
        one.diff(fewer)
    from .runs import rows_of, write_run

    refs = write_runs(tmp_path / "n4", probes=("ic-lke", "hgp"))
    refs.append(str(write_run(tmp_path / "n4" / "qa", "qa", "model-a", rows_of("qa"), digest="sha256:" + "8" * 64)))
    other = knowledge_map(refs, tmp_path / "map4")
    with pytest.raises(DataError, match="qa read other data in the two maps"):
        one.diff(other)


def test_a_map_of_several_models_needs_the_model_named(nights, tmp_path):
    one, _ = nights
    both = knowledge_map(write_runs(tmp_path / "a") + write_runs(tmp_path / "b", "model-b", table=NIGHT2), tmp_path / "both")
    with pytest.raises(ConfigError, match="maps 2 models .*--model-b"):
        one.diff(both)
    d = one.diff(both, model_b="model-b")
    assert d.summary["changes"]["robust gain"] == 1 and d.summary["after"]["model"] == "model-b"
