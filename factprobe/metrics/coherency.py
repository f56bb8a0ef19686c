"""Coherency metrics (youssef2024, Algorithm 1 and appendix A): pure functions over result rows.

A result row is one (item, round) with at least `relation`, `round` (1 or 2), `first_correct` and
`coherent` (booleans). Following the paper:

- `coherency` is Algorithm 1's number: per relation the mean over BOTH rounds' rows, then the
  macro average over relations (every relation weighs the same, whatever its size);
- `coherency_round1` / `coherency_round2`: the same macro average over one round's rows;
- `correct_round1` / `correct_round2` (the paper's c1 / c2): the first prediction of the round is
  correct, macro-averaged over relations. Coherency is NOT conditioned on correctness (section 2:
  "regardless of its correctness"); `coherency_given_correct_round*` adds the conditioned view;
- `per_relation` and `per_cardinality` (1-1 / N-1 / N-M: the macro average over the relations of
  that type) break these down.

Empty groups give None, never NaN.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: always reported in `per_cardinality` (None scores when a run has no relation of the type)
MAIN_CARDINALITIES = ("1-1", "N-1", "N-M")


def partial_match(a: str | None, b: str | None) -> bool:
    """The paper's partial match: one string contains the other after lower-casing (and stripping).

    An empty (or all-whitespace, or None) string never matches anything, not even another empty one."""
    if a is None or b is None:
        return False
    x, y = a.strip().casefold(), b.strip().casefold()
    if not x or not y:
        return False
    return x in y or y in x


def mean(values: Iterable[Any]) -> float | None:
    """Mean of the non-None values (booleans count 0/1); None when there are none."""
    vals = [float(v) for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def macro_by_relation(
    rows: Sequence[Mapping[str, Any]], column: str, where: Any = None
) -> tuple[float | None, dict[str, float | None]]:
    """(macro average over relations, {relation: mean}) of `column` over `rows`.

    `where(row) -> bool` keeps only some rows (e.g. one round). A relation with no kept row (or only
    None values) is left out of the macro average and maps to None."""
    by_rel: dict[str, list[Any]] = defaultdict(list)
    for r in rows:
        by_rel.setdefault(r["relation"], [])
        if where is None or where(r):
            by_rel[r["relation"]].append(r.get(column))
    per = {rel: mean(vs) for rel, vs in by_rel.items()}
    return mean(per.values()), per


def _round(n: int):
    return lambda r: int(r["round"]) == n


def _both(r: Mapping[str, Any]) -> Any:
    return bool(r["first_correct"] and r["coherent"])


def _scores(rows: Sequence[Mapping[str, Any]]) -> tuple[dict[str, float | None], dict[str, dict[str, Any]]]:
    """Macro scores and per-relation scores of `rows`."""
    rows = [{**r, "all_correct": _both(r), "coherent_if_correct": r["coherent"] if r["first_correct"] else None} for r in rows]
    spec = {
        "coherency": ("coherent", None),
        "coherency_round1": ("coherent", _round(1)),
        "coherency_round2": ("coherent", _round(2)),
        "correct_round1": ("first_correct", _round(1)),
        "correct_round2": ("first_correct", _round(2)),
        "all_correct_round1": ("all_correct", _round(1)),
        "all_correct_round2": ("all_correct", _round(2)),
        "coherency_given_correct_round1": ("coherent_if_correct", _round(1)),
        "coherency_given_correct_round2": ("coherent_if_correct", _round(2)),
    }
    macro: dict[str, float | None] = {}
    per: dict[str, dict[str, Any]] = defaultdict(dict)
    for name, (col, where) in spec.items():
        macro[name], by_rel = macro_by_relation(rows, col, where)
        for rel, v in by_rel.items():
            per[rel][name] = v
    return macro, dict(per)


def summarize(rows: Sequence[Mapping[str, Any]], cardinality: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Every coherency metric of a run (module docstring).

    `cardinality` maps relation -> 1-1/N-1/N-M (relations missing from it fall under the row's own
    `cardinality` field, else "unknown")."""
    cardinality = dict(cardinality or {})
    for r in rows:
        cardinality.setdefault(r["relation"], r.get("cardinality") or "unknown")
    macro, per = _scores(rows)
    items: dict[str, set] = defaultdict(set)
    for r in rows:
        items[r["relation"]].add(r.get("fact_id", r.get("key")))
    per_relation = {rel: {"cardinality": cardinality[rel], "n_items": len(items[rel]), **per[rel]} for rel in per}
    per_cardinality: dict[str, dict[str, Any]] = {}
    seen = {cardinality[rel] for rel in per}
    for card in list(MAIN_CARDINALITIES) + sorted(seen - set(MAIN_CARDINALITIES)):
        sub = [r for r in rows if cardinality[r["relation"]] == card]
        m, _ = _scores(sub)
        rels = sorted({r["relation"] for r in sub})
        per_cardinality[card] = {"n_relations": len(rels), "n_items": sum(len(items[x]) for x in rels), **m}
    return {
        **macro,
        "n": len(rows),
        "n_items": sum(len(v) for v in items.values()),
        "n_relations": len(per),
        "per_relation": per_relation,
        "per_cardinality": per_cardinality,
    }
