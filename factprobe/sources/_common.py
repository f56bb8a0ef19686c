"""Helpers shared by the fact readers: label cleaning, fact-file reading, relation defaults.

Contract: every problem a user's file can cause raises `DataError` whose one-line message names
the file and the 1-based line (or row) number. Problems that do not stop a run (ignored columns,
an empty fact file among many) are logged as one warning naming the file.
"""

from __future__ import annotations

import logging
import math
import re
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import ConfigError, DataError
from ..facts import Fact, Relation
from ..io import read_jsonl

log = logging.getLogger(__name__)

FACT_FILE_FIELDS = ("sub_label", "obj_label")  # sub_uri / obj_uri are optional ids


def warn_unknown_columns(
    logger: logging.Logger, path: Path, columns: Iterable[str], known: Iterable[str], kind: str = "column"
) -> list[str]:
    """Log one warning naming `path` and the `columns` not in `known` (they are ignored).
    Returns those columns, in file order."""
    known = set(known)
    unknown = [c for c in dict.fromkeys(columns) if c not in known]
    if unknown:
        shown = ", ".join(repr(c) if c.strip() else "(unnamed)" for c in unknown)
        logger.warning("%s: ignoring unknown %s(s) %s (known: %s)", path, kind, shown, ", ".join(sorted(known)))
    return unknown


def clean_text(value: Any, where: str, field: str, *, required: bool = True) -> str | None:
    """Return `value` as stripped text, or None for an absent optional value.

    Integers (and integral floats, as pandas gives for int columns with gaps) become their
    decimal text. None, NaN and blank strings are "empty": a DataError at `where` when
    `required`, else None. Any other type (list, dict, bool) is a DataError.
    """
    if isinstance(value, (bool, list, dict, tuple, set)):
        raise DataError(f"{where}: field {field!r} must be text, got {type(value).__name__} {value!r}")
    if value is None or (isinstance(value, float) and math.isnan(value)):
        text = ""
    elif isinstance(value, float):
        text = str(int(value)) if value.is_integer() else repr(value)
    elif isinstance(value, int):
        text = str(value)
    elif isinstance(value, str):
        text = value.strip()
    else:
        text = str(value).strip()
    if not text:
        if required:
            raise DataError(f"{where}: empty value for field {field!r}")
        return None
    return text


def relation_sort_key(relation_id: str) -> tuple[int, int, str]:
    """Natural order for Wikidata ids (P17 < P19 < P101), then everything else by name."""
    m = re.fullmatch(r"P(\d+)", relation_id)
    return (0, int(m.group(1)), "") if m else (1, 0, relation_id)


def fact_files(folder: Path) -> dict[str, Path]:
    """`P*.jsonl` files directly in `folder`, keyed by relation id (the file stem), natural order."""
    files = {p.stem: p for p in folder.glob("P*.jsonl") if p.is_file()}
    return {k: files[k] for k in sorted(files, key=relation_sort_key)}


def read_fact_file(path: Path, relation: str) -> list[Fact]:
    """Read one LAMA/T-REx style fact file (`sub_label, obj_label` plus optional `sub_uri, obj_uri`).

    Labels are stripped; ids are kept as given. Exact repeats (same relation, subject key and
    object key) are dropped, keeping the first.
    """
    facts: list[Fact] = []
    seen: set[str] = set()
    for lineno, rec in read_jsonl(path, required=FACT_FILE_FIELDS):
        where = f"{path}:{lineno}"
        fact = Fact(
            relation=relation,
            subject=clean_text(rec["sub_label"], where, "sub_label"),
            object=clean_text(rec["obj_label"], where, "obj_label"),
            subject_id=clean_text(rec.get("sub_uri"), where, "sub_uri", required=False),
            object_id=clean_text(rec.get("obj_uri"), where, "obj_uri", required=False),
        )
        if fact.fact_id not in seen:
            seen.add(fact.fact_id)
            facts.append(fact)
    return facts


def read_fact_files(files: dict[str, Path], wanted: Iterable[str] | None = None) -> list[Fact]:
    """Facts of every relation file in `files` ({relation id: file}), or only of `wanted` ids.

    A file without any fact is a DataError naming it when its relation was asked for by name
    (`wanted`); when every relation is read it is skipped with a warning naming the file.
    """
    wanted = None if wanted is None else set(wanted)
    facts: list[Fact] = []
    for rid, file in files.items():
        if wanted is not None and rid not in wanted:
            continue
        got = read_fact_file(file, rid)
        if not got:
            if wanted is not None:
                raise DataError(f"{file}: relation {rid} has no facts: the file is empty")
            log.warning("%s: relation %s has no facts (empty file); skipped", file, rid)
        facts.extend(got)
    return facts


def infer_cardinality(facts: Iterable[Fact]) -> str:
    """Cardinality seen in the data: 1-1, N-1 (one object per subject), 1-N or N-M."""
    objects_of: dict[str, set[str]] = defaultdict(set)
    subjects_of: dict[str, set[str]] = defaultdict(set)
    for f in facts:
        objects_of[f.subject_key].add(f.object_key)
        subjects_of[f.object_key].add(f.subject_key)
    many_objects = any(len(v) > 1 for v in objects_of.values())
    many_subjects = any(len(v) > 1 for v in subjects_of.values())
    if many_objects:
        return "N-M" if many_subjects else "1-N"
    return "N-1" if many_subjects else "1-1"


def relations_for(facts: list[Fact], meta: dict[str, Relation] | None = None) -> dict[str, Relation]:
    """Relation records for the relations used by `facts`, in first-seen order.

    A relation found in `meta` keeps its metadata; any other gets a default record whose
    label is its id and whose cardinality is inferred from the facts.
    """
    meta = meta or {}
    grouped: dict[str, list[Fact]] = defaultdict(list)
    for f in facts:
        grouped[f.relation].append(f)
    return {rel: meta.get(rel) or Relation(id=rel, label=rel, cardinality=infer_cardinality(fs)) for rel, fs in grouped.items()}


def check_relations(wanted: Iterable[str] | None, known: Iterable[str], source: str) -> list[str] | None:
    """Validate a `--relations` list against the relations a source holds.

    Returns the de-duplicated list (None stays None). Unknown ids raise ConfigError naming them,
    in the same words as `FactSet.select`.
    """
    if wanted is None:
        return None
    wanted = list(dict.fromkeys(wanted))
    known = list(known)
    unknown = [r for r in wanted if r not in known]
    if unknown:
        listed = ", ".join(sorted(known, key=relation_sort_key)) or "(none)"
        raise ConfigError(f"unknown relation(s) {', '.join(unknown)} in {source}; known: {listed}")
    return wanted


def dedupe_facts(facts: Iterable[Fact]) -> list[Fact]:
    """Drop repeated facts (same `fact_id`), keeping the first occurrence and the order."""
    seen: set[str] = set()
    out: list[Fact] = []
    for f in facts:
        if f.fact_id not in seen:
            seen.add(f.fact_id)
            out.append(f)
    return out
