"""Exact, shared-prefix text generation: greedy decoding and shared-KV sampling.

The scorer's twin for decoding (DESIGN.md section 4b). QA, counterfactual ICL and BELIEF-ICL
generate short answers after a long, shared k-shot block; here the shared block runs once.

Contract
--------
In: prompt strings. Each prompt is encoded as a context, `tokenizer(text, add_special_tokens=True)`
(BOS where the tokenizer adds one, like the scorer and lm-evaluation-harness).

Out: one `Generation` per prompt (greedy) or per sample, in input order:

- `token_ids`: the generated token ids, in order. They include the token that ended generation:
  the EOS token (finish "eos") or the token whose decoded text completed a stop string
  (finish "stop"). At most `max_new_tokens` of them.
- `logprobs`: for each generated token, the model's own natural-log probability of it,
  `log_softmax(raw logits)` at that step in float32, i.e. BEFORE temperature, top-k and top-p.
- `finish_reason`, checked after every generated token in this order:
  1. "eos": the token is an end-of-sequence id (`Generator.eos_token_ids`: the model's generation
     config, as `model.generate` uses it). `text` is the decoded text before it.
  2. "stop": the decoded text of the generated tokens so far contains a stop string. Generation
     stops at the FIRST token for which this is true; `text` is cut just before the earliest
     occurrence of any stop string (the stop string itself is not in `text`).
  3. "length": `max_new_tokens` tokens were generated without 1. or 2.; `text` is all of them.
- `text`: `tokenizer.decode(ids, skip_special_tokens=True)` of the generated tokens (not the
  prompt), cut as above. Stop strings are searched in this same decoded text.

Units: token ids are ints of the model's vocabulary; log-probs are natural logs (float).
`token_budget` bounds one batch at rows x (prompt tokens + max_new_tokens), a shared prefix
counted in every row's prompt: the keys the batch's rows attend to at its last step (the size of
the attention scores, and what a per-row KV cache would hold; ours stores a shared prefix once).

How the work is shared
----------------------
1. *Shared prefix, stored once.* `greedy(prompts, shared_prefix=p)` runs `encode(p)` once
   (batch 1) and keeps its keys/values as ONE copy (`_SharedKV`). Each batch of prompts then
   forwards only each prompt's own tokens after the prefix, left-padded to one length, and keeps
   only those in its per-row cache. The rows attend to the shared prefix through
   `_shared_prefix_attention`: the prefix scores of all rows and queries are one matmul per
   key/value head against the single copy, joined with the row's own keys in one softmax (the
   model's attention layers are routed to it with transformers' `AttentionInterface` for these
   forwards only). No per-row copy of the prefix is made or read, so a decode step costs about
   what it costs without a prefix.
   Every row is exactly `encode(prompt)`: it shares the longest run of prefix tokens its own
   encoding starts with, normally all of `encode(p)`; where a token merged across the boundary
   (e.g. `"\n\n" + "Question"` -> `"\n", "\nQuestion"`), the row hides the prefix keys after the
   merge point and forwards its own tokens from there (`GenerateStats.boundary_merges`), never
   silently different tokens. Position ids follow the real tokens, so a row's positions are those
   of the prompt run alone. Padding sits between the prefix and a row's own tokens, so index
   distance is not position distance: every forward gets explicit 4D masks built from positions,
   one per attention type (a sliding-window mask for Gemma-3's local layers), as the scorer's
   `_masks` does.
2. *Shared-KV sampling.* `sample(prompt, n)` runs the prompt once and shares its keys/values
   the same way with `n` rows that decode together (HF `num_return_sequences` pays `n` prefills
   and `n` copies). A `torch.Generator` seeded with `seed` makes the samples reproducible.
3. *Finished rows leave the batch.* A row that hits EOS or a stop string is dropped from the
   batch and its cache, so it costs nothing afterwards.
4. *Only the last position's logits.* The model runs through its normal forward with
   `logits_to_keep=1` (works for PEFT models too).
Prompts without a shared prefix are batched with plain left padding and the model's own attention.

Exactness: greedy output is token-identical to `model.generate(do_sample=False)` run on each
prompt alone, and the log-probs of greedy and sampled tokens equal a naive full forward within
1e-4 (fp32) (tests/lm/test_generate.py, tiny random GPT-2/Llama and real SmolLM2/Gemma-3).

Over 500 lines: one engine, the `Generator` class (about 370 lines), whose greedy and sampling paths share
its shared-prefix keys/values, its row bookkeeping and the attention function routed around its forwards.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import torch

from ..errors import ConfigError, ContextTooLongError
from .engine import ModelEngine

FinishReason = Literal["stop", "eos", "length"]


@dataclass
class Generation:
    """One generated continuation; see the module docstring for the exact semantics."""

    text: str
    token_ids: list[int]
    logprobs: list[float]  # natural log P(token | prompt, earlier tokens), before any sampling warp
    finish_reason: FinishReason


@dataclass
class GenerateStats:
    """Counters for what the generator did; tokens are counted as model input positions."""

    prefix_tokens: int = 0  # shared-prefix tokens forwarded (once per distinct prefix in a row of calls)
    prefix_reuses: int = 0  # `greedy` calls that reused the previous call's shared-prefix KV
    prompt_tokens: int = 0  # per-prompt tokens forwarded: suffixes after a shared prefix, whole prompts otherwise
    pad_tokens: int = 0  # padding positions forwarded alongside them
    decode_tokens: int = 0  # generated tokens fed back to the model
    forwards: int = 0
    boundary_merges: int = 0  # prompts whose encoding does not start with all of the shared prefix's tokens
    naive_prompt_tokens: int = 0  # prompt tokens if every prompt / sample ran its whole prompt alone

    @property
    def total_tokens(self) -> int:
        return self.prefix_tokens + self.prompt_tokens + self.pad_tokens + self.decode_tokens


@dataclass
class _SharedKV:
    """Keys/values of a prefix that every row of a batch attends to, stored ONCE (batch 1):
    one `(keys, values)` pair per layer, each `[1, kv_heads, prefix_len, head_dim]`."""

    kv: list[tuple[torch.Tensor, torch.Tensor]]

    def __len__(self) -> int:
        return self.kv[0][0].shape[2]


@dataclass
class _Rows:
    """A batch being decoded: its rows' own KV cache, an optional shared prefix, and per row the
    position of every key it may attend to.

    `key_pos[r, k]` is the position id of own cache slot k of row r, or -1 for padding;
    `prefix_pos[r, j]` is j for the shared-prefix tokens row r sees and -1 for those it must not
    (after a token merged across the prefix boundary). Positions of a row's real keys increase
    with their index, so "key position <= query position" is the causal rule.
    """

    cache: object  # transformers DynamicCache: each row's keys after the shared prefix
    key_pos: torch.Tensor  # [rows, own slots] long, on the CPU
    next_pos: torch.Tensor  # [rows] long: position id of the row's next token
    logits: torch.Tensor | None  # [rows, vocab] float32: raw logits for the row's next token
    shared: _SharedKV | None = None
    prefix_pos: torch.Tensor | None = None  # [rows, prefix_len] long, on the CPU


_SHARED_ATTENTION = "factprobe_shared_prefix"


def _shared_prefix_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """Attention over [shared prefix | each row's own keys] without copying the prefix per row.

    `query` is `[rows, heads, q, d]`; `key`/`value` are the rows' own keys `[rows, kv_heads, k, d]`;
    the prefix keys come from `kwargs["factprobe_shared_kv"]` at `[1, kv_heads, p, d]`;
    `attention_mask` is additive `[rows, 1, q, p + k]` (prefix columns first). The prefix scores
    of all rows are one matmul per key/value head (rows x queries stacked), the two parts are
    joined by one softmax: exactly softmax over the concatenated keys, up to float rounding.
    Returns `[rows, q, heads, d]` like transformers' attention functions.
    """
    shared: _SharedKV = kwargs["factprobe_shared_kv"]
    pk, pv = shared.kv[module.layer_idx]
    rows, heads, n_q, dim = query.shape
    kv_heads, n_pre = key.shape[1], pk.shape[2]
    group = heads // kv_heads
    scale = scaling if scaling is not None else dim**-0.5
    q = query.reshape(rows, kv_heads, group, n_q, dim)
    q_stacked = q.permute(1, 0, 2, 3, 4).reshape(kv_heads, rows * group * n_q, dim)
    s_pre = torch.bmm(q_stacked, pk[0].transpose(1, 2)).view(kv_heads, rows, group, n_q, n_pre)
    s_pre = s_pre.permute(1, 0, 2, 3, 4).float() * scale + attention_mask[:, :, None, :, :n_pre].float()
    s_own = torch.matmul(q, key[:, :, None].transpose(-1, -2)).float() * scale
    s_own = s_own + attention_mask[:, :, None, :, n_pre:].float()
    top = torch.maximum(s_pre.amax(-1, keepdim=True), s_own.amax(-1, keepdim=True))
    e_pre, e_own = torch.exp(s_pre - top), torch.exp(s_own - top)
    denom = e_pre.sum(-1, keepdim=True) + e_own.sum(-1, keepdim=True)
    e_pre_stacked = e_pre.to(pv.dtype).permute(1, 0, 2, 3, 4).reshape(kv_heads, rows * group * n_q, n_pre)
    o_pre = torch.bmm(e_pre_stacked, pv[0]).view(kv_heads, rows, group, n_q, dim).permute(1, 0, 2, 3, 4)
    o_own = torch.matmul(e_own.to(value.dtype), value[:, :, None])
    out = ((o_pre.float() + o_own.float()) / denom).to(query.dtype)
    return out.reshape(rows, heads, n_q, dim).transpose(1, 2).contiguous(), None


@contextmanager
def _attention_implementation(model: torch.nn.Module, name: str) -> Iterator[None]:
    """Temporarily route the attention layers of the model's text decoder (they read the
    implementation from their config at every call) to the registered function `name`."""
    from transformers import AttentionInterface

    AttentionInterface.register(_SHARED_ATTENTION, _shared_prefix_attention)
    config = model.config.get_text_config()
    old = config._attn_implementation
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = old


def _encode_stop(stop: str | Sequence[str]) -> tuple[str, ...]:
    stops = (stop,) if isinstance(stop, str) else tuple(stop)
    for s in stops:
        if not isinstance(s, str) or not s:
            raise ConfigError(f"stop: stop strings must be non-empty strings, got {s!r}")
    return stops


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Number of leading tokens `a` and `b` have in common."""
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    return k


def first_stop(text: str, stops: Sequence[str]) -> int:
    """Index in `text` of the earliest occurrence of any stop string, or -1."""
    found = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(found) if found else -1


class Generator(ModelEngine):
    """Batched greedy decoding and shared-KV sampling, exact against `model.generate`.

    Args:
        model: a causal LM (transformers `PreTrainedModel` or a PEFT `PeftModel`).
        tokenizer: its tokenizer. Prompts are encoded with the tokenizer's default special tokens.
        device: where to run; defaults to the model's device.
        token_budget: bound per batch on rows x (prompt tokens, a shared prefix included, +
            max_new_tokens) (CPU default 1024, CUDA 8192; set-up shared with the scorer:
            `factprobe.lm.engine.ModelEngine`). A single prompt may exceed it alone.
        max_length: the model's context window; prompt + max_new_tokens beyond it raise
            ContextTooLongError.
        eos_token_ids: ids that end a row (finish "eos"); defaults to the model's generation
            config (what `model.generate` stops at), else its config, else the tokenizer's EOS.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer,
        device: torch.device | str | None = None,
        token_budget: int | None = None,
        max_length: int | None = None,
        eos_token_ids: Sequence[int] | None = None,
    ) -> None:
        super().__init__(model, tokenizer, device=device, token_budget=token_budget, max_length=max_length)
        self.eos_token_ids = frozenset(eos_token_ids if eos_token_ids is not None else self._default_eos())
        self.stats = GenerateStats()
        # The last shared prefix's KV (token ids, single-row batch): consecutive `greedy` calls with
        # the same prefix (a probe's checkpointed batches) forward it once. Read-only once built.
        self._prefix_memo: tuple[tuple[int, ...], _Rows] | None = None

    def clear_prefix_cache(self) -> None:
        """Forget the remembered shared prefix (call after changing the model's weights)."""
        self._prefix_memo = None

    def _prefix_rows(self, prefix_ids: list[int]) -> _Rows:
        key = tuple(prefix_ids)
        if self._prefix_memo is not None and self._prefix_memo[0] == key:
            self.stats.prefix_reuses += 1
            return self._prefix_memo[1]
        self._prefix_memo = None
        rows = self._empty_rows(1)
        self._extend(rows, [prefix_ids])
        self.stats.prefix_tokens += len(prefix_ids)
        self._prefix_memo = (key, rows)
        return rows

    def _default_eos(self) -> list[int]:
        for source in (getattr(self.model, "generation_config", None), self.model.config, self.tokenizer):
            eos = getattr(source, "eos_token_id", None)
            if eos is not None:
                return [eos] if isinstance(eos, int) else list(eos)
        return []

    # ------------------------------------------------------------------ validation
    def encode(self, text: str) -> list[int]:
        """Token ids of a prompt, with the tokenizer's default special tokens (e.g. BOS)."""
        return list(self.tokenizer(text, add_special_tokens=True)["input_ids"])

    def _check_fits(self, prompt_len: int, max_new_tokens: int) -> None:
        if prompt_len + max_new_tokens > self.max_length:
            raise ContextTooLongError(
                f"prompt of {prompt_len} tokens + max_new_tokens={max_new_tokens} exceed the model's "
                f"context window of {self.max_length} tokens"
            )

    @staticmethod
    def _check_max_new(max_new_tokens: int) -> None:
        if not isinstance(max_new_tokens, int) or max_new_tokens <= 0:
            raise ConfigError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")

    # ------------------------------------------------------------------ model calls
    def _masks(self, key_pos: torch.Tensor, q_pos: torch.Tensor, q_valid: torch.Tensor):
        """Additive 4D masks `[rows, 1, queries, keys]` for queries at `q_pos` over keys at `key_pos`.

        `key_pos` already includes the queries' own slots (last `queries` columns). A query sees
        real keys at positions <= its own (and, for sliding layers, within the window). A padding
        query sees only itself, so its (unused) output stays finite.
        """
        kp = key_pos[:, None, :]
        qp = q_pos[:, :, None]
        visible = (kp >= 0) & (kp <= qp) & q_valid[:, :, None]
        n_q = q_pos.shape[1]
        self_slot = torch.zeros_like(visible)
        self_slot[:, :, -n_q:] = torch.eye(n_q, dtype=torch.bool)
        pad_self = self_slot & ~q_valid[:, :, None]
        neg = torch.finfo(self.dtype).min

        def additive(v: torch.Tensor) -> torch.Tensor:
            m = torch.zeros(v.shape, dtype=self.dtype)
            m.masked_fill_(~(v | pad_self), neg)
            return m[:, None].to(self.device)

        full = additive(visible)
        if self.layer_types and "sliding_attention" in self.layer_types and self.sliding_window:
            sliding = additive(visible & ((qp - kp) < self.sliding_window))
            mask = {"full_attention": full, "sliding_attention": sliding}
            for t in self.layer_types:
                mask.setdefault(t, full)
            return mask
        return full

    @torch.inference_mode()
    def _extend(self, rows: _Rows, tokens: Sequence[Sequence[int]]) -> None:
        """Forward each row's `tokens` (left-padded to one length) after its cached keys; updates
        `rows` in place (cache, key positions, next positions, next-token logits)."""
        n_q = max(len(t) for t in tokens)
        n_rows = len(tokens)
        ids = torch.zeros(n_rows, n_q, dtype=torch.long)
        q_valid = torch.zeros(n_rows, n_q, dtype=torch.bool)
        for r, t in enumerate(tokens):
            if t:
                ids[r, n_q - len(t) :] = torch.tensor(list(t), dtype=torch.long)
                q_valid[r, n_q - len(t) :] = True
        # Real tokens continue the row's positions; padding gets -1 (never seen by anyone).
        offs = torch.cumsum(q_valid.long(), dim=1) - 1
        q_pos = torch.where(q_valid, rows.next_pos[:, None] + offs, torch.full_like(offs, -1))
        key_pos = torch.cat([rows.key_pos, q_pos], dim=1)
        if rows.shared is None:
            mask = self._masks(key_pos, q_pos, q_valid)
            out = self._forward(ids, mask, q_pos, rows.cache)
        else:
            mask = self._masks(torch.cat([rows.prefix_pos, key_pos], dim=1), q_pos, q_valid)
            with _attention_implementation(self.model, _SHARED_ATTENTION):
                out = self._forward(ids, mask, q_pos, rows.cache, factprobe_shared_kv=rows.shared)
        rows.cache = out.past_key_values
        rows.key_pos = key_pos
        rows.next_pos = rows.next_pos + q_valid.sum(dim=1)
        rows.logits = out.logits[:, -1, :].float()
        n_real = int(q_valid.sum())
        self.stats.pad_tokens += ids.numel() - n_real
        self.stats.forwards += 1

    def _forward(self, ids: torch.Tensor, mask, q_pos: torch.Tensor, cache, **kwargs):
        return self.model(
            input_ids=ids.to(self.device),
            attention_mask=mask,
            position_ids=q_pos.clamp(min=0).to(self.device),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
            **kwargs,
        )

    def _empty_rows(self, n_rows: int) -> _Rows:
        from transformers import DynamicCache

        return _Rows(
            cache=DynamicCache(),
            key_pos=torch.zeros(n_rows, 0, dtype=torch.long),
            next_pos=torch.zeros(n_rows, dtype=torch.long),
            logits=None,
        )

    def _sharing(self, prefix: _Rows, shared_lens: Sequence[int]) -> _Rows:
        """A new batch whose row r attends to the first `shared_lens[r]` tokens of the single-row
        batch `prefix` (its KV is shared, not copied) and has no own tokens yet."""
        shared = _SharedKV([(layer.keys, layer.values) for layer in prefix.cache.layers])
        lens = torch.tensor(list(shared_lens), dtype=torch.long)
        pos = torch.arange(len(shared)).expand(len(lens), -1)
        n_rows = len(lens)
        return _Rows(
            cache=self._empty_rows(n_rows).cache,
            key_pos=torch.zeros(n_rows, 0, dtype=torch.long),
            next_pos=lens,
            logits=None if prefix.logits is None else prefix.logits.expand(n_rows, -1),
            shared=shared,
            prefix_pos=torch.where(pos < lens[:, None], pos, torch.full_like(pos, -1)),
        )

    @staticmethod
    def _select(rows: _Rows, keep: list[int]) -> None:
        """Keep only rows `keep` (indices into the current batch)."""
        idx = torch.tensor(keep, dtype=torch.long)
        rows.cache.batch_select_indices(idx.to(rows.logits.device))
        rows.key_pos = rows.key_pos[idx]
        if rows.prefix_pos is not None:
            rows.prefix_pos = rows.prefix_pos[idx]
        rows.next_pos = rows.next_pos[idx]
        rows.logits = rows.logits[idx.to(rows.logits.device)]

    # ------------------------------------------------------------------ the decode loop
    def _decode(self, rows: _Rows, max_new_tokens: int, stops: tuple[str, ...], pick) -> list[Generation]:
        """Decode every row of `rows` (whose `logits` predict its first new token) to completion.

        `pick(logits [active, vocab] float32, active) -> token ids [active]` chooses the next
        tokens; `active` lists the original row index of each batch row.
        """
        n = rows.next_pos.shape[0]
        ids: list[list[int]] = [[] for _ in range(n)]
        lps: list[list[float]] = [[] for _ in range(n)]
        results: list[Generation | None] = [None] * n
        active = list(range(n))  # original row index of each current batch row
        for step in range(max_new_tokens):
            logits = rows.logits
            chosen = pick(logits, active)
            logprobs = torch.log_softmax(logits, dim=-1).gather(1, chosen[:, None].to(logits.device))[:, 0]
            keep: list[int] = []
            for b, (row, tok, lp) in enumerate(zip(active, chosen.tolist(), logprobs.tolist())):
                ids[row].append(tok)
                lps[row].append(lp)
                finished = self._finish(ids[row], lps[row], stops, last_step=step == max_new_tokens - 1)
                if finished is None:
                    keep.append(b)
                else:
                    results[row] = finished
            if not keep:
                break
            if len(keep) < len(active):
                self._select(rows, keep)
                chosen = chosen[torch.tensor(keep, device=chosen.device)]
                active = [active[b] for b in keep]
            self._extend(rows, [[t] for t in chosen.tolist()])
            self.stats.decode_tokens += len(active)
        return results  # type: ignore[return-value]

    def _finish(self, ids: list[int], lps: list[float], stops: tuple[str, ...], last_step: bool) -> Generation | None:
        """The finished Generation if `ids` (the row's tokens so far) ends it, else None."""
        decode = self.tokenizer.decode
        if ids[-1] in self.eos_token_ids:
            return Generation(decode(ids[:-1], skip_special_tokens=True), list(ids), list(lps), "eos")
        if stops:
            text = decode(ids, skip_special_tokens=True)
            cut = first_stop(text, stops)
            if cut >= 0:
                return Generation(text[:cut], list(ids), list(lps), "stop")
        if last_step:
            return Generation(decode(ids, skip_special_tokens=True), list(ids), list(lps), "length")
        return None

    # ------------------------------------------------------------------ greedy
    def greedy(
        self,
        prompts: Sequence[str],
        max_new_tokens: int = 16,
        stop: str | Sequence[str] = (),
        shared_prefix: str | None = None,
    ) -> list[Generation]:
        """Greedy continuation of every prompt, in input order.

        Token-identical to `model.generate(encode(prompt), do_sample=False, max_new_tokens=...)`
        run on each prompt alone (cut at EOS / stop strings as the module docstring says).
        `shared_prefix`: a string every prompt starts with; its tokens are forwarded once (a prompt
        whose encoding keeps none of them runs alone).
        Batches hold rows x (longest prompt + max_new_tokens) <= token_budget, longest first.
        """
        self._check_max_new(max_new_tokens)
        stops = _encode_stop(stop)
        prompts = list(prompts)
        if shared_prefix is not None and not isinstance(shared_prefix, str):
            raise ConfigError(f"shared_prefix must be a string, got {type(shared_prefix).__name__}")
        for i, p in enumerate(prompts):
            if shared_prefix and not p.startswith(shared_prefix):
                raise ConfigError(f"shared_prefix: prompt {i} does not start with the shared prefix (prompt begins {p[:40]!r})")
        encoded = [self.encode(p) for p in prompts]
        for ids in encoded:
            if not ids:
                raise ConfigError("prompts: an empty prompt encodes to no tokens; nothing to condition on")
            self._check_fits(len(ids), max_new_tokens)
        self.stats.naive_prompt_tokens += sum(len(ids) for ids in encoded)
        results: list[Generation | None] = [None] * len(prompts)

        # Each prompt shares the longest run of the prefix's tokens that its own encoding starts
        # with (all of them unless a token merged across the boundary), keeping >= 1 own token.
        prefix_ids = self.encode(shared_prefix) if shared_prefix else []
        shared_len: dict[int, int] = {}
        for i, ids in enumerate(encoded if prefix_ids else []):
            common = common_prefix_len(prefix_ids, ids)
            k = min(common, len(ids) - 1)
            if k > 0:
                shared_len[i] = k
            self.stats.boundary_merges += common < len(prefix_ids)
        alone = [i for i in range(len(prompts)) if i not in shared_len]

        if shared_len:
            prefix_rows = self._prefix_rows(prefix_ids)
            slots = {i: len(prefix_ids) + len(encoded[i]) - k for i, k in shared_len.items()}
            for batch in self._batches(list(shared_len), slots, max_new_tokens):
                rows = self._sharing(prefix_rows, [shared_len[i] for i in batch])
                self._greedy_batch(rows, batch, [encoded[i][shared_len[i] :] for i in batch], max_new_tokens, stops, results)
        for batch in self._batches(alone, {i: len(encoded[i]) for i in alone}, max_new_tokens):
            rows = self._empty_rows(len(batch))
            self._greedy_batch(rows, batch, [encoded[i] for i in batch], max_new_tokens, stops, results)
        return results  # type: ignore[return-value]

    def _greedy_batch(
        self,
        rows: _Rows,
        batch: list[int],
        tokens: list[list[int]],
        max_new_tokens: int,
        stops: tuple[str, ...],
        results: list[Generation | None],
    ) -> None:
        self._extend(rows, tokens)
        self.stats.prompt_tokens += sum(len(t) for t in tokens)
        outs = self._decode(rows, max_new_tokens, stops, lambda logits, active: logits.argmax(dim=-1))
        for i, g in zip(batch, outs):
            results[i] = g

    def _batches(self, order: list[int], lengths: dict[int, int], max_new_tokens: int) -> list[list[int]]:
        """Cut prompts (longest first, to limit padding) into batches within the token budget."""
        batches: list[list[int]] = []
        current: list[int] = []
        for i in sorted(order, key=lambda i: -lengths[i]):
            longest = lengths[current[0]] if current else lengths[i]
            if current and (len(current) + 1) * (longest + max_new_tokens) > self.token_budget:
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
        return batches

    # ------------------------------------------------------------------ sampling
    def sample(
        self,
        prompt: str,
        n: int,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        seed: int = 0,
        stop: str | Sequence[str] = (),
    ) -> list[Generation]:
        """`n` samples continuing `prompt`; the prompt is forwarded once and its KV cache shared.

        Tokens are drawn from softmax(logits / temperature) restricted to the `top_k` most likely
        tokens (0 = all) and then to the smallest set whose probability reaches `top_p` (HF's
        order: temperature, top-k, top-p), by inverse CDF with one uniform number per sample and
        step. `temperature=0` is greedy. The same `seed` (and n) gives the same samples; a sample
        does not depend on which other samples have finished (up to float rounding of batched
        logits), so adding a stop string only truncates samples. `logprobs` are always the
        unwarped model log-probs.
        Needs n x (prompt tokens + max_new_tokens) <= token_budget.
        """
        self._check_max_new(max_new_tokens)
        stops = _encode_stop(stop)
        if not isinstance(n, int) or n < 1:
            raise ConfigError(f"n must be a positive integer, got {n!r}")
        if not temperature >= 0:
            raise ConfigError(f"temperature must be >= 0, got {temperature!r}")
        if not 0 < top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {top_p!r}")
        if not isinstance(top_k, int) or top_k < 0:
            raise ConfigError(f"top_k must be an integer >= 0 (0 = no limit), got {top_k!r}")
        ids = self.encode(prompt)
        if not ids:
            raise ConfigError("prompt: an empty prompt encodes to no tokens; nothing to condition on")
        self._check_fits(len(ids), max_new_tokens)
        need = n * (len(ids) + max_new_tokens)
        if need > self.token_budget:
            raise ConfigError(
                f"n={n} samples x ({len(ids)} prompt tokens + max_new_tokens={max_new_tokens}) = {need} "
                f"tokens exceed token_budget={self.token_budget}; raise token_budget or lower n"
            )
        self.stats.naive_prompt_tokens += n * len(ids)
        rows = self._empty_rows(1)
        self._extend(rows, [ids])
        self.stats.prompt_tokens += len(ids)
        rows = self._sharing(rows, [len(ids)] * n)
        gen = torch.Generator(device=self.device).manual_seed(seed)

        def pick(logits: torch.Tensor, active: list[int]) -> torch.Tensor:
            # One uniform number per sample and step, drawn for all n samples every step, so a
            # sample does not depend on which other samples have finished.
            uniform = torch.rand(n, generator=gen, device=gen.device, dtype=torch.float64)
            if temperature == 0:
                return logits.argmax(dim=-1)
            probs = torch.softmax(warp(logits, temperature, top_k, top_p), dim=-1)
            return draw(probs, uniform[torch.tensor(active, device=uniform.device)])

        return self._decode(rows, max_new_tokens, stops, pick)


def draw(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """One token id per row of `probs` `[rows, vocab]` by inverse CDF, given one uniform number in
    [0, 1) per row (`torch.multinomial` draws one random number per vocabulary entry instead).
    Tokens of probability 0 are never drawn."""
    cdf = probs.double().cumsum(dim=-1)
    u = uniform.to(device=cdf.device, dtype=torch.float64)[:, None] * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True)[:, 0].clamp_(max=probs.shape[-1] - 1)


def warp(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Sampling scores from raw logits `[rows, vocab]`: divide by temperature, then set tokens
    outside the top-k and outside the top-p nucleus to -inf (at least one token always stays)."""
    scores = logits / temperature
    if 0 < top_k < scores.shape[-1]:
        kth = torch.topk(scores, top_k, dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        sorted_scores, order = torch.sort(scores, dim=-1, descending=True)
        probs = torch.softmax(sorted_scores, dim=-1)
        mass_before = torch.cumsum(probs, dim=-1) - probs
        drop_sorted = mass_before >= top_p
        drop_sorted[:, 0] = False
        drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
        scores = scores.masked_fill(drop, float("-inf"))
    return scores
