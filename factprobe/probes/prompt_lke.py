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
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Sequence

from ..errors import ConfigError, DataError
from ..facts import MCItem
from .base import Session
from ..config import option
from .mc import MCConfig, MCProbe, item_row
from .registry import register

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


# ------------------------------------------------------------------ the HGP / MMP probes
@dataclass
class PromptConfig(MCConfig):
    """HGP/MMP's own fields."""

    templates: str = option("3", "how many templates per relation, sampled with the seed from the LPAQA file, "
                                 "or 'paper' for exactly wu2024's appendix G, Table 5")
    prompts_root: str | None = option(None, "LPAQA prompts folder (default: <data root>/lpaqa/prompts)")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.templates = str(self.templates).strip()
        self.check(self.templates == "paper" or (self.templates.isdigit() and int(self.templates) >= 1),
                   "templates", self.templates, "must be 'paper' or a count >= 1")


class PromptProbe(MCProbe):
    """A template filled with the subject, then each option; one row per (fact, template)."""

    config_class = PromptConfig
    kind: ClassVar[str]  # "hgp" | "mmp"

    def templates(self, cfg, relation: str) -> list[str]:
        """The relation's templates for this run (see `factprobe.sources.lpaqa`)."""
        from ..paths import data_root
        from ..sources import lpaqa

        p = cfg.params
        if p.templates == "paper":
            return lpaqa.paper_templates(self.kind, relation)
        root = Path(p.prompts_root) if p.prompts_root else data_root() / "lpaqa" / "prompts"
        return lpaqa.sample_templates(self.kind, root, relation, int(p.templates), cfg.base.seed)

    def validate(self, cfg, prepared) -> None:
        """Choose every relation's templates up front (recorded in metrics.json as `<probe>_templates`)."""
        chosen = {rel: self.templates(cfg, rel) for rel in prepared.items}
        for rel, ts in chosen.items():
            if not ts:
                raise ConfigError(f"no {self.kind.upper()} prompts for relation {rel} under the LPAQA prompts folder")
        prepared.info[f"{self.name}_templates"] = chosen

    def item_keys(self, cfg, prepared, item) -> list[str]:
        return [f"{item.fact_id}#{t}" for t in prepared.info[f"{self.name}_templates"][item.relation]]

    def open_relation(self, session: Session, relation: str) -> list[str]:
        return session.prepared.info[f"{self.name}_templates"][relation]

    def score_batch(self, session: Session, templates: list[str], batch: Sequence[MCItem]) -> list[dict]:
        from ..lm.scorer import ChoiceRequest

        rows = []
        for template in templates:
            reqs, contexts = [], []
            for it in batch:
                pairs = [fill_template(template, it.subject, o) for o in it.options]
                ctx = pairs[0][0]
                contexts.append(ctx)
                reqs.append(ChoiceRequest(ctx, [cont for _, cont in pairs]))
            scores = session.scorer.score_choices(reqs)
            rows += [item_row(it, c, s, self.name, template) for it, c, s in zip(batch, contexts, scores)]
        return rows

    def metrics(self, rows, prepared, cfg) -> dict:
        from ..metrics.multiple_choice import template_summary

        m = super().metrics(rows, prepared, cfg)
        if rows:
            import pandas as pd

            m["templates"] = template_summary(pd.DataFrame(rows))
        return m


class HGP(PromptProbe):
    name = "hgp"
    kind = "hgp"
    description = "human-generated prompts (LPAQA paraphrases) as the context"


class MMP(PromptProbe):
    name = "mmp"
    kind = "mmp"
    description = "machine-mined prompts (LPAQA mine) as the context"


register(HGP())
register(MMP())
