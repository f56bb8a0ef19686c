"""Issue 29 item 6 on the real data (LAMA T-REx + the LPAQA training facts): data that is true in
some loaded source is never an "incorrect" example, and no "fictitious" subject is a real subject of
any loaded source. Today's data has such cases (P530 lists one object per country in LAMA and more in
LPAQA; "Papan" is a P36 subject in LPAQA): the test first shows they exist without `known_facts`."""

from __future__ import annotations

import pytest

from factprobe.sources import load_facts
from factprobe.studies.sequence_data import build_sequence, distinct_subject_facts

pytestmark = pytest.mark.slow

SEEDS = (0, 1, 2)  # 3 seeds x 41 relations x 40 replaced = 4,920 incorrect examples


@pytest.fixture(scope="module")
def sources(real_data_root):
    lama = load_facts("lama", str(real_data_root / "lama"))
    train = load_facts("lpaqa-train", str(real_data_root / "lpaqa" / "trex_train"))
    return lama, train


def _examples(lama, kind: str, known=()):
    """Every replaced example of every LAMA relation and seed (length 200, or all distinct subjects)."""
    out = []
    for rel, facts in sorted(lama.by_relation().items()):
        length = min(200, len(distinct_subject_facts(facts)))
        for seed in SEEDS:
            seq = build_sequence(lama.facts, rel, length, min(40, length), kind, "random", seed, known_facts=known)
            out += [(rel, e) for e in seq if e.replaced]
    return out


def test_incorrect_objects_are_wrong_in_every_loaded_source(sources):
    lama, train = sources
    true = {(f.relation, f.subject.casefold(), f.object.casefold()) for f in (*lama.facts, *train.facts)}

    def true_ones(examples):
        return [(rel, e.subject, e.object) for rel, e in examples if (rel, e.subject.casefold(), e.object.casefold()) in true]

    assert {rel for rel, _, _ in true_ones(_examples(lama, "incorrect"))} == {"P530"}  # the data has the trap
    fixed = _examples(lama, "incorrect", known=train.facts)
    assert len(fixed) == 4920 and true_ones(fixed) == []


def test_fictitious_subjects_are_no_real_subject_of_any_loaded_source(sources):
    lama, train = sources
    real = {f.subject.casefold() for f in (*lama.facts, *train.facts)}
    assert any(e.subject.casefold() in real for _, e in _examples(lama, "unknown"))  # e.g. P36 "Papan" today
    fixed = _examples(lama, "unknown", known=train.facts)
    assert fixed and all(e.fictitious_subject and e.subject.casefold() not in real for _, e in fixed)
