"""Exact, shared-prefix log-probability scorer: log P(continuation | context) for many candidates.

This is the heart of factprobe (DESIGN.md section 4). Every multiple-choice probe asks, for a
context `c` and candidates `y_1..y_M`, for `sum_t log P(y_j[t] | c, y_j[:t])`. Running the whole
context again per candidate (the papers' setup and lm-evaluation-harness) costs ~80k tokens per
IC-LKE fact; here a fact costs its own subject and candidate tokens.

How the work is shared
----------------------
1. *Tokenize like the harness.* Whitespace at the end of a context moves to the continuation.
   A context's token ids hold the tokenizer's own special tokens exactly once (`context_token_ids`:
   the one place that turns a context into ids; a context that encodes to no token at all gets one
   stand-in token, BOS else EOS, as lm-evaluation-harness does; docs/probes.md "Contexts").
   The continuation's tokens are `encode(c + y)[len(encode(c)):]`. If the joint encoding does not
   start with `encode(c)` (a token merged across the boundary), that candidate is scored by an
   exact full forward of `encode(c + y)` from the longest common prefix on (`split_point`), never
   by a silently different number. `ScoreStats.fallbacks` counts them. The same ids are built from
   pieces tokenized once and cached by text (`factprobe.lm.encoding.ChoiceEncoder`: a relation's
   shared prefix once per relation, not once per option of every fact), split only where the
   tokenizer's own definition proves the split exact.
2. *Context once.* A `PrefixCache` holds the key/value tensors of a prefix (for IC-LKE: the 50
   in-context examples of a relation, shared by all of its facts) and the log-distribution of the
   token after it.
3. *Candidates together, several facts per forward.* Tokens after the prefix are organised as a
   tree of `Segment`s: a fact's own context tokens (`" Germany"`) are a segment whose parent is
   the prefix; each candidate is a segment whose parent is the fact's segment. All segments of a
   chunk go through the model in ONE packed sequence of batch 1, with a 4D additive attention mask
   in which a token sees the prefix, its ancestors' tokens and its own earlier tokens, and with
   position ids that continue from the parent's end. Sliding-window layers (Gemma-3) get their own
   mask built from the same positions. The masks are built with tensor operations on the model's
   device (`factprobe.lm.packing`). Chunks are cut at tree boundaries to stay within
   `token_budget` query tokens; `request_tokens` says how many a request needs, so that callers
   (the probes' batches) can hand over as many requests as fill the budget.
4. *Only the needed log-probs.* The model body returns hidden states; the LM head runs only on the
   positions that predict a scored token, `head_chunk` rows at a time, so `[tokens x vocab]` is
   never materialised for a whole batch.

Exactness against a naive full-sequence forward is tested to 1e-4 (fp32) on tiny random GPT-2
and Llama models and on the real SmolLM2 and Gemma-3 models (tests/lm/test_scorer*.py).

Over 500 lines: one engine; the option trees of step 3 and the head of step 4 hold one exactness
invariant together (tokenization and masks live in `encoding` and `packing`), and the `Scorer` class is most of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ..errors import ContextTooLongError
from .body import decoder_parts
from .encoding import ChoiceEncoder, _adds_special_tokens, context_token_ids, split_trailing_whitespace
from .encoding import encode_choices as encode_choices
from .encoding import split_point as split_point
from .encoding import stand_in_token_id as stand_in_token_id
from .engine import ModelEngine
from .packing import packed_layout, packed_masks


@dataclass
class ScoreStats:
    """Counters for what the scorer did; tokens are counted as model input positions."""

    prefix_tokens: int = 0  # tokens forwarded to build prefix caches
    packed_tokens: int = 0  # tokens forwarded in packed segment passes
    fallback_tokens: int = 0  # tokens forwarded by exact per-candidate fallbacks
    forwards: int = 0
    fallbacks: int = 0  # candidates whose joint tokenization broke the context prefix
    naive_tokens: int = 0  # what one full forward per scored sequence would have cost (see `savings`)

    @property
    def total_tokens(self) -> int:
        return self.prefix_tokens + self.packed_tokens + self.fallback_tokens

    @property
    def savings(self) -> float:
        """Share of the naive tokens not forwarded: 1 - total / naive (0.0 before anything is scored)."""
        return 1.0 - self.total_tokens / self.naive_tokens if self.naive_tokens else 0.0


@dataclass
class PrefixCache:
    """Key/value states of a token prefix plus the log-distribution of the next token.

    `kv` holds one (keys, values) pair per layer, each `[1, heads, len, head_dim]`. For an empty
    prefix `kv` is None and `next_logprobs` is None (nothing can predict the first token). `text` is the
    context text the ids were encoded from (`Scorer.prefix` of a string; None for ids): requests that
    start with it reuse its tokenization (`factprobe.lm.encoding.ChoiceEncoder`).
    """

    token_ids: tuple[int, ...]
    kv: list[tuple[torch.Tensor, torch.Tensor]] | None
    next_logprobs: torch.Tensor | None  # [vocab], float32
    text: str | None = None

    def __len__(self) -> int:
        return len(self.token_ids)


@dataclass
class Segment:
    """A run of tokens that continues its parent: the prefix (`parent=-1`) or an earlier segment.

    `spans` are half-open [start, end) token ranges inside `token_ids` whose log-probs are summed
    and returned; None means one span over the whole segment. A scored token at index 0 is
    predicted from the parent's last position (or the prefix's `next_logprobs`).
    """

    token_ids: Sequence[int]
    parent: int = -1
    spans: Sequence[tuple[int, int]] | None = None

    def span_list(self) -> list[tuple[int, int]]:
        return [(0, len(self.token_ids))] if self.spans is None else [tuple(s) for s in self.spans]


@dataclass
class ChoiceRequest:
    """One multiple-choice question: a context string and candidate continuation strings."""

    context: str
    options: Sequence[str]


@dataclass
class _Encoded:
    ctx_ids: list[int]
    cont_ids: list[list[int]]
    fallback: list[bool]
    whole_ids: list[list[int]] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)


def pack_within_budget(sizes: Sequence[int], budget: int) -> list[list[int]]:
    """Greedy, order-keeping groups of the indices of `sizes` whose sizes add up to at most
    `budget` each; an item larger than `budget` is a group of its own."""
    groups: list[list[int]] = []
    used = 0
    for i, n in enumerate(sizes):
        if not groups or (groups[-1] and used + n > budget):
            groups.append([])
            used = 0
        groups[-1].append(i)
        used += n
    return groups


def apply_lm_head(model: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """Logits for hidden states `[n, d]` -> `[n, vocab]` float32, as the model's own head does it.

    Reproduces final-logit soft-capping where the config has it (Gemma-2 style). Works on plain,
    PEFT-wrapped and merged models (`decoder_parts`).
    """
    parts = decoder_parts(model)
    logits = parts.head(hidden).float()
    cap = getattr(parts.text_config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits


class Scorer(ModelEngine):
    """Exact summed log-probs of continuations, sharing prefixes and packing candidates.

    Args:
        model: a causal LM: a transformers `PreTrainedModel`, a `peft.PeftModel` on one, or a
            merged model (body and head are found by `factprobe.lm.body.decoder_parts`).
        tokenizer: its tokenizer. Contexts are encoded with the tokenizer's own special tokens exactly
            once (BOS where the tokenizer adds one, as lm-evaluation-harness does for Gemma; a stand-in
            BOS/EOS only for a context that encodes to nothing: `context_token_ids`), and
            continuations never get special tokens.
        device: where to run; defaults to the model's device.
        token_budget: most query tokens in one packed forward (CPU default 1024, CUDA 8192; set-up
            shared with the generator: `factprobe.lm.engine.ModelEngine`).
        head_chunk: rows of hidden states sent through the LM head at once (bounds memory at
            `head_chunk x vocab` floats).
        max_length: the model's context window; longer inputs raise ContextTooLongError.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer,
        device: torch.device | str | None = None,
        token_budget: int | None = None,
        head_chunk: int = 256,
        max_length: int | None = None,
    ) -> None:
        super().__init__(model, tokenizer, device=device, token_budget=token_budget, max_length=max_length)
        self.head_chunk = head_chunk
        self.stats = ScoreStats()
        self._encoder: ChoiceEncoder | None = None

    # ------------------------------------------------------------------ tokenization
    @property
    def encoder(self) -> ChoiceEncoder:
        """The tokenization of this scorer: the harness rule from pieces cached by text (`factprobe.lm.encoding`)."""
        if self._encoder is None:
            self._encoder = ChoiceEncoder(self.tokenizer)
        return self._encoder

    def encode_context(self, text: str, stand_in: bool = True) -> list[int]:
        """Token ids of a context: `context_token_ids` (the tokenizer's special tokens exactly once;
        the stand-in BOS/EOS for a context that encodes to nothing, unless `stand_in` is False)."""
        ids = list(self.encoder.encode([text], _adds_special_tokens(self.tokenizer, text))[0])
        return ids if ids or not stand_in else context_token_ids(self.tokenizer, text, stand_in)

    def encode_continuation(self, text: str) -> list[int]:
        """Token ids of a text piece on its own, without special tokens."""
        return list(self.encoder.encode([text], False)[0])

    def _encode_request(self, context: str, options: Sequence[str], head: str | None = None) -> _Encoded:
        ctx_ids, wholes, starts = self.encoder.choices(context, options, head)
        cont_ids, fallback = [], []
        for option, whole, start in zip(options, wholes, starts):
            if not split_trailing_whitespace(context, option)[1] or start == 0 or len(whole) <= start:
                raise ValueError(f"empty continuation {option!r} for context ending {context[-40:]!r}: nothing to score")
            cont_ids.append(whole[start:])
            fallback.append(start != len(ctx_ids))
        return _Encoded(ctx_ids=ctx_ids, cont_ids=cont_ids, fallback=fallback, whole_ids=wholes, starts=list(starts))

    # ------------------------------------------------------------------ model calls
    def _check_length(self, n: int) -> None:
        if n > self.max_length:
            raise ContextTooLongError(f"{n} tokens exceed the model's context window of {self.max_length} tokens")

    @torch.inference_mode()
    def prefix(self, text_or_ids: str | Sequence[int]) -> PrefixCache:
        """Run a prefix once and keep its KV states and next-token log-distribution.

        A string is encoded as a context (with default special tokens); a list is used as-is.
        """
        text = text_or_ids if isinstance(text_or_ids, str) else None
        ids = self.encode_context(text) if text is not None else list(text_or_ids)
        if not ids:
            return PrefixCache(token_ids=(), kv=None, next_logprobs=None)
        self._check_length(len(ids))
        from transformers import DynamicCache

        cache = DynamicCache()
        input_ids = torch.tensor([ids], device=self.device)
        out = decoder_parts(self.model).body(input_ids=input_ids, past_key_values=cache, use_cache=True)
        hidden = out.last_hidden_state[0, -1:]
        next_lp = torch.log_softmax(apply_lm_head(self.model, hidden)[0], dim=-1)
        kv = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
        self.stats.prefix_tokens += len(ids)
        self.stats.forwards += 1
        return PrefixCache(token_ids=tuple(ids), kv=kv, next_logprobs=next_lp, text=text)

    def extend(self, prefix: PrefixCache, ids: Sequence[int]) -> PrefixCache:
        """A new prefix = `prefix` + `ids`, computed with `prefix`'s cache (two-level sharing)."""
        if not ids:
            return prefix
        if prefix.kv is None:
            return self.prefix(list(ids))
        _, (extended,) = self._forward_packed(prefix, [Segment(list(ids), spans=[])], keep_kv=True)
        return extended

    def _masks(self, prefix_len: int, segments: Sequence[Segment]):
        """Position ids, the additive 4D mask(s) on the model's device, segment starts and each segment's
        last position, for a packed chunk of segments (`factprobe.lm.packing`)."""
        layout = packed_layout(prefix_len, [len(s.token_ids) for s in segments], [s.parent for s in segments])
        mask = packed_masks(layout, self.dtype, self.device, self.sliding_window, self.layer_types)
        return layout.positions, mask, layout.seg_start, layout.end_pos

    @torch.inference_mode()
    def _query_logprobs(
        self, prefix: PrefixCache, hidden: torch.Tensor | None, seg_start: Sequence[int], queries: Sequence[tuple[int, int, int]]
    ) -> torch.Tensor:
        """log P(target) for each query `(segment, token index, target id)`: the distribution at
        that packed token's hidden row, or the prefix's next-token distribution for segment -1.
        The LM head runs once per distinct row, `head_chunk` rows at a time. float64 `[len(queries)]`."""
        token_lp = torch.empty(len(queries), dtype=torch.float64)
        if not queries:
            return token_lp
        rows_t = torch.tensor([seg_start[q[0]] + q[1] if q[0] >= 0 else -1 for q in queries], dtype=torch.long)
        targets_t = torch.tensor([q[2] for q in queries], dtype=torch.long)
        from_prefix = rows_t < 0
        if from_prefix.any():
            if prefix.next_logprobs is None:
                raise ValueError("cannot score the first token of an empty prefix")
            token_lp[from_prefix] = prefix.next_logprobs[targets_t[from_prefix].to(prefix.next_logprobs.device)].double().cpu()
        need = (~from_prefix).nonzero().flatten()
        # Unique rows only: several candidates share the row that predicts their first token.
        uniq_rows, inverse = torch.unique(rows_t[need], return_inverse=True)
        for c0 in range(0, len(uniq_rows), self.head_chunk):
            sel = uniq_rows[c0 : c0 + self.head_chunk]
            lp = torch.log_softmax(apply_lm_head(self.model, hidden[sel.to(hidden.device)]), dim=-1)  # split: last layer's device
            in_chunk = (inverse >= c0) & (inverse < c0 + len(sel))
            k = need[in_chunk]
            token_lp[k] = lp[(inverse[in_chunk] - c0).to(lp.device), targets_t[k].to(lp.device)].double().cpu()
        return token_lp

    @torch.inference_mode()
    def _forward_hidden(self, prefix: PrefixCache, segments: Sequence[Segment]):
        """One packed forward of `segments` after `prefix`: (model output, hidden `[tokens, d]`,
        start of each segment in the packed sequence)."""
        from transformers import DynamicCache

        plen = len(prefix)
        pos_q, mask, seg_start, end_pos = self._masks(plen, segments)
        self._check_length(max(end_pos) + 1)
        ids = torch.tensor([[t for s in segments for t in s.token_ids]], device=self.device)
        cache = DynamicCache(ddp_cache_data=prefix.kv) if prefix.kv is not None else DynamicCache()
        out = decoder_parts(self.model).body(
            input_ids=ids,
            attention_mask=mask,
            position_ids=pos_q[None].to(self.device),
            past_key_values=cache,
            use_cache=True,
        )
        hidden = out.last_hidden_state[0]
        self.stats.packed_tokens += ids.shape[1]
        self.stats.forwards += 1
        return out, hidden, seg_start

    @torch.inference_mode()
    def _forward_packed(self, prefix: PrefixCache, segments: Sequence[Segment], keep_kv: bool = False):
        """One packed forward. Returns per-segment lists of span sums (and, with keep_kv, a
        PrefixCache of prefix + the single segment, used by `extend`)."""
        out, hidden, seg_start = self._forward_hidden(prefix, segments)
        # For every scored token: where it is predicted from (segment, token index; -1 = the
        # prefix's next-token distribution) and the target id.
        queries, owners = [], []  # owners: (segment, span) for accumulation
        for si, s in enumerate(segments):
            for sj, (a, b) in enumerate(s.span_list()):
                for t in range(a, b):
                    if t > 0:
                        at = (si, t - 1)
                    elif s.parent >= 0:
                        at = (s.parent, len(segments[s.parent].token_ids) - 1)
                    else:
                        at = (-1, 0)
                    queries.append((*at, s.token_ids[t]))
                    owners.append((si, sj))
        token_lp = self._query_logprobs(prefix, hidden, seg_start, queries)

        sums = [[0.0] * len(s.span_list()) for s in segments]
        for (si, sj), v in zip(owners, token_lp.tolist()):
            sums[si][sj] += v
        if not keep_kv:
            return sums
        kv = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
        last = torch.log_softmax(apply_lm_head(self.model, hidden[-1:])[0], dim=-1)
        seg = segments[0]
        return sums, [PrefixCache(token_ids=prefix.token_ids + tuple(seg.token_ids), kv=kv, next_logprobs=last)]

    # ------------------------------------------------------------------ public scoring
    def score_segments(self, prefix: PrefixCache, segments: Sequence[Segment]) -> list[list[float]]:
        """Summed log-probs per span of each segment, given `prefix`.

        Segments form trees rooted at the prefix (`parent=-1`); parents come before children.
        Root trees are packed into forwards of at most `token_budget` query tokens (a tree larger
        than the budget goes alone).
        """
        trees: list[list[int]] = []
        root_of: list[int] = []
        for i, s in enumerate(segments):
            if s.parent < 0:
                root_of.append(len(trees))
                trees.append([i])
            else:
                root_of.append(root_of[s.parent])
                trees[root_of[s.parent]].append(i)
        results: list[list[float] | None] = [None] * len(segments)
        sizes = [sum(len(segments[i].token_ids) for i in tree) for tree in trees]
        for group in pack_within_budget(sizes, self.token_budget):
            chunk = [i for t in group for i in trees[t]]
            local = {g: k for k, g in enumerate(chunk)}
            segs = [
                Segment(segments[g].token_ids, local[segments[g].parent] if segments[g].parent >= 0 else -1, segments[g].spans)
                for g in chunk
            ]
            for g, r in zip(chunk, self._forward_packed(prefix, segs)):
                results[g] = r
        return results  # type: ignore[return-value]

    @torch.inference_mode()
    def _full_forward_logprob(self, whole: Sequence[int], start: int) -> float:
        """Exact fallback: one full forward of `whole`, summing log-probs of tokens from `start`."""
        self._check_length(len(whole))
        ids = torch.tensor([list(whole)], device=self.device)
        hidden = decoder_parts(self.model).body(input_ids=ids, use_cache=False).last_hidden_state[0]
        total = 0.0
        for c0 in range(start - 1, len(whole) - 1, self.head_chunk):
            rows = torch.arange(c0, min(c0 + self.head_chunk, len(whole) - 1))
            lp = torch.log_softmax(apply_lm_head(self.model, hidden[rows.to(hidden.device)]), dim=-1)
            tgt = torch.tensor([whole[r + 1] for r in rows.tolist()], device=lp.device)
            total += lp[torch.arange(len(rows), device=lp.device), tgt].double().sum().item()
        self.stats.fallback_tokens += len(whole)
        self.stats.fallbacks += 1
        self.stats.forwards += 1
        return total

    def _score_option_trees(self, prefix: PrefixCache, trees: Sequence[_OptionTree]) -> list[torch.Tensor]:
        """Log-probs of every query of every tree (float64, one tensor per tree), given `prefix`.

        Trees are packed into forwards of at most `token_budget` tokens (a larger tree goes alone);
        a tree without segments (only single-token options after the prefix) needs no forward."""
        out: list[torch.Tensor | None] = [None] * len(trees)
        for chunk in pack_within_budget([t.n_tokens for t in trees], self.token_budget):
            segs: list[Segment] = []
            offsets = []
            for t in chunk:
                base = len(segs)
                offsets.append(base)
                segs.extend(
                    Segment(sg.token_ids, sg.parent + base if sg.parent >= 0 else -1, spans=[]) for sg in trees[t].segments
                )
            hidden, seg_start = None, []
            if segs:
                _, hidden, seg_start = self._forward_hidden(prefix, segs)
            queries = [
                (q[0] + base if q[0] >= 0 else -1, q[1], q[2]) for t, base in zip(chunk, offsets) for q in trees[t].queries
            ]
            lp = self._query_logprobs(prefix, hidden, seg_start, queries)
            at = 0
            for t in chunk:
                n = len(trees[t].queries)
                out[t] = lp[at : at + n]
                at += n
        return out  # type: ignore[return-value]

    def _plan_choices(self, requests: Sequence[ChoiceRequest], shared_prefix: PrefixCache | None, pack_contexts: bool):
        """How `score_choices` scores `requests`: (the shared prefix when it has tokens, each request's
        `_Encoded`, [(request, its tree)] packed after that prefix (or the empty one), [(request, how its
        context relates to the shared prefix: "extends" it, "equals" it, or "own": none)] scored alone)."""
        base = shared_prefix if shared_prefix is not None and len(shared_prefix) else None
        head = base.text if base is not None else None
        encoded = [self._encode_request(r.context, r.options, head) for r in requests]
        packs = pack_contexts and base is None  # every request's whole context goes in its tree
        packed: list[tuple[int, _OptionTree]] = []
        own: list[tuple[int, str]] = []
        for ri, enc in enumerate(encoded):
            starts_with_base = base is not None and enc.ctx_ids[: len(base)] == list(base.token_ids)
            shares = starts_with_base and len(enc.ctx_ids) > len(base)
            if shares or packs:
                tree = _OptionTree.build(enc.ctx_ids[len(base) :] if shares else enc.ctx_ids, enc.cont_ids, enc.fallback)
                if tree.n_tokens <= self.token_budget:
                    packed.append((ri, tree))
                    continue
            own.append((ri, "extends" if shares else "equals" if starts_with_base else "own"))
        return base, encoded, packed, own

    def request_tokens(
        self, requests: Sequence[ChoiceRequest], shared_prefix: PrefixCache | None = None, pack_contexts: bool = False
    ) -> list[int]:
        """Query tokens `score_choices(requests, shared_prefix, pack_contexts)` forwards for each request
        in packed passes: its tree (its own context tokens after the shared prefix, and its options'
        trie), plus its context where it runs alone. Exact per-candidate fallbacks are separate forwards
        and not counted. Tokenization is cached (`encoder`), so scoring the requests next costs no second one."""
        base, encoded, packed, own = self._plan_choices(requests, shared_prefix, pack_contexts)
        out = [0] * len(requests)
        for ri, tree in packed:
            out[ri] = tree.n_tokens
        for ri, relation in own:
            enc = encoded[ri]
            ctx = len(enc.ctx_ids) - len(base) if relation == "extends" else 0 if relation == "equals" else len(enc.ctx_ids)
            out[ri] = ctx + _OptionTree.build([], enc.cont_ids, enc.fallback).n_tokens
        return out

    def score_choices(
        self, requests: Sequence[ChoiceRequest], shared_prefix: PrefixCache | str | None = None, pack_contexts: bool = False
    ) -> list[np.ndarray]:
        """Summed log-prob of every option of every request, `[len(options)]` float64 each.

        `shared_prefix` (a string or a PrefixCache) is a context prefix common to the requests,
        e.g. a relation's in-context examples. A request whose encoded context does not start
        with the prefix's tokens is scored with its own prefix (exact, just not shared).
        `pack_contexts` (only without a shared prefix): each request's whole context and its
        options' trie form one tree after the empty prefix, and the trees of many requests are
        packed into forwards of at most `token_budget` tokens (HGP/MMP: many short prompts, one
        forward for several of them, instead of a context forward and an options forward each).
        A request's options form a token trie (`_OptionTree`): option tokens they share are
        forwarded once, and no option's last token is forwarded (nothing is predicted from it).
        The numbers equal `naive_logprob(context, option)` up to float rounding.
        """
        if isinstance(shared_prefix, str):
            shared_prefix = self.prefix(shared_prefix) if shared_prefix else None
        base, encoded, packed, own = self._plan_choices(requests, shared_prefix, pack_contexts)
        self.stats.naive_tokens += sum(len(w) for enc in encoded for w in enc.whole_ids)
        results: list[np.ndarray] = []
        for enc in encoded:
            results.append(np.full(len(enc.cont_ids), np.nan))
            self._check_length(max(len(w) for w in enc.whole_ids) if enc.whole_ids else len(enc.ctx_ids))
            for oi, fb in enumerate(enc.fallback):
                if fb:
                    results[-1][oi] = self._full_forward_logprob(enc.whole_ids[oi], enc.starts[oi])
        shared_of = [ri for ri, _ in packed]
        trees = [tree for _, tree in packed]
        after = base if base is not None else PrefixCache(token_ids=(), kv=None, next_logprobs=None)
        for ri, tree, lp in zip(shared_of, trees, self._score_option_trees(after, trees) if trees else []):
            tree.sum_into(lp, results[ri])
        # A request with its own prefix, or whose options' trie exceeds the token budget: its
        # context runs once (extending the shared prefix where it can), then its options' trie is
        # cut into root subtrees packed within the budget (attention cost grows with the square of
        # a packed forward's length, so one 2,000-token trie costs more than four of 500). A context
        # equal to the shared prefix (an item whose slot comes first, after in-context examples) uses
        # the shared prefix itself: nothing of it is forwarded again.
        for ri, relation in own:
            enc = encoded[ri]
            tree = _OptionTree.build([], enc.cont_ids, enc.fallback)
            if not tree.queries:
                continue
            prefix = (
                self.extend(base, enc.ctx_ids[len(base) :])
                if relation == "extends"
                else base
                if relation == "equals"
                else self.prefix(enc.ctx_ids)
            )
            parts = tree.split(self.token_budget)
            for part, lp in zip(parts, self._score_option_trees(prefix, parts)):
                part.sum_into(lp, results[ri])
        return results  # type: ignore[return-value]


@dataclass
class _OptionTree:
    """The options of one request after a prefix, as packed segments plus log-prob queries.

    `segments[0]` is the request's own context tokens after the prefix (when there are any); the
    options' tokens form a compressed trie below it, in which only *proper* prefixes of options
    appear: a shared leading token is forwarded once, and an option's last token never is. A
    query `(segment, token index, target)` asks for log P(target) at that token's row (segment -1:
    the prefix's next-token distribution); `option_of[q]` is the option it belongs to, so an
    option's log-prob is the sum of its queries (one per option token)."""

    segments: list[Segment]
    queries: list[tuple[int, int, int]]
    option_of: list[int]

    @property
    def n_tokens(self) -> int:
        return sum(len(s.token_ids) for s in self.segments)

    @classmethod
    def build(cls, ctx_ids: Sequence[int], options: Sequence[Sequence[int]], skip: Sequence[bool]) -> _OptionTree:
        segments: list[Segment] = []
        if ctx_ids:
            segments.append(Segment(list(ctx_ids), -1, spans=[]))
            root_at = (0, len(ctx_ids) - 1)
        else:
            root_at = (-1, 0)
        # Token trie over the options' proper prefixes: node -> {token: child}; node 0 is the root.
        children: list[dict[int, int]] = [{}]
        paths: list[list[int]] = []  # per option: the node reached after each of its tokens but the last
        for oi, opt in enumerate(options):
            path, node = [], 0
            if not skip[oi]:
                for tok in opt[:-1]:
                    nxt = children[node].get(tok)
                    if nxt is None:
                        nxt = len(children)
                        children.append({})
                        children[node][tok] = nxt
                    node = nxt
                    path.append(node)
            paths.append(path)
        # Compress chains into segments, depth first so parents come before children.
        where: dict[int, tuple[int, int]] = {0: root_at}
        stack = [(tok, child, root_at[0]) for tok, child in reversed(list(children[0].items()))]
        while stack:
            tok, node, parent = stack.pop()
            toks = [tok]
            seg = len(segments)
            where[node] = (seg, 0)
            while len(children[node]) == 1:
                ((tok, node),) = children[node].items()
                where[node] = (seg, len(toks))
                toks.append(tok)
            segments.append(Segment(toks, parent, spans=[]))
            stack.extend((t, c, seg) for t, c in reversed(list(children[node].items())))
        queries, option_of = [], []
        for oi, (opt, path) in enumerate(zip(options, paths)):
            if skip[oi]:
                continue
            for k, tok in enumerate(opt):
                at = root_at if k == 0 else where[path[k - 1]]
                queries.append((*at, tok))
                option_of.append(oi)
        return cls(segments=segments, queries=queries, option_of=option_of)

    def split(self, budget: int) -> list[_OptionTree]:
        """Cut the tree into parts of whole root subtrees, each at most `budget` tokens where a
        subtree allows (a larger subtree is a part of its own). Queries on the prefix go with the
        first part. One part (this tree) when it fits. (A tree with a context segment is a single
        root subtree, so only a tree built without one is ever cut.)"""
        if self.n_tokens <= budget or not self.segments:
            return [self]
        # Depth-first order keeps each root subtree contiguous: [start, end) ranges.
        roots = [i for i, sg in enumerate(self.segments) if sg.parent < 0] + [len(self.segments)]
        ends = dict(zip(roots, roots[1:]))
        sizes = [sum(len(self.segments[i].token_ids) for i in range(a, b)) for a, b in zip(roots, roots[1:])]
        groups = [[roots[k] for k in g] for g in pack_within_budget(sizes, budget)]  # root-subtree starts per part
        new_index: dict[int, tuple[int, int]] = {}
        parts = [_OptionTree(segments=[], queries=[], option_of=[]) for _ in groups]
        for pi, starts in enumerate(groups):
            for a in starts:
                for i in range(a, ends[a]):
                    sg = self.segments[i]
                    new_index[i] = (pi, len(parts[pi].segments))
                    parent = new_index[sg.parent][1] if sg.parent >= 0 else -1
                    parts[pi].segments.append(Segment(sg.token_ids, parent, spans=[]))
        for (seg, pos, tok), oi in zip(self.queries, self.option_of):
            pi, seg = new_index[seg] if seg >= 0 else (0, -1)
            parts[pi].queries.append((seg, pos, tok))
            parts[pi].option_of.append(oi)
        return parts

    def sum_into(self, logprobs: torch.Tensor, out: np.ndarray) -> None:
        """Add each query's log-prob to its option's entry of `out` (a NaN entry starts at 0, so
        the parts of a split tree add up)."""
        if not self.option_of:
            return
        of = np.asarray(self.option_of)
        out[of] = np.nan_to_num(out[of])  # NaN (not yet scored) -> 0.0
        np.add.at(out, of, logprobs.detach().cpu().numpy())
