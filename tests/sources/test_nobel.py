"""Nobel birth-year reader on the real CSV, plus error fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from factprobe.errors import ConfigError, DataError
from factprobe.sources import load_facts
from factprobe.sources.nobel import read_nobel

HEADER = "id,laureate_type,full_name,birth_date\n"


@pytest.fixture(scope="module")
def nobel_csv(real_data_root: Path) -> Path:
    path = real_data_root / "nobel" / "nobel.csv"
    if not path.is_file():
        pytest.skip(f"Nobel data not found at {path}")
    return path


@pytest.fixture(scope="module")
def nobel(nobel_csv):
    return read_nobel(nobel_csv)


def test_real_counts(nobel):
    fs, stats = nobel
    assert (stats.rows, stats.organisations, stats.missing_birth_date, stats.repeated_laureates) == (1012, 31, 0, 5)
    assert len(fs) == stats.facts == 976
    assert set(fs.relations) == {"birth_year"}
    rel = fs.relations["birth_year"]
    assert (rel.label, rel.cardinality) == ("birth year", "N-1")


def test_year_only_dates_and_ids(nobel):
    fs, _ = nobel
    spence = next(f for f in fs if f.subject == "A. Michael Spence")  # birth_date 1943-00-00
    assert (spence.object, spence.subject_id) == ("1943", "745")
    bohr = next(f for f in fs if f.subject == "Aage Niels Bohr")  # 1922-06-19
    assert bohr.object == "1922"


def test_twice_laureates_deduplicated_and_organisations_skipped(nobel):
    fs, _ = nobel
    names = [f.subject for f in fs]
    for name in ("Marie Curie, née Skłodowska", "Linus Carl Pauling", "Frederick Sanger", "John Bardeen"):
        assert names.count(name) == 1
    assert len({f.subject_id for f in fs}) == len(fs)
    assert "Amnesty International" not in names and "European Union" not in names
    curie = next(f for f in fs if f.subject.startswith("Marie Curie"))
    assert curie.object == "1867"


def test_registry_default_path_and_relations(nobel_csv):
    fs = load_facts("nobel", str(nobel_csv.parent), relations=["birth_year"])
    assert len(fs) == 976
    with pytest.raises(ConfigError, match="unknown relation"):
        load_facts("nobel", str(nobel_csv), relations=["P36"])


def test_malformed_birth_date_names_line(tmp_path):
    path = tmp_path / "n.csv"
    path.write_text(HEADER + '1,Individual,"Doe, Jane",1950-01-01\n2,Organization,Org,\n3,Individual,John Roe,19x0-01-01\n')
    with pytest.raises(DataError, match=r"n\.csv:4: malformed birth_date '19x0-01-01'"):
        read_nobel(path)


def test_line_numbers_count_multiline_fields(tmp_path):
    path = tmp_path / "n.csv"
    path.write_text(HEADER + '1,Individual,"Jane\nDoe",1950-01-01\n2,Individual,John,bad\n')
    with pytest.raises(DataError, match=r"n\.csv:4: malformed"):
        read_nobel(path)


def test_missing_dates_skipped_and_conflicting_repeat(tmp_path):
    path = tmp_path / "n.csv"
    path.write_text(HEADER + "1,Individual,A,NaN\n2,Individual,B,\n3,Individual,C,1900-00-00\n")
    fs, stats = read_nobel(path)
    assert len(fs) == 1 and stats.missing_birth_date == 2
    path.write_text(HEADER + "3,Individual,C,1900-00-00\n3,Individual,C,1901-00-00\n")
    with pytest.raises(DataError, match=r"n\.csv:3: laureate 3 born 1901 here but 1900 at line 2"):
        read_nobel(path)


def test_missing_columns_and_file(tmp_path):
    path = tmp_path / "n.csv"
    path.write_text("id,full_name\n1,A\n")
    with pytest.raises(DataError, match=r"n\.csv:1: missing column\(s\) laureate_type, birth_date"):
        read_nobel(path)
    with pytest.raises(DataError, match="file not found"):
        read_nobel(tmp_path / "none.csv")
