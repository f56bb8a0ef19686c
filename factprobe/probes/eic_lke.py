"""EIC-LKE (wu2024 appendix F and C.2): many test facts in one sequence of training examples.

Sequence layout for a group of test items t_1..t_T and option index j (one sequence per j):

    x_1 y_1 ... x_n y_n  x_t1 o_j(t1)  x_{n+1} y_{n+1} ... x_{n+k} y_{n+k}  x_t2 o_j(t2)  ...

n = `examples` leading training examples (the paper: 50), k = `interleave` training examples
between test slots (the paper: 5), T = `tests_per_sequence`. As in appendix C.2 the pieces are
tokenized separately and their token ids concatenated (`separator + piece` each), and the score
of option j for item t is the summed log-prob of o_j(t)'s tokens in sequence j. Later test items
therefore see earlier test items completed with option j, as in the paper.

Sharing: the leading examples are one cached prefix per relation; each of the M sequences of a
group is one segment on top of it, and the scorer packs several sequences per forward.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..facts import Fact, MCItem

if TYPE_CHECKING:  # torch stays unimported for callers that only build data
    from ..lm.scorer import PrefixCache, Scorer, Segment


def eic_group_segments(
    scorer: Scorer,
    items: Sequence[MCItem],
    between: Sequence[Sequence[Fact]],
    separator: str = " ",
) -> tuple[list[Segment], list[list[tuple[int, int]]]]:
    """Build the segment tree for one group. `between[i]` are the training examples placed after
    test slot i (len(between) >= len(items) - 1).

    Returns one segment per option index j and, per segment, the (item, option) pair of each of
    its spans.
    """
    from ..lm.scorer import Segment

    enc = scorer.encode_continuation
    n_opt = len(items[0].options)
    if any(len(it.options) != n_opt for it in items):
        raise ValueError("EIC-LKE needs the same number of options for every item of a group")
    first_subject = enc(f"{separator}{items[0].subject}")
    example_ids = [
        [t for e in exs for t in enc(f"{separator}{e.subject}") + enc(f"{separator}{e.object}")]
        for exs in between
    ]
    segments: list[Segment] = []
    owners: list[list[tuple[int, int]]] = []
    for j in range(n_opt):
        ids: list[int] = list(first_subject)
        spans, who = [], []
        for i, item in enumerate(items):
            if i > 0:
                ids += enc(f"{separator}{item.subject}")
            opt = enc(f"{separator}{item.options[j]}")
            spans.append((len(ids), len(ids) + len(opt)))
            who.append((i, j))
            ids += opt
            if i < len(items) - 1:
                ids += example_ids[i]
        segments.append(Segment(ids, -1, spans=spans))
        owners.append(who)
    return segments, owners


def score_eic_group(
    scorer: Scorer,
    prefix: PrefixCache,
    items: Sequence[MCItem],
    between: Sequence[Sequence[Fact]],
    separator: str = " ",
) -> list[np.ndarray]:
    """Option log-probs `[n_options]` for each item of the group, EIC-LKE style."""
    segments, owners = eic_group_segments(scorer, items, between, separator)
    # the naive EIC-LKE of the paper: one full forward per option sequence, leading examples included
    scorer.stats.naive_tokens += sum(len(prefix) + len(s.token_ids) for s in segments)
    out = [np.full(len(it.options), np.nan) for it in items]
    for who, sums in zip(owners, scorer.score_segments(prefix, segments)):
        for (i, j), v in zip(who, sums):
            out[i][j] = v
    return out

