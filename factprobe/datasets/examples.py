"""In-context examples for IC-LKE: drawn from training facts, never from the test facts.

- `split_train_test`: when no training data is given (Nobel, countryinfo, user triples), split
  each relation's facts by *subject*, so that all facts of one subject (N-M relations) land on
  the same side and no test subject can appear as an example.
- `sample_examples`: `n` example facts of one relation from the training set, excluding every
  test subject (by subject key and by case-insensitive label, since the LPAQA training split
  shares subjects with the LAMA test facts for some relations, e.g. P530 and P190). At most one
  example per subject, in a random order; fewer than `n` when fewer subjects qualify (the caller
  warns). With `drop_self=True` it also skips "self" facts, whose subject is the object
  (`is_self_fact`): in LPAQA's P1376 (capital of) 891 of 1000 training facts read
  `Pepingen Pepingen`, and 50 such examples teach the model to copy the subject, not the relation.
- `self_example_share`: the share of a relation's training facts that are self facts, so a
  caller can report it or decide to drop them.
Both samplers are deterministic in `seed` and the relation id: the examples are a function of
(seed, relation, training facts, excluded subjects) only, never of which facts are scored.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from ..errors import ConfigError
from ..facts import Fact, FactSet
from ..seeding import stable_rng

TRAIN_FRACTION = 0.5  # without --train-data: share of each relation's facts (by subject) used for examples


def split_train_test(
    facts: FactSet, train_fraction: float | None = None, n_train: int | None = None, seed: int = 0
) -> tuple[FactSet, FactSet]:
    """Split `facts` into (train, test) per relation, by subject. Give exactly one of
    `train_fraction` (0 < f < 1, share of facts) or `n_train` (facts per relation, >= 1).

    Subjects are shuffled and moved to train until it holds at least the target number of facts,
    but a relation with two or more subjects always keeps at least one subject for test. Both
    sides keep all relations' metadata and the original fact order.
    """
    if (train_fraction is None) == (n_train is None):
        raise ConfigError("give exactly one of train_fraction or n_train")
    if train_fraction is not None and not (0.0 < train_fraction < 1.0):
        raise ConfigError(f"train_fraction must be between 0 and 1 (exclusive), got {train_fraction}")
    if n_train is not None and n_train < 1:
        raise ConfigError(f"n_train must be >= 1, got {n_train}")
    train_subjects: set[tuple[str, str]] = set()
    for rel, rel_facts in facts.by_relation().items():
        per_subject: dict[str, int] = defaultdict(int)
        for f in rel_facts:
            per_subject[f.subject_key] += 1
        target = n_train if n_train is not None else round(train_fraction * len(rel_facts))
        subjects = sorted(per_subject)
        stable_rng(seed, "split_train_test", rel).shuffle(subjects)
        limit = len(subjects) - 1 if len(subjects) > 1 else len(subjects)
        taken = 0
        for s in subjects[:limit]:
            if taken >= target:
                break
            train_subjects.add((rel, s))
            taken += per_subject[s]
    train = [f for f in facts if (f.relation, f.subject_key) in train_subjects]
    test = [f for f in facts if (f.relation, f.subject_key) not in train_subjects]
    return (
        FactSet(train, dict(facts.relations), f"{facts.source} [train split seed={seed}]"),
        FactSet(test, dict(facts.relations), f"{facts.source} [test split seed={seed}]"),
    )


def is_self_fact(fact: Fact) -> bool:
    """True when the subject is the object: equal keys (ids, else labels) or labels equal up to
    case (`str.casefold`; "Gießen" equals "Giessen")."""
    return fact.subject_key == fact.object_key or fact.subject.casefold() == fact.object.casefold()


def self_example_share(train: FactSet, relation: str) -> float:
    """Share of `relation`'s training facts that are self facts (`is_self_fact`), in [0, 1];
    0.0 when the relation has no training facts. LPAQA P1376: 891 / 1000 = 0.891."""
    facts = [f for f in train if f.relation == relation]
    return sum(map(is_self_fact, facts)) / len(facts) if facts else 0.0


def sample_examples(
    train: FactSet,
    relation: str,
    n: int,
    seed: int = 0,
    exclude_subjects: Iterable[str | Fact] = (),
    drop_self: bool = False,
) -> list[Fact]:
    """Up to `n` training facts of `relation` for an in-context prompt, one per subject.

    `exclude_subjects` holds test facts or subject strings (ids or labels); a training fact is
    excluded when its subject key equals any of them or its label matches case-insensitively.
    `drop_self=True` also excludes self facts (`is_self_fact`). Returns a list in random
    (seeded) order; shorter than `n` when too few subjects qualify. The result depends only on
    (seed, relation, the training facts in order, the excluded subjects, drop_self).
    """
    if n < 0:
        raise ConfigError(f"number of examples must be >= 0, got {n}")
    keys: set[str] = set()
    labels: set[str] = set()
    for s in exclude_subjects:
        if isinstance(s, Fact):
            keys.add(s.subject_key)
            labels.add(s.subject.casefold())
        else:
            keys.add(s)
            labels.add(s.casefold())
    by_subject: dict[str, list[Fact]] = defaultdict(list)
    for f in train:
        if f.relation != relation or (drop_self and is_self_fact(f)):
            continue
        if f.subject_key not in keys and f.subject.casefold() not in labels:
            by_subject[f.subject_key].append(f)
    rng = stable_rng(seed, "sample_examples", relation)
    subjects = sorted(by_subject)
    chosen = rng.sample(subjects, min(n, len(subjects)))
    return [rng.choice(by_subject[s]) for s in chosen]
