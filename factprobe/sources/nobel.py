"""Nobel laureates CSV -> the `birth_year` relation of the IC-LKE paper.

Input: `nobel.csv` (a dump of the Nobel Prize API) with at least the columns `id`
(laureate id), `laureate_type`, `full_name` and `birth_date`. One fact per laureate:
subject = `full_name`, subject_id = `id`, object = the 4-digit year of `birth_date`
(`1922-06-19`, or `1943-00-00` when only the year is known), object_id = None.

Rows that are skipped, and counted in `NobelStats`:
- organisations (`laureate_type` other than `Individual`);
- individuals with an empty / `NaN` birth date;
- individuals whose birth year is not a plausible year of birth: before `MIN_BIRTH_YEAR`
  (1000, the first year `build.nobel_mc.year_candidates` accepts; `0000` is a placeholder for
  "unknown") or after the current year (`2999`); one warning names the file and their lines;
- repeated laureates (same `id`: Marie Curie, Linus Pauling, Frederick Sanger, John Bardeen,
  K. Barry Sharpless won twice); the first row is kept.
Years inside that range but outside the candidate years of a probe (1800-1999 by default) are
kept here: `build.nobel_mc.build_nobel_mc` skips and counts them for the range it is given.
A malformed birth date for an individual (not `YYYY-MM-DD`, month above 12, day above 31), or a
repeated id with a different birth year, raises DataError naming `file:line`; so does a file
that is not UTF-8 text (naming the byte). Columns other than those of the Nobel Prize API dump
(`NOBEL_COLUMNS`) are ignored with one warning naming them.
"""

from __future__ import annotations

import csv
import datetime
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import DataError
from ..facts import Fact, FactSet, Relation
from ..io import csv_rows, malformed_csv, open_text, utf8_text
from ._common import warn_unknown_columns

log = logging.getLogger(__name__)

BIRTH_YEAR = Relation(
    id="birth_year",
    label="birth year",
    template="[X] was born in [Y] .",
    cardinality="N-1",
    description="year of birth of a Nobel laureate",
)
REQUIRED_COLUMNS = ("id", "laureate_type", "full_name", "birth_date")
# Every column of the Nobel Prize API dump (`""` is the index column pandas writes first).
NOBEL_COLUMNS = REQUIRED_COLUMNS + (
    "",
    "year",
    "category",
    "gender",
    "birth_city",
    "birth_city_now",
    "birth_country",
    "birth_country_now",
    "birth_continent",
    "death_date",
    "prize_share",
    "prize",
    "motivation",
    "org_city_now",
    "org_country_now",
    "org_continent",
    *(f"affiliation_{i}_{part}" for i in range(1, 5) for part in ("name", "city", "country")),
)
MIN_BIRTH_YEAR = 1000
_DATE = re.compile(r"(\d{4})(?:-(\d{2})-(\d{2}))?")
_EMPTY = {"", "nan", "none", "null"}


@dataclass(frozen=True)
class NobelStats:
    """Row accounting of one `read_nobel` call: rows = facts + the three skip counts."""

    rows: int
    facts: int
    organisations: int
    missing_birth_date: int
    repeated_laureates: int
    implausible_birth_year: int = 0

    def summary(self) -> str:
        return (
            f"{self.facts} laureates from {self.rows} rows; skipped {self.organisations} organisation rows, "
            f"{self.missing_birth_date} without birth date, {self.implausible_birth_year} with an implausible "
            f"birth year, {self.repeated_laureates} repeated laureates"
        )


def read_nobel(path: str | Path) -> tuple[FactSet, NobelStats]:
    """Read the Nobel CSV (a file, or a folder holding `nobel.csv`) into birth-year facts.

    Returns the FactSet (source `nobel:<path>`) and the skip counts (also logged at INFO).
    """
    path = Path(path)
    if path.is_dir():
        path = path / "nobel.csv"
    facts: list[Fact] = []
    first_line: dict[str, tuple[int, str]] = {}
    rows = organisations = missing = repeated = 0
    implausible: list[str] = []  # "line (year)" of skipped rows
    last_year = datetime.date.today().year
    with open_text(path, encoding="utf-8-sig", newline="") as fh, utf8_text(path):
        reader = csv.DictReader(fh, strict=True)
        try:
            reader.fieldnames  # noqa: B018 - reads the header line
        except csv.Error as e:
            raise DataError(malformed_csv(path, 1, e)) from None
        missing_cols = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
        if missing_cols:
            raise DataError(f"{path}:1: missing column(s) {', '.join(missing_cols)}")
        warn_unknown_columns(log, path, reader.fieldnames or [], NOBEL_COLUMNS)
        for lineno, row in csv_rows(reader, path):  # 1-based line where the record starts
            rows += 1
            where = f"{path}:{lineno}"
            if (row.get("laureate_type") or "").strip() != "Individual":
                organisations += 1
                continue
            birth = (row.get("birth_date") or "").strip()
            if birth.lower() in _EMPTY:
                missing += 1
                continue
            m = _DATE.fullmatch(birth)
            if not m or (m.group(2) and (int(m.group(2)) > 12 or int(m.group(3)) > 31)):
                raise DataError(f"{where}: malformed birth_date {birth!r} (expected YYYY-MM-DD, e.g. 1943-00-00)")
            year = m.group(1)
            if not MIN_BIRTH_YEAR <= int(year) <= last_year:
                implausible.append(f"{lineno} ({year})")
                continue
            lid = (row.get("id") or "").strip()
            name = (row.get("full_name") or "").strip()
            if not lid or not name:
                raise DataError(f"{where}: empty {'id' if not lid else 'full_name'} for an individual laureate")
            if lid in first_line:
                first, first_year = first_line[lid]
                if first_year != year:
                    raise DataError(f"{where}: laureate {lid} born {year} here but {first_year} at line {first}")
                repeated += 1
                continue
            first_line[lid] = (lineno, year)
            facts.append(Fact(relation=BIRTH_YEAR.id, subject=name, object=year, subject_id=lid))
    if implausible:
        shown = ", ".join(implausible[:10]) + (f" and {len(implausible) - 10} more" if len(implausible) > 10 else "")
        log.warning(
            "%s: skipped %d laureate(s) whose birth year is not a plausible year (%d-%d): line %s",
            path,
            len(implausible),
            MIN_BIRTH_YEAR,
            last_year,
            shown,
        )
    stats = NobelStats(rows, len(facts), organisations, missing, repeated, len(implausible))
    log.info("%s: %s", path, stats.summary())
    return FactSet(facts=facts, relations={BIRTH_YEAR.id: BIRTH_YEAR}, source=f"nobel:{path}"), stats


def load_nobel(path: str | Path) -> FactSet:
    """The birth-year facts of `read_nobel`, without the stats."""
    return read_nobel(path)[0]
