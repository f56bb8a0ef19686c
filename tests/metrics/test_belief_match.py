"""BELIEF-ICL answer matching (factprobe.metrics.belief_match) on hand-written cases."""

from __future__ import annotations

import pytest

from factprobe.metrics import belief_match as bm


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Guitars", ("guitar",)),  # plural -> singular lemma
        ("a guitar", ("guitar",)),  # article dropped
        ("The Netherlands.", ("netherlands",)),  # article, case and punctuation dropped
        ("mice", ("mouse",)),  # irregular plural from the lookup table
        ("New York City", ("new", "york", "city")),
        ("Saint-Denis", ("saint", "denis")),  # the hyphen is punctuation
        ("an   Apple ", ("apple",)),
        ("", ()),
        ("   \n", ()),
        (".", ()),
        (None, ()),
    ],
)
def test_normalize(text, expected):
    assert bm.normalize(text) == expected


def test_normalize_many_equals_normalize_and_keeps_order():
    texts = ["Children", None, "the children", "Paris", "Children"]
    assert bm.normalize_many(texts) == [("child",), (), ("child",), ("paris",), ("child",)]
    assert [bm.normalize(t) for t in texts] == bm.normalize_many(texts)


def test_nlp_is_built_once():
    assert bm.nlp() is bm.nlp()
    assert bm.nlp().pipe_names == ["lemmatizer"]


@pytest.mark.parametrize(
    "answer, golds, expected",
    [
        ("guitars", ["guitar"], True),  # plural answer, singular gold
        ("a guitar", ["guitars"], True),  # article + plural gold
        ("GUITAR.", ["Guitar"], True),  # case and punctuation
        ("Paris, France", ["Paris"], True),  # gold contained in a longer answer
        ("Paris", ["Paris, France"], False),  # one-directional: the gold must be in the answer
        ("New York City", ["New York"], True),
        ("York", ["New York"], False),
        ("1978", ["78"], False),  # tokens, not substrings
        ("Lotus", ["Lot"], False),
        ("London", ["Paris", "London"], True),  # any gold alias
        ("", ["Paris"], False),
        ("   ", ["Paris"], False),
        (".", ["Paris"], False),  # empty answers are wrong
        ("the", ["The"], False),  # a gold that normalises to nothing never matches
        ("York New", ["New York"], False),  # order matters: a contiguous run
    ],
)
def test_accuracy_match_is_one_directional(answer, golds, expected):
    assert bm.accuracy_match(answer, golds) is expected


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ("Paris", "Paris, France", True),
        ("Paris, France", "Paris", True),  # bidirectional
        ("a guitar", "Guitars", True),
        ("London", "Paris", False),
        ("", "", False),  # empty matches nothing, not even empty
        ("Paris", " ", False),
    ],
)
def test_consistency_match_is_bidirectional(a, b, expected):
    assert bm.consistency_match(a, b) is expected
    assert bm.consistency_match(b, a) is expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Paris", True),
        ("Paris.", True),
        (" Paris.\n", True),
        ("Saint-Denis", True),
        ("1922", True),
        ("New York", False),
        ("a guitar", False),
        ("", False),
        (" . ", False),
        (None, False),
    ],
)
def test_one_word(text, expected):
    assert bm.one_word(text) is expected


def test_is_empty():
    assert bm.is_empty("") and bm.is_empty(" \t\n") and bm.is_empty(None)
    assert not bm.is_empty(".")


def test_confidence_is_the_share_of_matching_samples():
    assert bm.confidence("Paris", ["paris", "Paris, France", "London", ""]) == pytest.approx(0.5)
    assert bm.confidence("guitars", ["a guitar"] * 3 + ["piano"]) == pytest.approx(0.75)
    assert bm.confidence("", ["", "", "Paris"]) == 0.0  # an empty greedy answer matches nothing
    assert bm.confidence("Paris", []) is None
