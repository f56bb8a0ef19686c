"""The per-relation cap (`--max-facts-per-relation`): which test facts a capped run keeps. One rule.

The cap counts **facts**, not items: a fact with several items (one per template, per setting, ...)
is kept or left out whole. Per relation, the candidates are the distinct `fact_id`s of the items in
item order; when there are more than `max_facts`, the kept ones are drawn by
`stable_rng(seed, draw, relation).sample(range(number of candidates), max_facts)` (`draw` is
`"sample_facts"` unless a dataset names its own, `Prepared.cap_draw`), and every item of a kept fact
stays, in the order the items came. Equal items, seed and cap give equal kept items in every process;
a relation with at most `max_facts` facts is left as it is, so capping twice changes nothing.

`cap_items` is what the framework applies to every probe's items right after `prepare`
(`factprobe.framework.contract`). `sample_facts_per_relation` is the same draw over a `FactSet`: the
builders whose draw decides more than which items stay call it before they build (the
multiple-choice builds, whose skipped facts and dropped relations are counted among the drawn facts
and whose 100-option items are built only for them; QA, whose items join the multiple-choice ones by
fact id). The framework's cap then finds nothing left to remove.

A dataset whose items are not the test facts one to one (coherency asks one item per subject,
BELIEF one per subject-relation pair with templates) names `SOURCE_DRAW` as its `cap_draw`: the cap
then draws over the facts the multiple-choice probes of the same options test (`cap_facts`: the test
facts, or without `--train-data` the test side of their training split), exactly as
`sample_facts_per_relation` does, and keeps the items of the drawn facts (`cap_to_drawn_facts`). Every probe that reads the same
source with the same relations, seed and cap therefore covers the same facts (less those it has no
item for), which is what a knowledge map joins on; a draw over each probe's own candidates would give
each probe other facts (issue 39 item 6).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ConfigError
from ..facts import FactSet
from ..seeding import stable_rng

#: the draw every cap uses unless a dataset keeps an older name (`Prepared.cap_draw`)
DEFAULT_DRAW = "sample_facts"
#: `Prepared.cap_draw` of the datasets whose cap draws over the test facts, not over their items
#: (`cap_to_drawn_facts`): their capped runs cover the facts the multiple-choice and QA builds cover
SOURCE_DRAW = "source_facts"


def check_cap(max_facts: int | None) -> None:
    """Raise ConfigError for a cap below 1 (None: no cap)."""
    if max_facts is not None and max_facts < 1:
        raise ConfigError(f"max_facts_per_relation must be >= 1, got {max_facts}")


def drawn_positions(n: int, max_facts: int | None, seed: int, relation: str, draw: str = DEFAULT_DRAW) -> set[int]:
    """Positions (0..n-1) of the candidates a relation keeps: all of them when `max_facts` is None
    or at least `n`, else `max_facts` drawn from (seed, draw, relation). Raises ConfigError for a
    cap below 1."""
    if max_facts is None:
        return set(range(n))
    check_cap(max_facts)
    if n <= max_facts:
        return set(range(n))
    return set(stable_rng(seed, draw, relation).sample(range(n), max_facts))


def cap_items(
    items: Mapping[str, Sequence[Any]], max_facts: int | None, seed: int = 0, draw: str = DEFAULT_DRAW
) -> dict[str, list[Any]]:
    """{relation: items} keeping at most `max_facts` facts (by `fact_id`) per relation, every item of
    a kept fact, in order (module docstring). None keeps everything."""
    out: dict[str, list[Any]] = {}
    for rel, its in items.items():
        ids = list(dict.fromkeys(it.fact_id for it in its))
        keep = drawn_positions(len(ids), max_facts, seed, rel, draw)
        if len(keep) == len(ids):
            out[rel] = list(its)
            continue
        kept = {ids[i] for i in keep}
        out[rel] = [it for it in its if it.fact_id in kept]
    return out


def facts_per_relation(items: Mapping[str, Sequence[Any]]) -> dict[str, int]:
    """{relation: number of distinct fact ids among its items}."""
    return {rel: len({it.fact_id for it in its}) for rel, its in items.items()}


def sample_facts_per_relation(facts: FactSet, max_facts_per_relation: int | None, seed: int = 0) -> FactSet:
    """Keep at most `max_facts_per_relation` facts per relation of `facts`, drawn as `cap_items`
    draws (`"sample_facts"`, over each relation's facts in file order); kept facts stay in their
    original order. None keeps all (and returns `facts` itself)."""
    if max_facts_per_relation is None:
        return facts
    check_cap(max_facts_per_relation)
    positions: dict[str, list[int]] = defaultdict(list)
    for i, f in enumerate(facts.facts):
        positions[f.relation].append(i)
    keep: set[int] = set()
    for rel, idx in positions.items():
        keep.update(idx[j] for j in drawn_positions(len(idx), max_facts_per_relation, seed, rel))
    return FactSet(
        facts=[f for i, f in enumerate(facts.facts) if i in keep], relations=dict(facts.relations), source=facts.source
    )


def cap_to_drawn_facts(
    items: Mapping[str, Sequence[Any]], test: FactSet, max_facts: int | None, seed: int = 0
) -> tuple[dict[str, list[Any]], dict[str, str]]:
    """`SOURCE_DRAW`'s cap: the facts `sample_facts_per_relation(test, max_facts, seed)` keeps, and of
    `items` those whose `fact_id` is among them, in order. Returns ({relation: kept items}, {relation:
    why it was left out}) where a relation keeps no item (none of its drawn facts has one). None keeps
    everything. Capping twice changes nothing: the draw does not depend on the items."""
    if max_facts is None:
        return {rel: list(its) for rel, its in items.items()}, {}
    drawn = {f.fact_id for f in sample_facts_per_relation(test, max_facts, seed).facts}
    out: dict[str, list[Any]] = {}
    emptied: dict[str, str] = {}
    for rel, its in items.items():
        kept = [it for it in its if it.fact_id in drawn]
        if kept:
            out[rel] = kept
        elif its:
            emptied[rel] = f"{rel}: none of the {max_facts} test facts the cap drew (seed {seed}) has an item"
    return out, emptied


def cap_facts(test: FactSet, train_data: str | None, seed: int) -> FactSet:
    """The facts the multiple-choice and QA probes draw `--max-facts-per-relation` from, given a run's
    `test` facts (already selected to its relations): `test` itself with `--train-data`, else the test
    side of their training split (`mc_dataset.load_test_and_train`). Derived, never stored: the same
    test facts, option and seed give the same facts, so capping a saved dataset again changes nothing."""
    if train_data:
        return test
    from .examples import TRAIN_FRACTION, split_train_test

    return split_train_test(test, train_fraction=TRAIN_FRACTION, seed=seed)[1]


def cap_prepared_items(
    items: Mapping[str, Sequence[Any]], test: FactSet, base: Any, draw: str
) -> tuple[dict[str, list[Any]], dict[str, str]]:
    """The framework's cap of `base` (a `BaseConfig`: max_facts_per_relation, seed, train_data) under
    `draw` (a `Prepared.cap_draw`): `cap_to_drawn_facts` over `cap_facts(test, ...)` for `SOURCE_DRAW`,
    else `cap_items` over the items' own facts. Returns (items, relations left out with why)."""
    if draw == SOURCE_DRAW:
        universe = test if base.max_facts_per_relation is None else cap_facts(test, base.train_data, base.seed)
        return cap_to_drawn_facts(items, universe, base.max_facts_per_relation, base.seed)
    return cap_items(items, base.max_facts_per_relation, base.seed, draw), {}
