"""Multiple-choice builder: option invariants on real LAMA and countryinfo facts, determinism,
dropped relations, and small hand-made cases."""
from __future__ import annotations

from pathlib import Path

import pytest

from factprobe.errors import ConfigError
from factprobe.facts import Fact, FactSet
from factprobe.sources.countryinfo import load_countryinfo
from factprobe.sources.lama import load_lama
from factprobe.build.trex_mc import build_mc, build_mc_items, sample_facts_per_relation, stable_seed


@pytest.fixture(scope="module")
def lama(real_data_root: Path) -> FactSet:
    path = real_data_root / "lama"
    if not (path / "trex").is_dir():
        pytest.skip(f"LAMA data not found at {path}")
    return load_lama(path, relations=["P36", "P47", "P1412", "P530", "P19"])


def assert_valid(items, facts: FactSet, n_choices: int) -> None:
    correct = facts.correct_objects()
    for it in items:
        assert len(it.options) == n_choices
        assert it.options[it.gold_index] == it.gold
        folded = [o.casefold() for o in it.options]
        assert folded.count(it.gold.casefold()) == 1
        assert all(o.strip() for o in it.options)
        right = {label.casefold() for label in correct[(it.relation, it.subject_id or it.subject)].values()}
        assert right == {c.casefold() for c in it.correct_objects}
        distractors = folded[: it.gold_index] + folded[it.gold_index + 1:]
        assert not right & set(distractors), (it.subject, right & set(distractors))
        for i, a in enumerate(folded):
            for j, b in enumerate(folded):
                assert i == j or a not in b, (it.relation, it.subject, a, b)


def test_real_lama_items_are_valid(lama):
    build = build_mc(lama, n_choices=100, seed=0, max_facts_per_relation=40)
    assert_valid(build.items, lama, 100)
    by_rel = {}
    for it in build.items:
        by_rel.setdefault(it.relation, []).append(it)
    assert {rel: len(v) for rel, v in by_rel.items() if rel != "P530"} == {"P36": 40, "P47": 40, "P19": 40}
    assert build.dropped == {"P1412": "P1412: 51 unique objects < 100 choices"}
    # N-M: a P47 subject with several neighbours never sees another neighbour as a distractor
    multi = [it for it in by_rel["P47"] if len(it.correct_objects) > 1]
    assert multi


def test_gold_positions_spread(lama):
    items, _ = build_mc_items(lama.select(["P19"]), n_choices=100, seed=0, max_facts_per_relation=100)
    positions = {it.gold_index for it in items}
    assert len(positions) > 50


def test_deterministic_under_seed_and_different_across_seeds(lama):
    sub = lama.select(["P36"])
    a, _ = build_mc_items(sub, 100, seed=3, max_facts_per_relation=20)
    b, _ = build_mc_items(sub, 100, seed=3, max_facts_per_relation=20)
    c, _ = build_mc_items(sub, 100, seed=4, max_facts_per_relation=20)
    assert [it.to_dict() for it in a] == [it.to_dict() for it in b]
    assert [it.to_dict() for it in a] != [it.to_dict() for it in c]
    assert stable_seed(0, "P36") == stable_seed(0, "P36") != stable_seed(1, "P36")


def test_item_does_not_depend_on_other_facts(lama):
    sub = lama.select(["P36"])
    full = {it.fact_id: it for it in build_mc_items(sub, 100, seed=0)[0]}
    part = build_mc_items(sub, 100, seed=0, max_facts_per_relation=5)[0]
    assert all(full[it.fact_id] == it for it in part)


def test_countryinfo_dropped_and_kept():
    ci = load_countryinfo()
    build = build_mc(ci, n_choices=100, seed=0, max_facts_per_relation=30)
    assert build.dropped["P30"] == "P30: 6 unique objects < 100 choices"
    assert "P36" not in build.dropped and "P47" not in build.dropped
    assert_valid(build.items, ci, 100)
    small = build_mc(ci, n_choices=4, seed=0, max_facts_per_relation=30)
    assert "P30" not in small.dropped
    assert_valid(small.items, ci, 4)
    assert build_mc(ci.select(["P30"]), n_choices=4, min_unique_objects=10).dropped == {
        "P30": "P30: 6 unique objects < min_unique_objects 10"}


def test_skipped_facts_when_correct_objects_leave_too_few():
    # subject s1 has objects o0..o3 correct: with 6 unique objects only 2 remain for it
    facts = [Fact("r", "s1", f"o{i}", "S1", f"O{i}") for i in range(4)]
    facts += [Fact("r", f"t{i}", f"o{i}", f"T{i}", f"O{i}") for i in range(4, 6)]
    fs = FactSet(facts)
    build = build_mc(fs, n_choices=4)
    assert build.skipped == {"r": 4}
    assert len(build.items) == 2 and "r" not in build.dropped
    assert_valid(build.items, fs, 4)
    # 4 unique objects pass the relation check, but all are correct for the only subject
    lone = build_mc(FactSet(facts[:4]), n_choices=4)
    assert lone.items == [] and lone.dropped == {
        "r": "r: none of its 4 facts has 3 valid distractors after excluding correct objects and substring clashes"}


def test_substring_and_case_clashes_are_resampled():
    objs = ["York", "New York", "new york", "Paris", "Rome", "Oslo", "Lima", "Bern", "PARIS"]
    facts = [Fact("r", f"s{i}", o, f"S{i}", None) for i, o in enumerate(objs)]
    fs = FactSet(facts)
    for seed in range(20):
        items, dropped = build_mc_items(fs, n_choices=5, seed=seed)
        assert not dropped
        assert_valid(items, fs, 5)
        york = next(it for it in items if it.gold == "York")
        assert not any("york" in o.casefold() for i, o in enumerate(york.options) if i != york.gold_index)


def test_sample_facts_per_relation_is_deterministic(lama):
    a = sample_facts_per_relation(lama, 10, seed=1)
    b = sample_facts_per_relation(lama, 10, seed=1)
    c = sample_facts_per_relation(lama, 10, seed=2)
    assert [f.fact_id for f in a] == [f.fact_id for f in b] != [f.fact_id for f in c]
    assert all(len(v) == 10 for v in a.by_relation().values())
    assert sample_facts_per_relation(lama, None) is lama


def test_bad_arguments():
    fs = FactSet([Fact("r", "a", "b")])
    with pytest.raises(ConfigError, match="n_choices must be >= 2"):
        build_mc(fs, n_choices=1)
    with pytest.raises(ConfigError, match="min_unique_objects"):
        build_mc(fs, n_choices=10, min_unique_objects=5)
    with pytest.raises(ConfigError, match="max_facts_per_relation"):
        build_mc(fs, n_choices=2, max_facts_per_relation=0)


def test_same_items_in_another_process_with_another_hash_seed():
    import json
    import os
    import subprocess
    import sys

    code = (
        "import json; from factprobe.sources.countryinfo import load_countryinfo; "
        "from factprobe.build.trex_mc import build_mc_items; "
        "items, _ = build_mc_items(load_countryinfo(['P36']), n_choices=10, seed=7, max_facts_per_relation=5); "
        "print(json.dumps([it.to_dict() for it in items]))"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    here, _ = build_mc_items(load_countryinfo(["P36"]), n_choices=10, seed=7, max_facts_per_relation=5)
    assert json.loads(out) == [it.to_dict() for it in here]
