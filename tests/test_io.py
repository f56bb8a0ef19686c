"""factprobe.io: jsonl reading errors name file, line or byte; the one tabular reader (`open_table`)
names file:line / file: row N for every format; atomic writers leave 0644 files (0600 on request)
whatever the umask and although tempfile.mkstemp creates 0600."""

from __future__ import annotations

import json
import os
import stat

import pytest

from factprobe.errors import DataError
from factprobe.io import (
    atomic_write_json,
    atomic_write_jsonl,
    atomic_write_text,
    not_utf8_error,
    open_table,
    read_jsonl,
    read_text,
)


@pytest.fixture(params=[0o022, 0o077, 0o002])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_results_are_written_0644_whatever_the_umask(tmp_path, umask):
    atomic_write_text(tmp_path / "a.txt", "x")
    atomic_write_json(tmp_path / "metrics.json", {"acc": 1.0})
    atomic_write_jsonl(tmp_path / "results.jsonl", [{"a": 1}])
    for name in ("a.txt", "metrics.json", "results.jsonl"):
        assert _mode(tmp_path / name) == 0o644, (name, oct(umask))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


def test_rewrite_keeps_0644_and_secrets_get_0600(tmp_path, umask):
    path = tmp_path / "metrics.json"
    path.write_text("{}")
    path.chmod(0o600)
    atomic_write_json(path, {"acc": 0.5})
    assert _mode(path) == 0o644 and json.loads(path.read_text()) == {"acc": 0.5}
    atomic_write_text(tmp_path / "credentials", "token", mode=0o600)
    assert _mode(tmp_path / "credentials") == 0o600


def test_read_jsonl_errors_name_file_and_line(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n\n[1]\n')
    with pytest.raises(DataError, match=r"x\.jsonl:3: expected a JSON object, got list"):
        list(read_jsonl(path))
    with pytest.raises(DataError, match=r"nope\.jsonl: file not found"):
        list(read_jsonl(tmp_path / "nope.jsonl"))


@pytest.mark.parametrize(
    "data, offset, line, byte",
    [
        (b'{"a": "\xff"}\n', 7, 1, 0xFF),
        (b'{"a": 1}\n{"b": "ok \xc3\xa9"}\n{"c": "\xe9t\xe9"}\n', 31, 3, 0xE9),
        (b"\xef\xbb\xbf" + b"x\n" * 5 + b"\x80\n", 13, 6, 0x80),  # after a BOM
    ],
)
def test_non_utf8_jsonl_is_one_data_error(tmp_path, data, offset, line, byte):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(data)
    assert data[offset] == byte
    with pytest.raises(DataError) as e:
        list(read_jsonl(path))
    assert str(e.value) == (f"{path}: not UTF-8 text: byte 0x{byte:02x} at offset {offset} (line {line}); save the file as UTF-8")
    assert e.value.__cause__ is None and e.value.__suppress_context__


def test_truncated_multibyte_character_at_the_end(tmp_path):
    path = tmp_path / "cut.txt"
    path.write_bytes(b"ok\n\xe2\x82")  # the first two bytes of a three-byte euro sign
    with pytest.raises(DataError, match=r"cut\.txt: not UTF-8 text: truncated multi-byte character at offset 3 \(line 2\)"):
        read_text(path)


def test_not_utf8_error_scans_across_chunks(tmp_path, monkeypatch):
    import factprobe.io as fio

    monkeypatch.setattr(fio, "_SCAN_CHUNK", 5)  # split multi-byte characters across reads
    data = "äöü\nél\n".encode() + b"x\xffy"
    path = tmp_path / "c.txt"
    path.write_bytes(data)
    bad = data.index(b"\xff")
    assert str(not_utf8_error(path)).startswith(f"{path}: not UTF-8 text: byte 0xff at offset {bad} (line 3)")


# ------------------------------------------------------------------ open_table: jsonl, csv, parquet
def _records(path, columns=None):
    with open_table(path) as table:
        return table.kind, table.columns, list(table.records(columns))


def test_open_table_reads_every_format_with_where(tmp_path):
    (tmp_path / "t.jsonl").write_text('{"a": 1, "b": "x"}\n\n{"a": 2}\n', encoding="utf-8")
    assert _records(tmp_path / "t.jsonl") == (
        "jsonl",
        None,
        [(f"{tmp_path}/t.jsonl:1", {"a": 1, "b": "x"}), (f"{tmp_path}/t.jsonl:3", {"a": 2})],
    )
    # BOM dropped, header names stripped, a quoted value over two lines: the row's first line counts
    (tmp_path / "t.csv").write_text('\ufeff a , b\n1,"two\nlines"\n3,\n4\n', encoding="utf-8")
    kind, columns, rows = _records(tmp_path / "t.csv")
    assert (kind, columns) == ("csv", ["a", "b"])
    assert rows == [
        (f"{tmp_path}/t.csv:2", {"a": "1", "b": "two\nlines"}),
        (f"{tmp_path}/t.csv:4", {"a": "3", "b": ""}),
        (f"{tmp_path}/t.csv:5", {"a": "4", "b": None}),
    ]
    pd = pytest.importorskip("pandas")
    pd.DataFrame({"a": [1, 2], "b": ["x", "y"]}).to_parquet(tmp_path / "T.PARQUET", index=False)
    assert _records(tmp_path / "T.PARQUET") == (
        "parquet",
        ["a", "b"],
        [(f"{tmp_path}/T.PARQUET: row 1", {"a": 1, "b": "x"}), (f"{tmp_path}/T.PARQUET: row 2", {"a": 2, "b": "y"})],
    )
    assert _records(tmp_path / "T.PARQUET", ["b", "missing"])[2] == [
        (f"{tmp_path}/T.PARQUET: row 1", {"b": "x"}),
        (f"{tmp_path}/T.PARQUET: row 2", {"b": "y"}),
    ]


@pytest.mark.parametrize(
    "name, data, message",
    [
        ("t.tsv", b"a\tb\n", "t.tsv: unsupported table format .tsv; use .jsonl, .csv, .parquet"),
        ("t.parquet", b"not parquet", "t.parquet: not a readable parquet file ("),
        ("t.csv", b"a,b\n1,\xff\n", "t.csv: not UTF-8 text: byte 0xff at offset 6 (line 2)"),
        ("t.jsonl", b'{"a": 1}\n{"a": \n', "t.jsonl:2: malformed JSON line"),
    ],
)
def test_open_table_errors_name_the_file_and_line(tmp_path, name, data, message):
    (tmp_path / name).write_bytes(data)
    with pytest.raises(DataError) as err:
        _records(tmp_path / name)
    assert str(err.value).startswith(f"{tmp_path}/{message}"), str(err.value)


@pytest.mark.parametrize("name", ["gone.csv", "gone.parquet"])
def test_open_table_missing_file(tmp_path, name):
    with pytest.raises(DataError, match=r"gone\.\w+: file not found"):
        _records(tmp_path / name)
