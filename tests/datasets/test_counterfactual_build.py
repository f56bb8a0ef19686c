"""Exemplar blocks and counterfactual answers (`factprobe.datasets.counterfactual`).

- `shuffle_answers` never shows an exemplar its own answer or another correct answer of its
  subject: property-checked over 200 seeds of random toy pools (N-M subjects with several golds,
  object ids labelled differently by different facts, spellings equal under the QA metric,
  relations with one distinct answer), and on real LPAQA training facts.
- `draw_exemplars`: deterministic in the seed, a draw of k is the first k of a draw of more,
  every answer type of the pool comes first, and the order of the pool does not matter.
(`hypothesis` is not installed in the venv, hence the seeded loops.)
"""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

import pytest

from factprobe.datasets.counterfactual import Exemplar, correct_object_keys, draw_exemplars, shuffle_answers
from factprobe.datasets.qa import QAItem, build_qa, load_question_templates
from factprobe.facts import Fact
from factprobe.metrics.qa import ANSWER_TYPES, exact_match

SEEDS = range(200)


# ------------------------------------------------------------------ toy pools
def _variant(rng: random.Random, label: str) -> str:
    """Another spelling of `label` that the QA metric (SQuAD normalisation) calls equal."""
    return rng.choice([label.upper(), label.lower(), f"the {label}", f"{label}.", f" {label} "]).strip() or label


def toy_pool(seed: int) -> tuple[dict[str, list[QAItem]], list[Fact]]:
    """({relation: train items}, facts): random relations, subjects with 1-3 correct objects (by id),
    objects whose label differs between facts (an alias or another spelling), relations with a
    single distinct answer, and answer types entity/date/number."""
    rng = random.Random(seed)
    facts: list[Fact] = []
    types: dict[str, str] = {}
    for r in range(rng.randint(1, 4)):
        rel = f"P{100 + r}"
        types[rel] = rng.choice(ANSWER_TYPES)
        n_objects = rng.choice([1, 1, 2, 3, 5, 8])  # 1: a relation with one distinct answer
        if types[rel] == "date":
            canon = {f"Q{r}_{o}": f"March {o + 1}, {1900 + o}" for o in range(n_objects)}
        elif types[rel] == "number":
            canon = {f"Q{r}_{o}": str(10 * (o + 1)) for o in range(n_objects)}
        else:
            canon = {f"Q{r}_{o}": f"Object {chr(65 + o)}" for o in range(n_objects)}
        aliases = {q: f"Alias of {lab}" for q, lab in canon.items()}
        for s in range(rng.randint(1, 10)):
            subj = f"S{r}_{s}"
            for q in rng.sample(sorted(canon), rng.randint(1, min(3, n_objects))):
                roll = rng.random()
                label = aliases[q] if roll < 0.2 else _variant(rng, canon[q]) if roll < 0.4 else canon[q]
                facts.append(Fact(rel, f"Subject {subj}", label, subj, q))
    golds: dict[tuple[str, str], dict[str, None]] = defaultdict(dict)
    for f in facts:
        golds[(f.relation, f.subject_id)][f.object] = None
    items: dict[str, list[QAItem]] = defaultdict(list)
    seen = set()
    for f in facts:  # one item per subject: its first fact, every label of every correct object as gold
        if (f.relation, f.subject_id) in seen:
            continue
        seen.add((f.relation, f.subject_id))
        gold = tuple(dict.fromkeys([f.object, *golds[(f.relation, f.subject_id)]]))
        items[f.relation].append(
            QAItem(
                f.relation,
                f.subject,
                f.object,
                f"What about {f.subject}?",
                types[f.relation],
                gold,
                f.subject_id,
                f.object_id,
                split="train",
            )
        )
    return dict(items), facts


def check_shuffle(
    exemplars: list[QAItem], shuffled: list[Exemplar], pool: dict[str, list[QAItem]], correct: dict[tuple[str, str], set[str]]
) -> int:
    """Assert the shuffle's guarantees; returns how many exemplars were shuffled."""
    assert [e.fact_id for e in shuffled] == [it.fact_id for it in exemplars]
    n = 0
    for it, ex in zip(exemplars, shuffled):
        same = pool.get(it.relation, [])
        ids = correct[(it.relation, it.subject_id or it.subject)]
        # every label the pool gives a correct object of the subject, and every gold
        correct_labels = [*it.gold, *(o.object for o in same if o.object_id in ids)]
        matches = {
            label: exact_match(label, correct_labels, it.answer_type)  # once per distinct label
            for label in {o.object for o in same if o.object_id not in ids}
        }
        wrong = [o.object for o in same if o.object_id not in ids and not matches[o.object]]
        assert ex.true_answer == it.object and ex.question == it.question and ex.relation == it.relation
        if not ex.shuffled:
            assert ex.shown_answer == it.object, ex
            assert not wrong, f"{it.fact_id}: left unshuffled although {wrong[:3]} are wrong answers"
            continue
        n += 1
        assert ex.shown_answer in {o.object for o in same}, "the shown answer comes from the same relation's pool"
        assert ex.shown_answer != it.object
        assert not exact_match(ex.shown_answer, it.gold, it.answer_type), (it.gold, ex.shown_answer)
        shown_ids = {o.object_id for o in same if o.object.casefold().strip() == ex.shown_answer.casefold().strip()}
        assert not shown_ids & ids, f"{it.fact_id}: shown {ex.shown_answer!r} names a correct object {shown_ids & ids}"
        assert not exact_match(ex.shown_answer, correct_labels, it.answer_type), (correct_labels, ex.shown_answer)
    return n


@pytest.mark.parametrize("draw", ["fact", "label"])
def test_shuffle_never_shows_a_correct_answer_over_200_seeds(draw):
    shuffled_total = unshuffled_single = 0
    for seed in SEEDS:
        pool, facts = toy_pool(seed)
        correct = correct_object_keys(facts)
        exemplars = [it for its in pool.values() for it in its]
        out = shuffle_answers(exemplars, pool, seed, correct_objects=correct, draw=draw)
        shuffled_total += check_shuffle(exemplars, out, pool, correct)
        for rel, its in pool.items():  # one distinct correct object in the relation: nothing to shuffle to
            if len({o.object_id for o in its}) == 1:
                assert all(not e.shuffled and e.shown_answer == e.true_answer for e in out if e.relation == rel)
                unshuffled_single += 1
        # deterministic, and an exemplar's shown answer does not depend on the other exemplars
        assert shuffle_answers(exemplars, pool, seed, correct_objects=correct, draw=draw) == out
        alone = shuffle_answers(exemplars[-1:], pool, seed, correct_objects=correct, draw=draw)
        assert alone == out[-1:]
        # which exemplars are shuffled does not depend on how the answer is drawn
        other = shuffle_answers(exemplars, pool, seed, correct_objects=correct, draw="label" if draw == "fact" else "fact")
        assert [e.shuffled for e in other] == [e.shuffled for e in out]
    assert shuffled_total > 500 and unshuffled_single > 20  # the generator exercises both paths


def test_fact_draw_weights_frequent_objects_and_label_draw_does_not():
    """yuan2024 4.1 draws a random TRAINING FACT's answer: an object that 8 of the 9 other facts
    share is shown about 8/9 of the time; the label draw shows each distinct answer about equally."""

    def item(i, obj, oid):
        return QAItem("P19", f"S{i}", obj, f"Where was S{i} born?", "entity", (obj,), f"S{i}", oid, split="train")

    ex = item(0, "Berlin", "Q64")
    pool = {"P19": [ex] + [item(i, "Paris", "Q90") for i in range(1, 9)] + [item(9, "Rome", "Q220")]}
    shown = {d: [shuffle_answers([ex], pool, seed, draw=d)[0].shown_answer for seed in range(400)] for d in ("fact", "label")}
    assert set(shown["fact"]) == set(shown["label"]) == {"Paris", "Rome"}
    assert shown["fact"].count("Paris") / 400 > 0.8
    assert 0.38 < shown["label"].count("Paris") / 400 < 0.62
    with pytest.raises(ValueError, match="draw must be one of fact, label"):
        shuffle_answers([ex], pool, 0, draw="uniform")


def test_shuffle_never_shows_another_label_of_a_correct_object():
    """Subject S has objects Q1 ("BBC" in its fact) and Q2; another subject's fact calls Q1 "British
    Broadcasting Corporation": shown to S, that would be a correct answer, not a counterfactual."""
    facts = [
        Fact("P1", "S", "ITV", "S", "Q2"),
        Fact("P1", "S", "BBC", "S", "Q1"),
        Fact("P1", "T", "British Broadcasting Corporation", "T", "Q1"),
        Fact("P1", "U", "the ITV", "U", "Q2"),
        Fact("P1", "V", "Channel 4", "V", "Q3"),
    ]
    items = [
        QAItem(
            "P1",
            f.subject,
            f.object,
            f"Q {f.subject}?",
            "entity",
            tuple(dict.fromkeys([f.object, *(g.object for g in facts if g.subject == f.subject)])),
            f.subject_id,
            f.object_id,
            split="train",
        )
        for f in facts
        if f.subject != "S" or f.object_id == "Q2"
    ]
    pool = {"P1": items}
    s = items[0]
    for seed in SEEDS:
        out = shuffle_answers([s], pool, seed, correct_objects=correct_object_keys(facts))[0]
        assert out.shuffled and out.shown_answer == "Channel 4", out  # the only wrong answer
    # without the facts' ids, the golds alone still keep "the ITV" (= "ITV" by the QA metric) out
    out = {shuffle_answers([s], pool, seed)[0].shown_answer for seed in SEEDS}
    assert "the ITV" not in out and "ITV" not in out


def test_shuffle_metric_equal_spellings_are_not_counterfactual():
    """Real case (LPAQA P449): "M-Net" and "Mnet" are different channels, but the QA metric calls
    them equal, so showing one for the other would be a correct answer under our own scoring."""
    a = QAItem("P449", "Show A", "M-Net", "On which network did Show A air?", "entity", ("M-Net",), "A", "Q1", split="train")
    b = QAItem("P449", "Show B", "Mnet", "On which network did Show B air?", "entity", ("Mnet",), "B", "Q2", split="train")
    c = QAItem("P449", "Show C", "CBS", "On which network did Show C air?", "entity", ("CBS",), "C", "Q3", split="train")
    for seed in range(20):
        out = shuffle_answers([a, b], {"P449": [a, b, c]}, seed)
        assert [e.shown_answer for e in out] == ["CBS", "CBS"]
    assert shuffle_answers([a], {"P449": [a, b]}, 0) == [Exemplar.of(a)]  # nothing wrong left: unshuffled


def test_shuffle_relation_with_one_distinct_answer_stays_unshuffled():
    items = [
        QAItem(
            "P30",
            f"Country {i}",
            "Europe",
            f"On which continent is Country {i}?",
            "entity",
            ("Europe",),
            f"S{i}",
            "Q46",
            split="train",
        )
        for i in range(4)
    ]
    # one spelled differently, same id
    items.append(
        QAItem(
            "P30", "Country 9", "europe", "On which continent is Country 9?", "entity", ("europe",), "S9", "Q46", split="train"
        )
    )
    out = shuffle_answers(items, {"P30": items}, 0)
    assert all(not e.shuffled and e.shown_answer == e.true_answer for e in out)
    assert out[0].to_dict() == {
        "fact_id": items[0].fact_id,
        "relation": "P30",
        "question": items[0].question,
        "shown_answer": "Europe",
        "true_answer": "Europe",
        "shuffled": False,
    }
    assert shuffle_answers(items, {}, 0) == [Exemplar.of(it) for it in items]  # no pool for the relation


# ------------------------------------------------------------------ real data
REAL_RELATIONS = ["P36", "P449", "P530", "P37"]  # 1-1, N-1 with the M-Net/Mnet pair, two N-M


@pytest.fixture(scope="module")
def real_build(real_data_root: Path):
    from factprobe.sources.lama import load_lama
    from factprobe.sources.lpaqa import load_lpaqa_train

    lama, train_dir = real_data_root / "lama", real_data_root / "lpaqa" / "trex_train"
    if not (lama / "trex").is_dir() or not train_dir.is_dir():
        pytest.skip("LAMA / LPAQA data not found")
    test = load_lama(lama, REAL_RELATIONS)
    train = load_lpaqa_train(train_dir, REAL_RELATIONS)
    return build_qa(test, train, load_question_templates(), seed=0), [*test, *train]


@pytest.mark.slow  # minutes of exact_match over the real LPAQA pools
def test_shuffle_on_real_lpaqa_training_facts(real_build):
    build, facts = real_build
    correct = correct_object_keys(facts)
    several = sum(len(correct[(it.relation, it.subject_id)]) > 1 for its in build.train.values() for it in its)
    assert several >= 50  # N-M subjects with several golds are in the pool (measured: 55)
    for seed in range(1):  # one seed: each took ~100 s of exact_match on the real pools (3 seeds: 294 s, the suite's slowest)
        for rel, items in build.train.items():
            rng = random.Random(seed)
            exemplars = rng.sample(items, min(150, len(items)))
            out = shuffle_answers(exemplars, build.train, seed, correct_objects=correct)
            n = check_shuffle(exemplars, out, build.train, correct)
            assert n >= len(exemplars) - 2, rel  # real relations have plenty of wrong answers
    # the P449 pair the metric calls equal
    p449 = {it.object: it for it in build.train["P449"]}
    if "M-Net" in p449 and "Mnet" in p449:
        for seed in SEEDS:
            shown = shuffle_answers([p449["M-Net"], p449["Mnet"]], build.train, seed, correct_objects=correct)
            assert {e.shown_answer for e in shown}.isdisjoint({"M-Net", "Mnet", "MNet", "M-net"})


def test_draws_on_real_data_are_independent_of_pool_order(real_build):
    build, _ = real_build
    pool = [it for its in build.train.values() for it in its]
    d = draw_exemplars(pool, 32, 0)
    assert draw_exemplars(list(reversed(pool)), 32, 0) == d
    assert draw_exemplars(pool, 10, 0) == d[:10]
    assert len({it.relation for it in d}) >= 3  # across relations


# ------------------------------------------------------------------ draw_exemplars
def _typed_pool(seed: int, n: int = 60) -> list[QAItem]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        t = rng.choice(["entity"] * 8 + ["date", "number"])
        rel = {"entity": rng.choice(["P19", "P36", "P106"]), "date": "P569", "number": "P1101"}[t]
        obj = {"entity": f"Obj{i}", "date": f"May {i % 28 + 1}, 19{i % 90 + 10}", "number": str(i)}[t]
        out.append(QAItem(rel, f"Subj{i}", obj, f"Question about Subj{i}?", t, (obj,), f"S{i}", f"O{i}", split="train"))
    return out


def test_draw_is_deterministic_and_prefix_closed():
    for seed in range(50):
        pool = _typed_pool(seed)
        big = draw_exemplars(pool, 32, seed)
        assert big == draw_exemplars(pool, 32, seed)
        assert len(big) == 32 and len({it.fact_id for it in big}) == 32
        for k in (0, 1, 2, 3, 10, 15, 20):
            assert draw_exemplars(pool, k, seed) == big[:k]
        assert draw_exemplars(pool, 1000, seed)[:32] == big and len(draw_exemplars(pool, 1000, seed)) == len(pool)
        assert draw_exemplars(pool, 32, seed, "known") != big  # the tag separates the draws
    assert draw_exemplars([], 10, 0) == [] and draw_exemplars(_typed_pool(0), -1, 0) == []
    # other seeds give other blocks
    assert len({tuple(it.fact_id for it in draw_exemplars(_typed_pool(0), 10, s)) for s in range(20)}) == 20


def test_draw_covers_every_answer_type_first():
    for seed in range(100):
        pool = _typed_pool(seed)
        types = {it.answer_type for it in pool}
        d = draw_exemplars(pool, 10, seed)
        assert {it.answer_type for it in d[: len(types)]} == types
        # a rare type is covered even when k is just the number of types
        assert {it.answer_type for it in draw_exemplars(pool, len(types), seed)} == types


def test_draw_is_independent_of_pool_order():
    for seed in range(100):
        pool = _typed_pool(seed)
        d = draw_exemplars(pool, 32, seed)
        shuffled = list(pool)
        random.Random(seed + 1).shuffle(shuffled)
        assert draw_exemplars(shuffled, 32, seed) == d
        assert draw_exemplars(tuple(reversed(pool)), 32, seed) == d
