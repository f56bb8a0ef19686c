"""HGP / MMP prompt baselines (wu2024 section 4.1, appendix G; Jiang et al. 2020).

The same multiple-choice items as IC-LKE, but the context is a template filled with the
subject: human-generated paraphrases (HGP, `lpaqa/prompts/manual_paraphrase` or `paraphrase`)
or machine-mined prompts (MMP, `lpaqa/prompts/mine`). The text before `[Y]` is the context;
the option plus the rest of the sentence (with `[X]` filled, final period dropped) is the
continuation, so templates whose object is not last (`[Y] is the capital of [X]`) still
condition on the subject. A template that starts with `[Y]` gets the tokenizer's BOS (or EOS)
text as its context, as lm-evaluation-harness does for empty contexts.
"""
from __future__ import annotations

import re

from ..errors import DataError

_TRAILING_PERIOD = re.compile(r"\s*\.\s*$")


def fill_template(template: str, subject: str, option: str) -> tuple[str, str]:
    """Split a filled template into (context, continuation) around `[Y]`.

    The context ends before the whitespace that precedes `[Y]`; that whitespace starts the
    continuation (harness convention). Raises DataError when `[X]` or `[Y]` is missing.
    """
    if "[X]" not in template or "[Y]" not in template:
        raise DataError(f"template {template!r} lacks [X] or [Y]")
    before, after = template.split("[Y]", 1)
    after = _TRAILING_PERIOD.sub("", after)
    context = before.replace("[X]", subject)
    stripped = context.rstrip()
    space = context[len(stripped):]
    return stripped, f"{space}{option}{after.replace('[X]', subject)}"
