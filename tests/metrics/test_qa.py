"""QA metrics (FACT-Bench, Yuan et al. 2024): SQuAD normalisation, EM, F1, Contains, dates,
numbers, empty predictions, popularity buckets and the summary; every expected value by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from factprobe.metrics.qa import (
    canonical_dates,
    contains,
    exact_match,
    f1,
    is_empty,
    normalize_answer,
    normalize_date,
    normalize_typed,
    popularity_bucket,
    score_answer,
    summarize_qa,
)


# ------------------------------------------------------------------ SQuAD normalisation
@pytest.mark.parametrize(
    "text, expected",
    [
        ("The Eiffel  Tower!", "eiffel tower"),
        ("An apple a day", "apple day"),
        ("theater", "theater"),  # articles only as whole words
        ("U.S.A.", "usa"),
        ("  Royal\tNavy\n", "royal navy"),
        ("Apple Inc.", "apple inc"),
        ("Jean-Pierre", "jeanpierre"),  # SQuAD drops punctuation without a space
    ],
)
def test_normalize_answer_is_squad(text, expected):
    assert normalize_answer(text) == expected


def test_aliases_case_articles_and_punctuation():
    golds = ["Apple Inc.", "Apple"]  # every correct object / alias of an N-M pair
    assert exact_match("apple", golds) == 1.0
    assert exact_match("Apple Inc", golds) == 1.0
    assert exact_match("the Seine", ["Seine"]) == 1.0
    assert exact_match("A Seine", ["The Seine"]) == 1.0
    assert exact_match("Seine river", ["Seine"]) == 0.0
    assert exact_match("Oxygen", ["carbon", "hydrogen", "oxygen"]) == 1.0
    assert exact_match("USA", ["U.S.A."]) == 1.0


def test_f1_partial_overlap_by_hand():
    # pred [royal, navy, fleet] vs gold [royal, navy]: 2 common; P = 2/3, R = 1,
    # F1 = 2 * (2/3) * 1 / (2/3 + 1) = (4/3) / (5/3) = 0.8
    assert f1("the Royal Navy fleet", ["Royal Navy"]) == pytest.approx(0.8)
    # pred [motors, of, america] vs gold [american, motors, corporation]: 1 common;
    # P = 1/3, R = 1/3, F1 = 1/3
    assert f1("Motors of America", ["American Motors Corporation"]) == pytest.approx(1 / 3)
    # max over golds: "American Motors" vs gold 2 [american, motors]: F1 = 1
    assert f1("American Motors", ["American Motors Corporation", "American Motors"]) == 1.0
    # repeated tokens count once per occurrence (Counter intersection): pred [paris, paris],
    # gold [paris]: common 1, P = 1/2, R = 1, F1 = 2/3
    assert f1("Paris Paris", ["Paris"]) == pytest.approx(2 / 3)
    assert f1("Berlin", ["Paris"]) == 0.0


def test_contains_on_token_boundaries():
    assert contains("It is in Paris, France.", ["Paris"]) == 1.0
    assert contains("The answer is the Royal Navy", ["Royal Navy"]) == 1.0
    assert contains("Lotus", ["Lot"]) == 0.0  # not inside a longer word
    assert contains("Iran", ["Ira"]) == 0.0
    assert contains("Berlin", ["Paris", "Berlin"]) == 1.0
    assert contains("Navy Royal", ["Royal Navy"]) == 0.0  # contiguous, in order


def test_empty_predictions_score_zero():
    for pred in ("", "   ", "\n\t", None):
        assert is_empty(pred)
        assert score_answer(pred, ["Paris"]) == {"em": 0.0, "f1": 0.0, "contains": 0.0, "empty": True}
    assert not is_empty(" Paris ")
    assert score_answer(" Paris ", ["Paris"]) == {"em": 1.0, "f1": 1.0, "contains": 1.0, "empty": False}


def test_gold_made_of_articles_is_still_matched():
    # "The The" normalises to "" under SQuAD; it is compared with the articles kept
    assert exact_match("The The", ["The The"]) == 1.0
    assert contains("the band The The", ["The The"]) == 1.0
    assert exact_match("The", ["The The"]) == 0.0


def test_bad_arguments():
    with pytest.raises(ValueError, match="answer_type"):
        exact_match("x", ["x"], "string")
    with pytest.raises(ValueError, match="golds is empty"):
        f1("x", [])
    assert exact_match("Paris", "Paris") == 1.0  # one gold as a plain string


# ------------------------------------------------------------------ dates
@pytest.mark.parametrize(
    "text, expected",
    [
        ("1964-03-10", "March 10, 1964"),
        ("1964/03/10", "March 10, 1964"),
        ("10 March 1964", "March 10, 1964"),
        ("10th of March, 1964", "March 10, 1964"),
        ("March 10, 1964", "March 10, 1964"),
        ("march 10 1964", "March 10, 1964"),
        ("Mar 10 1964", "March 10, 1964"),
        ("Mar. 10th, 1964.", "March 10, 1964"),
        ("Sept 3 2001", "September 3, 2001"),
        ("1964-3-1", "March 1, 1964"),
        ("March 1964", "March 1964"),  # month-year keeps its precision
        ("Mar 1964", "March 1964"),
        ("1964-03", "March 1964"),
        ("1964-03-00", "March 1964"),
        ("1964", "1964"),  # a year stays a year
        ("1943-00-00", "1943"),  # Nobel CSV: year known, day unknown
        ("1964-02-29", "February 29, 1964"),  # leap year
        ("10/03/1964", None),  # ambiguous d/m order: not a date
        ("03.10.1964", None),
        ("1963-02-29", None),  # impossible dates
        ("1964-13-01", None),
        ("1964/03", None),
        ("yesterday", None),
    ],
)
def test_normalize_date(text, expected):
    assert normalize_date(text) == expected


def test_dates_written_both_ways():
    golds = ["1964-03-10"]
    for pred in ("March 10, 1964", "10 March 1964", "1964-03-10", "Mar 10 1964", "10th of March 1964"):
        assert exact_match(pred, golds, "date") == 1.0, pred
        assert exact_match(golds[0], [pred], "date") == 1.0, pred
    # as entities the forms differ: "march 10 1964" vs "19640310"
    assert exact_match("March 10, 1964", golds, "entity") == 0.0
    # dates inside a longer answer are rewritten too: Contains finds them
    assert canonical_dates("born on 10 March 1964 in Ohio") == "born on March 10, 1964 in Ohio"
    assert contains("He was born on 10 March 1964.", golds, "date") == 1.0
    assert exact_match("He was born on 10 March 1964.", golds, "date") == 0.0
    # an ambiguous numeric form is never read as a date
    assert exact_match("10/03/1964", golds, "date") == 0.0
    # a coarser prediction: pred [1964] vs gold [march, 10, 1964]: P = 1, R = 1/3, F1 = 0.5
    assert exact_match("1964", ["March 10, 1964"], "date") == 0.0
    assert contains("1964", ["March 10, 1964"], "date") == 0.0
    assert f1("1964", ["1964-03-10"], "date") == pytest.approx(0.5)
    assert exact_match("March 1964", ["1964-03"], "date") == 1.0


# ------------------------------------------------------------------ numbers
def test_numbers_units_and_thousands_separators():
    assert exact_match("1,000", ["1000"], "number") == 1.0
    assert exact_match("1000", ["1,000"], "number") == 1.0
    assert exact_match("1,234,567", ["1234567"], "number") == 1.0
    # the paper's example: gold "78", verbose prediction "78 floors": EM 0, Contains 1,
    # F1: pred [78, floors] vs gold [78]: P = 1/2, R = 1, F1 = 2/3
    assert exact_match("78 floors", ["78"], "number") == 0.0
    assert contains("78 floors", ["78"], "number") == 1.0
    assert f1("78 floors", ["78"], "number") == pytest.approx(2 / 3)
    assert contains("1978", ["78"], "number") == 0.0
    # a gold with a unit needs the unit ("500 km", not "500"), any spelling of it
    assert exact_match("500 kilometres", ["500 km"], "number") == 1.0
    assert exact_match("500km", ["500 km"], "number") == 1.0
    assert exact_match("500", ["500 km"], "number") == 0.0
    assert contains("500", ["500 km"], "number") == 0.0
    assert exact_match("98 degrees Celsius", ["98 °C"], "number") == 1.0
    # decimals and signs survive (SQuAD alone reads "1.5" as "15")
    assert exact_match("1.5", ["15"], "entity") == 1.0
    assert exact_match("1.5", ["15"], "number") == 0.0
    assert exact_match("1.50", ["1.5"], "number") == 1.0
    assert exact_match("78.0", ["78"], "number") == 1.0
    assert exact_match("-5", ["5"], "number") == 0.0
    assert exact_match("\u22125", ["-5"], "number") == 1.0
    assert normalize_typed("In 1922.", "number") == "in 1922"
    assert exact_match("1922", ["1922"], "number") == 1.0
    assert contains("born June 19, 1922", ["1922"], "number") == 1.0


# ------------------------------------------------------------------ popularity
def test_popularity_bucket_by_quartiles():
    # known values 1..4: q1 = 1.75, q3 = 3.25 (linear interpolation)
    assert popularity_bucket([1, 2, 3, 4, None, float("nan")]) == [
        "bottom-25%",
        "middle",
        "middle",
        "top-25%",
        "unknown",
        "unknown",
    ]
    # 1..8: q1 = 2.75, q3 = 6.25
    assert popularity_bucket(range(1, 9)) == ["bottom-25%"] * 2 + ["middle"] * 4 + ["top-25%"] * 2
    assert popularity_bucket([5.0, 5.0, 5.0]) == ["middle"] * 3  # all tied: neither end
    assert popularity_bucket([None, None]) == ["unknown", "unknown"]
    assert popularity_bucket([]) == []


# ------------------------------------------------------------------ summary
def _rows() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "relation": ["P36", "P36", "P36", "P19", "birth_year"],
            "answer_type": ["entity", "entity", "entity", "entity", "number"],
            "popularity_bucket": ["top-25%", "bottom-25%", "top-25%", None, "unknown"],
            "em": [1.0, 0.0, 0.0, 1.0, 0.0],
            "f1": [1.0, 0.5, 0.0, 1.0, 0.0],
            "contains": [1.0, 1.0, 0.0, 1.0, 0.0],
            "empty": [False, False, True, False, True],
        }
    )


def test_summarize_qa_by_hand():
    s = summarize_qa(_rows())
    assert s["n"] == 5 and s["n_empty"] == 2
    assert s["em"] == pytest.approx(2 / 5)
    assert s["f1"] == pytest.approx(2.5 / 5)
    assert s["contains"] == pytest.approx(3 / 5)
    # per relation: P36 em 1/3, f1 0.5, contains 2/3; P19 1, 1, 1; birth_year 0, 0, 0
    assert s["per_relation"] == {
        "P19": {"n": 1, "n_empty": 0, "em": 1.0, "f1": 1.0, "contains": 1.0},
        "P36": {"n": 3, "n_empty": 1, "em": pytest.approx(1 / 3), "f1": pytest.approx(0.5), "contains": pytest.approx(2 / 3)},
        "birth_year": {"n": 1, "n_empty": 1, "em": 0.0, "f1": 0.0, "contains": 0.0},
    }
    assert s["macro_em"] == pytest.approx((1 / 3 + 1 + 0) / 3)
    assert s["macro_f1"] == pytest.approx((0.5 + 1 + 0) / 3)
    assert s["macro_contains"] == pytest.approx((2 / 3 + 1 + 0) / 3)
    assert s["per_answer_type"]["entity"] == {"n": 4, "n_empty": 1, "em": 0.5, "f1": pytest.approx(2.5 / 4), "contains": 0.75}
    assert s["per_answer_type"]["number"]["n"] == 1
    assert set(s["per_popularity"]) == {"top-25%", "bottom-25%", "unknown"}
    assert s["per_popularity"]["top-25%"] == {"n": 2, "n_empty": 1, "em": 0.5, "f1": 0.5, "contains": 0.5}
    assert s["per_popularity"]["unknown"]["n"] == 2  # None counts as unknown
    for v in (s["em"], s["macro_em"], s["per_relation"]["P36"]["em"]):
        assert type(v) is float
    assert type(s["n"]) is int and type(s["per_relation"]["P36"]["n_empty"]) is int


def test_summarize_qa_empty_and_without_popularity():
    empty = _rows().iloc[:0].drop(columns=["popularity_bucket"])
    s = summarize_qa(empty)
    assert s["n"] == 0 and s["n_empty"] == 0
    assert s["em"] is None and s["f1"] is None and s["contains"] is None and s["macro_em"] is None
    assert s["per_relation"] == {} and s["per_answer_type"] == {}
    assert "per_popularity" not in s
    assert not any(isinstance(v, float) and math.isnan(v) for v in s.values())


def test_summarize_qa_missing_columns():
    with pytest.raises(ValueError, match="contains"):
        summarize_qa(_rows().drop(columns=["contains"]))
