"""The scorer equals a naive full-sequence forward within 1e-4 (fp32), on tiny RANDOM models and
on the real SmolLM2 / Gemma-3 models. Random-model numbers are only used for equality checks."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from factprobe.lm.naive import naive_logprob, naive_token_logprobs
from factprobe.lm.scorer import ChoiceRequest, Scorer, Segment, split_trailing_whitespace

TOL = 1e-4

PREFIX = "France Paris Spain Madrid Japan Tokyo Kenya Nairobi"
REQUESTS = [
    # shares the prefix; candidates share token prefixes; single- and multi-token candidates
    ChoiceRequest(PREFIX + " Germany", [" Berlin", " Bern", " Ber", " Bonn am Rhein", " B"]),
    # unicode and a long entity
    ChoiceRequest(
        PREFIX + " Côte d'Ivoire",
        [" Yamoussoukro", " Zürich", " 東京都", " Αθήνα", " Santa Cruz de la Sierra in the Plurinational State of Bolivia"],
    ),
    # trailing space in the context moves to the continuation
    ChoiceRequest(PREFIX + " Italy ", ["Rome", "Roma"]),
    # does not extend the shared prefix: scored with its own prefix
    ChoiceRequest("Q: capital of Peru? A:", [" Lima", " Cusco"]),
]


def _load(path):
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return model, tok


def _max_diff(model, tok, scorer_kwargs=None) -> float:
    scorer = Scorer(model, tok, **(scorer_kwargs or {}))
    got = scorer.score_choices(REQUESTS, shared_prefix=PREFIX)
    worst = 0.0
    for req, scores in zip(REQUESTS, got):
        assert scores.shape == (len(req.options),)
        for opt, value in zip(req.options, scores):
            ref = naive_logprob(model, tok, req.context, opt)
            assert value < 0
            worst = max(worst, abs(ref - value))
    return worst


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
@pytest.mark.parametrize("budget", [8, 64, 4096])
def test_tiny_random_models_match_naive(tiny_model_path, kind, budget):
    model, tok = _load(tiny_model_path(kind))
    assert _max_diff(model, tok, {"token_budget": budget, "head_chunk": 7}) <= TOL


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_segments_with_spans_match_token_logprobs(tiny_model_path, kind):
    """EIC-style segments: span sums equal the naive per-token log-probs of the full sequence."""
    model, tok = _load(tiny_model_path(kind))
    scorer = Scorer(model, tok, token_budget=16)
    prefix_ids = scorer.encode_context("Paris France Rome Italy")
    tails = [scorer.encode_continuation(" Madrid Spain Bern Switzerland"), scorer.encode_continuation(" Lima Peru")]
    prefix = scorer.prefix(prefix_ids)
    segs = [Segment(t, -1, spans=[(0, 2), (1, len(t))]) for t in tails]
    got = scorer.score_segments(prefix, segs)
    for t, sums in zip(tails, got):
        full = naive_token_logprobs(model, prefix_ids + t)
        per = full[len(prefix_ids) :]
        assert sums[0] == pytest.approx(sum(per[0:2]), abs=TOL)
        assert sums[1] == pytest.approx(sum(per[1:]), abs=TOL)


def test_extend_is_two_level_sharing(tiny_model_path):
    model, tok = _load(tiny_model_path("llama"))
    scorer = Scorer(model, tok)
    base = scorer.prefix("France Paris Spain Madrid")
    ext = scorer.extend(base, scorer.encode_continuation(" Peru"))
    ids = list(ext.token_ids)
    full = scorer.prefix(ids)
    assert torch.allclose(ext.next_logprobs, full.next_logprobs, atol=TOL)


def test_tokenization_fallback_is_exact(tiny_model_path):
    """A candidate whose joint encoding rewrites the context's last token is scored by a full forward."""
    model, tok = _load(tiny_model_path("gpt2"))
    scorer = Scorer(model, tok)
    # find a context/continuation pair whose joint tokenization changes the context tokens
    ctx, cand = None, None
    for c, y in [("Paris and Fran", "ce"), ("we saw Par", "is"), ("in Ber", "lin"), ("the capit", "al"), ("to T", "okyo")]:
        if tok(c + y)["input_ids"][: len(tok(c)["input_ids"])] != tok(c)["input_ids"]:
            ctx, cand = c, y
            break
    if ctx is None:
        pytest.skip("this tokenizer merged no test pair across the boundary")
    (scores,) = scorer.score_choices([ChoiceRequest(ctx, [cand, " x"])])
    assert scorer.stats.fallbacks == 1
    assert scores[0] == pytest.approx(naive_logprob(model, tok, ctx, cand), abs=TOL)


def test_split_trailing_whitespace():
    assert split_trailing_whitespace("a b ", "c") == ("a b", " c")
    assert split_trailing_whitespace("a b\n\t", "c") == ("a b", "\n\tc")
    assert split_trailing_whitespace("a", " c") == ("a", " c")


def test_empty_option_is_an_error(tiny_model_path):
    model, tok = _load(tiny_model_path("gpt2"))
    with pytest.raises(ValueError, match="empty continuation"):
        Scorer(model, tok).score_choices([ChoiceRequest("France", [" Paris", ""])])


def test_context_too_long_is_refused(tiny_model_path):
    from factprobe.errors import ContextTooLongError

    model, tok = _load(tiny_model_path("gpt2"))
    scorer = Scorer(model, tok, max_length=16)
    with pytest.raises(ContextTooLongError, match="context window of 16"):
        scorer.prefix("word " * 40)


def test_memory_is_bounded_by_head_chunk(tiny_model_path, monkeypatch):
    """The LM head never sees more than `head_chunk` rows at once ([tokens x vocab] is never built)."""
    import factprobe.lm.scorer as sc

    model, tok = _load(tiny_model_path("llama"))
    seen = []
    real = sc.apply_lm_head
    monkeypatch.setattr(sc, "apply_lm_head", lambda m, h: seen.append(h.shape[0]) or real(m, h))
    scorer = Scorer(model, tok, head_chunk=5)
    scorer.score_choices(REQUESTS, shared_prefix=PREFIX)
    assert max(seen) <= 5


@pytest.mark.real_model
@pytest.mark.parametrize("alias", ["smollm2-135m-instruct", "gemma-3-270m"])
def test_real_models_match_naive(real_model_path, alias):
    model, tok = _load(real_model_path(alias))
    assert _max_diff(model, tok, {"token_budget": 128}) <= TOL


@pytest.mark.real_model
def test_gemma_sliding_window_beyond_window(real_model_path):
    """Gemma-3 has sliding-window layers (512): a prefix longer than the window must stay exact."""
    model, tok = _load(real_model_path("gemma-3-270m"))
    window = model.config.get_text_config().sliding_window
    words = " ".join(f"Country{i} City{i}" for i in range(window // 3))
    prefix = words
    scorer = Scorer(model, tok, token_budget=64)
    assert len(scorer.encode_context(prefix)) > window
    req = [ChoiceRequest(prefix + " France", [" Paris", " Lyon", " City7"])]
    (got,) = scorer.score_choices(req, shared_prefix=prefix)
    for opt, value in zip(req[0].options, got):
        assert value == pytest.approx(naive_logprob(model, tok, req[0].context, opt), abs=TOL)


def test_naive_token_count_and_savings(tiny_model_path):
    """naive_tokens = what one full forward per (context, option) costs: sum of len(encode(c + y));
    savings = 1 - forwarded / naive."""
    model, tok = _load(tiny_model_path("llama"))
    scorer = Scorer(model, tok)
    scorer.score_choices(REQUESTS, shared_prefix=PREFIX)
    naive = sum(
        len(tok(c + y)["input_ids"]) for r in REQUESTS for c, y in (split_trailing_whitespace(r.context, o) for o in r.options)
    )
    assert scorer.stats.naive_tokens == naive
    assert scorer.stats.total_tokens < naive
    assert scorer.stats.savings == pytest.approx(1 - scorer.stats.total_tokens / naive)
    assert Scorer(model, tok).stats.savings == 0.0


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_option_trie_forwards_each_shared_token_once_and_no_last_token(tiny_model_path, kind):
    """Options form a token trie: a token sequence shared by several options is forwarded once,
    an option's last token never is, duplicates and options that prefix others are exact."""
    model, tok = _load(tiny_model_path(kind))
    scorer = Scorer(model, tok, token_budget=4096)
    opts = [" New York City", " New York", " New Delhi", " New York City", " Newark", " B", " New York City Hall"]
    req = ChoiceRequest(PREFIX + " USA", opts)
    prefix = scorer.prefix(PREFIX)
    before = scorer.stats.packed_tokens
    got = scorer.score_choices([req], shared_prefix=prefix)[0]
    for opt, value in zip(opts, got):
        assert abs(naive_logprob(model, tok, req.context, opt) - value) <= TOL
    assert got[0] == got[3]
    ctx_tail = len(scorer.encode_context(req.context)) - len(prefix)
    conts = [scorer._encode_request(req.context, [o]).cont_ids[0] for o in opts]
    proper_prefixes = {tuple(c[:k]) for c in conts for k in range(1, len(c))}
    assert scorer.stats.packed_tokens - before == ctx_tail + len(proper_prefixes)


def test_single_token_options_after_own_prefix_need_no_packed_forward(tiny_model_path):
    model, tok = _load(tiny_model_path("llama"))
    scorer = Scorer(model, tok)
    pool = [" a", " b", " c", " the", " of", "a", "b", "c", ".", ",", "!", "?", "1", "2"]
    opts = [o for o in pool if len(scorer._encode_request("Q: pick one. A:", [o]).cont_ids[0]) == 1][:3]
    assert len(opts) >= 2
    got = scorer.score_choices([ChoiceRequest("Q: pick one. A:", opts)])[0]
    assert scorer.stats.forwards == 1 and scorer.stats.packed_tokens == 0
    for opt, value in zip(opts, got):
        assert abs(naive_logprob(model, tok, "Q: pick one. A:", opt) - value) <= TOL


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_a_context_equal_to_the_shared_prefix_reuses_it(tiny_model_path, kind):
    """An item whose slot comes first, after in-context examples: its context is exactly the shared
    prefix. Its options are scored after that prefix, which is not forwarded again, and stay exact."""
    model, tok = _load(tiny_model_path(kind))
    scorer = Scorer(model, tok)
    prefix = scorer.prefix(PREFIX)
    before = scorer.stats.prefix_tokens
    requests = [ChoiceRequest(PREFIX, [" Berlin", " Bonn am Rhein", " B"]), REQUESTS[0]]
    got = scorer.score_choices(requests, shared_prefix=prefix)
    assert scorer.stats.prefix_tokens == before  # the prefix was not recomputed for the first request
    for req, scores in zip(requests, got):
        for opt, value in zip(req.options, scores):
            assert abs(naive_logprob(model, tok, req.context, opt) - value) <= TOL


def test_option_trie_split_keeps_root_subtrees_whole_and_every_query():
    from factprobe.lm.scorer import _OptionTree

    options = [[1, 2, 3], [1, 2, 4], [1, 5], [6, 7, 8, 9], [10], [11, 12]]
    tree = _OptionTree.build([], options, [False] * len(options))
    assert tree.n_tokens == 2 + 3 + 1  # proper prefixes only, each once: [1, 2], [6, 7, 8], [11]
    parts = tree.split(3)
    assert [p.n_tokens for p in parts] == [2, 3, 1]  # subtrees {1,2}, {6,7,8}, {11}
    assert sorted(q for p in parts for q in p.option_of) == sorted(tree.option_of)
    for p in parts:
        for si, sg in enumerate(p.segments):
            assert sg.parent < si
    assert tree.split(100) == [tree]


@pytest.mark.parametrize("budget", [1, 2, 5])
def test_split_tries_match_naive_with_tiny_budgets(tiny_model_path, budget):
    model, tok = _load(tiny_model_path("llama"))
    assert _max_diff(model, tok, {"token_budget": budget, "head_chunk": 3}) <= TOL
