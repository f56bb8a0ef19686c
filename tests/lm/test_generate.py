"""The generation engine is exact: greedy output is token-identical to `model.generate` run on each
prompt alone, and the log-probs of greedy and sampled tokens equal a naive full forward within 1e-4
(fp32).

Tiny RANDOM models (re-randomised with larger weights so that their outputs are varied and
peaked, see `_tiny`) are only used for equality checks; the real SmolLM2 / Gemma-3 tests carry
the `real_model` mark.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from factprobe.errors import ConfigError, ContextTooLongError
from factprobe.lm.generate import Generation, Generator, draw, first_stop, warp
from factprobe.lm.naive import naive_token_logprobs
from factprobe.models.testing import redraw_weights

TOL = 1e-4

PREFIX = "The capital of France is Paris. The capital of Germany is Berlin.\n"
SUFFIXES = [
    "The capital of Italy is",
    "Q: What is the capital of Peru? A:",
    "Marie Curie was born in",
    "0 1",
    "Albert Einstein was born in Ulm. The Nobel Prize in Physics was awarded to",
]
PROMPTS = [PREFIX + s for s in SUFFIXES]


def _load(path):
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return model, tok


_TINY: dict[str, tuple] = {}


def _tiny(tiny_model_path, kind: str):
    """A tiny RANDOM model whose matrices are redrawn with std 3/sqrt(n): the stock init gives
    near-uniform logits and repetitive text, which would make the equality tests weak."""
    if kind not in _TINY:
        model, tok = _load(tiny_model_path(kind))
        redraw_weights(model)
        _TINY[kind] = (model, tok)
    return _TINY[kind]


def _hf_greedy(model, tok, prompt: str, max_new_tokens: int, eos_ids) -> list[int]:
    """`model.generate(do_sample=False)` on the prompt alone, cut after the first EOS."""
    enc = tok(prompt, return_tensors="pt")
    out = model.generate(
        **enc, do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=sorted(eos_ids), pad_token_id=min(eos_ids)
    )
    new = out[0, enc["input_ids"].shape[1] :].tolist()
    for k, t in enumerate(new):
        if t in eos_ids:
            return new[: k + 1]
    return new


def _check_greedy_matches_hf(model, tok, prompts, max_new_tokens, **kwargs) -> Generator:
    shared_prefix = kwargs.pop("shared_prefix", None)
    gen = Generator(model, tok, **kwargs)
    outs = gen.greedy(prompts, max_new_tokens=max_new_tokens, shared_prefix=shared_prefix)
    assert len(outs) == len(prompts)
    for prompt, out in zip(prompts, outs):
        ref = _hf_greedy(model, tok, prompt, max_new_tokens, gen.eos_token_ids)
        assert out.token_ids == ref, prompt[-60:]
        assert out.finish_reason == ("eos" if ref[-1] in gen.eos_token_ids else "length")
        ids = tok(prompt)["input_ids"]
        naive = naive_token_logprobs(model, ids + out.token_ids)[len(ids) :]
        assert len(out.logprobs) == len(naive)
        assert max(abs(a - b) for a, b in zip(out.logprobs, naive)) <= TOL, prompt[-60:]
    return gen


# ---------------------------------------------------------------------------- greedy, tiny models
@pytest.mark.parametrize("kind", ["gpt2", "llama"])
@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("budget", [40, 4096])  # 40: one or two rows per batch; 4096: one batch
def test_greedy_matches_hf_generate(tiny_model_path, kind, shared, budget):
    model, tok = _tiny(tiny_model_path, kind)
    gen = _check_greedy_matches_hf(model, tok, PROMPTS, 12, token_budget=budget, shared_prefix=PREFIX if shared else None)
    prefix_len = len(tok(PREFIX)["input_ids"])
    if shared:
        assert gen.stats.prefix_tokens == prefix_len
        assert gen.stats.prompt_tokens == sum(len(tok(p)["input_ids"]) - prefix_len for p in PROMPTS)
        assert gen.stats.boundary_merges == 0
    else:
        assert gen.stats.prefix_tokens == 0
        assert gen.stats.prompt_tokens == gen.stats.naive_prompt_tokens


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_greedy_shared_prefix_token_merged_across_boundary(tiny_model_path, kind):
    """A prefix ending in a space: alone it ends with the token " ", but inside each prompt the space
    merges with the next word. The rows share all prefix tokens but the last, and stay exact."""
    model, tok = _tiny(tiny_model_path, kind)
    prefix = "The capital of France is Paris. The capital of Italy is "
    prompts = [prefix + s for s in ["Rome. The capital of Spain is", "Madrid", "Rome"]]
    pre = tok(prefix)["input_ids"]
    assert all(tok(p)["input_ids"][: len(pre)] != pre for p in prompts)  # the case under test
    gen = _check_greedy_matches_hf(model, tok, prompts, 10, shared_prefix=prefix)
    assert gen.stats.boundary_merges == len(prompts)
    assert gen.stats.prefix_tokens == len(pre)
    assert gen.stats.prompt_tokens == sum(len(tok(p)["input_ids"]) - (len(pre) - 1) for p in prompts)


def test_greedy_shared_prefix_mixed_rows(tiny_model_path):
    """One call with rows that share the whole prefix, a prompt equal to the prefix (nothing left to
    share: it keeps its only token as its own and runs alone), and prompts whose first token merges
    the whole prefix away (no BOS in GPT-2: nothing shared, they run alone). Results come back in
    input order."""
    model, tok = _tiny(tiny_model_path, "gpt2")
    prefix = " "
    prompts = ["  Paris is", " Paris", " ", "  capital of", " Paris. The capital of Italy is"]
    pre = tok(prefix)["input_ids"]
    assert tok(" Paris")["input_ids"][0] != pre[0]  # the case under test: nothing in common
    gen = _check_greedy_matches_hf(model, tok, prompts, 6, shared_prefix=prefix, token_budget=64)
    assert gen.stats.prefix_tokens == len(pre)
    assert gen.stats.boundary_merges == 2  # " Paris" twice; " " keeps its only token as its own


def test_greedy_with_eos_matches_hf(tiny_model_path):
    """Rows that end at EOS (a token the model really emits, declared EOS) leave the batch early."""
    model, tok = _tiny(tiny_model_path, "llama")
    free = Generator(model, tok).greedy(PROMPTS, max_new_tokens=12)
    eos = free[0].token_ids[3]
    gen = _check_greedy_matches_hf(model, tok, PROMPTS, 12, eos_token_ids=[eos], shared_prefix=PREFIX)
    outs = gen.greedy(PROMPTS, max_new_tokens=12)
    assert outs[0].finish_reason == "eos" and outs[0].token_ids[-1] == eos
    assert outs[0].token_ids == free[0].token_ids[: len(outs[0].token_ids)]
    assert outs[0].text == tok.decode(outs[0].token_ids[:-1], skip_special_tokens=True)


def test_greedy_single_prompt_over_budget_runs_alone(tiny_model_path):
    model, tok = _tiny(tiny_model_path, "gpt2")
    _check_greedy_matches_hf(model, tok, PROMPTS[:2], 5, token_budget=1)


def test_attention_implementation_is_restored(tiny_model_path, monkeypatch):
    """Shared-prefix forwards route attention to our function for their duration only, also when
    a forward fails."""
    from factprobe.lm import generate

    model, tok = _tiny(tiny_model_path, "llama")
    before = model.config._attn_implementation
    Generator(model, tok).greedy(PROMPTS[:2], max_new_tokens=3, shared_prefix=PREFIX)
    assert model.config._attn_implementation == before

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(generate, "_shared_prefix_attention", broken)
    with pytest.raises(RuntimeError, match="boom"):
        Generator(model, tok).greedy(PROMPTS[:2], max_new_tokens=3, shared_prefix=PREFIX)
    assert model.config._attn_implementation == before


def test_greedy_peft_model(tiny_model_path):
    """A PEFT-wrapped model goes through the same forward (LoRA B=0: same tokens as the base)."""
    peft = pytest.importorskip("peft")
    model, tok = _tiny(tiny_model_path, "llama")
    ref = Generator(model, tok).greedy(PROMPTS, max_new_tokens=8, shared_prefix=PREFIX)
    wrapped = peft.get_peft_model(model, peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    try:
        got = Generator(wrapped, tok).greedy(PROMPTS, max_new_tokens=8, shared_prefix=PREFIX)
        assert [g.token_ids for g in got] == [r.token_ids for r in ref]
    finally:
        wrapped.unload()


# ---------------------------------------------------------------------------- sampling
def _check_logprobs_vs_naive(model, tok, prompt: str, outs: list[Generation]) -> None:
    ids = tok(prompt)["input_ids"]
    for out in outs:
        ref = naive_token_logprobs(model, ids + out.token_ids)[len(ids) :]
        assert len(ref) == len(out.logprobs) > 0
        assert max(abs(a - b) for a, b in zip(ref, out.logprobs)) <= TOL


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
@pytest.mark.parametrize("warps", [{}, {"temperature": 0.7, "top_k": 20, "top_p": 0.9}])
def test_sample_logprobs_match_naive_forward(tiny_model_path, kind, warps):
    model, tok = _tiny(tiny_model_path, kind)
    gen = Generator(model, tok)
    outs = gen.sample(PROMPTS[1], n=6, max_new_tokens=10, seed=3, **warps)
    assert len(outs) == 6 and all(o.finish_reason in ("length", "eos") for o in outs)
    assert len({tuple(o.token_ids) for o in outs}) > 1  # really sampled
    _check_logprobs_vs_naive(model, tok, PROMPTS[1], outs)


def test_sample_forwards_the_prompt_once(tiny_model_path):
    model, tok = _tiny(tiny_model_path, "llama")
    gen = Generator(model, tok)
    outs = gen.sample(PROMPTS[4], n=5, max_new_tokens=7, seed=0)
    n_prompt = len(tok(PROMPTS[4])["input_ids"])
    assert gen.stats.prompt_tokens == n_prompt
    assert gen.stats.naive_prompt_tokens == 5 * n_prompt
    assert gen.stats.pad_tokens == 0
    # each row feeds back all its tokens but the last
    assert gen.stats.decode_tokens == sum(len(o.token_ids) - 1 for o in outs)
    assert gen.stats.forwards == max(len(o.token_ids) for o in outs)  # the prompt, then one per later step


def test_sample_seeds(tiny_model_path):
    model, tok = _tiny(tiny_model_path, "gpt2")
    gen = Generator(model, tok)

    def ids(seed):
        return [o.token_ids for o in gen.sample(PROMPTS[0], n=4, max_new_tokens=8, seed=seed)]

    assert ids(7) == ids(7)
    assert ids(7) != ids(8)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_sample_top_k_1_and_temperature_0_are_greedy(tiny_model_path, kind):
    model, tok = _tiny(tiny_model_path, kind)
    gen = Generator(model, tok)
    greedy = gen.greedy([PROMPTS[2]], max_new_tokens=9)[0]
    for kwargs in ({"top_k": 1}, {"temperature": 0.0}):
        outs = gen.sample(PROMPTS[2], n=3, max_new_tokens=9, seed=1, **kwargs)
        for o in outs:
            assert o.token_ids == greedy.token_ids
            assert o.logprobs == pytest.approx(greedy.logprobs, abs=TOL)


def test_sample_stop_rows_leave_the_batch(tiny_model_path):
    """Rows that hit a stop string finish early; the others go on unchanged (a sample does not
    depend on which others finished); log-probs stay exact."""
    model, tok = _tiny(tiny_model_path, "llama")
    gen = Generator(model, tok)
    free = gen.sample(PROMPTS[3], n=8, max_new_tokens=10, seed=5)
    stop = tok.decode(free[0].token_ids[2:3])
    assert stop.strip()
    outs = Generator(model, tok).sample(PROMPTS[3], n=8, max_new_tokens=10, seed=5, stop=[stop])
    reasons = {o.finish_reason for o in outs}
    assert "stop" in reasons
    assert outs[0].finish_reason == "stop" and outs[0].token_ids == free[0].token_ids[:3]
    for o, f in zip(outs, free):
        assert stop not in o.text
        assert o.token_ids == f.token_ids[: len(o.token_ids)]
    _check_logprobs_vs_naive(model, tok, PROMPTS[3], outs)


def test_warp_top_k_top_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isfinite(warp(logits, 1.0, top_k=2)).tolist() == [[True, True, False, False]]
    # nucleus: the smallest set whose mass reaches top_p
    assert torch.isfinite(warp(logits, 1.0, top_p=0.5)).tolist() == [[True, False, False, False]]
    assert torch.isfinite(warp(logits, 1.0, top_p=0.79)).tolist() == [[True, True, False, False]]
    assert torch.isfinite(warp(logits, 1.0, top_p=0.81)).tolist() == [[True, True, True, False]]
    assert torch.isfinite(warp(logits, 1.0, top_p=0.01)).tolist() == [[True, False, False, False]]
    assert torch.allclose(warp(logits, 2.0), logits / 2.0)


def test_draw_follows_the_distribution():
    probs = torch.tensor([[0.5, 0.0, 0.3, 0.2, 0.0]]).expand(20000, -1)
    ids = draw(probs, torch.rand(20000, generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    freq = torch.bincount(ids, minlength=5).double() / len(ids)
    assert freq[1] == 0 and freq[4] == 0  # probability 0, also at the end of the vocabulary
    assert torch.allclose(freq, probs[0].double(), atol=0.015)
    edges = torch.tensor([0.0, 0.4999, 0.5, 0.7999, 0.8, 0.9999999], dtype=torch.float64)
    assert draw(probs[:6], edges).tolist() == [0, 0, 2, 2, 3, 3]


# ---------------------------------------------------------------------------- stop strings, finish reasons
def test_stop_strings_and_finish_reasons(tiny_model_path):
    model, tok = _tiny(tiny_model_path, "gpt2")
    gen = Generator(model, tok)
    free = gen.greedy([PROMPTS[0]], max_new_tokens=12)[0]
    assert free.finish_reason == "length" and len(free.token_ids) == 12
    assert free.text == tok.decode(free.token_ids)
    pieces = [tok.decode([t]) for t in free.token_ids]
    k = next(i for i in range(2, 10) if pieces[i].strip() and pieces[i + 1].strip())

    # a stop string inside one token: stop at that token; text cut before the stop string
    stop = pieces[k]
    out = gen.greedy([PROMPTS[0]], max_new_tokens=12, stop=[stop])[0]
    first = next(i for i in range(12) if stop in tok.decode(free.token_ids[: i + 1]))
    assert out.finish_reason == "stop"
    assert out.token_ids == free.token_ids[: first + 1]
    assert out.logprobs == free.logprobs[: first + 1]
    full = tok.decode(out.token_ids)
    assert out.text == full[: full.index(stop)] and stop not in out.text

    # a stop string spanning two tokens: stop at the second one
    stop = pieces[k][-1] + pieces[k + 1][0]
    out = gen.greedy([PROMPTS[0]], max_new_tokens=12, stop=("never-there", stop))[0]
    first = next(i for i in range(12) if stop in tok.decode(free.token_ids[: i + 1]))
    assert out.finish_reason == "stop" and out.token_ids == free.token_ids[: first + 1]
    assert out.text == tok.decode(out.token_ids)[: tok.decode(out.token_ids).index(stop)]

    # a stop string that never occurs: length
    out = gen.greedy([PROMPTS[0]], max_new_tokens=12, stop="never-there")[0]
    assert out.finish_reason == "length" and out.token_ids == free.token_ids


def test_first_stop():
    assert first_stop("abc\ndef", ["\n"]) == 3
    assert first_stop("abc\ndef", ["de", "c"]) == 2
    assert first_stop("abc", ["x"]) == -1


# ---------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "call, match",
    [
        (lambda g: g.greedy(["a"], max_new_tokens=0), "max_new_tokens"),
        (lambda g: g.greedy(["a"], max_new_tokens=-3), "max_new_tokens"),
        (lambda g: g.greedy(["a"], stop=[""]), "stop"),
        (lambda g: g.greedy(["a"], stop=["\n", ""]), "stop"),
        (lambda g: g.greedy(["x a"], shared_prefix="y"), "shared_prefix"),
        (lambda g: g.sample("a", n=0, max_new_tokens=2), "n must"),
        (lambda g: g.sample("a", n=2, max_new_tokens=0), "max_new_tokens"),
        (lambda g: g.sample("a", n=2, max_new_tokens=2, temperature=-0.1), "temperature"),
        (lambda g: g.sample("a", n=2, max_new_tokens=2, top_p=0.0), "top_p"),
        (lambda g: g.sample("a", n=2, max_new_tokens=2, top_p=1.5), "top_p"),
        (lambda g: g.sample("a", n=2, max_new_tokens=2, top_k=-1), "top_k"),
        (lambda g: g.sample("a", n=2, max_new_tokens=2, stop=""), "stop"),
    ],
)
def test_bad_input_raises_config_error(tiny_model_path, call, match):
    model, tok = _tiny(tiny_model_path, "gpt2")
    with pytest.raises(ConfigError, match=match) as err:
        call(Generator(model, tok))
    assert "\n" not in str(err.value)


def test_too_many_samples_for_the_budget(tiny_model_path):
    model, tok = _tiny(tiny_model_path, "gpt2")
    n_prompt = len(tok(PROMPTS[0])["input_ids"])
    gen = Generator(model, tok, token_budget=100)
    with pytest.raises(ConfigError) as err:
        gen.sample(PROMPTS[0], n=10, max_new_tokens=5)
    msg = str(err.value)
    assert "n=10" in msg and f"{n_prompt} prompt tokens" in msg and "token_budget=100" in msg
    assert f"{10 * (n_prompt + 5)}" in msg and "raise token_budget" in msg


def test_prompt_longer_than_window(tiny_model_path):
    model, tok = _tiny(tiny_model_path, "gpt2")
    gen = Generator(model, tok)
    long_prompt = "Paris " * 300
    n = len(tok(long_prompt)["input_ids"])
    for call in (lambda: gen.greedy([long_prompt]), lambda: gen.sample(long_prompt, n=1, max_new_tokens=4)):
        with pytest.raises(ContextTooLongError, match=f"{n} tokens.*window of 256"):
            call()
    with pytest.raises(ContextTooLongError, match="max_new_tokens=250"):
        gen.greedy(["Paris " * 10], max_new_tokens=250)


# ---------------------------------------------------------------------------- real models
@pytest.mark.real_model
@pytest.mark.parametrize("alias", ["smollm2-135m-instruct", "gemma-3-270m"])
def test_real_models_greedy_matches_hf_generate(real_model_path, alias):
    model, tok = _load(real_model_path(alias))
    prompts = PROMPTS[:3]
    for shared in (None, PREFIX):
        _check_greedy_matches_hf(model, tok, prompts, 10, shared_prefix=shared)


@pytest.mark.real_model
def test_real_smollm2_sample_logprobs_match_naive_forward(real_model_path):
    model, tok = _load(real_model_path("smollm2-135m-instruct"))
    gen = Generator(model, tok)
    outs = gen.sample(PROMPTS[1], n=4, max_new_tokens=8, temperature=0.9, top_p=0.95, seed=0, stop="\n")
    assert gen.stats.prompt_tokens == len(tok(PROMPTS[1])["input_ids"])
    _check_logprobs_vs_naive(model, tok, PROMPTS[1], outs)


@pytest.mark.real_model
def test_gemma_shared_prefix_beyond_sliding_window(real_model_path):
    """Gemma-3's local layers see 512 positions. With a >512-token shared prefix and suffixes of
    different lengths (padding between prefix and suffix), a mask by index distance would let the
    shorter rows see too few or too many prefix tokens; ours is built from positions."""
    model, tok = _load(real_model_path("gemma-3-270m"))
    facts = [
        "The capital of France is Paris.",
        "The capital of Japan is Tokyo.",
        "The capital of Peru is Lima.",
        "The capital of Kenya is Nairobi.",
        "The capital of Italy is Rome.",
        "The capital of Spain is Madrid.",
    ]
    prefix = " ".join(facts * 14) + "\n"
    assert len(tok(prefix)["input_ids"]) > 512 + 20
    prompts = [
        prefix + s
        for s in [
            "The capital of Germany is",
            "Q: Which city is the capital of the country north of Mexico? A:",
            "0",
            (
                "Read the list above again, slowly, and then tell me which of these capitals "
                "lies furthest to the south of the equator, and which one lies furthest to "
                "the north. The southernmost capital is"
            ),
        ]
    ]
    gen = _check_greedy_matches_hf(model, tok, prompts, 6, shared_prefix=prefix, token_budget=4096)
    assert gen.stats.pad_tokens >= 3 * 20  # one batch, the short rows padded in the middle


def test_consecutive_calls_reuse_the_shared_prefix_and_stay_exact(tiny_model_path):
    """A probe calls `greedy` once per checkpointed batch with the same k-shot block: the block's
    KV is forwarded once and reused; a different prefix replaces it; outputs stay identical."""
    model, tok = _tiny(tiny_model_path, "llama")
    gen = Generator(model, tok, token_budget=4096)
    once = gen.greedy(PROMPTS, max_new_tokens=8, shared_prefix=PREFIX)
    again = [g for p in PROMPTS for g in gen.greedy([p], max_new_tokens=8, shared_prefix=PREFIX)]
    assert [g.token_ids for g in again] == [g.token_ids for g in once]
    assert gen.stats.prefix_tokens == len(tok(PREFIX)["input_ids"])
    assert gen.stats.prefix_reuses == len(PROMPTS)
    other = PREFIX[: len(PREFIX) // 2]
    gen.greedy([p for p in PROMPTS if p.startswith(other)], max_new_tokens=4, shared_prefix=other)
    assert gen.stats.prefix_tokens == len(tok(PREFIX)["input_ids"]) + len(tok(other)["input_ids"])
    gen.clear_prefix_cache()
    assert gen.greedy(PROMPTS[:1], max_new_tokens=8, shared_prefix=PREFIX)[0].token_ids == once[0].token_ids
