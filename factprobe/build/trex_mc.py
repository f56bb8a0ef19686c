"""Multiple-choice items for LAMA/T-REx style relations (IC-LKE, Wu et al. 2024, section 2.2).

For each fact: the gold object plus `n_choices - 1` distractors drawn from the relation's other
objects. Rules, all case-insensitive (`str.casefold`):
- the pool is the relation's unique object labels (over all its facts, not only the sampled
  ones); labels equal up to case are one pool entry;
- every correct object of the subject (by object id via `FactSet.correct_objects`, and by
  label) is excluded, so N-M relations never offer a second right answer;
- no option is a substring of another: a candidate that contains, or is contained in, an
  already chosen option (the gold included) is rejected and the next random candidate is
  drawn. The gold is never replaced;
- the gold's position is drawn uniformly.

Which relations are kept: those with at least `n_choices` unique object labels (and at least
`min_unique_objects` when given); others are reported in `dropped` as e.g.
`"P30: 6 unique objects < 100 choices"`. Within a kept relation, a fact for which fewer than
`n_choices - 1` valid distractors remain after the exclusions and substring rejections is skipped
and counted in `MCBuild.skipped`; a relation left with no items is reported in `dropped`.

Determinism: every fact draws from its own `random.Random` seeded with a sha256 of
(seed, relation, fact id), never Python's salted `hash()`. The same facts and seed give the
same items in any process; one fact's options do not depend on which other facts are built.
"""
from __future__ import annotations

import bisect
import hashlib
import logging
import random
from collections import defaultdict
from dataclasses import dataclass, field

from ..errors import ConfigError
from ..facts import Fact, FactSet, MCItem

log = logging.getLogger(__name__)


def stable_seed(*parts: object) -> int:
    """A 64-bit seed from `parts` via sha256: equal in every process (unlike `hash()`)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big")


def stable_rng(*parts: object) -> random.Random:
    """A `random.Random` seeded with `stable_seed(*parts)`."""
    return random.Random(stable_seed(*parts))


@dataclass
class MCBuild:
    """Result of a build: the items, relations dropped entirely {relation: reason}, and the
    number of facts skipped inside kept relations {relation: count}."""

    items: list[MCItem]
    dropped: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)


def sample_facts_per_relation(facts: FactSet, max_facts_per_relation: int | None, seed: int = 0) -> FactSet:
    """Keep at most `max_facts_per_relation` facts per relation, drawn deterministically from
    `seed` and the relation id; kept facts stay in their original order. None keeps all."""
    if max_facts_per_relation is None:
        return facts
    if max_facts_per_relation < 1:
        raise ConfigError(f"max_facts_per_relation must be >= 1, got {max_facts_per_relation}")
    keep: set[int] = set()
    positions: dict[str, list[int]] = defaultdict(list)
    for i, f in enumerate(facts.facts):
        positions[f.relation].append(i)
    for rel, idx in positions.items():
        if len(idx) <= max_facts_per_relation:
            keep.update(idx)
        else:
            keep.update(stable_rng(seed, "sample_facts", rel).sample(idx, max_facts_per_relation))
    return FactSet(
        facts=[f for i, f in enumerate(facts.facts) if i in keep], relations=dict(facts.relations), source=facts.source
    )


class _ObjectPool:
    """The unique object labels of one relation and which of them clash as substrings."""

    def __init__(self, facts: list[Fact]) -> None:
        variants: dict[str, set[str]] = defaultdict(set)
        ids: dict[str, set[str]] = defaultdict(set)
        for f in facts:
            key = f.object.casefold()
            variants[key].add(f.object)
            ids[key].add(f.object_key)
        self.keys = sorted(variants)
        self.labels = [min(variants[k]) for k in self.keys]  # deterministic surface form
        self.index = {k: i for i, k in enumerate(self.keys)}
        self.index_of_id: dict[str, set[int]] = defaultdict(set)
        for k, i in self.index.items():
            for oid in ids[k]:
                self.index_of_id[oid].add(i)
        self.clashes = self._substring_clashes(self.keys)

    @staticmethod
    def _substring_clashes(keys: list[str]) -> list[set[int]]:
        """clashes[i]: indices j != i with keys[i] in keys[j] or keys[j] in keys[i].

        One joined string and `str.find` keep this near-linear for ~500 labels."""
        sep = "\x00"
        starts, pos = [], 0
        for k in keys:
            starts.append(pos)
            pos += len(k) + 1
        joined = sep.join(keys)
        clashes: list[set[int]] = [set() for _ in keys]
        for i, k in enumerate(keys):
            if sep in k or not k:
                continue
            at = joined.find(k)
            while at != -1:
                j = bisect.bisect_right(starts, at) - 1
                if j != i:
                    clashes[i].add(j)
                    clashes[j].add(i)
                at = joined.find(k, at + 1)
        return clashes

    def __len__(self) -> int:
        return len(self.keys)


def _item(fact: Fact, pool: _ObjectPool, correct: dict[str, str], n_choices: int, seed: int) -> MCItem | None:
    """One item for `fact`, or None when fewer than n_choices - 1 valid distractors exist."""
    gold_i = pool.index[fact.object.casefold()]
    blocked = {gold_i} | pool.clashes[gold_i]
    for oid, label in correct.items():
        blocked |= pool.index_of_id.get(oid, set())
        if label.casefold() in pool.index:
            blocked.add(pool.index[label.casefold()])
    need = n_choices - 1
    if len(pool) - len(blocked) < need:
        return None
    rng = stable_rng(seed, "trex_mc", fact.relation, fact.fact_id)
    order = list(range(len(pool)))
    chosen: list[int] = []
    for k in range(len(order)):  # lazy Fisher-Yates: stop as soon as enough are accepted
        j = rng.randrange(k, len(order))
        order[k], order[j] = order[j], order[k]
        cand = order[k]
        if cand in blocked:
            continue
        chosen.append(cand)
        blocked.add(cand)
        blocked |= pool.clashes[cand]
        if len(chosen) == need:
            break
    else:
        return None
    gold_index = rng.randrange(n_choices)
    options = [pool.labels[i] for i in chosen]
    options.insert(gold_index, fact.object)
    return MCItem(
        relation=fact.relation, subject=fact.subject, gold=fact.object, options=tuple(options),
        gold_index=gold_index, correct_objects=tuple(dict.fromkeys(correct.values())),
        subject_id=fact.subject_id, object_id=fact.object_id,
    )


def build_mc(
    facts: FactSet,
    n_choices: int = 100,
    seed: int = 0,
    max_facts_per_relation: int | None = None,
    min_unique_objects: int | None = None,
) -> MCBuild:
    """Build multiple-choice items for every relation in `facts` (rules in the module docstring).

    `max_facts_per_relation` samples the test facts (`sample_facts_per_relation`); the
    distractor pool and the correct objects always come from all facts. Repeated facts (same
    `fact_id`) give one item. Raises ConfigError for `n_choices < 2` or
    `min_unique_objects < n_choices`.
    """
    if n_choices < 2:
        raise ConfigError(f"n_choices must be >= 2, got {n_choices}")
    if min_unique_objects is not None and min_unique_objects < n_choices:
        raise ConfigError(f"min_unique_objects ({min_unique_objects}) must be >= n_choices ({n_choices})")
    threshold = min_unique_objects or n_choices
    correct = facts.correct_objects()
    all_by_relation = facts.by_relation()
    test_by_relation = sample_facts_per_relation(facts, max_facts_per_relation, seed).by_relation()
    build = MCBuild(items=[])
    for rel, rel_facts in all_by_relation.items():
        pool = _ObjectPool(rel_facts)
        if len(pool) < threshold:
            what = f"{n_choices} choices" if threshold == n_choices else f"min_unique_objects {threshold}"
            build.dropped[rel] = f"{rel}: {len(pool)} unique objects < {what}"
            continue
        seen: set[str] = set()
        made = skipped = 0
        for f in test_by_relation.get(rel, []):
            if f.fact_id in seen:
                continue
            seen.add(f.fact_id)
            item = _item(f, pool, correct[(rel, f.subject_key)], n_choices, seed)
            if item is None:
                skipped += 1
                continue
            build.items.append(item)
            made += 1
        if skipped:
            build.skipped[rel] = skipped
            log.warning("%s: skipped %d of %d facts with fewer than %d valid distractors", rel, skipped, len(seen), n_choices - 1)
        if not made:
            build.dropped[rel] = (
                f"{rel}: none of its {len(seen)} facts has {n_choices - 1} valid distractors "
                f"after excluding correct objects and substring clashes"
            )
    return build


def build_mc_items(
    facts: FactSet,
    n_choices: int = 100,
    seed: int = 0,
    max_facts_per_relation: int | None = None,
    min_unique_objects: int | None = None,
) -> tuple[list[MCItem], dict[str, str]]:
    """`build_mc` returning only (items, dropped {relation: reason})."""
    build = build_mc(facts, n_choices, seed, max_facts_per_relation, min_unique_objects)
    return build.items, build.dropped
