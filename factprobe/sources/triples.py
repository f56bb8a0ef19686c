"""Generic triples files: jsonl, csv or parquet, chosen by extension.

Columns: `subject`, `relation`, `object` (required) and `subject_id`, `object_id` (optional).
The LAMA names are accepted as aliases: `sub_label` -> subject, `obj_label` -> object,
`sub_uri` -> subject_id, `obj_uri` -> object_id (a canonical column wins over its alias).
Ids decide which objects are correct for a subject (N-M relations); without ids the labels do.

Errors (DataError, one line): a file without a required column names the file and the missing
columns; an empty required value names `file:line` (jsonl, csv; csv counts the header as
line 1) or `file: row N` (parquet, 1-based). Relations get default metadata: label = id and the
cardinality seen in the data. Repeated facts are dropped. A file that is not UTF-8 raises
DataError naming the first bad byte and its line. `popularity` and `context` columns are
read by the QA and coherency builders. Columns (csv, parquet) or fields (jsonl) that are none of
the above are ignored, with one warning per file naming them.
"""
from __future__ import annotations

import csv
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..errors import DataError
from ..facts import Fact, FactSet
from ..io import open_text, read_jsonl, utf8_text
from ._common import check_relations, clean_text, dedupe_facts, relations_for, warn_unknown_columns

log = logging.getLogger(__name__)

TRIPLE_EXTENSIONS = (".jsonl", ".csv", ".parquet")
REQUIRED = ("subject", "relation", "object")
OPTIONAL = ("subject_id", "object_id")
ALIASES = {"sub_label": "subject", "obj_label": "object", "sub_uri": "subject_id", "obj_uri": "object_id"}
#: read by other builders from the same file, not by this reader: `popularity` (QA popularity
#: buckets, `factprobe.build.qa.read_triples_popularity`) and `context` (coherency context paragraphs)
SIDE_COLUMNS = ("popularity", "context")
KNOWN_COLUMNS = REQUIRED + OPTIONAL + tuple(ALIASES) + SIDE_COLUMNS


def _column_map(columns: Iterable[str]) -> dict[str, str]:
    """canonical name -> column present in the file (canonical first, then its alias)."""
    columns = list(columns)
    out = {c: c for c in REQUIRED + OPTIONAL if c in columns}
    for alias, canon in ALIASES.items():
        if canon not in out and alias in columns:
            out[canon] = alias
    return out


def _missing(colmap: dict[str, str]) -> list[str]:
    return [c for c in REQUIRED if c not in colmap]


def _fact(rec: dict[str, Any], colmap: dict[str, str], where: str) -> Fact:
    values = {
        canon: clean_text(rec.get(col), where, col, required=canon in REQUIRED) for canon, col in colmap.items()
    }
    return Fact(
        relation=values["relation"], subject=values["subject"], object=values["object"],
        subject_id=values.get("subject_id"), object_id=values.get("object_id"),
    )


def _read_jsonl(path: Path) -> Iterator[Fact]:
    unknown: dict[str, None] = {}
    for lineno, rec in read_jsonl(path):
        colmap = _column_map(rec)
        missing = _missing(colmap)
        if missing:
            raise DataError(f"{path}:{lineno}: missing field(s) {', '.join(missing)}")
        unknown.update((k, None) for k in rec if k not in KNOWN_COLUMNS)
        yield _fact(rec, colmap, f"{path}:{lineno}")
    warn_unknown_columns(log, path, unknown, KNOWN_COLUMNS, kind="field")


def _read_csv(path: Path) -> Iterator[Fact]:
    with open_text(path, encoding="utf-8-sig", newline="") as fh, utf8_text(path):
        reader = csv.DictReader(fh)
        header = [h.strip() for h in (reader.fieldnames or [])]
        reader.fieldnames = header
        colmap = _column_map(header)
        missing = _missing(colmap)
        if missing:
            raise DataError(f"{path}: missing column(s) {', '.join(missing)} (header: {', '.join(header) or 'empty'})")
        warn_unknown_columns(log, path, header, KNOWN_COLUMNS)
        start = reader.line_num + 1
        for rec in reader:
            lineno, start = start, reader.line_num + 1
            yield _fact(rec, colmap, f"{path}:{lineno}")


def _read_parquet(path: Path) -> Iterator[Fact]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a bad file
        raise DataError(f"{path}: not a readable parquet file ({type(e).__name__}: {e})".splitlines()[0]) from None
    colmap = _column_map(table.column_names)
    missing = _missing(colmap)
    if missing:
        raise DataError(f"{path}: missing column(s) {', '.join(missing)} (columns: {', '.join(table.column_names)})")
    warn_unknown_columns(log, path, table.column_names, KNOWN_COLUMNS)
    columns = {col: table.column(col).to_pylist() for col in colmap.values()}
    for i in range(table.num_rows):
        yield _fact({col: values[i] for col, values in columns.items()}, colmap, f"{path}: row {i + 1}")


_READERS = {".jsonl": _read_jsonl, ".csv": _read_csv, ".parquet": _read_parquet}


def triple_files(path: str | Path) -> list[Path]:
    """The triples files `path` names: the file itself, or every jsonl/csv/parquet file
    directly in the folder (sorted by name). Raises DataError when there are none."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: triples file or folder not found")
    if path.is_file():
        if path.suffix.lower() not in _READERS:
            raise DataError(f"{path}: unsupported triples format {path.suffix or '(none)'}; use {', '.join(TRIPLE_EXTENSIONS)}")
        return [path]
    files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in _READERS)
    if not files:
        raise DataError(f"{path}: no triples files ({', '.join(TRIPLE_EXTENSIONS)})")
    return files


def load_triples(path: str | Path, relations: list[str] | None = None) -> FactSet:
    """Load triples from one file or a folder of files (see `triple_files`).

    `relations` keeps only those ids; an id absent from the data raises ConfigError listing
    the known ones. The FactSet's `source` is `triples:<path>`.
    """
    path = Path(path)
    return load_triples_files(triple_files(path), f"triples:{path}", relations)


def load_triples_files(files: Iterable[str | Path], source: str, relations: list[str] | None = None) -> FactSet:
    """Load and merge the given triples files (format by extension); see `load_triples`."""
    facts: list[Fact] = []
    for file in map(Path, files):
        reader = _READERS.get(file.suffix.lower())
        if reader is None:
            raise DataError(f"{file}: unsupported triples format {file.suffix or '(none)'}; use {', '.join(TRIPLE_EXTENSIONS)}")
        if not file.is_file():
            raise DataError(f"{file}: file not found")
        facts.extend(reader(file))
    facts = dedupe_facts(facts)
    wanted = check_relations(relations, dict.fromkeys(f.relation for f in facts), source)
    if wanted is not None:
        keep = set(wanted)
        facts = [f for f in facts if f.relation in keep]
    return FactSet(facts=facts, relations=relations_for(facts), source=source)
