"""Prompt construction of IC-LKE (wu2024 eq. 1, Example 1), HGP/MMP templates and EIC-LKE layout."""

import pytest

from factprobe.errors import DataError
from factprobe.facts import Fact
from factprobe.probes import ic_lke, prompt_lke


def test_ic_lke_matches_paper_example_1():
    # wu2024 Example 1: "Feynman 1918 Heisenberg 1901 Einstein" -> options " 1879", ...
    ex = [Fact("birth_year", "Feynman", "1918"), Fact("birth_year", "Heisenberg", "1901")]
    prefix = ic_lke.relation_prefix(ex)
    assert prefix == "Feynman 1918 Heisenberg 1901"
    assert ic_lke.fact_context(prefix, "Einstein") == "Feynman 1918 Heisenberg 1901 Einstein"
    assert ic_lke.option_continuation("1879") == " 1879"


def test_ic_lke_custom_separator_and_no_examples():
    ex = [Fact("P36", "France", "Paris")]
    assert ic_lke.fact_context(ic_lke.relation_prefix(ex, "\n"), "Peru", "\n") == "France\nParis\nPeru"
    assert ic_lke.fact_context("", "Peru") == "Peru"


def test_ic_lke_prompt_formats():
    ex = [Fact("P36", "A", "a"), Fact("P36", "B", "b"), Fact("P36", "C", "c")]
    # paper (the default): x1 S y1 S ... xn S yn S x, then S option
    paper = ic_lke.relation_prefix(ex, " ", "paper")
    assert paper == ic_lke.relation_prefix(ex) == "A a B b C c"
    assert ic_lke.fact_context(paper, "France", " ", "paper") + ic_lke.option_continuation("Paris") == "A a B b C c France Paris"
    # official (ZeroPrompt_LKE): pairs written "x S y " joined by ", ", the subject, S, then S option
    sep = " : "
    official = ic_lke.relation_prefix(ex, sep, "official")
    assert official == "A : a , B : b , C : c "
    ctx = ic_lke.fact_context(official, "France", sep, "official")
    assert ctx == "A : a , B : b , C : c France : "
    assert ctx + ic_lke.option_continuation("Paris", sep) == "A : a , B : b , C : c France :  : Paris"


@pytest.mark.parametrize(
    "template, ctx, cont",
    [
        ("The capital of [X] is [Y] .", "The capital of France is", " Paris"),
        ("The capital of [X] is [Y].", "The capital of France is", " Paris"),
        ("[Y] is the capital of [X] .", "", "Paris is the capital of France"),
        ("[X] , whose capital is [Y] , is big .", "France , whose capital is", " Paris , is big"),
    ],
)
def test_fill_template(template, ctx, cont):
    assert prompt_lke.fill_template(template, "France", "Paris") == (ctx, cont)


def test_fill_template_rejects_missing_slots():
    with pytest.raises(DataError, match=r"lacks \[X\] or \[Y\]"):
        prompt_lke.fill_template("The capital is [Y]", "France", "Paris")
