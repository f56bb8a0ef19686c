"""Nobel-MC: birth-year items whose candidates are the years 1800-1999 (IC-LKE, Wu et al. 2024).

Candidates are the years `first_year..last_year` as 4-digit strings (200 by default). With
`n_choices=None` every item offers all of them; with `n_choices=k` the gold plus `k - 1` years
drawn from the rest of the range (per fact, deterministically from `seed` and the fact id).
Options are listed in chronological order: the scorer ranks every candidate by its
log-probability, so order carries no cue, and equal option lists make items easy to compare.
Other correct years of the same subject (none in clean data) are left out of the options.

A fact whose object is not a year inside the range is skipped and counted in `MCBuild.skipped`
and, by cause, in `MCBuild.skip_reasons` (`SKIP_OUT_OF_RANGE`; `SKIP_TOO_FEW_YEARS` when other
correct years leave fewer than `n_choices - 1`) (on the real Nobel file births run from 1817 to
1997, so none is); a relation left with no items is reported in `MCBuild.dropped`.
`MCBuild.pool_sizes` holds the number of candidate years per relation.
"""

from __future__ import annotations

import logging
import re

from ..errors import ConfigError
from ..facts import FactSet, MCItem
from ..seeding import stable_rng
from .trex_mc import MCBuild

log = logging.getLogger(__name__)

SKIP_OUT_OF_RANGE = "object is not a year within the candidate range"
SKIP_TOO_FEW_YEARS = "too few candidate years once the subject's other correct years are excluded"
FIRST_YEAR = 1800
LAST_YEAR = 1999
_YEAR = re.compile(r"\d{4}")


def year_candidates(first_year: int = FIRST_YEAR, last_year: int = LAST_YEAR) -> list[str]:
    """The candidate years as strings, in order. Raises ConfigError for an empty range."""
    if not (1000 <= first_year <= last_year <= 9999):
        raise ConfigError(f"year range must be 4-digit years with first <= last, got {first_year}-{last_year}")
    return [str(y) for y in range(first_year, last_year + 1)]


def _skip(build: MCBuild, relation: str, reason: str) -> None:
    build.skipped[relation] = build.skipped.get(relation, 0) + 1
    reasons = build.skip_reasons.setdefault(relation, {})
    reasons[reason] = reasons.get(reason, 0) + 1


def build_nobel_mc(
    facts: FactSet,
    n_choices: int | None = None,
    seed: int = 0,
    first_year: int = FIRST_YEAR,
    last_year: int = LAST_YEAR,
) -> MCBuild:
    """Birth-year items for every fact in `facts` (rules in the module docstring).

    Raises ConfigError when `n_choices` is < 2 or larger than the number of candidate years.
    """
    years = year_candidates(first_year, last_year)
    if n_choices is not None and not (2 <= n_choices <= len(years)):
        raise ConfigError(f"n_choices must be between 2 and {len(years)} for years {first_year}-{last_year}, got {n_choices}")
    in_range = set(years)
    correct = facts.correct_objects()
    build = MCBuild(items=[])
    for rel, rel_facts in facts.by_relation().items():
        build.pool_sizes[rel] = len(years)
        seen: set[str] = set()
        made = 0
        for f in rel_facts:
            if f.fact_id in seen:
                continue
            seen.add(f.fact_id)
            if not (_YEAR.fullmatch(f.object) and f.object in in_range):
                _skip(build, rel, SKIP_OUT_OF_RANGE)
                continue
            others = {label for label in correct[(rel, f.subject_key)].values() if label != f.object}
            pool = [y for y in years if y not in others]
            if n_choices is not None:
                rest = [y for y in pool if y != f.object]
                if len(rest) < n_choices - 1:
                    _skip(build, rel, SKIP_TOO_FEW_YEARS)
                    continue
                picked = stable_rng(seed, "nobel_mc", rel, f.fact_id).sample(rest, n_choices - 1)
                pool = sorted(picked + [f.object])
            build.items.append(
                MCItem(
                    relation=rel,
                    subject=f.subject,
                    gold=f.object,
                    options=tuple(pool),
                    gold_index=pool.index(f.object),
                    correct_objects=tuple(correct[(rel, f.subject_key)].values()),
                    subject_id=f.subject_id,
                    object_id=f.object_id,
                )
            )
            made += 1
        if build.skipped.get(rel):
            log.warning(
                "%s: skipped %d facts whose year lies outside %d-%d (or too few other years)",
                rel,
                build.skipped[rel],
                first_year,
                last_year,
            )
        if not made:
            build.dropped[rel] = f"{rel}: none of its {len(seen)} facts has a year within {first_year}-{last_year}"
    return build


def build_nobel_mc_items(
    facts: FactSet,
    n_choices: int | None = None,
    seed: int = 0,
    first_year: int = FIRST_YEAR,
    last_year: int = LAST_YEAR,
) -> tuple[list[MCItem], dict[str, str]]:
    """`build_nobel_mc` returning only (items, dropped {relation: reason})."""
    build = build_nobel_mc(facts, n_choices, seed, first_year, last_year)
    return build.items, build.dropped
