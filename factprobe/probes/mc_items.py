"""mc-items: your own multiple-choice items, scored with their options in place.

Items come from `--data FILE` (`factprobe.datasets.mc_items` states the format and the bad-item
errors): a prompt with one answer slot (`[Y]`; `--slot`), its options and the answer.

What is scored. The prompt is split at the slot into `before` and `after`; the context is
`before` (after the in-context examples, when there are any) and each option's continuation is
`option + after` (trailing whitespace dropped). The scorer moves the context's trailing
whitespace into the continuation, as IC-LKE and lm-evaluation-harness do, so:

- slot at the end (`The capital of France is [Y]`): log P(" Paris" | "The capital of France is"),
  the continuation scoring of IC-LKE;
- text after the slot (`[Y] is the capital of France.`, `The [Y] river flows through Cairo.`):
  log P(option + rest of the sentence | text before the slot), i.e. the log-probability of the
  whole filled sentence less that of the shared text before the slot, which is the same for
  every option and is forwarded once (the scorer's prefix sharing). A slot at the very start
  (no examples) leaves the context empty: the model sees the stand-in BOS (else EOS) token, as
  lm-evaluation-harness does (docs/probes.md, "Contexts").

`--option-score` (default `sum`): `sum` is the summed log-probability of those tokens (wu2024's and
lm-eval's `acc` scoring; the softmax over options is then the model's probability of each option
among the options, so `gold_prob` and `confidence` are probabilities); `mean` divides each sum by
the option's number of scored tokens (a length normalisation that stops long options losing just
for being long; `gold_prob` and `confidence` are then a softmax of mean log-probs, a score, not a
probability). Rows carry `logprobs` (the score per option that decided the prediction),
`option_tokens` (scored tokens per option) and, under `mean`, `logprob_sums`.

In-context examples (`--examples n`, from `--train-data FILE` of the same format): n training
items of the item's relation (all training items when none has that relation), drawn with the seed
per relation (a function of seed, relation and data only), each written as its prompt filled with
its answer, joined by `--example-separator` (a newline) and followed by it before the item. The
examples' text is one cached prefix per relation. A training item that is a test item (any
relation's) is never an example: its prompt, or its prompt filled with its answer, equals a test
item's prompt or answered prompt once Unicode form (NFKC), case, punctuation and whitespace are
ignored, or it has a test item's id and answer (its (subject, answer) pair), however it is worded
(`factprobe.datasets.mc_items.leaks`). Each relation that left some out says how many in one note
(on screen and in metrics.json's `notes`), and metrics.json has the total,
`examples_excluded_as_test`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..config import ConfigBase, option
from ..datasets.mc_items import (
    ANSWER_RULES,
    BY_PAIR,
    DEFAULT_SLOT,
    LeakKeys,
    leak_keys,
    leaks,
    parse_fields,
    prepare_mc_items,
)
from ..datasets.prepared import Prepared
from ..errors import ConfigError
from ..facts import Fact, MCItem
from ..framework.base import Session
from ..framework.config import RunConfig
from ..framework.registry import register
from ..seeding import stable_rng
from .mc import ON_TOO_LONG, MCProbe, fit_examples, item_row

OPTION_SCORES = ("sum", "mean")


@dataclass
class MCItemsConfig(ConfigBase):
    """mc-items' own fields (the items file is the base `--data`, the examples file `--train-data`)."""

    slot: str = option(DEFAULT_SLOT, "the answer slot in each prompt")
    fields: str = option(
        "",
        "your column names, e.g. prompt=text,answer=label (fields: prompt, options, answer, id, "
        "relation, group; default: the field names)",
    )
    answer_is: str = option(
        "auto",
        "how an item's answer is read: auto (an option's text, else a 0-based index; an answer "
        "that reads as two different options is refused), text or index",
        choices=ANSWER_RULES,
    )
    option_score: str = option(
        "sum",
        "sum: summed log-prob of the option's scored tokens (probabilities among the "
        "options); mean: per scored token (length-normalised)",
        choices=OPTION_SCORES,
    )
    examples: int = option(0, "in-context examples per relation from --train-data, each its prompt filled with its answer")
    example_separator: str = option("\n", "between in-context examples, and between the last one and the item")
    on_too_long: str = option(
        "truncate", "examples longer than the model's window: drop the earliest (truncate) or refuse", choices=ON_TOO_LONG
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check(bool(self.slot and self.slot.strip()), "slot", self.slot, "must not be empty")
        parse_fields(self.fields)
        self.check(self.examples >= 0, "examples", self.examples, "must be >= 0")
        self.check(bool(self.example_separator), "example_separator", self.example_separator, "must not be empty")


def split_prompt(prompt: str, slot: str = DEFAULT_SLOT) -> tuple[str, str]:
    """(text before the slot, text after it with trailing whitespace dropped)."""
    before, after = prompt.split(slot, 1)
    return before, after.rstrip()


def fill(prompt: str, slot: str, option: str) -> str:
    """The prompt with `option` in the slot."""
    return prompt.replace(slot, option, 1)


def item_request(
    prompt: str, options: Sequence[str], slot: str, examples_text: str = "", separator: str = "\n"
) -> tuple[str, list[str]]:
    """(context, one continuation per option) scored for an item (see the module docstring). A
    context with no text (slot first, no examples) stays empty: the scorer's stand-in token conditions it."""
    before, after = split_prompt(prompt, slot)
    context = f"{examples_text}{separator}{before}" if examples_text else before
    return context, [f"{o}{after}" for o in options]


def encode_item(scorer, context: str, continuations: Sequence[str]) -> tuple[list[int], list[tuple[list[int], int]]]:
    """The harness split of every option, as the scorer makes it: (context ids, per option
    (ids of context + continuation, where the continuation starts)). `len(ids) - start` tokens are scored.
    An in-process scorer's pieces are tokenized once and cached (`Scorer.encoder`: the same ids)."""
    from ..lm.scorer import encode_choices

    encoder = getattr(scorer, "encoder", None)  # a served scorer has none
    ctx_ids, wholes, starts = (
        encoder.choices(context, continuations)
        if encoder is not None
        else encode_choices(scorer.tokenizer, context, continuations)
    )
    return ctx_ids, list(zip(wholes, starts))


def score_packed(scorer, requests: Sequence[tuple[str, Sequence[str]]]) -> list[np.ndarray]:
    """Summed log-probs per option of items that share no prefix, several items per packed forward
    (`Scorer.score_segments` after an empty prefix): each item's context is one segment and each
    option a child segment of it. An option whose joint tokenization rewrites the end of the
    context is a root segment of its own (the whole sequence, its continuation scored): exact."""
    from ..lm.scorer import Segment

    segments: list[Segment] = []
    owners: list[tuple[int, int] | None] = []
    out = [np.full(len(conts), np.nan) for _, conts in requests]
    for i, (context, conts) in enumerate(requests):
        ctx_ids, encoded = encode_item(scorer, context, conts)
        root = None
        for j, (whole, start) in enumerate(encoded):
            if start == 0 or start >= len(whole):
                raise ValueError(f"nothing to score for option {conts[j]!r} after context ending {context[-40:]!r}")
            scorer.stats.naive_tokens += len(whole)
            if start == len(ctx_ids):
                if root is None:
                    root = len(segments)
                    segments.append(Segment(ctx_ids, -1, spans=[]))
                    owners.append(None)
                segments.append(Segment(whole[start:], root))
            else:
                scorer.stats.fallbacks += 1
                segments.append(Segment(whole, -1, spans=[(start, len(whole))]))
            owners.append((i, j))
    for who, sums in zip(owners, scorer.score_segments(scorer.prefix([]), segments)):
        if who is not None:
            out[who[0]][who[1]] = sums[0]
    return out


def example_pool(
    train: Sequence[Fact], keys: LeakKeys, relation: str, slot: str = DEFAULT_SLOT
) -> tuple[list[Fact], dict[str, int]]:
    """(the training items `relation`'s examples are drawn from, how many were left out as test items by
    why: `LeakKeys.why`): the relation's training items (all of them when none has the relation), less
    those that `leaks` into the test items whose `leak_keys` are `keys`."""
    pool = [f for f in train if f.relation == relation] or list(train)
    kept, left_out = [], {}
    for f in pool:
        why = keys.why(f, slot)
        if why is None:
            kept.append(f)
        else:
            left_out[why] = left_out.get(why, 0) + 1
    return kept, left_out


def exclusion_note(relation: str, left_out: dict[str, int]) -> str:
    """The one-line note of a relation whose pool lost `left_out` (by why) training items as test items."""
    n = sum(left_out.values())
    by_pair = left_out.get(BY_PAIR, 0)
    pairs = f"; {by_pair} of them by a test item's id and answer" if by_pair else ""
    return (
        f"{relation}: {n} training item(s) left out of the examples: each is a test item (its prompt or "
        f"answered prompt equals one ignoring Unicode form, case, punctuation and whitespace, or it has a "
        f"test item's id and answer){pairs}"
    )


def choose_examples(
    train: Sequence[Fact], keys: LeakKeys, relation: str, n: int, seed: int, slot: str = DEFAULT_SLOT
) -> list[Fact]:
    """`n` training items for `relation` (see the module docstring), in drawn order; never one that
    is a test item (`keys`: the test items' `leak_keys`)."""
    pool, _ = example_pool(train, keys, relation, slot)
    return stable_rng(seed, "mc_items_examples", relation).sample(pool, min(n, len(pool)))


@dataclass
class _RelationState:
    examples_text: str
    prefix: Any  # PrefixCache or None


class MCItems(MCProbe):
    name = "mc-items"
    description = "your own multiple-choice items (prompt with an answer slot, options, answer) from --data FILE"
    config_class = MCItemsConfig
    dataset = "mc-items"

    def prepare(self, cfg: RunConfig) -> Prepared:
        p = cfg.params
        return prepare_mc_items(cfg.base, p.slot, parse_fields(p.fields), p.answer_is)

    def check_inputs(self, cfg: RunConfig) -> None:
        """The items file is required; in-context examples need the training items file."""
        if not cfg.base.data:
            raise ConfigError("data=None: mc-items needs --data FILE (a .json list, .jsonl, .csv or .parquet of items)")
        if cfg.params.examples and not cfg.base.train_data:
            raise ConfigError(
                f"examples={cfg.params.examples}: in-context examples need --train-data FILE (items in the --data format)"
            )

    def validate(self, cfg: RunConfig, prepared: Prepared) -> None:
        if cfg.params.examples and "train" not in prepared.facts:
            raise ConfigError(
                f"examples={cfg.params.examples}: in-context examples need --train-data FILE (items in the --data format)"
            )

    def input_name(self, cfg: RunConfig) -> str:
        """`mc-items-<file stem>`."""
        return f"mc-items-{Path(str(cfg.base.data)).stem}"

    def open_relation(self, session: Session, relation: str) -> _RelationState:
        p, cfg = session.cfg.params, session.cfg
        if not p.examples:
            return _RelationState("", None)
        keys = leak_keys(session.prepared.test, p.slot)
        _, left_out = example_pool(session.prepared.train.facts, keys, relation, p.slot)
        if left_out:
            session.note(exclusion_note(relation, left_out))
        examples = choose_examples(session.prepared.train.facts, keys, relation, p.examples, cfg.base.seed, p.slot)
        if len(examples) < p.examples:
            session.note(f"{relation}: only {len(examples)} training items for {p.examples} examples")
        sep = p.example_separator

        def text_of(ex: list[Fact]) -> str:
            return sep.join(fill(e.subject, p.slot, e.object) for e in ex)

        items = session.prepared.items[relation]
        tail = sep + max((fill(it.subject, p.slot, o) for it in items for o in it.options), key=len)
        examples = fit_examples(session, relation, examples, text_of, tail)
        text = text_of(examples)
        shared = text.rstrip()
        return _RelationState(text, session.scorer.prefix(shared) if shared else None)

    def item_tokens(self, session: Session, state: _RelationState, item: MCItem) -> int:
        """The tokens the item forwards: after the examples, its context and options' trie; without
        examples, its context and every option (`score_packed`)."""
        from ..lm.scorer import ChoiceRequest

        p = session.cfg.params
        context, conts = item_request(item.subject, item.options, p.slot, state.examples_text, p.example_separator)
        if state.prefix is None:
            ctx_ids, encoded = encode_item(session.scorer, context, conts)
            return len(ctx_ids) + sum(len(whole) - start for whole, start in encoded)
        return session.scorer.request_tokens([ChoiceRequest(context, conts)], shared_prefix=state.prefix)[0]

    def score_batch(self, session: Session, state: _RelationState, batch: Sequence[MCItem]) -> list[dict]:
        from ..lm.scorer import ChoiceRequest

        p = session.cfg.params
        scorer = session.scorer
        requests = [item_request(it.subject, it.options, p.slot, state.examples_text, p.example_separator) for it in batch]
        if state.prefix is None:  # no examples: pack the items' own trees after an empty prefix
            sums = score_packed(scorer, requests)
        else:
            sums = scorer.score_choices([ChoiceRequest(c, conts) for c, conts in requests], shared_prefix=state.prefix)
        rows = []
        for it, (context, conts), s in zip(batch, requests, sums):
            counts = [len(whole) - start for whole, start in encode_item(scorer, context, conts)[1]]
            scores = s / np.asarray(counts, dtype=float) if p.option_score == "mean" else s
            row = item_row(it, context, scores, self.name)
            row["option_tokens"] = counts
            if p.option_score == "mean":
                row["logprob_sums"] = [float(x) for x in s]
            rows.append(row)
        return rows

    def metrics(self, rows: Sequence[dict], prepared: Prepared, cfg: RunConfig) -> dict:
        m = super().metrics(rows, prepared, cfg)
        m["option_score"] = cfg.params.option_score
        m["examples_excluded_as_test"] = excluded_as_test(prepared, cfg)
        return m


def excluded_as_test(prepared: Prepared, cfg: RunConfig) -> int:
    """How many training items are never an example because each is a test item (`leaks`); 0
    without in-context examples."""
    if not cfg.params.examples or "train" not in prepared.facts:
        return 0
    keys = leak_keys(prepared.test, cfg.params.slot)
    return sum(leaks(f, keys, cfg.params.slot) for f in prepared.train.facts)


register(MCItems())
