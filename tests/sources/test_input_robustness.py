"""Readers facing imperfect files: bytes that are not UTF-8, unknown columns, empty relation
files, implausible Nobel years. Each problem ends in one clear line naming the file."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from factprobe.errors import DataError
from factprobe.sources import load_facts
from factprobe.sources.lama import load_lama, load_relations_meta
from factprobe.sources.lpaqa import load_lpaqa_train, load_prompts
from factprobe.sources.nobel import read_nobel
from factprobe.sources.triples import load_triples

# Latin-1 "é" (0xe9) followed by ASCII is not UTF-8; so is a lone 0xff.
LATIN1_NAME = "Ren\xe9 Descartes".encode("latin-1")


def _not_utf8(path: Path, offset: int, line: int) -> str:
    return re.escape(f"{path}: not UTF-8 text: byte 0x") + r"[0-9a-f]{2}" + re.escape(f" at offset {offset} (line {line})")


# ---------------------------------------------------------------------------------------------
# non-UTF-8 bytes


def test_triples_csv_with_latin1_bytes(tmp_path):
    good = b"subject,relation,object\nParis,P1376,France\n"
    path = tmp_path / "t.csv"
    path.write_bytes(good + LATIN1_NAME + b",P19,La Haye\n")
    offset = len(good) + LATIN1_NAME.index(b"\xe9")
    with pytest.raises(DataError, match=_not_utf8(path, offset, 3)) as e:
        load_triples(path)
    assert "0xe9" in str(e.value) and "\n" not in str(e.value)


def test_triples_jsonl_with_a_stray_byte(tmp_path):
    lines = [json.dumps({"subject": "Paris", "relation": "P1376", "object": "France"}).encode()] * 3
    bad = b'{"subject": "Bad\xff", "relation": "P1376", "object": "X"}'
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n".join(lines + [bad]) + b"\n")
    offset = sum(len(line) + 1 for line in lines) + bad.index(b"\xff")
    with pytest.raises(DataError, match=_not_utf8(path, offset, 4)):
        load_triples(path)


def test_triples_jsonl_error_far_into_a_large_file(tmp_path):
    """The offset is exact across the 1 MiB chunks the scan reads, even when a multi-byte
    character straddles a chunk boundary."""
    line = json.dumps({"subject": "Zürich", "relation": "P17", "object": "Schweiz"}, ensure_ascii=False).encode() + b"\n"
    n = (3 << 20) // len(line) + 1
    path = tmp_path / "big.jsonl"
    head = line * n
    path.write_bytes(head + b'{"subject": "x\xc3(", "relation": "P17", "object": "y"}\n')
    with pytest.raises(DataError, match=_not_utf8(path, len(head) + 14, n + 1)):
        load_triples(path)


def test_nobel_csv_with_latin1_bytes(tmp_path):
    head = b"id,laureate_type,full_name,birth_date\n1,Individual,Marie Curie,1867-11-07\n"
    path = tmp_path / "nobel.csv"
    path.write_bytes(head + b"2,Individual," + LATIN1_NAME + b",1596-03-31\n")
    with pytest.raises(DataError, match=_not_utf8(path, len(head) + len(b"2,Individual,Ren"), 3)):
        read_nobel(path)


def test_lama_fact_and_relation_files_with_bad_bytes(tmp_path):
    relations = b'{"relation": "P36", "label": "capit\xe0l"}\n'
    (tmp_path / "relations.jsonl").write_bytes(relations)
    (tmp_path / "P36.jsonl").write_text(json.dumps({"sub_label": "France", "obj_label": "Paris"}) + "\n")
    with pytest.raises(DataError, match=_not_utf8(tmp_path / "relations.jsonl", relations.index(b"\xe0"), 1)):
        load_relations_meta(tmp_path / "relations.jsonl")
    (tmp_path / "relations.jsonl").write_text('{"relation": "P36"}\n')
    facts = b'{"sub_label": "Germany", "obj_label": "Berlin"}\n{"sub_label": "France", "obj_label": "Par\xefs"}\n'
    (tmp_path / "P36.jsonl").write_bytes(facts)
    with pytest.raises(DataError, match=_not_utf8(tmp_path / "P36.jsonl", facts.index(b"\xef"), 2)):
        load_lama(tmp_path)


def test_lpaqa_manual_prompts_txt_with_bad_bytes(tmp_path):
    folder = tmp_path / "prompts" / "manual_paraphrase"
    folder.mkdir(parents=True)
    text = b"The capital of [X] is [Y] .\n[X] capit\xe1l [Y] .\n"
    (folder / "P36.txt").write_bytes(text)
    with pytest.raises(DataError, match=_not_utf8(folder / "P36.txt", text.index(b"\xe1"), 2)):
        load_prompts(tmp_path / "prompts", "P36", "manual_paraphrase")


def test_tsv_in_windows_1252_read_through_the_registry_names_the_byte(tmp_path):
    """A tab-separated export in Windows-1252 (curly quotes 0x93/0x94) given as a csv: one
    DataError naming the first bad byte (the text layer decodes ahead, before the header is
    parsed), never a UnicodeDecodeError traceback."""
    path = tmp_path / "facts.csv"
    head = b"subject\trelation\tobject\n"
    path.write_bytes(head + b"\x93quoted\x94\tP1\tx\n")
    with pytest.raises(DataError, match=_not_utf8(path, len(head), 2)) as e:
        load_facts("triples", str(path))
    assert "0x93" in str(e.value)


# ---------------------------------------------------------------------------------------------
# unknown columns


def test_unknown_triples_columns_are_named_once(tmp_path, caplog):
    path = tmp_path / "t.csv"
    path.write_text("subject,relation,object,confidence,sourse\n" + "Paris,P1376,France,0.9,x\n" * 3)
    with caplog.at_level(logging.WARNING, logger="factprobe.sources"):
        fs = load_triples(path)
    assert len(fs) == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].startswith(f"{path}: ignoring unknown column(s) 'confidence', 'sourse'")


def test_unknown_triples_fields_in_jsonl_and_parquet(tmp_path, caplog):
    import pandas as pd

    jl = tmp_path / "a.jsonl"
    jl.write_text("\n".join(json.dumps({"subject": f"s{i}", "relation": "P1", "object": "o", "note": i}) for i in range(3)))
    pq = tmp_path / "b.parquet"
    pd.DataFrame({"sub_label": ["x"], "relation": ["P1"], "obj_label": ["y"], "extra": [1]}).to_parquet(pq)
    with caplog.at_level(logging.WARNING, logger="factprobe.sources"):
        load_triples(tmp_path)
    warnings = sorted(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert len(warnings) == 2
    assert warnings[0].startswith(f"{jl}: ignoring unknown field(s) 'note'")
    assert warnings[1].startswith(f"{pq}: ignoring unknown column(s) 'extra'")


def test_known_columns_and_aliases_do_not_warn(tmp_path, caplog):
    path = tmp_path / "t.csv"
    path.write_text("sub_label,relation,obj_label,sub_uri,obj_uri\nParis,P1376,France,Q90,Q142\n")
    with caplog.at_level(logging.WARNING, logger="factprobe.sources"):
        load_triples(path)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_unknown_nobel_columns_are_named_once(tmp_path, caplog):
    path = tmp_path / "nobel.csv"
    path.write_text(
        "id,laureate_type,full_name,birth_date,year,shoe_size\n"
        "1,Individual,Marie Curie,1867-11-07,1903,37\n2,Individual,Pierre Curie,1859-05-15,1903,43\n"
    )
    with caplog.at_level(logging.WARNING, logger="factprobe.sources"):
        fs, _ = read_nobel(path)
    assert len(fs) == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith(f"{path}: ignoring unknown column(s) 'shoe_size'")


# ---------------------------------------------------------------------------------------------
# empty relation files


def _lama(tmp_path: Path) -> Path:
    (tmp_path / "relations.jsonl").write_text('{"relation": "P36"}\n{"relation": "P19"}\n')
    (tmp_path / "P36.jsonl").write_text(json.dumps({"sub_label": "France", "obj_label": "Paris"}) + "\n")
    (tmp_path / "P19.jsonl").write_text("\n\n")  # blank lines only: no fact
    return tmp_path


def test_empty_lama_relation_file_asked_for_is_named(tmp_path):
    root = _lama(tmp_path)
    with pytest.raises(DataError, match=re.escape(f"{root / 'P19.jsonl'}: relation P19 has no facts: the file is empty")):
        load_lama(root, ["P19"])
    with pytest.raises(DataError, match="P19.jsonl: relation P19 has no facts"):
        load_facts("lama", str(root), ["P36", "P19"])


def test_empty_lama_relation_file_among_all_is_skipped_with_a_warning(tmp_path, caplog):
    root = _lama(tmp_path)
    with caplog.at_level(logging.WARNING, logger="factprobe.sources"):
        fs = load_lama(root)
    assert set(fs.relations) == {"P36"}
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        f"{root / 'P19.jsonl'}: relation P19 has no facts (empty file); skipped"
    ]


def test_empty_lpaqa_training_file_is_named(tmp_path):
    (tmp_path / "P36.jsonl").write_text("")
    (tmp_path / "P19.jsonl").write_text(json.dumps({"sub_label": "Mozart", "obj_label": "Salzburg"}) + "\n")
    with pytest.raises(DataError, match=re.escape(f"{tmp_path / 'P36.jsonl'}: relation P36 has no facts: the file is empty")):
        load_lpaqa_train(tmp_path, ["P36"])
    assert set(load_lpaqa_train(tmp_path).relations) == {"P19"}


# ---------------------------------------------------------------------------------------------
# Nobel birth years


def test_implausible_nobel_years_are_skipped_and_named(tmp_path, caplog):
    path = tmp_path / "nobel.csv"
    path.write_text(
        "id,laureate_type,full_name,birth_date\n"
        "1,Individual,Marie Curie,1867-11-07\n"
        "2,Individual,Nobody Zero,0000-00-00\n"
        "3,Individual,Future Person,2999-01-01\n"
        "4,Individual,Medieval Scholar,0999\n"
        "5,Individual,Early Modern,1700-01-01\n"
    )
    with caplog.at_level(logging.WARNING, logger="factprobe.sources"):
        fs, stats = read_nobel(path)
    assert [f.object for f in fs] == ["1867", "1700"]  # 1700 is a real year: the MC build decides on ranges
    assert stats.implausible_birth_year == 3
    assert (
        stats.rows
        == stats.facts + stats.organisations + stats.missing_birth_date + stats.repeated_laureates + stats.implausible_birth_year
    )
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith(f"{path}: skipped 3 laureate(s) whose birth year is not a plausible year (1000-")
    assert warning.endswith("line 3 (0000), 4 (2999), 5 (0999)")
    assert "3 with an implausible birth year" in stats.summary()


def test_nobel_years_outside_the_candidates_are_skipped_by_the_build(tmp_path):
    """Consistent with build/nobel_mc.py: the reader keeps plausible years, the build skips the
    ones outside its candidate range and counts them."""
    from factprobe.datasets.nobel_mc import build_nobel_mc

    path = tmp_path / "nobel.csv"
    path.write_text("id,laureate_type,full_name,birth_date\n1,Individual,A,1867-11-07\n2,Individual,B,1700-01-01\n")
    build = build_nobel_mc(read_nobel(path)[0], n_choices=10)
    assert [item.gold for item in build.items] == ["1867"] and sum(build.skipped.values()) == 1


@pytest.mark.parametrize("date", ["1943-13-01", "1943-01-32", "19430101", "1943-1-1"])
def test_malformed_nobel_dates(tmp_path, date):
    path = tmp_path / "nobel.csv"
    path.write_text(f"id,laureate_type,full_name,birth_date\n1,Individual,A,{date}\n")
    with pytest.raises(DataError, match=re.escape(f"{path}:2: malformed birth_date '{date}'")):
        read_nobel(path)
