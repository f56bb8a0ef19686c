"""Issue 39: the map joins runs that real `factprobe probe` calls made (a TINY RANDOM model: a test of the
joining and the records, never a result). Each probe's data digest and the model revision come from
the runs' own metrics.json; a capped coherency run covers the same facts as the others (the cap draws
over the test facts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from factprobe.cli import main
from factprobe.knowledge_maps import knowledge_map


def _probe(name: str, model: Path, out: Path) -> Path:
    argv = ["probe", name, "--model", str(model), "--relations", "P36", "--max-facts-per-relation", "3"]
    assert main([*argv, "--device", "cpu", "--no-progress", "--no-track", "--out", str(out)]) == 0
    return out


def _facts(run: Path) -> set[str]:
    return {json.loads(line)["fact_id"] for line in (run / "results.jsonl").read_text().splitlines() if line.strip()}


@pytest.mark.slow  # four probe runs of a tiny RANDOM model: ~40 s on 2 cores
def test_a_map_of_real_probe_runs_records_what_each_probe_read(tmp_path, tiny_model_path):
    model = tiny_model_path("gpt2")
    runs = [_probe(p, model, tmp_path / p) for p in ("ic-lke", "hgp", "qa")]
    km = knowledge_map([str(r) for r in runs], tmp_path / "map")
    shared = set.intersection(*(_facts(r) for r in runs))
    assert km.summary["n_facts"] == len(shared) == 3 and km.summary["n_partial"] == 0
    assert set(km.verdicts["fact_id"]) == shared
    for run in runs:
        metrics = json.loads((run / "metrics.json").read_text())
        row = km.runs.set_index("probe").loc[metrics["probe"]]
        assert row["data_digest"] == metrics["identity"]["data_digest"]
        assert row["model_revision"] == metrics["model_revision"]
    recorded = {r["probe"]: r for r in json.loads((tmp_path / "map" / "map_inputs.json").read_text())["runs"]}
    assert (
        recorded["hgp"]["verdict"] == "correct, majority of rows"
        and recorded["qa"]["verdict"] == "correct, majority of rows where split=eval"
    )
    coherency = _probe("coherency", model, tmp_path / "coherency")
    every = [*runs, coherency]
    common = set.intersection(*(_facts(r) for r in every))
    union = set.union(*(_facts(r) for r in every))
    # a capped coherency run draws over the test facts (factprobe.datasets.cap.SOURCE_DRAW): it asks about
    # the facts IC-LKE, HGP and QA ask about (P36's subjects are distinct, so every drawn fact has an item)
    assert _facts(coherency) == set.intersection(*(_facts(r) for r in runs)) == common and len(common) == 3
    km4 = knowledge_map([str(r) for r in every], tmp_path / "map4")
    assert km4.summary["n_facts"] == len(common) and km4.summary["n_partial"] == len(union - common) == 0
