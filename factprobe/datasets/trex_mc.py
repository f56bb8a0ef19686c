"""Multiple-choice items for LAMA/T-REx style relations (IC-LKE, Wu et al. 2024, section 2.2).

For each fact: the gold object plus `n_choices - 1` distractors drawn from the relation's other
objects. `facts` are the test facts; `known` are the other loaded facts (e.g. the LPAQA training
file), which are never turned into items but count as knowledge. Rules, all case-insensitive
(`str.casefold`):
- the pool is the relation's unique object labels over the test facts (all of them, not only
  the sampled ones) AND the known facts; labels equal up to case are one pool entry;
- every correct object of the subject, known from the test OR the known facts, is excluded, so
  N-M relations never offer a second right answer. Subjects match by id; where one side lacks
  an id they match by case-insensitive label. Objects are excluded by id (via
  `FactSet.correct_objects`) and by label;
- no option is a substring of another: a candidate that contains, or is contained in, an
  already chosen option (the gold included) is rejected and the next random candidate is
  drawn. The gold is never replaced;
- the gold's position is drawn uniformly.

Which relations are kept: those whose pool holds at least `n_choices` labels (and at least
`min_unique_objects` when given); `MCBuild.pool_sizes` has every relation's pool size, and a
relation with too small a pool is reported in `dropped` as e.g.
`"P413: distractor pool has 21 objects; --choices 100 needs 100, the largest supported is 21"`.
Within a kept relation, a fact for which fewer than `n_choices - 1` valid distractors remain
after the exclusions and substring rejections is skipped, counted in `MCBuild.skipped` and, by
cause, in `MCBuild.skip_reasons` (`SKIP_CORRECT`, `SKIP_CLASHES`); a relation left with no items
is reported in `dropped`.

Determinism: every fact draws from its own `random.Random` seeded with a sha256 of
(seed, relation, fact id), never Python's salted `hash()`. The same facts and seed give the
same items in any process; one fact's options do not depend on which other facts are built.
"""

from __future__ import annotations

import bisect
import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..errors import ConfigError
from ..facts import Fact, FactSet, MCItem
from ..seeding import stable_rng
from .cap import sample_facts_per_relation

log = logging.getLogger(__name__)


SKIP_CORRECT = "too few distractors once the subject's correct objects are excluded"
SKIP_CLASHES = "too few distractors once substring clashes are also rejected"


@dataclass
class MCBuild:
    """Result of a build: the items, relations dropped entirely {relation: reason}, the number
    of facts skipped inside kept relations {relation: count} and why {relation: {reason: count}}
    (reasons `SKIP_CORRECT`, `SKIP_CLASHES`), and the distractor pool size of every relation
    {relation: number of unique object labels}."""

    items: list[MCItem]
    dropped: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    skip_reasons: dict[str, dict[str, int]] = field(default_factory=dict)
    pool_sizes: dict[str, int] = field(default_factory=dict)


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


class _CorrectObjects:
    """Every correct object of a (relation, subject), over several fact lists.

    Subjects match by key (id, else label); a fact without a subject id also matches any fact
    of the same relation whose subject label is equal up to case, so a file without ids still
    contributes to one with ids (and vice versa). Two subjects that both have ids never match
    by label: equal labels can name different entities.
    """

    def __init__(self, facts: Iterable[Fact]) -> None:
        self.by_key: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
        self.by_label: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
        self.by_label_without_id: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
        for f in facts:
            label_key = (f.relation, f.subject.casefold())
            self.by_key[(f.relation, f.subject_key)].setdefault(f.object_key, f.object)
            self.by_label[label_key].setdefault(f.object_key, f.object)
            if f.subject_id is None:
                self.by_label_without_id[label_key].setdefault(f.object_key, f.object)

    def of(self, fact: Fact) -> dict[str, str]:
        """{object_key: object_label} of every correct object of `fact`'s subject, in first-seen
        order (the gold included)."""
        label_key = (fact.relation, fact.subject.casefold())
        out = dict(self.by_key.get((fact.relation, fact.subject_key), {}))
        out.setdefault(fact.object_key, fact.object)
        extra = self.by_label.get(label_key, {}) if fact.subject_id is None else self.by_label_without_id.get(label_key, {})
        for key, label in extra.items():
            out.setdefault(key, label)
        return out


def _item(fact: Fact, pool: _ObjectPool, correct: dict[str, str], n_choices: int, seed: int) -> MCItem | str:
    """One item for `fact`, or the skip reason (`SKIP_CORRECT`, `SKIP_CLASHES`) when fewer than
    n_choices - 1 valid distractors exist."""
    gold_i = pool.index[fact.object.casefold()]
    blocked = {gold_i}
    for oid, label in correct.items():
        blocked |= pool.index_of_id.get(oid, set())
        if label.casefold() in pool.index:
            blocked.add(pool.index[label.casefold()])
    need = n_choices - 1
    if len(pool) - len(blocked) < need:
        return SKIP_CORRECT
    blocked |= pool.clashes[gold_i]
    if len(pool) - len(blocked) < need:
        return SKIP_CLASHES
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
        return SKIP_CLASHES
    gold_index = rng.randrange(n_choices)
    options = [pool.labels[i] for i in chosen]
    options.insert(gold_index, fact.object)
    return MCItem(
        relation=fact.relation,
        subject=fact.subject,
        gold=fact.object,
        options=tuple(options),
        gold_index=gold_index,
        correct_objects=tuple(dict.fromkeys(correct.values())),
        subject_id=fact.subject_id,
        object_id=fact.object_id,
    )


def small_pool_reason(relation: str, pool_size: int, n_choices: int, min_unique_objects: int | None = None) -> str | None:
    """Why `relation` cannot be built from a pool of `pool_size` labels, or None when it can.

    The pool includes the gold, so `--choices k` needs k labels and the largest supported
    `--choices` is the pool size.
    """
    if pool_size < n_choices:
        return (
            f"{relation}: distractor pool has {pool_size} objects; --choices {n_choices} needs {n_choices}, "
            f"the largest supported is {pool_size}"
        )
    if min_unique_objects is not None and pool_size < min_unique_objects:
        return f"{relation}: distractor pool has {pool_size} objects; min_unique_objects asks for at least {min_unique_objects}"
    return None


def build_mc(
    facts: FactSet,
    n_choices: int = 100,
    seed: int = 0,
    max_facts_per_relation: int | None = None,
    min_unique_objects: int | None = None,
    known: FactSet | None = None,
) -> MCBuild:
    """Build multiple-choice items for every relation in `facts` (rules in the module docstring).

    `facts` are the test facts: only they become items. `known` (e.g. the training facts) adds
    to each relation's distractor pool and to each subject's correct objects, never items; its
    relations without test facts are ignored. `max_facts_per_relation` draws the test facts before
    anything is built, with the framework's cap (`factprobe.datasets.cap.sample_facts_per_relation`):
    skipped facts and dropped relations are counted among the drawn facts, and options are built only
    for them; the pool and the correct objects always come from all facts.
    Repeated facts (same `fact_id`) give one item. Raises ConfigError for `n_choices < 2` or
    `min_unique_objects < n_choices`.
    """
    if n_choices < 2:
        raise ConfigError(f"n_choices must be >= 2, got {n_choices}")
    if min_unique_objects is not None and min_unique_objects < n_choices:
        raise ConfigError(f"min_unique_objects ({min_unique_objects}) must be >= n_choices ({n_choices})")
    known_facts = list(known) if known is not None else []
    correct = _CorrectObjects([*facts, *known_facts])
    known_by_relation = FactSet(known_facts).by_relation()
    test_by_relation = sample_facts_per_relation(facts, max_facts_per_relation, seed).by_relation()
    build = MCBuild(items=[])
    for rel, rel_facts in facts.by_relation().items():
        pool = _ObjectPool(rel_facts + known_by_relation.get(rel, []))
        build.pool_sizes[rel] = len(pool)
        too_small = small_pool_reason(rel, len(pool), n_choices, min_unique_objects)
        if too_small:
            build.dropped[rel] = too_small
            continue
        seen: set[str] = set()
        made = 0
        reasons: dict[str, int] = defaultdict(int)
        for f in test_by_relation.get(rel, []):
            if f.fact_id in seen:
                continue
            seen.add(f.fact_id)
            item = _item(f, pool, correct.of(f), n_choices, seed)
            if isinstance(item, str):
                reasons[item] += 1
                continue
            build.items.append(item)
            made += 1
        if reasons:
            build.skipped[rel] = sum(reasons.values())
            build.skip_reasons[rel] = dict(reasons)
            log.warning(
                "%s: skipped %d of %d facts with fewer than %d valid distractors: %s",
                rel,
                build.skipped[rel],
                len(seen),
                n_choices - 1,
                dict(reasons),
            )
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
    known: FactSet | None = None,
) -> tuple[list[MCItem], dict[str, str]]:
    """`build_mc` returning only (items, dropped {relation: reason})."""
    build = build_mc(facts, n_choices, seed, max_facts_per_relation, min_unique_objects, known)
    return build.items, build.dropped
