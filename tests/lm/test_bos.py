"""Exactly one BOS, by token ids, and one context convention for every n (issue 29, items 1 and 2).

The oracle is lm-evaluation-harness itself (`HFLM` on the same model object): the token ids its
`loglikelihood` feeds the model (captured where it hands them to `_loglikelihood_tokens`) and its
log-likelihoods. A test that compared against a naive forward of the probe's own context text could not
catch a doubled BOS (the text itself carried it), so these look at the ids the model is given:

- `context_token_ids` / `encode_choices` (the one place a context becomes ids) equal lm-eval's ids;
- every entry point that had an empty or subject-only context (IC-LKE `--examples 0`, the n = 0 point of
  `study icl-examples`, mc-items with the slot first and no examples, an HGP template that starts with
  `[Y]`, EIC-LKE with no leading examples) runs with a hook on the model body that records every token the
  model sees and its position: a BOS-adding tokenizer's BOS is at position 0 of every sequence and nowhere
  else; a tokenizer that adds none sees no stand-in token except in a truly empty context;
- the rows' log-probs equal lm-eval's `loglikelihood` of the paper's request (the subject alone at n = 0;
  an empty context for a slot first) within 1e-4.

Tokenizers: tiny RANDOM Llama (adds `<s>`) and GPT-2 (adds nothing; its BOS = EOS text is the stand-in);
the real Gemma-3 (adds `<bos>`) and SmolLM2-Instruct (adds nothing; BOS text `<|im_start|>`) where they are
converted in the real cache. Random-model numbers are only used for equality checks.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from factprobe.framework.config import RunConfig
from factprobe.framework.runner import run_probe
from factprobe.lm.body import decoder_parts
from factprobe.lm.scorer import ChoiceRequest, Scorer, context_token_ids, encode_choices, stand_in_token_id

TOL = 1e-4
FX = Path(__file__).resolve().parents[1] / "fixtures" / "mc_snapshot"
TINY = ("llama", "gpt2")
KINDS = [
    pytest.param("llama", id="tiny-llama-adds-bos"),
    pytest.param("gpt2", id="tiny-gpt2-adds-none"),
    pytest.param("gemma-3-270m", id="gemma-3-270m", marks=pytest.mark.real_model),
    pytest.param("smollm2-135m-instruct", id="smollm2-135m-instruct", marks=pytest.mark.real_model),
]


@dataclass
class LM:
    """A model loaded as factprobe loads it, and lm-eval's HFLM on the same model object."""

    name: str
    path: Path
    loaded: Any  # factprobe.models.LoadedModel
    hflm: Any

    @property
    def tok(self):
        return self.loaded.tokenizer

    @property
    def adds_bos(self) -> bool:
        """Whether the tokenizer puts its own BOS before a text."""
        return bool(context_token_ids(self.tok, "", stand_in=False))


def _real_path(real_model_path, alias: str) -> Path:
    """The converted real model, or a skip when it is not in the real cache (no download in tests)."""
    from factprobe.models.gguf_cache import check_cache
    from tests.conftest import REAL_CACHE_ROOT

    old = os.environ.get("FACTPROBE_CACHE")
    os.environ["FACTPROBE_CACHE"] = str(REAL_CACHE_ROOT)
    try:
        problem = check_cache(alias)
    finally:
        if old is None:
            os.environ.pop("FACTPROBE_CACHE", None)
        else:
            os.environ["FACTPROBE_CACHE"] = old
    if problem is not None:
        pytest.skip(f"{alias} is not converted in {REAL_CACHE_ROOT} ({problem}); run `make models`")
    return real_model_path(alias)


@pytest.fixture(scope="module", params=KINDS)
def lm(request, tiny_model_path, real_model_path) -> LM:
    from lm_eval.models.huggingface import HFLM

    from factprobe.models import load_model

    name = request.param
    path = tiny_model_path(name) if name in TINY else _real_path(real_model_path, name)
    loaded = load_model(str(path), device="cpu", dtype="float32")
    hflm = HFLM(pretrained=loaded.model, tokenizer=loaded.tokenizer, batch_size=1, device="cpu")
    return LM(name, path, loaded, hflm)


# ------------------------------------------------------------------ the oracle: lm-evaluation-harness
def _instances(pairs):
    from lm_eval.api.instance import Instance

    return [Instance(request_type="loglikelihood", doc={}, arguments=tuple(p), idx=i) for i, p in enumerate(pairs)]


def harness_ids(hflm, pairs) -> list[tuple[list[int], list[int]]]:
    """(context ids, continuation ids) that lm-eval's `HFLM.loglikelihood` gives the model for each
    (context, continuation) pair, captured where it hands them to `_loglikelihood_tokens`."""
    seen: list = []

    def capture(requests, disable_tqdm=False, override_bs=None):
        seen.extend(requests)
        return [(0.0, False)] * len(requests)

    hflm._loglikelihood_tokens = capture
    try:
        hflm.loglikelihood(_instances(pairs), disable_tqdm=True)
    finally:
        del hflm._loglikelihood_tokens
    return [(list(ctx), list(cont)) for _, ctx, cont in seen]


def harness_logprobs(hflm, pairs) -> list[float]:
    """lm-eval's `loglikelihood` of each (context, continuation) pair."""
    return [float(lp) for lp, _ in hflm.loglikelihood(_instances(pairs), disable_tqdm=True)]


# ------------------------------------------------------------------ what the model sees
@contextmanager
def seen_tokens(model):
    """Record (token id, position) of every token any forward of the model body is given."""
    body = decoder_parts(model).body
    seen: list[tuple[int, int]] = []

    def hook(_module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        ids = ids[0].tolist()
        pos = kwargs.get("position_ids")
        if pos is None:
            past = kwargs.get("past_key_values")
            start = past.get_seq_length() if past is not None else 0
            positions = list(range(start, start + len(ids)))
        else:
            positions = pos[0].tolist()
        seen.extend(zip(ids, positions))

    handle = body.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield seen
    finally:
        handle.remove()


def assert_specials_once(lm: LM, seen: list[tuple[int, int]], empty_context: bool) -> None:
    """The tokenizer's own BOS at position 0 of every sequence and nowhere else; a tokenizer that adds
    none: the stand-in token first in every sequence when the context is truly empty, else nowhere."""
    assert seen, "the model saw nothing"
    first = {t for t, p in seen if p == 0}
    later = [t for t, p in seen if p > 0]
    sid = stand_in_token_id(lm.tok)
    if lm.adds_bos:
        bos = lm.tok.bos_token_id
        assert first == {bos}, f"{lm.name}: sequences start with {first}, not the one BOS {bos}"
        assert bos not in later, f"{lm.name}: BOS {bos} seen after position 0 (a doubled BOS)"
    elif empty_context:
        assert first == {sid}, f"{lm.name}: an empty context must be the stand-in {sid}, got {first}"
        assert sid not in later, f"{lm.name}: stand-in {sid} seen after position 0"
    else:
        assert sid not in first and sid not in later, (
            f"{lm.name}: the stand-in {sid} ({lm.tok.decode([sid])!r}) was added to a context that is not empty"
        )


def _mc_config(lm: LM, probe: str, **extra) -> RunConfig:
    return RunConfig.from_dict(
        {
            "probe": probe,
            "model": str(lm.path),
            "source": "triples",
            "data": str(FX / "test.jsonl"),
            "train_data": str(FX / "train"),
            "choices": 5,
            "seed": 3,
            "relations": "P36",
            "max_facts_per_relation": 3,
            "device": "cpu",
            "dtype": "float32",
            **extra,
        }
    )


def _run(lm: LM, cfg: RunConfig, out: Path) -> tuple[list[dict], list[tuple[int, int]]]:
    """The probe's rows, and every (token, position) the model saw while it ran."""
    with seen_tokens(lm.loaded.model) as seen:
        outcome = run_probe(cfg, out, loaded=lm.loaded, progress=False, log=lambda m: None)
    rows = outcome.results.to_dict("records")
    assert rows
    return rows, seen


def assert_equals_harness(lm: LM, rows: list[dict], request_of) -> None:
    """Every option's log-prob equals lm-eval's loglikelihood of `request_of(row, option)` within TOL."""
    pairs = [request_of(r, o) for r in rows for o in r["options"]]
    want = harness_logprobs(lm.hflm, pairs)
    got = [lp for r in rows for lp in r["logprobs"]]
    worst = max(abs(a - b) for a, b in zip(got, want))
    assert worst <= TOL, f"{lm.name}: differs from lm-eval's loglikelihood by {worst:.3g} nats"


# ------------------------------------------------------------------ the one encoding function
def test_context_ids_are_lm_eval_s(lm):
    """`encode_choices` gives the ids lm-eval's loglikelihood gives the model (context, then continuation),
    with the tokenizer's BOS once, and the stand-in only for a context with no text (or BOS text) of its own."""
    tok = lm.tok
    sid = stand_in_token_id(tok)
    bos_text = tok.decode([sid])
    pairs = [
        ("France", " Paris"),
        ("", "Paris is the capital of France"),
        ("The capital of France is ", "Paris"),
        (bos_text + "France", " Paris"),
        ("A a B b France", " Paris"),
        ("   ", "Paris"),
    ]
    for (ctx, cont), (h_ctx, h_cont) in zip(pairs, harness_ids(lm.hflm, pairs[:-1]) + [(None, None)]):
        _, (whole,), (start,) = encode_choices(tok, ctx, [cont])
        if h_ctx is not None:
            assert (whole[:start], whole[start:]) == (h_ctx, h_cont), (lm.name, ctx, cont)
        specials = whole.count(sid)
        if lm.adds_bos or not ctx.strip() or ctx.startswith(bos_text):
            assert specials == 1 and whole[0] == sid, (lm.name, ctx, whole)
        else:
            assert specials == 0, (lm.name, ctx, whole)
    # the context alone (a shared prefix), and the stand-in only where nothing else is there
    assert context_token_ids(tok, "France") == harness_ids(lm.hflm, [("France", " Paris")])[0][0]
    if lm.adds_bos:  # BOS text at the start is not doubled (lm-eval's tok_encode rule)
        assert context_token_ids(tok, bos_text + "France") == context_token_ids(tok, "France")
    assert context_token_ids(tok, "") == [sid]
    assert context_token_ids(tok, "", stand_in=False) == ([sid] if lm.adds_bos else [])


def test_scorer_empty_and_subject_contexts_equal_lm_eval(lm):
    """`score_choices` (what coherency and HGP/MMP call with an empty context) equals lm-eval."""
    scorer = Scorer(lm.loaded.model, lm.tok, token_budget=64)
    reqs = [
        ChoiceRequest("", ["Paris is the capital of France", "Rome is the capital of France"]),
        ChoiceRequest("France", [" Paris", " Rome"]),
    ]
    with seen_tokens(lm.loaded.model) as seen:
        got = [float(x) for s in scorer.score_choices(reqs) for x in s]
    want = harness_logprobs(lm.hflm, [(r.context, o) for r in reqs for o in r.options])
    assert max(abs(a - b) for a, b in zip(got, want)) <= TOL
    if lm.adds_bos:
        assert_specials_once(lm, seen, empty_context=False)


# ------------------------------------------------------------------ entry points of item 1
def test_ic_lke_examples_0(lm, tmp_path):
    rows, seen = _run(lm, _mc_config(lm, "ic-lke", examples=0), tmp_path / "run")
    assert_specials_once(lm, seen, empty_context=False)
    assert all(r["context"] == r["subject"] for r in rows)  # the paper's context at n = 0: just x
    assert_equals_harness(lm, rows, lambda r, o: (r["subject"], " " + o))


def test_icl_examples_n0(lm):
    from factprobe.datasets.mc_dataset import prepare_mc
    from factprobe.framework.config import BaseConfig
    from factprobe.studies.icl_examples import ICLExamplesConfig, plan_relation, score_curve

    base = BaseConfig.from_dict(
        {
            "model": str(lm.path),
            "source": "triples",
            "data": str(FX / "test.jsonl"),
            "train_data": str(FX / "train"),
            "relations": "P36",
            "max_facts_per_relation": 3,
            "seed": 3,
            "device": "cpu",
            "dtype": "float32",
        }
    )
    prepared = prepare_mc(base, choices=5)
    cfg = ICLExamplesConfig(n=[0, 1], draws=1, choices=5)
    scorer = Scorer(lm.loaded.model, lm.tok, max_length=lm.loaded.max_length)
    plans = {
        rel: plan_relation(
            scorer, rel, items, prepared.train, [f for f in prepared.test if f.relation == rel], cfg, 3, lambda m: None
        )
        for rel, items in prepared.items.items()
    }
    with seen_tokens(lm.loaded.model) as seen:
        scores = score_curve(scorer, plans, cfg, keep_logprobs=True)
    items = {it.fact_id: it for it in plans["P36"].items}
    rows = [
        {**r, "subject": items[r["fact_id"]].subject, "options": list(items[r["fact_id"]].options)}
        for r in scores.rows[("P36", 0, None)]
    ]
    assert all(r["context"] == r["subject"] for r in rows)
    assert_equals_harness(lm, rows, lambda r, o: (r["subject"], " " + o))
    # n = 0 and n = 1 share one convention: the same special tokens before the context's text
    assert_specials_once(lm, seen, empty_context=False)


def test_mc_items_slot_first_without_examples(lm, tmp_path):
    from factprobe.probes.mc_items import split_prompt

    items = [
        {
            "id": "fr",
            "relation": "capital",
            "prompt": "[Y] is the capital of France.",
            "options": ["Paris", "Rome", "Lima"],
            "answer": "Paris",
        },
        {
            "id": "br",
            "relation": "language",
            "prompt": "[Y] is spoken in Brazil.",
            "options": ["Portuguese", "Thai"],
            "answer": 0,
        },
    ]
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in items))
    cfg = RunConfig.from_dict(
        {"probe": "mc-items", "model": str(lm.path), "data": str(data), "device": "cpu", "dtype": "float32"}
    )
    rows, seen = _run(lm, cfg, tmp_path / "run")
    assert_specials_once(lm, seen, empty_context=True)
    assert all(r["context"] == "" for r in rows)
    assert_equals_harness(lm, rows, lambda r, o: ("", o + split_prompt(r["subject"])[1]))


def test_hgp_template_that_starts_with_the_slot(lm, tmp_path, monkeypatch):
    """LPAQA sampling keeps only causal templates ([X] before [Y]); a template given otherwise (here by
    replacing the draw) that starts with [Y] leaves an empty context."""
    from factprobe.probes.prompt_lke import PromptProbe

    monkeypatch.setattr(PromptProbe, "templates", lambda self, cfg, relation: ["[Y] is the capital of [X] ."])
    rows, seen = _run(lm, _mc_config(lm, "hgp", prompts_root=str(FX / "prompts")), tmp_path / "run")
    assert_specials_once(lm, seen, empty_context=True)
    assert all(r["context"] == "" for r in rows)
    assert_equals_harness(lm, rows, lambda r, o: ("", f"{o} is the capital of {r['subject']}"))


def test_eic_lke_without_leading_examples(lm, tmp_path):
    """The first test subject is the context of the first option: no stand-in, the tokenizer's BOS once."""
    cfg = _mc_config(lm, "eic-lke", examples=0, eic_interleave=1, eic_tests_per_sequence=2)
    _, seen = _run(lm, cfg, tmp_path / "run")
    assert_specials_once(lm, seen, empty_context=False)


def test_an_empty_context_without_bos_or_eos_is_one_clear_error(tiny_model_path):
    from transformers import AutoTokenizer

    from factprobe.errors import ConfigError

    tok = AutoTokenizer.from_pretrained(tiny_model_path("gpt2"))
    tok.bos_token = tok.eos_token = None
    assert context_token_ids(tok, "France") and encode_choices(tok, "France", [" Paris"])[2] == [len(tok("France")["input_ids"])]
    for call in (lambda: context_token_ids(tok, ""), lambda: encode_choices(tok, "", ["Paris is big"])):
        with pytest.raises(ConfigError, match=r"neither a BOS nor an EOS token.*put text before the slot"):
            call()
