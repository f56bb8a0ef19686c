"""IC-LKE (wu2024 section 2.2, appendix C.1): in-context examples of the relation, then the test subject.

Two prompt formats (`--prompt-format`), S being the separator (a space by default):

- `paper` (default; the paper's Eq. 1): `x1 S y1 S x2 S y2 ... xn S yn S x`, then `S option`.
  With S = " " and three examples: `A a B b C c France Paris`.
- `official` (ZeroPrompt_LKE @ 154ec3f, `latent_knowledge_extractor/construct_prompt.py`, the
  `zp-lke` case): each pair is written `x_i S y_i ` (with a trailing space) and the pairs are joined
  by `, `; the test subject follows the last pair's trailing space with no comma; then S, and S
  again before the option. With S = " : ": `A : a , B : b , C : c France :  : Paris`.

The scored string is the context plus the option exactly as the format writes it (the scorer moves
the context's trailing whitespace into the continuation, as lm-evaluation-harness does). No
relation name or instruction is used (design principle DP2). The n examples come from the
relation's training facts, never from test subjects (`mc.relation_examples`). The relation prefix
is shared by all test facts of the relation: the scorer caches it once and extends it per fact.
The runner hands over as many facts as fill the scorer's token budget (`item_tokens`). Without
examples (`--examples 0`) each fact's context and options are packed with other facts' into
forwards of at most that budget, as HGP's rows are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..config import option
from ..facts import Fact, MCItem
from ..framework.base import Session
from ..framework.registry import register
from .mc import ExamplesConfig, MCProbe, fit_examples, item_row, longest, relation_examples

PROMPT_FORMATS = ("paper", "official")


def relation_prefix(examples: Sequence[Fact], separator: str = " ", prompt_format: str = "paper") -> str:
    """The examples' text: `x1 S y1 S ... xn S yn` (paper) or `x1 S y1 , ... , xn S yn ` (official)."""
    if prompt_format == "official":
        return ", ".join(f"{e.subject}{separator}{e.object} " for e in examples)
    return separator.join(f"{e.subject}{separator}{e.object}" for e in examples)


def fact_context(prefix: str, subject: str, separator: str = " ", prompt_format: str = "paper") -> str:
    """The exact text scored before the options: the prefix, then the test subject (and, in the
    official format, a separator)."""
    if prompt_format == "official":
        return f"{prefix}{subject}{separator}"
    return f"{prefix}{separator}{subject}" if prefix else subject


def option_continuation(option: str, separator: str = " ") -> str:
    """What follows the context for one option: the separator, then the option (both formats)."""
    return f"{separator}{option}"


@dataclass
class ICLKEConfig(ExamplesConfig):
    """IC-LKE's own fields."""

    prompt_format: str = option(
        "paper",
        "paper: x1 S y1 S ... x S option (Eq. 1); official: the ZeroPrompt_LKE code's 'x1 S y1 , ... xn S yn x S S option'",
        choices=PROMPT_FORMATS,
    )


@dataclass
class _RelationState:
    prefix_text: str
    prefix: Any  # PrefixCache or None


class ICLKE(MCProbe):
    name = "ic-lke"
    description = "in-context latent knowledge estimation: n training examples of the relation, then the subject"
    config_class = ICLKEConfig

    def open_relation(self, session: Session, relation: str) -> _RelationState:
        p = session.cfg.params
        sep, fmt = p.separator, p.prompt_format
        examples = relation_examples(session, relation, p.examples)
        subject, opt = longest(session.prepared.items[relation])
        tail = (f"{sep}{subject}" if fmt == "paper" else f"{subject}{sep}") + option_continuation(opt, sep)
        examples = fit_examples(session, relation, examples, lambda ex: relation_prefix(ex, sep, fmt), tail)
        prefix_text = relation_prefix(examples, sep, fmt)
        # The official prefix ends in a space that tokenizes with the next subject: share it without.
        shared = prefix_text.rstrip()
        return _RelationState(prefix_text, session.scorer.prefix(shared) if shared else None)

    def _requests(self, session: Session, state: _RelationState, batch: Sequence[MCItem]):
        """(contexts, one `ChoiceRequest` per item, the scorer's keyword arguments) for `batch`."""
        from ..lm.scorer import ChoiceRequest

        p = session.cfg.params
        contexts = [fact_context(state.prefix_text, it.subject, p.separator, p.prompt_format) for it in batch]
        reqs = [ChoiceRequest(c, [option_continuation(o, p.separator) for o in it.options]) for c, it in zip(contexts, batch)]
        # no examples (--examples 0): each fact's context and options are packed with other facts', as HGP
        # does, instead of a context forward and an options forward per fact (a served model packs nothing)
        packs = state.prefix is None and not getattr(session.loaded, "served", False)
        return contexts, reqs, ({"pack_contexts": True} if packs else {"shared_prefix": state.prefix})

    def item_tokens(self, session: Session, state: _RelationState, item: MCItem) -> int:
        """The tokens the fact forwards after the relation's examples: its subject and its options' trie."""
        _, reqs, how = self._requests(session, state, [item])
        return session.scorer.request_tokens(reqs, **how)[0]

    def score_batch(self, session: Session, state: _RelationState, batch: Sequence[MCItem]) -> list[dict]:
        contexts, reqs, how = self._requests(session, state, batch)
        scores = session.scorer.score_choices(reqs, **how)
        return [item_row(it, c, s, self.name) for it, c, s in zip(batch, contexts, scores)]


register(ICLKE())
