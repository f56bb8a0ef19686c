"""Masks of a packed forward built with tensor operations (factprobe.lm.packing, issue 40 item 1): equal to
the mask the scorer built before (kept below as the reference, `_old_masks`), and the log-probs of a packed
batch unchanged against the scorer's previous algorithm (joint tokenization, the old mask) within 1e-5."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from factprobe.lm.encoding import encode_choices
from factprobe.lm.naive import naive_logprob
from factprobe.lm.packing import packed_layout, packed_masks
from factprobe.lm.scorer import ChoiceRequest, Scorer, Segment, _Encoded, split_trailing_whitespace


def _old_masks(prefix_len, segments, dtype, sliding_window=None, layer_types=None):
    """The scorer's `_masks` before issue 40 (Python lists per token, a gathered ancestor matrix), verbatim
    but for `self`: (position ids, mask or masks by layer type, segment starts, last positions)."""
    total = sum(len(s.token_ids) for s in segments)
    seg_start, starts, positions, seg_of = [], 0, [], []
    end_pos = []
    for i, s in enumerate(segments):
        seg_start.append(starts)
        first = prefix_len if s.parent < 0 else end_pos[s.parent] + 1
        positions.extend(range(first, first + len(s.token_ids)))
        end_pos.append(first + len(s.token_ids) - 1)
        seg_of.extend([i] * len(s.token_ids))
        starts += len(s.token_ids)
    seg_of_t = torch.tensor(seg_of)
    n_seg = len(segments)
    ancestor = torch.zeros(n_seg, n_seg, dtype=torch.bool)
    for i, s in enumerate(segments):
        ancestor[i, i] = True
        if s.parent >= 0:
            ancestor[i] |= ancestor[s.parent]
    idx = torch.arange(total)
    vis_packed = ancestor[seg_of_t][:, seg_of_t] & ((seg_of_t[:, None] != seg_of_t[None, :]) | (idx[None, :] <= idx[:, None]))
    vis = torch.cat([torch.ones(total, prefix_len, dtype=torch.bool), vis_packed], dim=1)
    pos_q = torch.tensor(positions)
    pos_k = torch.cat([torch.arange(prefix_len), pos_q])
    neg = torch.finfo(dtype).min

    def additive(v):
        m = torch.zeros(v.shape, dtype=dtype)
        m.masked_fill_(~v, neg)
        return m[None, None]

    full = additive(vis)
    if layer_types and "sliding_attention" in layer_types and sliding_window:
        window = (pos_q[:, None] - pos_k[None, :]) < sliding_window
        mask = {"full_attention": full, "sliding_attention": additive(vis & window)}
        for t in layer_types:
            mask.setdefault(t, full)
    else:
        mask = full
    return pos_q, mask, seg_start, end_pos


def _forest(rng: random.Random, depth_first: bool) -> list[Segment]:
    """Random segment trees (fact contexts, option tries), in depth-first order (each subtree right after
    its root, as the scorer packs) or breadth-first (every root, then every child: parents still first)."""
    parents: list[int] = []
    for _ in range(rng.randint(1, 5)):
        root = len(parents)
        parents.append(-1)
        for _ in range(rng.randint(0, 6)):
            parents.append(rng.choice([root] + [i for i in range(root + 1, len(parents)) if rng.random() < 0.4]))
    depth = []
    for p in parents:
        depth.append(0 if p < 0 else depth[p] + 1)
    kids: dict[int, list[int]] = {}
    for i, p in enumerate(parents):
        kids.setdefault(p, []).append(i)
    if depth_first:
        order, stack = [], list(reversed(kids[-1]))
        while stack:
            i = stack.pop()
            order.append(i)
            stack.extend(reversed(kids.get(i, [])))
    else:
        order = sorted(range(len(parents)), key=lambda i: (depth[i], i))
    new = {old: k for k, old in enumerate(order)}
    return [Segment([1 + depth[i]] * rng.randint(1, 4), new[parents[i]] if parents[i] >= 0 else -1) for i in order]


@pytest.mark.parametrize("depth_first", [True, False])
@pytest.mark.parametrize("sliding", [None, 3])
def test_tensor_masks_equal_the_old_masks(depth_first, sliding):
    rng = random.Random(7)
    layer_types = ["full_attention", "sliding_attention"] if sliding else None
    general = 0
    for trial in range(60):
        segs = _forest(rng, depth_first)
        plen = rng.choice([0, 1, 5])
        layout = packed_layout(plen, [len(s.token_ids) for s in segs], [s.parent for s in segs])
        assert layout.key_end is not None or not depth_first  # depth-first chunks take the two-comparison path
        general += layout.key_end is None
        mask = packed_masks(layout, torch.float32, torch.device("cpu"), sliding, layer_types)
        pos, old, seg_start, end_pos = _old_masks(plen, segs, torch.float32, sliding, layer_types)
        assert torch.equal(layout.positions, pos) and layout.seg_start == seg_start and layout.end_pos == end_pos
        if isinstance(old, dict):
            assert mask.keys() == old.keys() and all(torch.equal(mask[k], old[k]) for k in old), trial
        else:
            assert torch.equal(mask, old), trial
    assert depth_first or general > 20  # the ancestor-matrix path is checked too


def test_a_parent_after_its_child_is_refused():
    with pytest.raises(ValueError, match="parent must come before"):
        packed_layout(0, [1, 1], [1, -1])


class _OldScorer(Scorer):
    """The scorer's previous algorithm: every (context, option) tokenized jointly, the old mask."""

    def _encode_request(self, context, options, head=None):
        ctx_ids, wholes, starts = encode_choices(self.tokenizer, context, options)
        conts = [w[s:] for w, s in zip(wholes, starts)]
        for o, w, s in zip(options, wholes, starts):
            assert split_trailing_whitespace(context, o)[1] and 0 < s < len(w)
        return _Encoded(ctx_ids, conts, [s != len(ctx_ids) for s in starts], wholes, list(starts))

    def _masks(self, prefix_len, segments):
        pos, mask, seg_start, end_pos = _old_masks(prefix_len, segments, self.dtype, self.sliding_window, self.layer_types)
        mask = {k: v.to(self.device) for k, v in mask.items()} if isinstance(mask, dict) else mask.to(self.device)
        return pos, mask, seg_start, end_pos


def _batch(n_examples: int, n_facts: int, n_options: int) -> tuple[str, list[ChoiceRequest]]:
    """An IC-LKE packed batch: a relation prefix, facts that extend it, options with shared first tokens."""
    rng = random.Random(3)
    names = ["Paris", "Lima", "Bern", "Bernau", "Côte d'Ivoire", "東京都", "San José", "Ulaanbaatar", "Rome", "Roma"]
    prefix = " ".join(f"{rng.choice(names)} {rng.choice(names)}" for _ in range(n_examples))
    facts = [f"{prefix} {rng.choice(names)}{rng.choice(['', ' Norte', 'x'])}" for _ in range(n_facts)]
    options = [f" {rng.choice(names)}{rng.choice(['', ' am See', ' 2'])}" for _ in range(n_options)]
    return prefix, [ChoiceRequest(f, rng.sample(options, len(options))) for f in facts]


def _unchanged(model, tok, budget: int, n_examples: int, naive_checks: int = 3) -> None:
    prefix, reqs = _batch(n_examples, 6, 16)
    new = Scorer(model, tok, token_budget=budget).score_choices(reqs, shared_prefix=prefix)
    old = _OldScorer(model, tok, token_budget=budget).score_choices(reqs, shared_prefix=prefix)
    for a, b in zip(new, old):
        assert abs(a - b).max() <= 1e-5
    for r, a in list(zip(reqs, new))[:naive_checks]:  # and still the naive forward's numbers
        assert abs(a[0] - naive_logprob(model, tok, r.context, r.options[0])) <= 1e-4


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_packed_batch_logprobs_unchanged_on_tiny_models(tiny_model_path, kind):
    path = tiny_model_path(kind)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    _unchanged(model, AutoTokenizer.from_pretrained(path), budget=96, n_examples=8)


@pytest.mark.real_model
def test_packed_batch_logprobs_unchanged_on_smollm2(real_model_path):
    path = real_model_path("smollm2-135m-instruct")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    _unchanged(model, AutoTokenizer.from_pretrained(path), budget=1024, n_examples=50)
