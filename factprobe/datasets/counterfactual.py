"""Exemplar blocks for QA prompts and their counterfactual (shuffled) answers (yuan2024 sections 4.1-4.2).

- `draw_exemplars(pool, k, seed, tag)`: k QA items drawn once from a pool across relations,
  deterministic in (seed, tag, pool). The first item of each answer type present in the pool
  comes first (yuan2024 B.1: exemplars "considering coverage for all 3 answer types"), then the
  rest at random; a draw of k is the first k of a draw of more (k = 10 is a prefix of k = 32).
- `shuffle_answers(exemplars, answer_pool, seed, correct_objects=..., draw=...)`: each exemplar's
  shown answer is replaced by the answer of another training fact of the SAME relation
  ("inner-property shuffle"), never by its own true answer and never by another correct answer
  of its subject. `draw="fact"` (default, yuan2024 4.1: "random answers chosen from the 5k
  training set" within the property type) picks one of the relation's admissible training FACTS
  uniformly and shows its answer, so an object that many facts share is drawn more often;
  `draw="label"` picks uniformly among the distinct admissible answer labels (factprobe's
  behaviour before issue 20, a deviation kept as an option). "Correct" is judged as the QA metrics judge an answer: a label is excluded
  when it is an exact match (`metrics.qa.exact_match`: SQuAD normalisation, dates, numbers) for
  any gold label of the exemplar, or for any label the pool gives an object that is correct for
  the subject by id (the exemplar's own object id, and, with `correct_objects` (from
  `correct_object_keys(facts)`), every correct object id of the subject: an N-M subject's second
  object may be labelled differently by another subject's fact, "BBC" vs "British Broadcasting
  Corporation"). A relation with no such answer (fewer than two distinct answers) keeps its
  exemplars unshuffled, and `Exemplar.shuffled` says so.

The same rules build the counterfactual fine-tuning set (`factprobe.datasets.known_unknown`).
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from ..facts import Fact
from ..metrics.qa import exact_match
from .qa import QAItem

#: (relation, subject key) -> object keys of every correct object of that subject
CorrectObjects = Mapping[tuple[str, str], Collection[str]]


@dataclass(frozen=True)
class Exemplar:
    """One exemplar of a prompt: its question, the answer shown, and the true (first gold) answer."""

    fact_id: str
    relation: str
    question: str
    shown_answer: str
    true_answer: str
    shuffled: bool = False

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def of(cls, item: QAItem) -> Exemplar:
        """The item as an unshuffled exemplar (its true answer shown)."""
        return cls(item.fact_id, item.relation, item.question, item.object, item.object, False)


def _rng(seed: int, tag: str) -> np.random.Generator:
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, zlib.crc32(tag.encode("utf-8"))])


def draw_exemplars(pool: Sequence[QAItem], k: int, seed: int, tag: str = "regular") -> list[QAItem]:
    """`min(k, len(pool))` items of `pool` (see the module docstring). The order of `pool` does
    not matter: items are first sorted by (relation, fact_id)."""
    items = sorted(pool, key=lambda it: (it.relation, it.fact_id))
    if k <= 0 or not items:
        return []
    rng = _rng(seed, tag)
    order = [int(i) for i in rng.permutation(len(items))]
    first: list[int] = []
    seen: set[str] = set()
    for i in order:  # one item per answer type, in a random order of types
        if items[i].answer_type not in seen:
            seen.add(items[i].answer_type)
            first.append(i)
    rest = [i for i in order if i not in set(first)]
    return [items[i] for i in (first + rest)[:k]]


def correct_object_keys(facts: Iterable[Fact]) -> dict[tuple[str, str], set[str]]:
    """{(relation, subject key): {object key of every correct object}} over `facts` (pass the test
    and the training facts: a subject's correct objects are those of both)."""
    out: dict[tuple[str, str], set[str]] = defaultdict(set)
    for f in facts:
        out[(f.relation, f.subject_key)].add(f.object_key)
    return dict(out)


def _subject_key(item: QAItem) -> str:
    return item.subject_id or item.subject


#: how a counterfactual answer is drawn: a random admissible training fact's answer (the paper), or
#: a random distinct admissible label
DRAWS = ("fact", "label")


def _wrong_answers(
    item: QAItem, pool: Sequence[QAItem], correct_objects: CorrectObjects | None = None, draw: str = "label"
) -> list[str]:
    """Answers of `pool` (the item's relation) that are not correct for the item's subject (see the
    module docstring), sorted: each distinct label once (`draw="label"`), or one entry per
    admissible fact, so a label repeats as often as facts carry it (`draw="fact"`)."""
    same = [o for o in pool if o.relation == item.relation]
    ids = {item.object_id or item.object}
    if correct_objects is not None:
        ids |= set(correct_objects.get((item.relation, _subject_key(item)), ()))
    # every label that names a correct answer: the golds, and the pool's labels of correct objects
    correct = list(dict.fromkeys([*item.gold, *(o.object for o in same if (o.object_id or o.object) in ids)]))
    out: dict[str, str] = {}  # casefolded label -> the first admissible spelling
    per_fact: list[str] = []  # each admissible fact's own answer
    for other in same:
        label = other.object
        key = label.casefold().strip()
        if not key or (other.object_id or other.object) in ids:
            continue
        if key not in out:
            if exact_match(label, correct, item.answer_type) >= 1.0:
                continue
            out[key] = label
        per_fact.append(label)
    return sorted(per_fact) if draw == "fact" else sorted(out.values())


def shuffle_answers(
    exemplars: Sequence[QAItem],
    answer_pool: Mapping[str, Sequence[QAItem]],
    seed: int,
    tag: str = "shuffle",
    correct_objects: CorrectObjects | None = None,
    draw: str = "fact",
) -> list[Exemplar]:
    """Counterfactual exemplars: each shown answer drawn from the wrong answers of its relation in
    `answer_pool` ({relation: train items}); unshuffled (`shuffled=False`) where none exists.
    `correct_objects` ({(relation, subject key): correct object keys}, `correct_object_keys`)
    adds the subjects' other correct objects by id. `draw` ("fact", the paper's, or "label"; see
    the module docstring) decides how the answer is drawn; which exemplars stay unshuffled does
    not depend on it. Deterministic in (seed, tag, draw, exemplar fact ids, pool): an exemplar gets
    the same shown answer in every block it appears in. The label draw is the draw of earlier
    versions, answer for answer."""
    if draw not in DRAWS:
        raise ValueError(f"draw must be one of {', '.join(DRAWS)}, got {draw!r}")
    out = []
    for ex in exemplars:
        wrong = _wrong_answers(ex, answer_pool.get(ex.relation, ()), correct_objects, draw)
        if not wrong:
            out.append(Exemplar.of(ex))
            continue
        pick = wrong[int(_rng(seed, f"{tag}|{ex.fact_id}").integers(len(wrong)))]
        out.append(Exemplar(ex.fact_id, ex.relation, ex.question, pick, ex.object, True))
    return out
