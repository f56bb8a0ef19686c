"""Nobel-MC: year candidates 1800-1999 on the real birth years."""

from __future__ import annotations

from pathlib import Path

import pytest

from factprobe.datasets.nobel_mc import SKIP_OUT_OF_RANGE, build_nobel_mc, build_nobel_mc_items, year_candidates
from factprobe.errors import ConfigError
from factprobe.facts import Fact, FactSet
from factprobe.sources.nobel import load_nobel


@pytest.fixture(scope="module")
def nobel(real_data_root: Path) -> FactSet:
    path = real_data_root / "nobel" / "nobel.csv"
    if not path.is_file():
        pytest.skip(f"Nobel data not found at {path}")
    return load_nobel(path)


def test_candidates():
    years = year_candidates()
    assert len(years) == 200 and years[0] == "1800" and years[-1] == "1999"
    with pytest.raises(ConfigError):
        year_candidates(2000, 1999)


def test_full_range_items_on_real_data(nobel):
    build = build_nobel_mc(nobel)
    assert len(build.items) == 976 and build.dropped == {} and build.skipped == {}
    years = tuple(year_candidates())
    for it in build.items:
        assert it.options == years
        assert it.options[it.gold_index] == it.gold and it.options.count(it.gold) == 1
    curie = next(it for it in build.items if it.subject.startswith("Marie Curie"))
    assert curie.gold == "1867" and curie.gold_index == 67


def test_sampled_choices_deterministic(nobel):
    sub = FactSet(nobel.facts[:50], dict(nobel.relations))
    a, dropped = build_nobel_mc_items(sub, n_choices=10, seed=1)
    b, _ = build_nobel_mc_items(sub, n_choices=10, seed=1)
    c, _ = build_nobel_mc_items(sub, n_choices=10, seed=2)
    assert not dropped and a == b and a != c
    for it in a:
        assert len(it.options) == 10 and len(set(it.options)) == 10
        assert it.options[it.gold_index] == it.gold
        assert list(it.options) == sorted(it.options)
        assert all("1800" <= y <= "1999" for y in it.options)


def test_out_of_range_years_dropped_with_count():
    facts = FactSet(
        [
            Fact("birth_year", "Old", "1750", "1"),
            Fact("birth_year", "Young", "2001", "2"),
            Fact("birth_year", "Mid", "1900", "3"),
            Fact("birth_year", "Odd", "circa 1900", "4"),
        ]
    )
    build = build_nobel_mc(facts)
    assert [it.subject for it in build.items] == ["Mid"]
    assert build.skipped == {"birth_year": 3} and build.dropped == {}
    assert build.skip_reasons == {"birth_year": {SKIP_OUT_OF_RANGE: 3}}
    assert build.pool_sizes == {"birth_year": 200}
    gone = build_nobel_mc(FactSet(facts.facts[:2]))
    assert gone.dropped == {"birth_year": "birth_year: none of its 2 facts has a year within 1800-1999"}


def test_bad_n_choices():
    fs = FactSet([Fact("birth_year", "Mid", "1900")])
    for n in (1, 201):
        with pytest.raises(ConfigError, match="n_choices must be between 2 and 200"):
            build_nobel_mc(fs, n_choices=n)
