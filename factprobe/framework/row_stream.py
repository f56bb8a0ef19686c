"""Result rows on disk, read back only as needed: a probe run holds no list of its rows (issue 40 item 3).

A run's rows are written as they are scored (the checkpoint, `factprobe.framework.checkpoint`) and are
never all in memory at once; a 100-option row is about 25 KB as Python objects, so 100,000 facts x 10
templates held whole would need tens of GB. What a run keeps instead:

- `RowIndex`: where each finished row lies, by key: a byte offset into the folder's `results.jsonl`
  (an earlier run's) or its checkpoint. It is the `Mapping` {key: row} the runner and the probes see
  (`Session.done`), whose rows are read from disk when asked for. About 100 bytes per row.
- `Projector`: a row cut down to the fields a probe's metrics and extra files read
  (`Probe.metric_columns`: a few numbers and short strings per row, never the option lists, log-probs
  or contexts); equal strings and equal lists or dicts are shared between rows. A `ProjectedRow`
  refuses a read of a field outside the projection (`ProjectionError`: the probe's declaration
  misses it) instead of answering None. A probe that declares none gets its rows whole (a plug-in
  written before the declaration: its metrics are unchanged, its run's memory grows with its rows).
- `write_ordered(index, keys, out, projector)`: copies the rows of `keys`, in that order, from where
  they lie into an open binary file (the bytes as written, no re-encoding) and returns their
  projections, from which the metrics are computed: the metrics are those of the written rows.

Files are read line by line (split at `\\n` only: a U+2028 inside a string is not a line break).
`scan_rows(path)` yields each complete row with its offset; a torn last line (a crash mid-write) is
left out, a damaged line before the last is refused (ConfigError naming the file and line).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from ..errors import ConfigError

#: strings longer than this are not shared between rows (a context or prompt is rarely repeated)
SHARED_STRING_MAX = 256


class ProjectionError(RuntimeError):
    """A probe's metrics read a row field it does not declare in `Probe.metric_columns` (a mistake in
    the probe's code, not in its input: not a KeyError, which a probe might catch and read as absent)."""


class ProjectedRow(dict):
    """A result row cut down to a projection's columns (`Projector`). Reading a field that is not a
    column raises ProjectionError; a column the row lacks reads as a plain dict's would (KeyError,
    `get`'s default, `in` False)."""

    __slots__ = ()
    columns: frozenset[str] = frozenset()
    owner: str = ""

    def _refuse(self, key: Any) -> ProjectionError:
        return ProjectionError(
            f"probe {self.owner}: its metrics read the row field {key!r}, which its metric_columns "
            f"({', '.join(sorted(self.columns))}) do not name; add it to metric_columns"
        )

    def __missing__(self, key: Any) -> Any:
        if key in type(self).columns:
            raise KeyError(key)
        raise self._refuse(key)

    def get(self, key: Any, default: Any = None) -> Any:
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        if key not in type(self).columns:
            raise self._refuse(key)
        return default

    def __contains__(self, key: object) -> bool:
        if dict.__contains__(self, key):
            return True
        if key not in type(self).columns:
            raise self._refuse(key)
        return False


class Projector:
    """Cuts rows down to `columns` (None: rows are kept whole), sharing repeated values between rows."""

    def __init__(self, columns: Sequence[str] | None, owner: str = "") -> None:
        self.columns = None if columns is None else tuple(dict.fromkeys(columns))
        self._row_class = (
            None
            if columns is None
            else type("ProjectedRow", (ProjectedRow,), {"__slots__": (), "columns": frozenset(columns), "owner": owner})
        )
        self._shared: dict[bytes, Any] = {}  # a list's or dict's JSON digest -> the first such value

    def _share(self, value: Any) -> Any:
        if isinstance(value, str):
            return sys.intern(value) if len(value) <= SHARED_STRING_MAX else value
        if isinstance(value, (list, dict)):
            digest = hashlib.blake2b(json.dumps(value, ensure_ascii=False).encode("utf-8"), digest_size=16).digest()
            shared = self._shared.setdefault(digest, value)
            return shared if shared is value or shared == value else value
        return value

    def project(self, row: dict) -> dict:
        """`row` cut down to the columns it has (the row itself when there are no columns)."""
        if self.columns is None or self._row_class is None:
            return row
        out = self._row_class()
        for c in self.columns:
            if c in row:
                dict.__setitem__(out, c, self._share(row[c]))
        return out


# ------------------------------------------------------------------ reading jsonl files
def scan_lines(path: Path) -> Iterator[tuple[int, int, bytes]]:
    """(line number from 1, byte offset, line) of each non-blank line of `path`, one at a time; a
    missing file yields nothing. The last line may lack its newline (a torn write)."""
    if not path.exists():
        return
    with path.open("rb") as fh:
        offset = 0
        for number, line in enumerate(fh, start=1):
            if line.strip():
                yield number, offset, line
            offset += len(line)


def scan_rows(path: Path) -> Iterator[tuple[int, dict]]:
    """(byte offset, row) of each row of a jsonl results or checkpoint file, one at a time. A last line
    that is not a whole JSON object (a torn write at a crash: the item is scored again) is left out;
    a damaged line before it raises ConfigError naming the file and line."""
    bad: int | None = None
    for number, offset, line in scan_lines(path):
        if bad is not None:
            raise ConfigError(f"{path}:{bad}: corrupt line in a results file; move it away to start over")
        try:
            row = json.loads(line)
        except ValueError:
            bad = number
            continue
        yield offset, row


def iter_rows(path: Path) -> Iterator[dict]:
    """The rows of a jsonl results or checkpoint file, one at a time (see `scan_rows`)."""
    for _, row in scan_rows(path):
        yield row


# ------------------------------------------------------------------ where the rows lie
class RowIndex(Mapping[str, dict]):
    """{key: row} of a run folder's finished rows, the rows read from disk when asked for (module
    docstring). `sources` names the files by a small number: {number: path}."""

    def __init__(self, sources: Mapping[int, Path]) -> None:
        if any(not 0 <= s < 4 for s in sources):
            raise ValueError(f"source numbers must be 0-3, got {sorted(sources)}")
        self.sources = dict(sources)
        self._where: dict[str, int] = {}  # key -> offset * 4 + source
        self._handles: dict[int, IO[bytes]] = {}

    def add(self, key: str, source: int, offset: int) -> bool:
        """Record that `key`'s row starts at `offset` of `source`; False (nothing changed) when the key
        is already recorded: the first row of a key wins."""
        if key in self._where:
            return False
        self._where[key] = offset * 4 + source
        return True

    def scan(self, source: int, accept: Callable[[str, dict], bool] | None = None) -> None:
        """Record the rows of file `source` (`scan_rows`) whose key is not recorded yet and that
        `accept(key, row)` keeps (default: all), one row in memory at a time."""
        for offset, row in scan_rows(self.sources[source]):
            key = row["key"]
            if key not in self._where and (accept is None or accept(key, row)):
                self.add(key, source, offset)

    def line(self, key: str) -> bytes:
        """The row of `key` as written (one JSON line, ending in a newline)."""
        where = self._where[key]
        source, offset = where % 4, where // 4
        fh = self._handles.get(source)
        if fh is None:
            fh = self._handles[source] = self.sources[source].open("rb")
        fh.seek(offset)
        line = fh.readline()
        return line if line.endswith(b"\n") else line + b"\n"

    def __getitem__(self, key: str) -> dict:
        return json.loads(self.line(key))

    def __contains__(self, key: object) -> bool:
        return key in self._where

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)

    def close(self) -> None:
        for fh in self._handles.values():
            fh.close()
        self._handles.clear()


def write_ordered(index: RowIndex, keys: Iterable[str], out: IO[bytes], projector: Projector) -> list[dict]:
    """Copy the rows of `keys` (each in `index`), in that order, into `out`; return their projections
    (`projector`), parsed from the copied bytes."""
    projected = []
    for key in keys:
        line = index.line(key)
        out.write(line)
        projected.append(projector.project(json.loads(line)))
    return projected


__all__ = [
    "SHARED_STRING_MAX",
    "ProjectedRow",
    "ProjectionError",
    "Projector",
    "RowIndex",
    "iter_rows",
    "scan_lines",
    "scan_rows",
    "write_ordered",
]
