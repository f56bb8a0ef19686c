"""In-context examples: from training facts only, never a test subject."""

from __future__ import annotations

from pathlib import Path

import pytest

from factprobe.datasets.examples import is_self_fact, sample_examples, self_example_share, split_train_test
from factprobe.errors import ConfigError
from factprobe.facts import Fact, FactSet
from factprobe.sources.countryinfo import load_countryinfo
from factprobe.sources.lama import load_lama
from factprobe.sources.lpaqa import load_lpaqa_train


@pytest.fixture(scope="module")
def lama_and_train(real_data_root: Path):
    if not (real_data_root / "lpaqa" / "trex_train").is_dir():
        pytest.skip(f"LPAQA training data not found under {real_data_root}")
    rels = ["P530", "P36", "P1376"]
    return load_lama(real_data_root / "lama", rels), load_lpaqa_train(real_data_root / "lpaqa" / "trex_train", rels)


def test_examples_from_lpaqa_never_hit_test_subjects(lama_and_train):
    test, train = lama_and_train
    test_p530 = test.by_relation()["P530"]
    ex = sample_examples(train, "P530", 50, seed=0, exclude_subjects=test_p530)
    keys = {f.subject_key for f in test_p530}
    labels = {f.subject.casefold() for f in test_p530}
    assert ex and all(f.subject_key not in keys and f.subject.casefold() not in labels for f in ex)
    # P530 train and test share 128 subjects; without exclusion some examples would leak
    leaky = sample_examples(train, "P530", 50, seed=0)
    assert any(f.subject_key in keys for f in leaky)
    assert len(ex) == len({f.subject_key for f in ex}) and all(f.relation == "P530" for f in ex)


def test_examples_deterministic_and_seed_dependent(lama_and_train):
    test, train = lama_and_train
    excl = test.by_relation()["P36"]
    a = sample_examples(train, "P36", 50, seed=0, exclude_subjects=excl)
    assert len(a) == 50
    assert a == sample_examples(train, "P36", 50, seed=0, exclude_subjects=excl)
    assert a != sample_examples(train, "P36", 50, seed=1, exclude_subjects=excl)


def test_fewer_than_n_and_string_exclusions():
    train = FactSet(
        [Fact("r", "Alpha", "x", "A"), Fact("r", "Beta", "y", "B"), Fact("r", "Gamma", "z", "G"), Fact("q", "Delta", "w", "D")]
    )
    got = sample_examples(train, "r", 10, exclude_subjects=["A", "beta"])  # by id and by label
    assert [f.subject for f in got] == ["Gamma"]
    assert sample_examples(train, "missing", 5) == []
    with pytest.raises(ConfigError):
        sample_examples(train, "r", -1)


def test_split_by_subject_is_disjoint_and_deterministic():
    ci = load_countryinfo(["P36", "P47"])
    train, test = split_train_test(ci, train_fraction=0.5, seed=0)
    assert len(train) + len(test) == len(ci)
    for rel in ("P36", "P47"):
        tr = {f.subject_key for f in train if f.relation == rel}
        te = {f.subject_key for f in test if f.relation == rel}
        assert tr and te and not tr & te  # N-M P47: a country's borders all land on one side
    share = len(train.by_relation()["P36"]) / len(ci.by_relation()["P36"])
    assert 0.45 < share < 0.55
    again, _ = split_train_test(ci, train_fraction=0.5, seed=0)
    other, _ = split_train_test(ci, train_fraction=0.5, seed=1)
    assert [f.fact_id for f in again] == [f.fact_id for f in train] != [f.fact_id for f in other]
    n_train, n_test = split_train_test(ci, n_train=20, seed=0)
    assert len(n_train.by_relation()["P36"]) == 20
    ex = sample_examples(n_train, "P36", 50, exclude_subjects=n_test.by_relation()["P36"])
    assert len(ex) == 20


def test_split_keeps_a_test_subject_and_validates():
    tiny = FactSet([Fact("r", "a", "x"), Fact("r", "b", "y")])
    train, test = split_train_test(tiny, n_train=5)
    assert len(train) == 1 and len(test) == 1
    for kwargs in ({}, {"train_fraction": 0.5, "n_train": 3}, {"train_fraction": 1.0}, {"n_train": 0}):
        with pytest.raises(ConfigError):
            split_train_test(tiny, **kwargs)


def test_self_example_share_real_p1376(lama_and_train):
    _, train = lama_and_train
    # 890 LPAQA P1376 facts have equal labels ("Pepingen" / "Pepingen"); "Gießen" / "Giessen" is the 891st
    assert self_example_share(train, "P1376") == pytest.approx(891 / 1000)
    assert self_example_share(train, "P530") == 0.0
    assert self_example_share(train, "missing") == 0.0


def test_drop_self_keeps_self_facts_out_of_examples(lama_and_train):
    test, train = lama_and_train
    excl = test.by_relation()["P1376"]
    kept = sample_examples(train, "P1376", 50, seed=0, exclude_subjects=excl)
    assert sum(map(is_self_fact, kept)) > 25  # the default keeps the file as it is
    clean = sample_examples(train, "P1376", 50, seed=0, exclude_subjects=excl, drop_self=True)
    assert len(clean) == 50 and not any(map(is_self_fact, clean))
    assert clean == sample_examples(train, "P1376", 50, seed=0, exclude_subjects=excl, drop_self=True)


def test_is_self_fact_by_key_or_casefolded_label():
    assert is_self_fact(Fact("r", "Paris", "paris"))
    assert is_self_fact(Fact("r", "Gießen", "Giessen", "Q1", "Q2"))
    assert is_self_fact(Fact("r", "A city", "Another name", "Q1", "Q1"))
    assert not is_self_fact(Fact("r", "Paris", "France", "Q90", "Q142"))
    train = FactSet([Fact("r", "a", "A"), Fact("r", "b", "x"), Fact("r", "c", "C", "Q3", "Q3")])
    assert self_example_share(train, "r") == pytest.approx(2 / 3)
    assert [f.subject for f in sample_examples(train, "r", 5, drop_self=True)] == ["b"]


def test_examples_depend_only_on_the_relations_training_facts():
    base = [Fact("r", f"s{i}", f"o{i}", f"S{i}") for i in range(30)]
    other = [Fact("q", f"s{i}", f"p{i}", f"S{i}") for i in range(30)]
    a = sample_examples(FactSet(base), "r", 10, seed=5, exclude_subjects=["S3"])
    b = sample_examples(FactSet(other[:7] + base + other[7:]), "r", 10, seed=5, exclude_subjects=["S3"])
    assert a == b and len(a) == 10 and all(f.subject_id != "S3" for f in a)
