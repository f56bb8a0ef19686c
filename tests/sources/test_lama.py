"""LAMA / T-REx reader on the real files, plus small broken fixtures for the error paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from factprobe.errors import ConfigError, DataError
from factprobe.sources import load_facts, load_relations_meta
from factprobe.sources.lama import find_lama_layout, load_lama


@pytest.fixture(scope="module")
def lama_dir(real_data_root: Path) -> Path:
    path = real_data_root / "lama"
    if not (path / "relations.jsonl").is_file():
        pytest.skip(f"LAMA data not found at {path}")
    return path


@pytest.fixture(scope="module")
def lama(lama_dir):
    return load_lama(lama_dir)


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def fact(s: str, o: str, si: str | None = None, oi: str | None = None) -> dict:
    rec = {"sub_label": s, "obj_label": o}
    if si:
        rec["sub_uri"] = si
    if oi:
        rec["obj_uri"] = oi
    return rec


def test_real_counts(lama):
    assert len(lama.relations) == 41
    assert len(lama) == 33981
    assert len(lama.by_relation()["P36"]) == 703
    assert lama.source.startswith("lama:")


def test_relation_metadata_from_relations_jsonl(lama):
    p36 = lama.relations["P36"]
    assert p36.label == "capital"
    assert p36.template == "The capital of [X] is [Y] ."
    assert p36.cardinality == "1-1"
    assert lama.relations["P47"].cardinality == "N-M"
    # relations.jsonl lists 46 relations; only those with fact files are in the FactSet
    assert "P166" not in lama.relations


def test_ids_kept_and_nm_pairs_have_several_objects(lama):
    first = lama.by_relation()["P36"][0]
    assert (first.subject, first.object, first.subject_id, first.object_id) == ("Azerbaijan", "Baku", "Q227", "Q9248")
    correct = lama.correct_objects()
    p47 = [objs for (rel, _), objs in correct.items() if rel == "P47"]
    assert max(len(o) for o in p47) >= 5
    assert sum(1 for o in p47 if len(o) > 1) == 174
    # Wikidata ids decide: two different objects may share a label
    p36_labels = {f.object for f in lama.by_relation()["P36"]}
    p36_ids = {f.object_id for f in lama.by_relation()["P36"]}
    assert len(p36_ids) > len(p36_labels)


def test_relations_filter_and_registry(lama_dir):
    fs = load_facts("lama", str(lama_dir), relations=["P47", "P36"])
    assert set(fs.relations) == {"P36", "P47"}
    assert {f.relation for f in fs} == {"P36", "P47"}
    with pytest.raises(ConfigError, match="unknown relation.*P9999"):
        load_facts("lama", str(lama_dir), relations=["P36", "P9999"])


def test_trex_folder_and_single_file_find_relations_in_parent(lama_dir):
    fs = load_lama(lama_dir / "trex", relations=["P36"])
    assert fs.relations["P36"].label == "capital"
    one = load_lama(lama_dir / "trex" / "P1376.jsonl")
    assert set(one.relations) == {"P1376"} and one.relations["P1376"].template == "[X] is the capital of [Y] ."


def test_google_re_only_when_passed_itself(lama_dir, lama):
    assert "place_of_birth" not in lama.relations
    gre = load_lama(lama_dir / "google_re")
    assert set(gre.relations) == {"place_of_birth", "place_of_death"}
    assert gre.facts[0].subject_id.startswith("/m/")
    assert gre.relations["place_of_birth"].template == "[X] was born in [Y] ."


def test_relations_meta(lama_dir):
    meta = load_relations_meta(lama_dir / "relations.jsonl")
    assert len(meta) == 46 and meta["P19"].template == "[X] was born in [Y] ."


def test_fact_file_without_metadata_gets_default_relation(tmp_path):
    write_jsonl(tmp_path / "relations.jsonl", [{"relation": "P1", "label": "one", "template": "[X] a [Y] .", "type": "N-1"}])
    write_jsonl(tmp_path / "facts" / "P1.jsonl", [fact("a", "b", "Q1", "Q2")])
    write_jsonl(tmp_path / "facts" / "P2.jsonl", [fact("a", "b", "Q1", "Q2"), fact("a", "c", "Q1", "Q3")])
    fs = load_lama(tmp_path)
    assert fs.relations["P1"].label == "one"
    assert fs.relations["P2"].label == "P2" and fs.relations["P2"].cardinality == "1-N"


def test_malformed_line_names_file_and_line(tmp_path):
    path = write_jsonl(tmp_path / "P1.jsonl", [fact("a", "b")])
    with path.open("a") as fh:
        fh.write('{"sub_label": "x", "obj_la')  # truncated last line
    with pytest.raises(DataError, match=r"P1\.jsonl:2: malformed JSON"):
        load_lama(tmp_path)


def test_missing_and_blank_fields(tmp_path):
    write_jsonl(tmp_path / "a" / "P1.jsonl", [fact("a", "b"), {"sub_label": "c"}])
    with pytest.raises(DataError, match=r"P1\.jsonl:2: missing field\(s\) obj_label"):
        load_lama(tmp_path / "a")
    write_jsonl(tmp_path / "b" / "P1.jsonl", [fact("a", "b"), fact("  ", "c")])
    with pytest.raises(DataError, match=r"P1\.jsonl:2: empty value for field 'sub_label'"):
        load_lama(tmp_path / "b")


def test_bad_relations_file(tmp_path):
    write_jsonl(tmp_path / "relations.jsonl", [{"relation": "P1", "template": "[X] is", "type": "N-1"}])
    write_jsonl(tmp_path / "P1.jsonl", [fact("a", "b")])
    with pytest.raises(DataError, match=r"relations\.jsonl:1: template .* lacks \[X\] or \[Y\]"):
        load_lama(tmp_path)
    write_jsonl(tmp_path / "relations.jsonl", [{"relation": "P1", "type": "many"}])
    with pytest.raises(DataError, match=r"relations\.jsonl:1: relation P1 has type 'many'"):
        load_lama(tmp_path)


def test_layout_errors(tmp_path):
    with pytest.raises(DataError, match="not found"):
        load_lama(tmp_path / "nope")
    with pytest.raises(DataError, match="no P\\*.jsonl fact files"):
        load_lama(tmp_path)
    write_jsonl(tmp_path / "x" / "P1.jsonl", [fact("a", "b")])
    write_jsonl(tmp_path / "y" / "P1.jsonl", [fact("a", "b")])
    with pytest.raises(DataError, match="several subfolders \\(x, y\\)"):
        find_lama_layout(tmp_path)


def test_repeated_facts_are_dropped(tmp_path):
    write_jsonl(tmp_path / "P1.jsonl", [fact("a", "b", "Q1", "Q2"), fact("a", "b", "Q1", "Q2")])
    assert len(load_lama(tmp_path)) == 1
