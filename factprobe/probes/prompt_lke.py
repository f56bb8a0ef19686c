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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ..config import option
from ..errors import ConfigError, DataError
from ..facts import MCItem
from ..framework.base import Session
from ..framework.registry import register
from .mc import MCConfig, MCProbe, item_row

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
    space = context[len(stripped) :]
    return stripped, f"{space}{option}{after.replace('[X]', subject)}"


# ------------------------------------------------------------------ the HGP / MMP probes
@dataclass
class PromptConfig(MCConfig):
    """HGP/MMP's own fields."""

    templates: str = option(
        "3",
        "how many templates per relation, sampled with the seed from the LPAQA file, "
        "or 'paper' for wu2024's appendix G, Table 5 less its backwards templates (Native language HGP 1, "
        "Official language MMP 2-3: subject and object swapped; metrics.json lists them as <probe>_paper_left_out)",
    )
    prompts_root: str | None = option(None, "LPAQA prompts folder (default: <data root>/lpaqa/prompts)")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.templates = str(self.templates).strip()
        self.check(
            self.templates == "paper" or (self.templates.isdigit() and int(self.templates) >= 1),
            "templates",
            self.templates,
            "must be 'paper' or a count >= 1",
        )


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
        if cfg.params.templates == "paper":  # what of Table 5 the set leaves out, and why
            from ..sources import lpaqa

            prepared.info[f"{self.name}_paper_left_out"] = [e for rel in chosen for e in lpaqa.paper_left_out(self.kind, rel)]

    def item_keys(self, cfg, prepared, item) -> list[str]:
        return [f"{item.fact_id}#{t}" for t in prepared.info[f"{self.name}_templates"][item.relation]]

    def open_relation(self, session: Session, relation: str) -> list[str]:
        return session.prepared.info[f"{self.name}_templates"][relation]

    @staticmethod
    def _requests(templates: list[str], batch: Sequence[MCItem]):
        """([(item, template)], one `ChoiceRequest` per (template, item), template by template)."""
        from ..lm.scorer import ChoiceRequest

        reqs, owners = [], []
        for template in templates:
            for it in batch:
                pairs = [fill_template(template, it.subject, o) for o in it.options]
                reqs.append(ChoiceRequest(pairs[0][0], [cont for _, cont in pairs]))
                owners.append((it, template))
        return owners, reqs

    def item_tokens(self, session: Session, templates: list[str], item: MCItem) -> int:
        """The tokens the fact's rows forward: each template's prompt and its options' trie."""
        return sum(session.scorer.request_tokens(self._requests(templates, [item])[1], pack_contexts=True))

    def score_batch(self, session: Session, templates: list[str], batch: Sequence[MCItem]) -> list[dict]:
        """One row per (template, item), template by template. Every row's prompt is short and
        its own (the subject sits in it), so no prefix is shared: the rows of the whole batch go to
        the scorer at once with `pack_contexts`, which packs several rows' contexts and options into
        one forward (`token_budget`) instead of two tiny forwards per row."""
        owners, reqs = self._requests(templates, batch)
        # a served model's scorer (factprobe.lm.served) sends each option as its own request: nothing to pack
        packing = {} if getattr(session.loaded, "served", False) else {"pack_contexts": True}
        scores = session.scorer.score_choices(reqs, **packing)
        return [item_row(it, r.context, s, self.name, template) for (it, template), r, s in zip(owners, reqs, scores)]

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
