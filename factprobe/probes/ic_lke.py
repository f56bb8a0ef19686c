"""IC-LKE (wu2024 section 2.2, appendix C.1): `x1 y1 x2 y2 ... xn yn x`, then score each option.

The n in-context examples come from the relation's *training* facts, never from test facts.
No relation name or instruction is used (design principle DP2). The separator joins subject
and object and consecutive examples (space by default; wu2024 section 4.1). The relation
prefix `x1 y1 ... xn yn` is shared by every test fact of the relation, so the scorer caches it
once per relation and extends it per fact with `sep + x` (two-level sharing).
"""
from __future__ import annotations

from typing import Sequence

from ..facts import Fact


def relation_prefix(examples: Sequence[Fact], separator: str = " ") -> str:
    """`x1 y1 x2 y2 ... xn yn` joined by `separator` ("" for no examples)."""
    return separator.join(f"{e.subject}{separator}{e.object}" for e in examples)


def fact_context(prefix: str, subject: str, separator: str = " ") -> str:
    """The exact text scored before the options: the prefix, then the test subject."""
    return f"{prefix}{separator}{subject}" if prefix else subject


def option_continuation(option: str, separator: str = " ") -> str:
    """What follows the context for one option: the separator, then the option."""
    return f"{separator}{option}"
