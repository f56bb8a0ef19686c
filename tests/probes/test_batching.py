"""Batches fill the scorer's token budget (issue 40 item 2): the runner hands a probe that counts its items'
tokens (`Probe.item_tokens`) as many items per batch as fit `token_budget`, not a fixed 8, so the number of
forwards for N facts is what the budget implies; the results are those of batches of 8. IC-LKE without
examples packs facts as HGP does (it cost two forwards per fact)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from factprobe.framework.base import Probe
from factprobe.framework.config import RunConfig
from factprobe.framework.runner import run_probe
from factprobe.lm.body import decoder_parts
from factprobe.lm.naive import naive_logprob
from factprobe.lm.scorer import ChoiceRequest, Scorer, _OptionTree, encode_choices, pack_within_budget
from factprobe.models import load_model
from factprobe.probes.ic_lke import ICLKE

TOL = 1e-5


class _Sized(Probe):
    name = "sized-test"
    batch_size = 2

    def item_tokens(self, session, state, item):
        return item


def _session(budget: int, served: bool = False):
    return SimpleNamespace(cfg=None, loaded=SimpleNamespace(served=served), scorer=SimpleNamespace(token_budget=budget))


def test_items_fill_the_budget_in_order():
    """Greedy and order-keeping: a batch takes items while their tokens fit; one over the budget goes
    alone; an item of 0 tokens counts 1. A served model (nothing packed) keeps `batch_size`."""
    sizes = [3, 4, 2, 12, 1, 0, 9, 5, 5]
    got = [list(b) for b in _Sized().batches_for(_session(10), None, sizes)]
    assert got == [[3, 4, 2], [12], [1, 0], [9], [5, 5]]  # 1 + 1 (the 0) + 9 > 10
    assert [list(b) for b in _Sized().batches_for(_session(10, served=True), None, sizes[:5])] == [[3, 4], [2, 12], [1]]
    assert list(_Sized().batches_for(_session(10), None, [])) == []


def test_a_probe_without_item_tokens_keeps_its_batches():
    class Fixed(Probe):
        name = "fixed-test"
        batch_size = 3

    assert [list(b) for b in Fixed().batches_for(_session(10), None, list(range(7)))] == [[0, 1, 2], [3, 4, 5], [6]]


def _count_forwards(loaded, monkeypatch) -> list[int]:
    """Wrap the model body's forward (every forward the scorer runs goes through it); returns the counter."""
    body = decoder_parts(loaded.model).body
    calls = [0]
    inner = body.forward

    def counted(*a, **kw):
        calls[0] += 1
        return inner(*a, **kw)

    monkeypatch.setattr(body, "forward", counted)
    return calls


def _ic_lke(loaded, tmp_path, monkeypatch, budget: int, examples: int, facts: int = 12, fixed: bool = False):
    """An IC-LKE run of `facts` facts of P36 through the runner: (rows, forwards counted at the body)."""
    cfg = RunConfig.from_dict(
        {
            "probe": "ic-lke",
            "model": str(loaded.path),
            "relations": ["P36"],
            "max_facts_per_relation": facts,
            "choices": 8,
            "examples": examples,
            "token_budget": budget,
        }
    )
    if fixed:  # the batching before issue 40: 8 facts a batch, whatever the budget
        monkeypatch.setattr(ICLKE, "item_tokens", Probe.item_tokens)
    calls = _count_forwards(loaded, monkeypatch)
    out_dir = tmp_path / f"{budget}-{examples}-{fixed}"
    out = run_probe(cfg, out_dir, loaded=loaded, progress=False, log=lambda s: None)
    monkeypatch.undo()
    assert out.metrics["tokenization_fallbacks"] == 0
    rows = [json.loads(line) for line in (out_dir / "results.jsonl").read_text().splitlines()]
    return rows, calls[0], out.metrics["forwards"]


def _fact_tokens(tok, rows, examples: bool) -> list[int]:
    """Each fact's packed tokens, computed apart from the probe: the joint harness encoding of its context
    and options, its context after the relation's examples, and its options' trie."""
    sizes = []
    for r in rows:
        conts = [f" {o}" for o in r["options"]]
        ctx_ids, wholes, starts = encode_choices(tok, r["context"], conts)
        head = r["context"][: -len(r["subject"]) - 1] if examples else ""
        skip = len(encode_choices(tok, head, [" x"])[0]) if head else 0
        sizes.append(_OptionTree.build(ctx_ids[skip:], [w[s:] for w, s in zip(wholes, starts)], [False] * len(conts)).n_tokens)
    return sizes


@pytest.mark.slow
@pytest.mark.parametrize("budget", [160, 4096])
def test_ic_lke_forwards_are_what_the_budget_implies(tiny_model_path, tmp_path, monkeypatch, real_data_root, budget):
    """12 facts: the relation's prefix once, then greedy budget-filled groups of facts; batches of 8 took a
    forward (at least) per 8 facts, and their numbers are the same."""
    loaded = load_model(str(tiny_model_path("llama")))
    rows, forwards, reported = _ic_lke(loaded, tmp_path, monkeypatch, budget, examples=5)
    sizes = _fact_tokens(loaded.tokenizer, rows, examples=True)
    assert forwards == reported == 1 + len(pack_within_budget(sizes, budget)), (sizes, forwards)
    old_rows, old_forwards, _ = _ic_lke(loaded, tmp_path, monkeypatch, budget, examples=5, fixed=True)
    by_batch = [sizes[b : b + 8] for b in range(0, len(sizes), 8)]
    assert old_forwards == 1 + sum(len(pack_within_budget(s, budget)) for s in by_batch)
    if budget == 4096:
        assert (forwards, old_forwards) == (2, 3)  # all 12 facts in one forward, where batches of 8 took two
    for new, old in zip(rows, old_rows):
        assert new["key"] == old["key"] and max(abs(a - b) for a, b in zip(new["logprobs"], old["logprobs"])) <= TOL


@pytest.mark.slow
def test_ic_lke_without_examples_packs_facts(tiny_model_path, tmp_path, monkeypatch, real_data_root):
    """--examples 0: each fact's context and options' trie is one tree, trees packed within the budget
    (before: a context forward and an options forward per fact); the numbers are the unpacked ones and
    the naive forward's."""
    loaded = load_model(str(tiny_model_path("llama")))
    rows, forwards, _ = _ic_lke(loaded, tmp_path, monkeypatch, 1024, examples=0, facts=6)
    sizes = _fact_tokens(loaded.tokenizer, rows, examples=False)
    assert forwards == len(pack_within_budget(sizes, 1024)) == 1, sizes
    scorer = Scorer(loaded.model, loaded.tokenizer)
    unpacked = scorer.score_choices([ChoiceRequest(r["context"], [f" {o}" for o in r["options"]]) for r in rows])
    assert scorer.stats.forwards == 2 * len(rows)  # what the probe paid before
    for r, want in zip(rows, unpacked):
        assert max(abs(a - b) for a, b in zip(r["logprobs"], want)) <= TOL
        naive = naive_logprob(loaded.model, loaded.tokenizer, r["context"], f" {r['options'][0]}")
        assert abs(r["logprobs"][0] - naive) <= 1e-4


@pytest.mark.slow
def test_hgp_batches_fill_the_budget(tiny_model_path, tmp_path, monkeypatch, real_data_root):
    """HGP's facts (each with its templates' rows) fill the budget: one forward per greedy group of facts."""
    from factprobe.probes.prompt_lke import fill_template

    loaded = load_model(str(tiny_model_path("llama")))
    cfg = RunConfig.from_dict(
        {
            "probe": "hgp",
            "model": str(loaded.path),
            "relations": ["P36"],
            "max_facts_per_relation": 10,
            "choices": 6,
            "templates": "2",
            "token_budget": 300,
        }
    )
    calls = _count_forwards(loaded, monkeypatch)
    out = run_probe(cfg, tmp_path, loaded=loaded, progress=False, log=lambda s: None)
    sizes: dict[str, int] = {}
    for r in out.results.to_dict("records"):
        pairs = [fill_template(r["template"], r["subject"], o) for o in r["options"]]
        ctx_ids, wholes, starts = encode_choices(loaded.tokenizer, pairs[0][0], [c for _, c in pairs])
        tree = _OptionTree.build(ctx_ids, [w[s:] for w, s in zip(wholes, starts)], [False] * len(pairs))
        sizes[r["fact_id"]] = sizes.get(r["fact_id"], 0) + tree.n_tokens
    assert out.metrics["n"] == 20 and calls[0] == len(pack_within_budget(list(sizes.values()), 300)) > 1
