"""EIC-LKE (wu2024 appendix F and C.2): many test facts in one sequence of training examples.

Sequence layout for a group of test items t_1..t_T and option index j (one sequence per j):

    x_1 y_1, ..., x_n y_n, x_t1 o_j(t1), x_{n+1} y_{n+1}, ..., x_{n+k} y_{n+k}, x_t2 o_j(t2), ...

Subject and object are joined by the separator S (a space) and tuples by the tuple separator
(`--tuple-separator`, default `", "`): appendix C.2 combines the separately tokenized pieces
"using a space token to separate the subject and object, and a comma to differentiate between
different tuples" (appendix F itself says nothing about it). `--tuple-separator " "` gives the
comma-free layout of factprobe <= 0.1 (`x_1 y_1 x_2 y_2 ...`).

n = `examples` leading training examples (the paper: 50), k = `interleave` training examples
between test slots (the paper: 5), T = `tests_per_sequence`. As in appendix C.2 the pieces are
tokenized separately and their token ids concatenated (`separator + piece` each), and the score
of option j for item t is the summed log-prob of o_j(t)'s tokens in sequence j. Later test items
therefore see earlier test items completed with option j, as in the paper.

Sharing: the leading examples are one cached prefix per relation; each of the M sequences of a
group is one segment on top of it, and the scorer packs several sequences per forward.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..config import option
from ..facts import Fact, MCItem
from ..framework.base import Session
from ..framework.registry import register
from .mc import ExamplesConfig, MCProbe, fit_examples, item_row, longest, relation_examples

if TYPE_CHECKING:  # torch stays unimported for callers that only build data
    from ..lm.scorer import PrefixCache, Scorer, Segment


def eic_group_segments(
    scorer: Scorer,
    items: Sequence[MCItem],
    between: Sequence[Sequence[Fact]],
    separator: str = " ",
    tuple_separator: str = " ",
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
    first_subject = enc(f"{tuple_separator}{items[0].subject}")
    example_ids = [
        [t for e in exs for t in enc(f"{tuple_separator}{e.subject}") + enc(f"{separator}{e.object}")] for exs in between
    ]
    segments: list[Segment] = []
    owners: list[list[tuple[int, int]]] = []
    for j in range(n_opt):
        ids: list[int] = list(first_subject)
        spans, who = [], []
        for i, item in enumerate(items):
            if i > 0:
                ids += enc(f"{tuple_separator}{item.subject}")
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
    tuple_separator: str = " ",
) -> list[np.ndarray]:
    """Option log-probs `[n_options]` for each item of the group, EIC-LKE style."""
    segments, owners = eic_group_segments(scorer, items, between, separator, tuple_separator)
    # the naive EIC-LKE of the paper: one full forward per option sequence, leading examples included
    scorer.stats.naive_tokens += sum(len(prefix) + len(s.token_ids) for s in segments)
    out = [np.full(len(it.options), np.nan) for it in items]
    for who, sums in zip(owners, scorer.score_segments(prefix, segments)):
        for (i, j), v in zip(who, sums):
            out[i][j] = v
    return out


def leading_prefix(examples: Sequence[Fact], separator: str, tuple_separator: str) -> str:
    """The leading examples' text `x_1 S y_1 T x_2 S y_2 ... x_n S y_n` (T: the tuple separator)."""
    return tuple_separator.join(f"{e.subject}{separator}{e.object}" for e in examples)


@dataclass
class EICLKEConfig(ExamplesConfig):
    """EIC-LKE's own fields (appendix C.2 and F)."""

    eic_interleave: int = option(5, "training examples between two test slots (appendix C.2: 5)")
    eic_tests_per_sequence: int = option(10, "test facts packed into one sequence")
    tuple_separator: str = option(", ", "between packed (subject, object) tuples (appendix C.2: a comma)")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check(self.eic_interleave >= 0, "eic_interleave", self.eic_interleave, "must be >= 0")
        self.check(self.eic_tests_per_sequence >= 1, "eic_tests_per_sequence", self.eic_tests_per_sequence, "must be >= 1")
        self.check(bool(self.tuple_separator), "tuple_separator", self.tuple_separator, "must not be empty")


@dataclass
class _RelationState:
    prefix_text: str
    prefix: Any  # PrefixCache
    between: list[list[Fact]]


class EICLKE(MCProbe):
    name = "eic-lke"
    description = "efficient IC-LKE: several test facts packed into one sequence of training examples"
    config_class = EICLKEConfig

    def batches(self, cfg, items):
        n = cfg.params.eic_tests_per_sequence
        for b in range(0, len(items), n):
            yield items[b : b + n]

    def open_relation(self, session: Session, relation: str) -> _RelationState:
        p = session.cfg.params
        per_seq, k = p.eic_tests_per_sequence, p.eic_interleave
        n_between = k * (per_seq - 1)
        pool = relation_examples(session, relation, p.examples + n_between)
        lead, rest = pool[: p.examples], pool[p.examples :]
        subject, opt = longest(session.prepared.items[relation])
        lead = fit_examples(
            session,
            relation,
            lead,
            lambda ex: leading_prefix(ex, p.separator, p.tuple_separator),
            f"{p.tuple_separator}{subject}{p.separator}{opt}",
        )
        prefix_text = leading_prefix(lead, p.separator, p.tuple_separator)
        between = [rest[i * k : (i + 1) * k] for i in range(per_seq - 1)]
        # No stand-in: the first test subject's tokens follow even when there are no leading examples.
        prefix_ids = session.scorer.encode_context(prefix_text, stand_in=False)
        return _RelationState(prefix_text, session.scorer.prefix(prefix_ids), between)

    def score_batch(self, session: Session, state: _RelationState, batch: Sequence[MCItem]) -> list[dict]:
        p = session.cfg.params
        sep, tsep = p.separator, p.tuple_separator
        scores = score_eic_group(session.scorer, state.prefix, batch, state.between, sep, tsep)
        rows = []
        for i, (it, s) in enumerate(zip(batch, scores)):
            ctx = (
                state.prefix_text
                + "".join(
                    f"{tsep}{g.subject}{sep}<option>" + "".join(f"{tsep}{e.subject}{sep}{e.object}" for e in state.between[j])
                    for j, g in enumerate(batch[:i])
                )
                + f"{tsep}{it.subject}"
            )
            rows.append(item_row(it, ctx, s, self.name))
        return rows


register(EICLKE())
