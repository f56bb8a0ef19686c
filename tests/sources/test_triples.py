"""Generic triples reader: jsonl / csv / parquet, aliases, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from factprobe.errors import ConfigError, DataError
from factprobe.sources import load_facts
from factprobe.sources.triples import load_triples

ROWS = [
    {"subject": "France", "relation": "capital", "object": "Paris", "subject_id": "FRA", "object_id": "c:Paris"},
    {"subject": "France", "relation": "borders", "object": "Spain", "subject_id": "FRA", "object_id": "ESP"},
    {"subject": "France", "relation": "borders", "object": "Italy", "subject_id": "FRA", "object_id": "ITA"},
    {"subject": "Spain", "relation": "capital", "object": "Madrid", "subject_id": "ESP", "object_id": "c:Madrid"},
]


def write(path: Path, rows: list[dict]) -> Path:
    df = pd.DataFrame(rows)
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif path.suffix == ".csv":
        df.to_csv(path, index=False)
    else:
        df.to_parquet(path, index=False)
    return path


@pytest.mark.parametrize("ext", [".jsonl", ".csv", ".parquet"])
def test_formats_give_equal_facts(tmp_path, ext):
    fs = load_facts("triples", str(write(tmp_path / f"t{ext}", ROWS)))
    assert len(fs) == 4 and fs.source == f"triples:{tmp_path / f't{ext}'}"
    assert fs.relations["borders"].cardinality == "1-N"
    assert fs.correct_objects()[("borders", "FRA")] == {"ESP": "Spain", "ITA": "Italy"}
    reference = load_triples(write(tmp_path / "ref.jsonl", ROWS))
    assert fs.digest() == reference.digest()


def test_lama_aliases_and_optional_ids(tmp_path):
    rows = [
        {"sub_label": "France", "relation": "P36", "obj_label": "Paris", "sub_uri": "Q142", "obj_uri": "Q90"},
        {"subject": "Spain", "relation": "P36", "object": "Madrid"},
    ]
    fs = load_triples(write(tmp_path / "t.jsonl", rows))
    assert (fs.facts[0].subject_id, fs.facts[0].object_id) == ("Q142", "Q90")
    assert fs.facts[1].subject_id is None and fs.facts[1].subject_key == "Spain"
    csv_fs = load_triples(write(tmp_path / "t.csv", [rows[0]]))
    assert csv_fs.facts[0].subject == "France"


def test_folder_relations_filter_and_dedupe(tmp_path):
    write(tmp_path / "a.csv", ROWS[:2])
    write(tmp_path / "b.jsonl", ROWS[1:])
    (tmp_path / "README.md").write_text("ignored")
    fs = load_triples(tmp_path, relations=["borders"])
    assert len(fs) == 2 and set(fs.relations) == {"borders"}
    with pytest.raises(ConfigError, match="unknown relation.*nope.*known: borders, capital"):
        load_triples(tmp_path, relations=["nope"])


def test_missing_columns_name_file_and_columns(tmp_path):
    bad = [{"subject": "a", "object": "b"}]
    with pytest.raises(DataError, match=r"t\.csv: missing column\(s\) relation"):
        load_triples(write(tmp_path / "t.csv", bad))
    with pytest.raises(DataError, match=r"t\.parquet: missing column\(s\) relation"):
        load_triples(write(tmp_path / "t.parquet", bad))
    with pytest.raises(DataError, match=r"t\.jsonl:1: missing field\(s\) relation"):
        load_triples(write(tmp_path / "t.jsonl", bad))


def test_empty_values_name_line_or_row(tmp_path):
    rows = ROWS[:2] + [{"subject": "Peru", "relation": "capital", "object": "", "subject_id": "PER", "object_id": ""}]
    with pytest.raises(DataError, match=r"t\.csv:4: empty value for field 'object'"):
        load_triples(write(tmp_path / "t.csv", rows))
    with pytest.raises(DataError, match=r"t\.jsonl:3: empty value for field 'object'"):
        load_triples(write(tmp_path / "t.jsonl", rows))
    rows[2]["object"] = None
    with pytest.raises(DataError, match=r"t\.parquet: row 3: empty value for field 'object'"):
        load_triples(write(tmp_path / "t.parquet", rows))


def test_truncated_and_unsupported_files(tmp_path):
    path = write(tmp_path / "t.jsonl", ROWS[:1])
    with path.open("a") as fh:
        fh.write('{"subject": "x", "rel')
    with pytest.raises(DataError, match=r"t\.jsonl:2: malformed JSON"):
        load_triples(path)
    (tmp_path / "t.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(DataError, match=r"t\.parquet: not a readable parquet file"):
        load_triples(tmp_path / "t.parquet")
    (tmp_path / "t.tsv").write_text("a\tb\n")
    with pytest.raises(DataError, match=r"unsupported triples format \.tsv"):
        load_triples(tmp_path / "t.tsv")
    with pytest.raises(DataError, match="not found"):
        load_triples(tmp_path / "missing.csv")


def test_numbers_become_text(tmp_path):
    fs = load_triples(write(tmp_path / "t.jsonl", [{"subject": "Ada Lovelace", "relation": "birth_year", "object": 1815}]))
    assert fs.facts[0].object == "1815"
    with pytest.raises(DataError, match=r"t\.jsonl:1: field 'object' must be text"):
        load_triples(write(tmp_path / "t.jsonl", [{"subject": "a", "relation": "r", "object": ["x"]}]))
