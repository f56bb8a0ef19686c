"""EIC-LKE (wu2024 appendix F / C.2) on a tiny RANDOM model: layout and exact span scores."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from factprobe.facts import Fact, MCItem
from factprobe.lm.naive import naive_token_logprobs
from factprobe.lm.scorer import Scorer
from factprobe.probes.eic_lke import eic_group_segments, score_eic_group


def _item(subject, gold, opts):
    return MCItem("birth_year", subject, gold, tuple(opts), opts.index(gold), (gold,))


@pytest.fixture(scope="module")
def scorer(tiny_model_path):
    path = tiny_model_path("gpt2")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return Scorer(model, AutoTokenizer.from_pretrained(path), token_budget=32)


def test_layout_and_exact_scores(scorer):
    items = [_item("Einstein", "1879", ["1879", "1880"]), _item("Louis", "1892", ["1850", "1892"])]
    between = [[Fact("birth_year", "Heisenberg", "1901")]]
    segs, owners = eic_group_segments(scorer, items, between)
    # one sequence per option index; each holds both test items (appendix F, Example 2)
    assert len(segs) == 2 and owners == [[(0, 0), (1, 0)], [(0, 1), (1, 1)]]
    dec = scorer.tokenizer.decode(segs[0].token_ids)
    assert dec == " Einstein 1879 Heisenberg 1901 Louis 1850"
    prefix_ids = scorer.encode_context("Feynman 1918")
    prefix = scorer.prefix(prefix_ids)
    scores = score_eic_group(scorer, prefix, items, between)
    for j, seg in enumerate(segs):
        per = naive_token_logprobs(scorer.model, prefix_ids + list(seg.token_ids))[len(prefix_ids) :]
        for (i, jj), (a, b) in zip(owners[j], seg.spans):
            assert scores[i][jj] == pytest.approx(sum(per[a:b]), abs=1e-4)


def test_tuple_separator_between_packed_tuples(scorer):
    """Appendix C.2: a comma between tuples (the config default); " " gives the old comma-free layout."""
    from factprobe.probes.eic_lke import EICLKEConfig, leading_prefix

    assert EICLKEConfig().tuple_separator == ", "
    items = [_item("Einstein", "1879", ["1879", "1880"]), _item("Louis", "1892", ["1850", "1892"])]
    between = [[Fact("birth_year", "Heisenberg", "1901")]]
    segs, owners = eic_group_segments(scorer, items, between, " ", ", ")
    assert owners == [[(0, 0), (1, 0)], [(0, 1), (1, 1)]]
    assert scorer.tokenizer.decode(segs[1].token_ids) == ", Einstein 1880, Heisenberg 1901, Louis 1892"
    # the option spans cover exactly the options' tokens
    for seg, opts in zip(segs, (("1879", "1850"), ("1880", "1892"))):
        assert [scorer.tokenizer.decode(seg.token_ids[a:b]) for a, b in seg.spans] == [f" {o}" for o in opts]
    lead = [Fact("birth_year", "Feynman", "1918"), Fact("birth_year", "Curie", "1867")]
    assert leading_prefix(lead, " ", ", ") == "Feynman 1918, Curie 1867"
    assert leading_prefix(lead, " ", " ") == "Feynman 1918 Curie 1867"


def test_naive_tokens_count_one_full_sequence_per_option(scorer):
    """The naive EIC-LKE forwards each option's whole sequence, leading examples included."""
    items = [_item("Einstein", "1879", ["1879", "1880", "1881"]), _item("Louis", "1892", ["1850", "1892", "1893"])]
    between = [[Fact("birth_year", "Heisenberg", "1901")]]
    segs, _ = eic_group_segments(scorer, items, between)
    prefix = scorer.prefix(scorer.encode_context("Feynman 1918 Curie 1867"))
    before = scorer.stats.naive_tokens
    score_eic_group(scorer, prefix, items, between)
    assert scorer.stats.naive_tokens - before == 3 * len(prefix) + sum(len(s.token_ids) for s in segs)
