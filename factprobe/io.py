"""File helpers: jsonl reading with file:line errors, and atomic writes.

Contract: readers raise `DataError` whose message names the file and the 1-based line number.
Writers never leave a half-written file: they write a temporary sibling and `os.replace` it.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

from .errors import DataError


def read_jsonl(path: str | Path, required: Iterable[str] = ()) -> Iterator[tuple[int, dict]]:
    """Yield (line_number, record) for each non-blank line of a jsonl file.

    Raises DataError naming `path:line` for malformed JSON, a non-object line, or a record
    missing any of the `required` fields.
    """
    path = Path(path)
    required = tuple(required)
    try:
        fh = path.open("r", encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    with fh:
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


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write `text` to `path` atomically (temp file in the same folder, fsync, rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: str | Path, obj: Any) -> None:
    """Write `obj` as pretty JSON, atomically."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def atomic_write_jsonl(path: str | Path, records: Iterable[dict]) -> None:
    """Write one JSON object per line, atomically."""
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
