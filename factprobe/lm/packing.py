"""Position ids and 4D attention masks of a packed forward, built with tensor operations.

The scorer packs a forest of token segments after a cached prefix into one sequence (DESIGN.md section 4,
step 3): a token sees the whole prefix, the tokens of its segment's ancestors, and its own segment's
earlier tokens; its position continues from its parent's last position (or from the prefix's end).

`packed_layout` works per segment (a Python loop over segments, never over tokens) and expands to
tokens with `repeat_interleave`. `packed_masks` builds the masks where they are used (on the model's
device) from per-token index vectors:

- segments in depth-first order (each segment's subtree packed right after it, as every caller in
  factprobe packs them): key `k` is visible to query `q` iff `k <= q` and `q` lies before the end of the
  subtree of `k`'s segment: two comparisons over `[tokens x tokens]`;
- any other order (parents still before children): the segment-ancestor matrix, gathered per token.

The mask is additive in the model's dtype (0 where seen, the dtype's minimum elsewhere), which every
attention implementation of transformers accepts, eager included; sliding-window layers (Gemma-3) get
their own mask, the same one with keys `sliding_window` or more positions back hidden too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass
class PackedLayout:
    """Where the tokens of a packed chunk sit. Token tensors are int64 on the CPU.

    `positions[t]`: position id of packed token t; `seg_start[i]`: index of segment i's first token;
    `end_pos[i]`: position id of segment i's last token; `key_end[t]`: for depth-first chunks, the packed
    index where the subtree of t's segment ends (None otherwise); `seg_of[t]` and `ancestor[i, j]`
    (segment j is segment i or one of its ancestors) for the other chunks (None for depth-first ones)."""

    prefix_len: int
    positions: torch.Tensor
    seg_start: list[int]
    end_pos: list[int]
    key_end: torch.Tensor | None
    seg_of: torch.Tensor | None = None
    ancestor: torch.Tensor | None = None

    @property
    def total(self) -> int:
        return int(self.positions.numel())


def packed_layout(prefix_len: int, lengths: Sequence[int], parents: Sequence[int]) -> PackedLayout:
    """The layout of segments of `lengths` tokens whose parents are `parents` (-1: the prefix) packed in
    order after a prefix of `prefix_len` tokens. ValueError if a parent does not come before its child."""
    n = len(lengths)
    seg_start, end_pos, firsts = [], [], []
    at = 0
    for i, (length, p) in enumerate(zip(lengths, parents)):
        if p >= i:
            raise ValueError("a segment's parent must come before it")
        first = prefix_len if p < 0 else end_pos[p] + 1
        seg_start.append(at)
        firsts.append(first)
        end_pos.append(first + length - 1)
        at += length
    lens = torch.tensor(list(lengths), dtype=torch.long)
    shift = torch.tensor([f - s for f, s in zip(firsts, seg_start)], dtype=torch.long)
    positions = torch.repeat_interleave(shift, lens) + torch.arange(at)
    subtree_end = _subtree_ends(parents, seg_start, at)
    if subtree_end is not None:
        return PackedLayout(prefix_len, positions, seg_start, end_pos, torch.repeat_interleave(torch.tensor(subtree_end), lens))
    ancestor = torch.zeros(n, n, dtype=torch.bool)
    for i, p in enumerate(parents):
        ancestor[i, i] = True
        if p >= 0:
            ancestor[i] |= ancestor[p]
    seg_of = torch.repeat_interleave(torch.arange(n), lens)
    return PackedLayout(prefix_len, positions, seg_start, end_pos, None, seg_of, ancestor)


def _subtree_ends(parents: Sequence[int], seg_start: Sequence[int], total: int) -> list[int] | None:
    """Per segment, the packed index where its subtree ends, if the segments are in depth-first order
    (every segment's parent is on the path to the segment before it); None otherwise."""
    ends = [total] * len(parents)
    path: list[int] = []
    for i, p in enumerate(parents):
        while path and path[-1] != p:
            ends[path.pop()] = seg_start[i]
        if p >= 0 and not path:
            return None
        path.append(i)
    return ends


def packed_masks(
    layout: PackedLayout,
    dtype: torch.dtype,
    device: torch.device,
    sliding_window: int | None = None,
    layer_types: Sequence[str] | None = None,
) -> torch.Tensor | dict[str, torch.Tensor]:
    """The additive `[1, 1, tokens, prefix + tokens]` mask of `layout`, built on `device` (module docstring);
    a dict by layer type when the model has sliding-window layers. Rows are written a block at a time
    (`torch.where` into the mask), so no `[tokens x tokens]` intermediate is held beside it, and a block's
    keys after its last query (hidden from all of them) are filled without being compared."""
    total, plen = layout.total, layout.prefix_len
    sliding = bool(layer_types and "sliding_attention" in layer_types and sliding_window)
    idx = torch.arange(total, device=device)
    key_end = layout.key_end.to(device) if layout.key_end is not None else None
    if key_end is None:
        seg_of, ancestor = layout.seg_of.to(device), layout.ancestor.to(device)
    if sliding:
        pos_q = layout.positions.to(device)
        pos_k = torch.cat([torch.arange(plen, device=device), pos_q])
    zero = torch.zeros((), dtype=dtype, device=device)
    neg = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=device)
    full = torch.empty(1, 1, total, plen + total, dtype=dtype, device=device)
    full[0, 0, :, :plen] = 0
    window = torch.empty_like(full) if sliding else None
    step = max(1, (1 << 22) // max(1, total))  # rows per block: about 4M mask entries
    for r0 in range(0, total, step):
        r1 = min(r0 + step, total)  # keys from r1 on come after every query of the block: hidden
        q, k = idx[r0:r1, None], idx[None, :r1]
        if key_end is not None:
            seen = (k <= q) & (q < key_end[None, :r1])
        else:
            sq = seg_of[r0:r1, None]
            seen = ancestor[sq[:, 0]][:, seg_of[:r1]] & ((sq != seg_of[None, :r1]) | (k <= q))
        torch.where(seen, zero, neg, out=full[0, 0, r0:r1, plen : plen + r1])
        full[0, 0, r0:r1, plen + r1 :] = neg
        if window is not None:
            near = (pos_q[r0:r1, None] - pos_k[None, : plen + r1]) < sliding_window
            near[:, plen:] &= seen
            torch.where(near, zero, neg, out=window[0, 0, r0:r1, : plen + r1])
            window[0, 0, r0:r1, plen + r1 :] = neg
    if window is None:
        return full
    mask = {"full_attention": full, "sliding_attention": window}
    for t in layer_types:
        mask.setdefault(t, full)
    return mask
