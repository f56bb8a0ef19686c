"""The built-in countryinfo fact set."""

from __future__ import annotations

import pytest

from factprobe.errors import ConfigError
from factprobe.sources.countryinfo import RELATION_IDS, countryinfo_stats, load_countryinfo


@pytest.fixture(scope="module")
def ci():
    return load_countryinfo()


def facts_of(fs, relation, subject):
    return sorted(f.object for f in fs if f.relation == relation and f.subject == subject)


def test_relations_and_templates(ci):
    assert tuple(ci.relations) == RELATION_IDS == ("P36", "P1376", "P30", "P37", "P38", "P47")
    assert ci.relations["P36"].template == "The capital of [X] is [Y] ."
    assert all("[X]" in r.template and "[Y]" in r.template for r in ci.relations.values())
    assert {rid: r.cardinality for rid, r in ci.relations.items() if rid in ("P37", "P38", "P47")} == {
        "P37": "N-M",
        "P38": "N-M",
        "P47": "N-M",
    }
    assert ci.source.startswith("countryinfo:")


def test_known_facts(ci):
    assert facts_of(ci, "P36", "France") == ["Paris"]
    assert facts_of(ci, "P1376", "Paris") == ["France"]
    assert facts_of(ci, "P30", "France") == ["Europe"]
    assert facts_of(ci, "P30", "Brazil") == ["South America"]
    assert facts_of(ci, "P30", "Mexico") == ["North America"]
    assert facts_of(ci, "P30", "Jamaica") == ["North America"]
    assert facts_of(ci, "P37", "France") == ["French"]
    assert facts_of(ci, "P38", "Japan") == ["Yen"]
    assert facts_of(ci, "P47", "France") == [
        "Andorra",
        "Belgium",
        "Germany",
        "Italy",
        "Luxembourg",
        "Monaco",
        "Spain",
        "Switzerland",
    ]
    assert facts_of(ci, "P37", "Serbia") == ["Serbian"]  # countryinfo's "rs" means "sr"
    assert facts_of(ci, "P38", "United States") == ["US Dollar"]  # fund codes USN/USS dropped


def test_ids_keep_every_correct_object(ci):
    correct = ci.correct_objects()
    assert set(correct[("P47", "FRA")]) == {"AND", "BEL", "DEU", "ITA", "LUX", "MCO", "ESP", "CHE"}
    assert set(correct[("P37", "CHE")]) >= {"lang:de", "lang:fr", "lang:it"}
    # one city label, two countries: both are correct for "Kingston"
    assert set(correct[("P1376", "city:Kingston")]) == {"JAM", "NFK"}
    assert all(f.subject_id and f.object_id for f in ci)


def test_clean_and_deterministic(ci):
    assert all(f.subject.strip() == f.subject and f.object.strip() == f.object for f in ci)
    assert len({f.fact_id for f in ci}) == len(ci)
    assert not any("(" in f.object for f in ci if f.relation == "P37")  # "Modern Greek (1453-)" -> "Modern Greek"
    assert load_countryinfo().digest() == ci.digest()
    stats = countryinfo_stats()
    assert stats["countries"] == 249 and stats["facts"] == len(ci)
    assert stats["entry duplicating an ISO code"] >= 1
    assert len(ci.by_relation()["P36"]) > 200


def test_relations_filter(ci):
    fs = load_countryinfo(["P47"])
    assert set(fs.relations) == {"P47"} and len(fs) == len(ci.by_relation()["P47"])
    with pytest.raises(ConfigError, match="unknown relation.*P19.*known: P30, P36"):
        load_countryinfo(["P19"])
