"""ParaRel patterns (Elazar et al. 2021): several equivalent cloze templates per relation.

Layout: a folder (`<data root>/pararel/patterns`, the `pararel` folder above it is accepted too)
of `P*.jsonl` files, one per relation, one pattern per line:
`{"pattern": "[X] is located in [Y] .", "lemma": ..., "extended_lemma": ..., "tense": ...}`.
Only `pattern` is required; `lemma` and `tense` are kept when present.

`load_pararel_patterns(path, relations)` returns {relation: [PararelPattern]} in natural relation
order and file order, each pattern exactly as written (stripped) with its file and 1-based line.
Normalisation (endings, de-duplication) is the multi-prompt builder's job
(`factprobe.datasets.multiprompt`). Every problem raises DataError naming `file:line`:
a malformed line, a pattern that is not text, or a pattern without exactly one `[X]` and one
`[Y]` (`check_template_slots`). An unknown relation in `relations` is a ConfigError listing the
known ones; a relation without a file is simply absent from the result when `relations` is None.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import DataError
from ..io import read_jsonl
from ._common import check_relations, fact_files

SUBJECT_SLOT, OBJECT_SLOT = "[X]", "[Y]"


@dataclass(frozen=True)
class PararelPattern:
    """One ParaRel pattern as written, with where it came from."""

    relation: str
    pattern: str
    file: str
    line: int
    lemma: str | None = None
    tense: str | None = None


def check_template_slots(template: str, where: str) -> None:
    """Raise DataError `"<where>: template '<t>' lacks the slot [Y]"` (or "has 2 of") unless
    `template` holds exactly one `[X]` and one `[Y]`."""
    for slot in (SUBJECT_SLOT, OBJECT_SLOT):
        n = template.count(slot)
        if n != 1:
            what = "lacks" if n == 0 else f"has {n} of"
            raise DataError(
                f"{where}: template {template!r} {what} the slot {slot}; "
                f"a template needs exactly one {SUBJECT_SLOT} and one {OBJECT_SLOT}"
            )


def patterns_dir(path: str | Path) -> Path:
    """The folder of `P*.jsonl` pattern files: `path` itself or `path/patterns`."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: ParaRel patterns folder not found")
    if path.is_dir() and not fact_files(path) and (path / "patterns").is_dir():
        return path / "patterns"
    return path


def load_pararel_patterns(path: str | Path, relations: list[str] | None = None) -> dict[str, list[PararelPattern]]:
    """{relation: patterns} from a ParaRel patterns folder or one `P*.jsonl` file (module docstring)."""
    folder = patterns_dir(path)
    files = {folder.stem: folder} if folder.is_file() else fact_files(folder)
    if not files:
        raise DataError(f"{folder}: no P*.jsonl ParaRel pattern files")
    wanted = check_relations(relations, files, f"pararel:{folder}")
    out: dict[str, list[PararelPattern]] = {}
    for rid, file in files.items():
        if wanted is not None and rid not in wanted:
            continue
        got: list[PararelPattern] = []
        for lineno, rec in read_jsonl(file, required=("pattern",)):
            where = f"{file}:{lineno}"
            pattern = rec["pattern"]
            if not isinstance(pattern, str):
                raise DataError(f"{where}: pattern must be text, got {type(pattern).__name__} {pattern!r}")
            pattern = pattern.strip()
            check_template_slots(pattern, where)
            lemma, tense = rec.get("lemma"), rec.get("tense")
            got.append(
                PararelPattern(
                    rid,
                    pattern,
                    str(file),
                    lineno,
                    lemma if isinstance(lemma, str) else None,
                    tense if isinstance(tense, str) else None,
                )
            )
        out[rid] = got
    return out
