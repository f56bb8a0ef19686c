"""The sequences of the position study (wu2024 section 3, Figure 2): which examples, which are
replaced, and the exact text before every object. Pure: no model, no files.

A sequence is `length` (subject, object) examples of ONE relation, written as IC-LKE writes its
in-context examples (`factprobe.probes.ic_lke`, paper format: `x1 S y1 S x2 S y2 ...`, S the
separator). The clean sequence draws `length` facts with distinct subjects (one fact per subject,
case-insensitive labels; the first listed fact of an N-M subject) in a random order,
deterministically from (seed, relation).

A variant replaces `replace` of these positions (the same positions for both kinds, so that
`unknown` and `incorrect` runs with one seed are paired):
- placement `random`: `replace` distinct positions drawn from (seed, placement, relation);
- placement `block`: one contiguous run of `replace` positions whose start is drawn likewise.
What a replaced position holds:
- kind `unknown`: a FICTITIOUS subject (`fictitious_subjects`: a plausible-looking name spliced
  from the relation's real subject names, never equal, case-insensitively, to any real subject
  of any loaded source: the sequence's data, `known_facts` (e.g. the LPAQA training facts) and
  `all_subjects`) with a plausible object (an object of the same relation, drawn by seed);
- kind `incorrect`: the true subject with a WRONG object of the same relation: never an object
  that any loaded source (the sequence's data and `known_facts`) lists as correct for that
  subject in that relation (by id and by case-insensitive label). Data that is true somewhere is
  never "incorrect" or "fictitious" (LAMA lists one object per subject of P530, LPAQA others).
Kind `none` replaces nothing.

Bad input (DataError, one line naming relation, what is there and what was asked): fewer
distinct subjects than `length`; for `incorrect`, a subject for which the relation has no wrong
object; for `unknown`, too few real names to splice distinct fictitious ones from.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..errors import DataError
from ..facts import Fact
from ..probes.ic_lke import fact_context, option_continuation
from ..seeding import stable_rng

KINDS = ("none", "unknown", "incorrect")
PLACEMENTS = ("random", "block")


@dataclass(frozen=True)
class SequenceExample:
    """One position of a sequence. For a replaced position `kind` says how, and
    `original_subject`/`original_object` hold the clean sequence's example there;
    `fictitious_subject` marks a made-up subject (kind `unknown`)."""

    position: int
    subject: str
    object: str
    replaced: bool = False
    kind: str | None = None
    fictitious_subject: bool = False
    original_subject: str | None = None
    original_object: str | None = None


def distinct_subject_facts(facts: Iterable[Fact]) -> list[Fact]:
    """One fact per subject label (case-insensitive), the first listed, in the given order."""
    seen: set[str] = set()
    out = []
    for f in facts:
        key = f.subject.casefold()
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def clean_sequence(facts: Sequence[Fact], relation: str, length: int, seed: int) -> list[SequenceExample]:
    """`length` examples of `relation` with distinct subjects, in a seeded random order.
    DataError when the relation has fewer distinct subjects than `length`."""
    pool = distinct_subject_facts(f for f in facts if f.relation == relation)
    if len(pool) < length:
        raise DataError(
            f"relation {relation}: {len(pool)} facts with distinct subjects available, "
            f"{length} requested (--length {len(pool)} or fewer)"
        )
    chosen = stable_rng(seed, "icl-sequence", "examples", relation).sample(pool, length)
    return [SequenceExample(i, f.subject, f.object) for i, f in enumerate(chosen)]


def replaced_positions(length: int, replace: int, placement: str, seed: int, relation: str) -> list[int]:
    """The sorted positions to replace: `replace` random distinct ones, or one contiguous block
    with a seeded start. Equal for every kind (the draw does not depend on it)."""
    if not 0 <= replace <= length:
        raise DataError(f"relation {relation}: cannot replace {replace} of {length} examples")
    if placement not in PLACEMENTS:
        raise ValueError(f"unknown placement {placement!r}; choose one of {', '.join(PLACEMENTS)}")
    if replace == 0:
        return []
    rng = stable_rng(seed, "icl-sequence", "positions", placement, relation)
    if placement == "random":
        return sorted(rng.sample(range(length), replace))
    start = rng.randrange(length - replace + 1)
    return list(range(start, start + replace))


def _splice(a: list[str], b: list[str], multi_word: bool) -> str:
    """A new name from two real ones: all but the last word of `a` and the last word of `b`
    (names of several words, e.g. people), else the first half of `a`'s first word and the
    second half of `b`'s last word."""
    if multi_word and len(a) >= 2 and len(b) >= 2:
        return " ".join(a[:-1] + b[-1:])
    wa, wb = a[0], b[-1]
    return wa[: max(1, (len(wa) + 1) // 2)] + wb[len(wb) // 2 :]


def fictitious_subjects(
    real: Sequence[str], n: int, rng: random.Random, forbidden: Iterable[str] = (), relation: str = ""
) -> list[str]:
    """`n` distinct plausible-looking made-up names spliced from the names in `real`
    (`_splice`), none equal (case-insensitively) to a name in `real` or `forbidden`.
    DataError when `real` cannot give `n` of them."""
    words = [s.split() for s in sorted(set(real)) if s.split()]
    if not words:
        raise DataError(f"relation {relation}: no subject names to make fictitious subjects from")
    multi = 2 * sum(len(w) >= 2 for w in words) >= len(words)
    taken = {s.casefold() for s in real} | {s.casefold() for s in forbidden}
    out: list[str] = []
    budget = 200 * n + 1000
    while len(out) < n and budget > 0:
        budget -= 1
        name = _splice(rng.choice(words), rng.choice(words), multi)
        if name.strip() and name.casefold() not in taken:
            taken.add(name.casefold())
            out.append(name)
    if len(out) < n:
        raise DataError(
            f"relation {relation}: could make only {len(out)} fictitious subjects from {len(words)} real names, {n} requested"
        )
    return out


def _correct_objects(facts: Iterable[Fact], relation: str) -> dict[str, set[str]]:
    """subject label (casefold) -> object ids and labels (casefold) listed as correct."""
    out: dict[str, set[str]] = defaultdict(set)
    for f in facts:
        if f.relation == relation:
            out[f.subject.casefold()] |= {f.object_key, f.object.casefold()}
    return out


def build_sequence(
    facts: Sequence[Fact],
    relation: str,
    length: int,
    replace: int,
    kind: str,
    placement: str,
    seed: int,
    all_subjects: Iterable[str] = (),
    known_facts: Iterable[Fact] = (),
) -> list[SequenceExample]:
    """The sequence of one relation (module docstring). `facts`: every loaded fact (all relations
    may be given; other relations' subjects are never used as fictitious names); `all_subjects`:
    more real names a fictitious subject must not equal; `known_facts`: facts of other loaded
    sources (never drawn into the sequence): an incorrect object is wrong against them too, and a
    fictitious subject equals none of their subjects. Kind `none` ignores `replace`."""
    known = list(known_facts)
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; choose one of {', '.join(KINDS)}")
    clean = clean_sequence(facts, relation, length, seed)
    if kind == "none":
        return clean
    positions = replaced_positions(length, replace, placement, seed, relation)
    rel_facts = [f for f in facts if f.relation == relation]
    objects: dict[str, str] = {}
    for f in rel_facts:
        objects.setdefault(f.object_key, f.object)
    object_list = sorted(objects.items())
    rng = stable_rng(seed, "icl-sequence", kind, relation)
    out = list(clean)
    if kind == "unknown":
        real = sorted({f.subject for f in rel_facts})
        names = fictitious_subjects(
            real, len(positions), rng, forbidden={f.subject for f in (*facts, *known)} | set(all_subjects), relation=relation
        )
        for p, name in zip(positions, names):
            obj = rng.choice(object_list)[1]
            out[p] = SequenceExample(p, name, obj, True, kind, True, clean[p].subject, clean[p].object)
        return out
    correct = _correct_objects((*facts, *known), relation)
    for p in positions:
        ex = clean[p]
        bad = correct[ex.subject.casefold()] | {ex.object.casefold()}
        wrong = [label for key, label in object_list if key not in bad and label.casefold() not in bad]
        if not wrong:
            raise DataError(
                f"relation {relation}: no wrong object for subject {ex.subject!r} "
                f"({len(object_list)} distinct objects, all correct for it)"
            )
        out[p] = SequenceExample(p, ex.subject, rng.choice(wrong), True, kind, False, ex.subject, ex.object)
    return out


def sequence_texts(examples: Sequence[SequenceExample], separator: str = " ") -> list[str]:
    """The exact text before each example's object (IC-LKE's paper format): for position i,
    `x1 S y1 S ... S xi S`. `texts[i] + examples[i].object` is the sequence up to that object,
    and the whole sequence is `texts[-1] + examples[-1].object`."""
    out = []
    text = ""
    for ex in examples:
        context = fact_context(text, ex.subject, separator)
        out.append(context + separator)
        text = context + option_continuation(ex.object, separator)
    return out
