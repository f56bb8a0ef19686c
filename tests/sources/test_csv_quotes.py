"""Issue 28 item 7: a CSV with an unterminated quote. Python's lenient csv reader takes everything from
the quote to the end of the file as one value, so the file silently lost its later rows. Every CSV a
user hands over (mc-items item files, triples, the Nobel CSV, `--model-meta`) is read strictly: one
DataError line naming the file and the line the quote opens on."""

from __future__ import annotations

import pytest

from factprobe.errors import ConfigError, DataError
from factprobe.io import open_table
from factprobe.report.model_meta import read_model_meta
from factprobe.sources import load_facts
from factprobe.sources.nobel import read_nobel

NEVER_CLOSED = "malformed CSV (unexpected end of data): a quoted value opened here is never closed"


def test_triples_csv(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('subject,relation,object\nFrance,P36,Paris\nSpain,P36,"Madrid\nItaly,P36,Rome\nPeru,P36,Lima\n')
    with pytest.raises(DataError) as e:
        load_facts("triples", str(path), None)
    assert str(e.value) == f"{path}:3: {NEVER_CLOSED}"


def test_open_table_names_the_line_of_any_malformed_quote(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('a,b\n1,2\n3,"x"y\n')  # text after a closing quote
    with pytest.raises(DataError, match=rf"^{path}:3: malformed CSV \(',' expected after '\"'\)"), open_table(path) as t:
        list(t.records())
    path.write_text('"a,b\n1,2\n')  # in the header
    with pytest.raises(DataError, match=rf"^{path}:1: malformed CSV"), open_table(path) as t:
        list(t.records())


def test_nobel_csv(tmp_path):
    path = tmp_path / "n.csv"
    path.write_text(
        'id,laureate_type,full_name,birth_date\n1,Individual,"Doe, Jane,1950-01-01\n'
        "2,Individual,John Roe,1940-01-01\n3,Individual,Max Poe,1930-01-01\n"
    )
    with pytest.raises(DataError) as e:
        read_nobel(path)
    assert str(e.value) == f"{path}:2: {NEVER_CLOSED}"


def test_model_meta_csv(tmp_path):
    path = tmp_path / "meta.csv"
    path.write_text('model,family,size,base\norg/a,"llama,1B,\norg/b,llama,7B,org/a\n')
    with pytest.raises(ConfigError) as e:
        read_model_meta(path)
    assert str(e.value) == f"--model-meta {path}:2: {NEVER_CLOSED}"


def test_well_formed_quotes_still_read(tmp_path):
    path = tmp_path / "meta.csv"
    path.write_text('model,family,size,base\norg/a,"llama, v2",1B,\n"org/b","x ""y""",7B,org/a\n')
    meta = read_model_meta(path)
    assert meta["org/a"].family == "llama, v2" and meta["org/b"].family == 'x "y"' and meta["org/b"].base == "org/a"
