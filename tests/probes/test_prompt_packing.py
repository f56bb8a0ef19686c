"""HGP / MMP pack several (fact, template) rows into one forward (issue 31 item 10).

Each row's prompt is short and its own (the subject sits in it). They used to cost two tiny
forwards each (the context, then the options); `Scorer.score_choices(..., pack_contexts=True)`
packs whole rows into forwards of at most `token_budget` tokens. The log-probs must not change:
packed = one row at a time = a naive full forward per option, within 1e-4 (fp32), on tiny RANDOM
models and on the real SmolLM2."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from factprobe.framework.config import RunConfig
from factprobe.framework.runner import run_probe
from factprobe.lm.naive import naive_logprob
from factprobe.lm.scorer import ChoiceRequest, Scorer
from factprobe.models import load_model
from factprobe.probes.prompt_lke import fill_template

TOL = 1e-4

# an object last, an object first (the context is the stand-in BOS), an object in the middle
TEMPLATES = ["The capital of [X] is [Y] .", "[Y] is the capital city of [X] .", "[X] 's capital , [Y] , is a city"]
FACTS = [
    ("France", ["Paris", "Lyon", "Bordeaux am Rhein"]),
    ("Côte d'Ivoire", ["Yamoussoukro", "東京都"]),
    ("Peru", ["Lima", "Cusco"]),
]


def _requests() -> list[ChoiceRequest]:
    """HGP rows: every template filled with every subject, as the probe builds them."""
    reqs = []
    for template in TEMPLATES:
        for subject, options in FACTS:
            pairs = [fill_template(template, subject, o) for o in options]
            reqs.append(ChoiceRequest(pairs[0][0], [c for _, c in pairs]))
    return reqs


def _load(path):
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval(), AutoTokenizer.from_pretrained(path)


def _check_packed(model, tok, budgets=(16, 1024)) -> tuple[list[int], int]:
    """Packed (at each budget) vs one row at a time vs naive, within TOL; returns (packed forwards
    per budget, one-at-a-time forwards)."""
    reqs = _requests()
    single_scorer = Scorer(model, tok, token_budget=max(budgets))
    single = [single_scorer.score_choices([r])[0] for r in reqs]
    naive = [[naive_logprob(model, tok, r.context, o) for o in r.options] for r in reqs]
    forwards = []
    for budget in budgets:
        scorer = Scorer(model, tok, token_budget=budget)
        packed = scorer.score_choices(reqs, pack_contexts=True)
        for req, p, s, n in zip(reqs, packed, single, naive):
            assert abs(p - s).max() <= TOL, (budget, req, p, s)
            assert max(abs(a - b) for a, b in zip(p, n)) <= TOL, (budget, req, p, n)
        assert scorer.stats.naive_tokens == single_scorer.stats.naive_tokens  # the same work is reported
        forwards.append(scorer.stats.forwards)
    return forwards, single_scorer.stats.forwards


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_packed_rows_equal_one_row_at_a_time_and_naive(tiny_model_path, kind):
    """Budget 16 cuts the rows into many forwards, 1024 takes them all in one or two."""
    model, tok = _load(tiny_model_path(kind))
    (small, large), single = _check_packed(model, tok)
    assert single >= 2 * len(_requests())  # a context forward and an options forward per row
    assert large <= 2 < small, (large, small)


@pytest.mark.real_model
def test_packed_rows_equal_naive_on_smollm2(real_model_path):
    model, tok = _load(real_model_path("smollm2-135m-instruct"))
    (_, large), single = _check_packed(model, tok)
    assert large < single


def test_hgp_packs_a_batch_and_keeps_each_rows_numbers(tiny_model_path, tmp_path, real_data_root):
    """The probe end to end: 3 facts x 2 templates = 6 rows in one forward (they took 12), each
    row's log-probs equal to the naive full forward of its filled template."""
    loaded = load_model(str(tiny_model_path("llama")))
    cfg = RunConfig.from_dict(
        {
            "probe": "hgp",
            "model": str(loaded.path),
            "relations": ["P36"],
            "max_facts_per_relation": 3,
            "choices": 8,
            "templates": "2",
        }
    )
    out = run_probe(cfg, tmp_path, loaded=loaded, progress=False)
    assert out.metrics["n"] == 6 and out.metrics["forwards"] == 1, out.metrics["forwards"]
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    for r in rows:
        conts = [fill_template(r["template"], r["subject"], o)[1] for o in r["options"]]
        assert fill_template(r["template"], r["subject"], r["options"][0])[0] == r["context"]
        naive = [naive_logprob(loaded.model, loaded.tokenizer, r["context"], c) for c in conts]
        assert max(abs(a - b) for a, b in zip(r["logprobs"], naive)) <= TOL, r["key"]


def test_hgp_on_a_served_model_sends_whole_requests(tiny_model_path, tmp_path, real_data_root):
    """A served model's scorer (factprobe.lm.served) has nothing to pack: HGP runs through it as before."""
    from tests.lm.served_fake import FakeServer

    server = FakeServer(str(tiny_model_path("llama")))
    try:
        cfg = RunConfig.from_dict(
            {
                "probe": "hgp",
                "model": server.spec(),
                "relations": ["P36"],
                "max_facts_per_relation": 2,
                "choices": 4,
                "templates": "2",
            }
        )
        out = run_probe(cfg, tmp_path, progress=False, log=lambda s: None)
    finally:
        server.close()
    assert out.metrics["n"] == 4 and all(len(r["logprobs"]) == 4 for r in out.results.to_dict("records"))
