"""What the four multiple-choice probes (IC-LKE, EIC-LKE, HGP, MMP) share.

- `MCConfig`: the data fields of a multiple-choice item set (choices, small-relation policy).
- `ExamplesConfig`: in-context examples (IC-LKE, EIC-LKE).
- `MCProbe`: `prepare` (through `factprobe.build.mc_dataset`), the result row of an item and the
  metrics (`factprobe.metrics.multiple_choice`), so each probe module only builds its contexts.
- `relation_examples`: the in-context examples of a relation, a function of (seed, relation,
  training facts, the relation's test subjects) only: never of which facts are still to score,
  so a fact sees the same context in a 10-fact run, a 200-fact run and a resumed run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..build.examples import sample_examples
from ..build.prepared import Prepared
from ..errors import ContextTooLongError
from ..facts import Fact, MCItem
from ..metrics import multiple_choice as mc
from .config import ConfigBase, RunConfig, option
from .registry import Probe, Session

ON_TOO_LONG = ("truncate", "refuse")


@dataclass
class MCConfig(ConfigBase):
    """Fields of a multiple-choice item set."""

    choices: int = option(100, "options per item, gold included (wu2024: 100)")
    skip_small_relations: bool = option(False, "skip requested relations whose distractor pool is smaller than --choices "
                                               "instead of refusing the run")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check(self.choices >= 2, "choices", self.choices, "must be at least 2")


@dataclass
class ExamplesConfig(MCConfig):
    """In-context examples drawn from the relation's training facts."""

    examples: int = option(50, "in-context examples per relation (wu2024: 50)")
    separator: str = option(" ", "between subject and object (and, in the paper format, between examples)")
    drop_self_examples: bool = option(False, "never use a training fact whose subject equals its object as an example "
                                             "(the share is reported either way)")
    on_too_long: str = option("truncate", "examples longer than the model's window: drop the earliest (truncate) or refuse",
                              choices=ON_TOO_LONG)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check(self.examples >= 0, "examples", self.examples, "must be >= 0")
        self.check(bool(self.separator), "separator", self.separator, "must not be empty")


def empty_context_text(tokenizer) -> str:
    """What an empty context becomes: the BOS (else EOS) token text, as the harness does."""
    return tokenizer.bos_token or tokenizer.eos_token or ""


def relation_examples(session: Session, relation: str, n: int) -> list[Fact]:
    """`n` training facts of `relation` for the prompt (see the module docstring); notes a shortfall."""
    cfg = session.cfg
    test_subjects = [f for f in session.prepared.test if f.relation == relation]
    examples = sample_examples(session.prepared.train, relation, n, seed=cfg.base.seed, exclude_subjects=test_subjects,
                               drop_self=getattr(cfg.params, "drop_self_examples", False))
    if len(examples) < n:
        session.note(f"{relation}: only {len(examples)} training facts for {n} examples")
    return examples


def fit_examples(session: Session, relation: str, examples: list[Fact], prefix_of: Callable[[list[Fact]], str],
                 tail_text: str) -> list[Fact]:
    """Drop the earliest examples until `prefix_of(examples) + tail_text` fits the model's window.

    `tail_text` is the longest fact-specific continuation of the relation (subject and option);
    it is computed over all of the relation's items, so truncation never depends on what is left
    to score."""
    scorer = session.scorer
    tail = len(scorer.encode_continuation(tail_text)) + 2
    kept = list(examples)
    while kept and len(scorer.encode_context(prefix_of(kept))) + tail > scorer.max_length:
        if session.cfg.params.on_too_long == "refuse":
            raise ContextTooLongError(
                f"{len(examples)} examples for {relation} exceed the model's context window of "
                f"{scorer.max_length} tokens; lower --examples"
            )
        kept = kept[1:]
    if len(kept) < len(examples):
        session.note(f"{relation}: context longer than the model's window ({scorer.max_length} tokens); "
                     f"kept the last {len(kept)} of {len(examples)} examples")
    if not kept and examples:
        raise ContextTooLongError(f"{relation}: even one example does not fit the context window")
    return kept


def longest(items: Sequence[MCItem]) -> tuple[str, str]:
    """The longest subject and the longest option of a relation's items."""
    return max((it.subject for it in items), key=len), max((o for it in items for o in it.options), key=len)


def item_row(item: MCItem, context: str, logprobs: Sequence[float] | np.ndarray, probe: str,
             template: str | None = None) -> dict[str, Any]:
    """One result row: the item, the exact context scored, and its option log-probs and verdict."""
    lp = [float(x) for x in logprobs]
    pred = mc.predict(lp)
    probs = mc.option_probs(lp)
    row = {
        "key": item.fact_id if template is None else f"{item.fact_id}#{template}",
        "fact_id": item.fact_id,
        "probe": probe,
        "relation": item.relation,
        "subject": item.subject,
        "subject_id": item.subject_id,
        "gold": item.gold,
        "gold_index": item.gold_index,
        "correct_objects": list(item.correct_objects),
        "options": list(item.options),
        "logprobs": lp,
        "prediction": None if pred is None else item.options[pred],
        "correct": bool(pred is not None and pred == item.gold_index),
        "gold_prob": float(probs[item.gold_index]),
        "confidence": float(probs.max()),
        "context": context,
    }
    if template is not None:
        row["template"] = template
    return row


class MCProbe(Probe):
    """Base of the multiple-choice probes: shared data, rows and metrics."""

    dataset = "mc"
    config_class = MCConfig

    def prepare(self, cfg: RunConfig) -> Prepared:
        from ..build.mc_dataset import prepare_mc

        return prepare_mc(cfg.base, choices=cfg.params.choices, skip_small_relations=cfg.params.skip_small_relations)

    def metrics(self, rows: Sequence[dict], prepared: Prepared, cfg: RunConfig) -> dict:
        import pandas as pd

        df = pd.DataFrame(rows, columns=None if rows else ["relation", "correct", "gold_prob", "confidence"])
        m = mc.summarize(df, n_boot=1000, seed=cfg.base.seed)
        m["dropped_relations"] = dict(prepared.dropped)
        m.update(prepared.info)
        if rows and "template" in rows[0]:
            per_t = df.groupby(["relation", "template"])["correct"].mean()
            m["per_template"] = {f"{r}|{t}": float(v) for (r, t), v in per_t.items()}
        return m
