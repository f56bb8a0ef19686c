"""File helpers: text reading with file:line errors, the one reader of tabular files (jsonl, csv,
parquet: `open_table`), and atomic writes.

Contract: readers raise `DataError` whose message names the file and the 1-based line number.
A file that is not UTF-8 text raises one `DataError` naming the file, the first bad byte, its
offset and its line (`not_utf8_error`), never a `UnicodeDecodeError` traceback.
Writers never leave a half-written file: they write a temporary sibling and `os.replace` it.
The result gets mode 0644 (results are shared; `tempfile.mkstemp` alone would leave 0600);
pass `mode=0o600` for anything holding credentials.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from .errors import DataError

RESULT_FILE_MODE = 0o644
SECRET_FILE_MODE = 0o600
_SCAN_CHUNK = 1 << 20


def not_utf8_error(path: str | Path, encoding: str = "utf-8") -> DataError:
    """A DataError for `path`, which failed to decode: the first invalid byte, its offset and
    its line, e.g. `data/x.csv: not UTF-8 text: byte 0xff at offset 1234 (line 17); ...`."""
    path = Path(path)
    decoder = codecs.getincrementaldecoder(encoding)()
    offset = 0  # bytes of the file handed to the decoder before this chunk
    line = 1
    try:
        with path.open("rb") as fh:
            while chunk := fh.read(_SCAN_CHUNK):
                try:
                    decoder.decode(chunk)
                except UnicodeDecodeError as e:
                    # e.start counts from the decoder's pending bytes (<= 3 of an unfinished
                    # sequence carried over from the previous chunk) plus this chunk
                    bad = offset - (len(e.object) - len(chunk)) + e.start
                    line += e.object.count(b"\n", 0, e.start)
                    byte = e.object[e.start]
                    return DataError(
                        f"{path}: not UTF-8 text: byte 0x{byte:02x} at offset {bad} (line {line}); save the file as UTF-8"
                    )
                line += chunk.count(b"\n")
                offset += len(chunk)
            decoder.decode(b"", final=True)
    except UnicodeDecodeError as e:  # the file ends inside a multi-byte sequence
        return DataError(
            f"{path}: not UTF-8 text: truncated multi-byte character at offset {offset - len(e.object) + e.start} "
            f"(line {line}); save the file as UTF-8"
        )
    except OSError:
        pass
    return DataError(f"{path}: not UTF-8 text; save the file as UTF-8")


@contextmanager
def utf8_text(path: str | Path) -> Iterator[None]:
    """Turn a UnicodeDecodeError raised while reading `path` in the block into `not_utf8_error`."""
    try:
        yield
    except UnicodeDecodeError:
        raise not_utf8_error(path) from None


def open_text(path: str | Path, *, encoding: str = "utf-8", newline: str | None = None) -> TextIO:
    """Open `path` for reading text; a missing file raises DataError `<path>: file not found`.
    Decode errors surface while reading: wrap the reading in `utf8_text(path)`."""
    try:
        return Path(path).open("r", encoding=encoding, newline=newline)
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a folder, expected a file") from None


def read_text(path: str | Path) -> str:
    """The whole file as text (UTF-8); DataError for a missing or non-UTF-8 file."""
    with open_text(path) as fh, utf8_text(path):
        return fh.read()


def read_jsonl(path: str | Path, required: Iterable[str] = ()) -> Iterator[tuple[int, dict]]:
    """Yield (line_number, record) for each non-blank line of a jsonl file.

    Raises DataError naming `path:line` for malformed JSON, a non-object line, or a record
    missing any of the `required` fields; DataError naming the byte for a non-UTF-8 file.
    """
    path = Path(path)
    required = tuple(required)
    with open_text(path) as fh, utf8_text(path):
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{lineno}: malformed JSON line ({e.msg} at column {e.colno})") from None
            if not isinstance(rec, dict):
                raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}")
            missing = [k for k in required if rec.get(k) in (None, "")]
            if missing:
                raise DataError(f"{path}:{lineno}: missing field(s) {', '.join(missing)}")
            yield lineno, rec


def malformed_csv(path: str | Path, line: int, err: csv.Error) -> str:
    """The one-line message of a CSV record that `csv` (strict) cannot read, starting at `line`."""
    why = str(err)
    hint = (
        "a quoted value opened here is never closed"
        if "end of data" in why
        else "a quoted value must be followed by the delimiter or the line's end; write a quote inside it twice"
    )
    return f"{path}:{line}: malformed CSV ({why}): {hint}"


def csv_rows(reader: Any, path: str | Path) -> Iterator[tuple[int, Any]]:
    """(1-based line the row starts on, row) of a `csv.reader`/`csv.DictReader` made with `strict=True`
    over the lines of `path`; a row `csv` cannot read (an unterminated quote, which a lenient reader
    takes as the rest of the file in one value) is a DataError naming that line (`malformed_csv`)."""
    start = reader.line_num + 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise DataError(malformed_csv(path, start, e)) from None
        lineno, start = start, reader.line_num + 1
        yield lineno, row


#: the tabular formats `open_table` reads, by file extension (any case)
TABLE_EXTENSIONS = (".jsonl", ".csv", ".parquet")


@dataclass
class Table:
    """A tabular file opened by `open_table`: its format, its columns, and its rows.

    `columns` is the csv header (names stripped of spaces) or the parquet schema's names; None for
    jsonl, whose records each have their own fields. `records()` yields `(where, record)` per row:
    `where` is `file:line` (jsonl and csv, 1-based; csv counts the header as line 1, a quoted value
    spanning lines gives the line the row starts on) or `file: row N` (parquet, 1-based), ready to
    start an error message."""

    path: Path
    kind: str  # "jsonl" | "csv" | "parquet"
    columns: list[str] | None
    _rows: Any = field(repr=False, default=None)

    def records(self, columns: Iterable[str] | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
        """(where, record) of every row, in file order. `columns` limits a parquet record to those
        of its columns (the others are never converted to Python); jsonl and csv records always
        hold every field. A blank jsonl line is no row."""
        if self.kind == "jsonl":
            for lineno, rec in read_jsonl(self.path):
                yield f"{self.path}:{lineno}", rec
        elif self.kind == "csv":
            for lineno, rec in csv_rows(self._rows, self.path):
                yield f"{self.path}:{lineno}", rec
        else:
            table = self._rows
            wanted = self.columns if columns is None else [c for c in dict.fromkeys(columns) if c in self.columns]
            values = {c: table.column(c).to_pylist() for c in wanted}
            for i in range(table.num_rows):
                yield f"{self.path}: row {i + 1}", {c: v[i] for c, v in values.items()}


@contextmanager
def open_table(path: str | Path) -> Iterator[Table]:
    """Open a jsonl, csv or parquet file (by extension) for reading its rows (`Table.records`).

    csv is read as UTF-8 (a BOM is dropped) with a strict `csv.DictReader`: a short row has None for its
    missing values; an unterminated quote is a DataError naming the line the record starts on
    (`csv_rows`). Raises DataError for an extension other than `TABLE_EXTENSIONS`, a missing
    file (`<path>: file not found`), a parquet file pyarrow cannot read (`<path>: not a readable
    parquet file (...)`), and, while the rows are read inside the block, for malformed jsonl lines
    (`read_jsonl`) and non-UTF-8 text (`not_utf8_error`)."""
    path = Path(path)
    kind = path.suffix.lower().lstrip(".")
    if f".{kind}" not in TABLE_EXTENSIONS:
        raise DataError(f"{path}: unsupported table format {path.suffix or '(none)'}; use {', '.join(TABLE_EXTENSIONS)}")
    if kind == "jsonl":
        yield Table(path, kind, None)
    elif kind == "csv":
        with open_text(path, encoding="utf-8-sig", newline="") as fh, utf8_text(path):
            reader = csv.DictReader(fh, strict=True)
            try:
                reader.fieldnames = [h.strip() for h in (reader.fieldnames or [])]
            except csv.Error as e:
                raise DataError(malformed_csv(path, 1, e)) from None
            yield Table(path, kind, list(reader.fieldnames), reader)
    else:
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except FileNotFoundError:
            raise DataError(f"{path}: file not found") from None
        except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a bad file
            raise DataError(f"{path}: not a readable parquet file ({type(e).__name__}: {e})".splitlines()[0]) from None
        yield Table(path, kind, list(table.column_names), table)


def atomic_write_text(path: str | Path, text: str, mode: int = RESULT_FILE_MODE) -> None:
    """Write `text` to `path` atomically (temp file in the same folder, fsync, rename).

    The file ends with permissions `mode` (default 0644, whatever the umask; 0600 for secrets)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)  # mkstemp creates 0600
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: str | Path, obj: Any, mode: int = RESULT_FILE_MODE) -> None:
    """Write `obj` as pretty JSON, atomically (mode as in `atomic_write_text`)."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n", mode)


def atomic_write_jsonl(path: str | Path, records: Iterable[dict], mode: int = RESULT_FILE_MODE) -> None:
    """Write one JSON object per line, atomically (mode as in `atomic_write_text`)."""
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), mode)


def atomic_write_parquet(path: str | Path, df, mode: int = RESULT_FILE_MODE) -> None:
    """Write a pandas DataFrame as parquet, atomically (temp file, fsync, rename; mode as above)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        os.close(fd)
        df.to_parquet(tmp, index=False)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sha256_file(path: Path, desc: str | None = None) -> str:
    """sha256 (hex) of a file's bytes, with a tqdm bar when `desc` is given and the file is large."""
    h = hashlib.sha256()
    size = path.stat().st_size
    bar = None
    if desc and size > 50 * 1024**2:
        from tqdm.auto import tqdm

        bar = tqdm(total=size, unit="B", unit_scale=True, desc=desc, leave=False)
    with path.open("rb") as f:
        while chunk := f.read(4 * 1024**2):
            h.update(chunk)
            if bar is not None:
                bar.update(len(chunk))
    if bar is not None:
        bar.close()
    return h.hexdigest()
