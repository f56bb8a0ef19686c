"""Tokenised training sequences: answer-only labels, optional packing, and the batch collator.

- `tokenize_examples(tokenizer, examples, max_seq_len)`: each example becomes `input_ids` =
  prompt tokens (encoded as the generation engine encodes a prompt: with the tokenizer's special
  tokens, e.g. a BOS) + target tokens (no special tokens), and `labels` = -100 on the prompt and
  the target's ids on the target. So the loss is on the answer tokens (and the newline that ends
  the answer) only. An example longer than `max_seq_len` is refused (ConfigError naming it).
- `pack_sequences(tokenized, max_seq_len)`: several examples per row, first-fit in order, never
  splitting one; each row keeps the example boundaries as `position_ids` restarting at 0.
- `Collator`: pads a batch. Unpacked rows: right padding, an `attention_mask`, labels -100 on
  padding. Packed rows: NO attention mask but `position_ids`; transformers then builds a
  block-diagonal causal mask from the restarts (`masking_utils.find_packed_sequence_indices`,
  sdpa and eager attention, checked against the unpacked logits in the tests) and flash attention
  uses them as varlen boundaries; the padding tail is one more block (its own positions, labels
  -100), so no real token attends to padding or to another example. The collator counts real
  and fed tokens per batch (`counts`: non-padding fraction, tokens per second).
- `no_kv_cache(model)`: transformers 5 skips that packed-sequence detection whenever a KV cache
  exists, and a model whose config says `use_cache=True` creates one in every forward, training
  included: examples then DO attend to each other (seen on the llama sdpa path, CPU). Training
  therefore runs with `config.use_cache = False`; the test compares packed and unpacked logits
  in that state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError

IGNORE = -100


@dataclass
class TrainRow:
    """One training row: token ids, labels and (packed rows) position ids; `n_examples` in it."""

    input_ids: list[int]
    labels: list[int]
    position_ids: list[int] | None = None
    n_examples: int = 1

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"input_ids": self.input_ids, "labels": self.labels}
        if self.position_ids is not None:
            d["position_ids"] = self.position_ids
        return d


def tokenize_examples(tokenizer: Any, examples: Sequence[Any], max_seq_len: int) -> list[TrainRow]:
    """One `TrainRow` per example (`prompt`/`target` attributes), labels on the target only."""
    out = []
    for ex in examples:
        prompt = tokenizer(ex.prompt, add_special_tokens=True)["input_ids"]
        target = tokenizer(ex.target, add_special_tokens=False)["input_ids"]
        if not target:
            raise ConfigError(f"{ex.fact_id}: the answer {ex.target!r} encodes to no tokens")
        ids = list(prompt) + list(target)
        if len(ids) > max_seq_len:
            raise ConfigError(
                f"{ex.fact_id}: the example takes {len(ids)} tokens, more than --max-seq-len {max_seq_len}; raise --max-seq-len"
            )
        out.append(TrainRow(ids, [IGNORE] * len(prompt) + list(target)))
    return out


def pack_sequences(seqs: Sequence[TrainRow], max_seq_len: int) -> list[TrainRow]:
    """Rows of at most `max_seq_len` tokens holding whole examples (first fit, in order), with
    position ids restarting at 0 for each example."""
    rows: list[TrainRow] = []
    for s in seqs:
        pos = list(range(len(s.input_ids)))
        row = next((r for r in rows if len(r.input_ids) + len(s.input_ids) <= max_seq_len), None)
        if row is None:
            rows.append(TrainRow(list(s.input_ids), list(s.labels), pos, 1))
        else:
            row.input_ids += s.input_ids
            row.labels += s.labels
            row.position_ids += pos  # type: ignore[operator]
            row.n_examples += 1
    return rows


def no_kv_cache(model: Any) -> bool:
    """Set `use_cache = False` on the model's config (and a PEFT model's base); returns the old value."""
    old = bool(getattr(model.config, "use_cache", False))
    model.config.use_cache = False
    base = getattr(model, "get_base_model", None)
    if base is not None:
        base().config.use_cache = False
    return old


class RowDataset:
    """A list of `TrainRow` as a map-style dataset of dicts (what `Trainer` iterates)."""

    def __init__(self, rows: Sequence[TrainRow]) -> None:
        self.rows = list(rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.rows[i].to_dict()


@dataclass
class Collator:
    """Pads a batch of row dicts to its longest row (see the module docstring); `pad_id` fills
    input ids. `real_tokens` / `fed_tokens` count what it produced."""

    pad_id: int
    #: (real, fed) tokens of every batch collated, in order (the trainer may collate one batch ahead
    #: of training: `counts(n)` sums the first n only)
    per_batch: list[tuple[int, int]] = field(default_factory=list)

    def __call__(self, batch: Sequence[dict[str, Any]]) -> dict[str, Any]:
        import torch

        width = max(len(b["input_ids"]) for b in batch)
        packed = "position_ids" in batch[0]
        ids, labels, extra = [], [], []
        real = 0
        for b in batch:
            n = len(b["input_ids"])
            pad = width - n
            ids.append(list(b["input_ids"]) + [self.pad_id] * pad)
            labels.append(list(b["labels"]) + [IGNORE] * pad)
            extra.append(list(b["position_ids"]) + list(range(pad)) if packed else [1] * n + [0] * pad)
            real += n
        self.per_batch.append((real, width * len(batch)))
        out = {"input_ids": torch.tensor(ids), "labels": torch.tensor(labels)}
        out["position_ids" if packed else "attention_mask"] = torch.tensor(extra)
        return out

    def counts(self, n_batches: int | None = None) -> tuple[int, int]:
        """(real, fed) tokens of the first `n_batches` batches (default: all)."""
        picked = self.per_batch if n_batches is None else self.per_batch[:n_batches]
        return sum(r for r, _ in picked), sum(f for _, f in picked)

    @property
    def non_padding_fraction(self) -> float | None:
        real, fed = self.counts()
        return real / fed if fed else None
