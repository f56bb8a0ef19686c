"""Multiple-choice builder: option invariants on real LAMA and countryinfo facts, determinism,
dropped relations, and small hand-made cases."""

from __future__ import annotations

from pathlib import Path

import pytest

from factprobe.datasets.trex_mc import (
    SKIP_CORRECT,
    build_mc,
    build_mc_items,
    sample_facts_per_relation,
    small_pool_reason,
)
from factprobe.errors import ConfigError
from factprobe.facts import Fact, FactSet
from factprobe.seeding import stable_seed
from factprobe.sources.countryinfo import load_countryinfo
from factprobe.sources.lama import load_lama
from factprobe.sources.lpaqa import load_lpaqa_train


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
        distractors = folded[: it.gold_index] + folded[it.gold_index + 1 :]
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
    assert build.dropped == {
        "P1412": "P1412: distractor pool has 51 objects; --choices 100 needs 100, the largest supported is 51"
    }
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
    assert build.dropped["P30"] == ("P30: distractor pool has 6 objects; --choices 100 needs 100, the largest supported is 6")
    assert build.pool_sizes["P30"] == 6
    assert "P36" not in build.dropped and "P47" not in build.dropped
    assert_valid(build.items, ci, 100)
    small = build_mc(ci, n_choices=4, seed=0, max_facts_per_relation=30)
    assert "P30" not in small.dropped
    assert_valid(small.items, ci, 4)
    assert build_mc(ci.select(["P30"]), n_choices=4, min_unique_objects=10).dropped == {
        "P30": "P30: distractor pool has 6 objects; min_unique_objects asks for at least 10"
    }


def test_skipped_facts_when_correct_objects_leave_too_few():
    # subject s1 has objects o0..o3 correct: with 6 unique objects only 2 remain for it
    facts = [Fact("r", "s1", f"o{i}", "S1", f"O{i}") for i in range(4)]
    facts += [Fact("r", f"t{i}", f"o{i}", f"T{i}", f"O{i}") for i in range(4, 6)]
    fs = FactSet(facts)
    build = build_mc(fs, n_choices=4)
    assert build.skipped == {"r": 4}
    assert build.skip_reasons == {"r": {SKIP_CORRECT: 4}}
    assert len(build.items) == 2 and "r" not in build.dropped
    assert_valid(build.items, fs, 4)
    # 4 unique objects pass the relation check, but all are correct for the only subject
    lone = build_mc(FactSet(facts[:4]), n_choices=4)
    assert lone.items == [] and lone.dropped == {
        "r": "r: none of its 4 facts has 3 valid distractors after excluding correct objects and substring clashes"
    }


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
        "from factprobe.datasets.trex_mc import build_mc_items; "
        "items, _ = build_mc_items(load_countryinfo(['P36']), n_choices=10, seed=7, max_facts_per_relation=5); "
        "print(json.dumps([it.to_dict() for it in items]))"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    here, _ = build_mc_items(load_countryinfo(["P36"]), n_choices=10, seed=7, max_facts_per_relation=5)
    assert json.loads(out) == [it.to_dict() for it in here]


# --- known facts (training file): pool and correct objects ----------------------------------------


@pytest.fixture(scope="module")
def lama_and_train(real_data_root: Path) -> tuple[FactSet, FactSet]:
    if not (real_data_root / "lpaqa" / "trex_train").is_dir():
        pytest.skip(f"LPAQA training data not found under {real_data_root}")
    rels = ["P530", "P178", "P413"]
    return load_lama(real_data_root / "lama", rels), load_lpaqa_train(real_data_root / "lpaqa" / "trex_train", rels)


def _offers_a_known_object(it, known: FactSet) -> bool:
    right = {label.casefold() for label in known.correct_objects().get((it.relation, it.subject_id), {}).values()}
    return any(o.casefold() in right for i, o in enumerate(it.options) if i != it.gold_index)


@pytest.mark.slow
def test_p530_distractors_never_an_object_the_training_file_lists(lama_and_train):
    test, train = lama_and_train
    p530 = test.select(["P530"])
    before = build_mc(p530, n_choices=100, seed=0)
    assert sum(_offers_a_known_object(it, train) for it in before.items) == 474  # of 651 items
    build = build_mc(p530, n_choices=100, seed=0, known=train)
    assert not any(_offers_a_known_object(it, train) for it in build.items)
    assert_valid(build.items, FactSet([*p530, *train]), 100)
    # the pool grows from 132 to 161 countries, so more items survive despite the extra exclusions;
    # the 217 dropped facts are countries with diplomatic relations to more than 62 pool countries
    assert build.pool_sizes == {"P530": 161} and before.pool_sizes == {"P530": 132}
    assert len(build.items) == 779 and build.skipped == {"P530": 217}
    assert build.skip_reasons == {"P530": {SKIP_CORRECT: 217}} and not build.dropped


def test_pool_spans_test_and_known_facts(lama_and_train):
    test, train = lama_and_train
    lama_only = build_mc(test.select(["P178", "P413"]), n_choices=100, max_facts_per_relation=20)
    assert lama_only.pool_sizes == {"P178": 25, "P413": 14}
    assert lama_only.dropped["P178"] == (
        "P178: distractor pool has 25 objects; --choices 100 needs 100, the largest supported is 25"
    )
    both = build_mc(test.select(["P178", "P413"]), n_choices=100, max_facts_per_relation=20, known=train)
    assert both.pool_sizes == {"P178": 512, "P413": 21}  # 513 labels, "Apple"/"apple" are one entry
    assert "P178" not in both.dropped and len(both.items) == 20
    assert both.dropped == {"P413": "P413: distractor pool has 21 objects; --choices 100 needs 100, the largest supported is 21"}
    assert {it.relation for it in both.items} == {"P178"}


def test_known_facts_excluded_by_id_and_by_label_where_ids_are_missing():
    test = FactSet([Fact("r", "Alpha", "o0", "A", "O0")] + [Fact("r", f"s{i}", f"o{i}", f"S{i}", f"O{i}") for i in range(1, 4)])
    known = FactSet(
        [
            Fact("r", "Alpha", "o1", "A", "O1"),  # same subject id
            Fact("r", "alpha", "o2"),  # no ids: matched by label
            Fact("r", "Alpha", "o4", "A2", "O4"),  # another entity with the same label: not excluded
            Fact("r", "Zeta", "o5", "Z", "O5"),
            Fact("q", "Alpha", "o6", "A", "O6"),  # another relation: not in this pool
        ]
    )
    build = build_mc(test, n_choices=4, seed=0, known=known)
    assert build.pool_sizes == {"r": 6}
    alpha = next(it for it in build.items if it.subject == "Alpha")
    assert set(alpha.correct_objects) == {"o0", "o1", "o2"}
    assert set(alpha.options) == {"o0", "o3", "o4", "o5"}
    assert {it.relation for it in build.items} == {"r"}
    # known facts never become items
    assert {it.subject for it in build.items} == {"Alpha", "s1", "s2", "s3"}


def test_small_pool_reason():
    assert small_pool_reason("P1", 100, 100) is None
    assert small_pool_reason("P1", 99, 100) == (
        "P1: distractor pool has 99 objects; --choices 100 needs 100, the largest supported is 99"
    )
    assert small_pool_reason("P1", 120, 100, 150) == (
        "P1: distractor pool has 120 objects; min_unique_objects asks for at least 150"
    )
