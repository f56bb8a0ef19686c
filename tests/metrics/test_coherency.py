"""Coherency metrics (youssef2024): partial match, macro averages, per-cardinality, hand-computed."""

import json
import math

import pytest

from factprobe.metrics.coherency import macro_by_relation, mean, partial_match, summarize


@pytest.mark.parametrize(
    "a, b, want",
    [
        ("Paris", "Paris", True),
        ("paris", "PARIS", True),  # case-insensitive
        ("University of Bern", "Bern", True),  # b in a
        ("Bern", "University of Bern", True),  # a in b: both directions
        ("  Bern ", "bern", True),  # surrounding whitespace is ignored
        ("Berlin", "Bern", False),
        ("", "", False),  # an empty string never matches, not even another empty one
        ("", "Paris", False),
        ("Paris", "", False),
        ("   ", "Paris", False),
        (None, "Paris", False),
        ("Straße", "STRASSE", True),  # casefold, not lower()
    ],
)
def test_partial_match(a, b, want):
    assert partial_match(a, b) is want


def test_mean_ignores_none_and_is_none_when_empty():
    assert mean([True, False, None, True]) == pytest.approx(2 / 3)
    assert mean([]) is None and mean([None]) is None


def row(rel, fact, rnd, correct, coherent, card=None):
    r = {"relation": rel, "fact_id": fact, "round": rnd, "first_correct": correct, "coherent": coherent}
    if card:
        r["cardinality"] = card
    return r


# Hand-worked table. A (1-1): 2 items; B (N-1): 1 item; C (N-M): 3 items.
ROWS = [
    row("A", "a1", 1, True, True),
    row("A", "a1", 2, True, False),
    row("A", "a2", 1, False, True),
    row("A", "a2", 2, False, False),
    row("B", "b1", 1, True, False),
    row("B", "b1", 2, False, False),
    row("C", "c1", 1, True, True),
    row("C", "c1", 2, True, True),
    row("C", "c2", 1, False, False),
    row("C", "c2", 2, True, True),
    row("C", "c3", 1, False, False),
    row("C", "c3", 2, False, True),
]
CARDS = {"A": "1-1", "B": "N-1", "C": "N-M"}


def test_macro_by_relation_weighs_relations_equally():
    macro, per = macro_by_relation(ROWS, "coherent")
    # per relation over both rounds: A 2/4, B 0/2, C 4/6
    assert per == pytest.approx({"A": 0.5, "B": 0.0, "C": 4 / 6})
    assert macro == pytest.approx((0.5 + 0.0 + 4 / 6) / 3)  # 0.3889, not the micro 6/12 = 0.5
    macro1, per1 = macro_by_relation(ROWS, "coherent", where=lambda r: r["round"] == 1)
    assert per1 == pytest.approx({"A": 1.0, "B": 0.0, "C": 1 / 3}) and macro1 == pytest.approx(4 / 9)


def test_summary_hand_computed():
    m = summarize(ROWS, CARDS)
    assert m["coherency"] == pytest.approx((0.5 + 0.0 + 4 / 6) / 3)
    assert m["coherency_round1"] == pytest.approx((1.0 + 0.0 + 1 / 3) / 3)
    assert m["coherency_round2"] == pytest.approx((0.0 + 0.0 + 1.0) / 3)
    assert m["correct_round1"] == pytest.approx((0.5 + 1.0 + 1 / 3) / 3)  # c1
    assert m["correct_round2"] == pytest.approx((0.5 + 0.0 + 2 / 3) / 3)  # c2
    # both the first prediction correct and coherent: A r1 a1; C r1 c1; C r2 c1, c2
    assert m["all_correct_round1"] == pytest.approx((0.5 + 0.0 + 1 / 3) / 3)
    assert m["all_correct_round2"] == pytest.approx((0.0 + 0.0 + 2 / 3) / 3)
    # conditioned on a correct first step: A r1 1/1, B r1 0/1, C r1 1/1 -> 2/3; r2: A 0/1, B none, C 2/2
    assert m["coherency_given_correct_round1"] == pytest.approx(2 / 3)
    assert m["coherency_given_correct_round2"] == pytest.approx(0.5)
    assert m["per_relation"]["B"]["coherency_given_correct_round2"] is None
    assert (m["n"], m["n_items"], m["n_relations"]) == (12, 6, 3)
    assert m["per_relation"]["C"] == pytest.approx(
        {
            "cardinality": "N-M",
            "n_items": 3,
            "coherency": 4 / 6,
            "coherency_round1": 1 / 3,
            "coherency_round2": 1.0,
            "correct_round1": 1 / 3,
            "correct_round2": 2 / 3,
            "all_correct_round1": 1 / 3,
            "all_correct_round2": 2 / 3,
            "coherency_given_correct_round1": 1.0,
            "coherency_given_correct_round2": 1.0,
        }
    )


def test_per_cardinality_is_the_macro_average_over_that_type():
    cards = {"A": "N-1", "B": "N-1", "C": "N-M"}  # A and B together
    m = summarize(ROWS, cards)
    n1 = m["per_cardinality"]["N-1"]
    assert n1["n_relations"] == 2 and n1["n_items"] == 3
    assert n1["coherency"] == pytest.approx((0.5 + 0.0) / 2)
    assert n1["coherency_round1"] == pytest.approx((1.0 + 0.0) / 2)
    assert n1["correct_round1"] == pytest.approx((0.5 + 1.0) / 2)
    assert m["per_cardinality"]["N-M"]["coherency"] == pytest.approx(4 / 6)
    # a type without relations is reported with None scores, never NaN
    one = m["per_cardinality"]["1-1"]
    assert one["n_relations"] == 0 and one["coherency"] is None and one["correct_round2"] is None


def test_cardinality_falls_back_to_the_rows_and_empty_input_is_none_not_nan():
    m = summarize([row("X", "x", 1, True, True, card="1-N"), row("X", "x", 2, False, False, card="1-N")])
    assert m["per_cardinality"]["1-N"]["coherency"] == 0.5
    empty = summarize([], {})
    assert empty["coherency"] is None and empty["n"] == 0 and empty["per_relation"] == {}
    text = json.dumps(empty)
    assert "NaN" not in text and not any(isinstance(v, float) and math.isnan(v) for v in empty.values())
