"""Generic triples files: jsonl, csv or parquet, chosen by extension (read by `factprobe.io.open_table`).

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

import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..errors import DataError
from ..facts import Fact, FactSet
from ..io import TABLE_EXTENSIONS, open_table
from ._common import check_relations, clean_text, dedupe_facts, relations_for, warn_unknown_columns

log = logging.getLogger(__name__)

TRIPLE_EXTENSIONS = TABLE_EXTENSIONS
REQUIRED = ("subject", "relation", "object")
OPTIONAL = ("subject_id", "object_id")
ALIASES = {"sub_label": "subject", "obj_label": "object", "sub_uri": "subject_id", "obj_uri": "object_id"}
#: read by other builders from the same file, not by this reader: `popularity` (QA popularity
#: buckets, `factprobe.datasets.qa.read_triples_popularity`) and `context` (coherency context paragraphs)
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
    values = {canon: clean_text(rec.get(col), where, col, required=canon in REQUIRED) for canon, col in colmap.items()}
    return Fact(
        relation=values["relation"],
        subject=values["subject"],
        object=values["object"],
        subject_id=values.get("subject_id"),
        object_id=values.get("object_id"),
    )


def _read_file(path: Path) -> Iterator[Fact]:
    """The facts of one triples file (`factprobe.io.open_table` reads it)."""
    with open_table(path) as table:
        if table.columns is None:  # jsonl: every record has its own fields
            unknown: dict[str, None] = {}
            for where, rec in table.records():
                colmap = _column_map(rec)
                missing = _missing(colmap)
                if missing:
                    raise DataError(f"{where}: missing field(s) {', '.join(missing)}")
                unknown.update((k, None) for k in rec if k not in KNOWN_COLUMNS)
                yield _fact(rec, colmap, where)
            warn_unknown_columns(log, path, unknown, KNOWN_COLUMNS, kind="field")
            return
        colmap = _column_map(table.columns)
        missing = _missing(colmap)
        if missing:
            shown = ", ".join(table.columns)
            listed = f"header: {shown or 'empty'}" if table.kind == "csv" else f"columns: {shown}"
            raise DataError(f"{path}: missing column(s) {', '.join(missing)} ({listed})")
        warn_unknown_columns(log, path, table.columns, KNOWN_COLUMNS)
        for where, rec in table.records(colmap.values()):
            yield _fact(rec, colmap, where)


def triple_files(path: str | Path) -> list[Path]:
    """The triples files `path` names: the file itself, or every jsonl/csv/parquet file
    directly in the folder (sorted by name). Raises DataError when there are none."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: triples file or folder not found")
    if path.is_file():
        if path.suffix.lower() not in TRIPLE_EXTENSIONS:
            raise DataError(f"{path}: unsupported triples format {path.suffix or '(none)'}; use {', '.join(TRIPLE_EXTENSIONS)}")
        return [path]
    files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in TRIPLE_EXTENSIONS)
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
        if file.suffix.lower() not in TRIPLE_EXTENSIONS:
            raise DataError(f"{file}: unsupported triples format {file.suffix or '(none)'}; use {', '.join(TRIPLE_EXTENSIONS)}")
        if not file.is_file():
            raise DataError(f"{file}: file not found")
        facts.extend(_read_file(file))
    facts = dedupe_facts(facts)
    wanted = check_relations(relations, dict.fromkeys(f.relation for f in facts), source)
    if wanted is not None:
        keep = set(wanted)
        facts = [f for f in facts if f.relation in keep]
    return FactSet(facts=facts, relations=relations_for(facts), source=source)
