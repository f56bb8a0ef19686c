"""The multi-prompt dataset of BELIEF / BELIEF-ICL (zhao2024, sections 2 and 4): many templates per
relation, one fact per subject-relation pair, every correct object as gold.

The templates (their sources, the data root they come from, normalisation, de-duplication, rendering)
are `factprobe.datasets.multiprompt_templates`; this module pairs them with the facts.

Data contract (`MultiPromptSet`)
--------------------------------
`templates` (pandas DataFrame, one row per usable template, `TEMPLATE_COLUMNS`):
- `relation` (str), `template_id` (str, unique over the whole set, stable across builds:
  `<relation>:<source>:<line>`), `template` (str, normalised: `multiprompt_templates.normalize_template`; exactly one
  `[X]` and one `[Y]`), `source` (one of `TEMPLATE_SOURCES`), `provenance` (str, `<file>:<line>` of the
  first occurrence; files under the data root or the repository are named relative to it),
  `style` ("cloze" | "question"), `y_last` (bool: nothing but end punctuation follows `[Y]`,
  so the text before `[Y]` is a prompt a causal LM can continue).
Rows are ordered by relation (first-seen order of the facts), then source priority, then line.

`facts` (one row per subject-relation pair, the paper's t in T, `FACT_COLUMNS`):
- `fact_id` (str: the `Fact.fact_id` of the pair's first test fact, so rows join with every other
  probe's tables), `relation`, `subject` (label), `subject_id` (str | None),
  `subject_aliases` (list[str]: other labels of the same subject id in any loaded file, plus the
  `aliases` argument; empty where no source provides any; the shipped LAMA/LPAQA files give one
  label per id, so it is mostly empty), `object` / `object_id` (the first test fact's object),
  `gold` (list[str]: the labels of every correct object of the pair, matched by subject id over
  the test facts and the training facts, the first test fact's object first; N-M pairs have
  several), `gold_ids` (list[str | None], aligned with the distinct objects).

`dropped` (`DROPPED_COLUMNS`): every template that was read but not kept, with the reason
(`duplicate of <template_id>`, `backwards`, `[Y] not last (causal)`).

The set holds every pair; `--max-facts-per-relation` is applied by the framework after `prepare`
(`factprobe.datasets.cap`, draw `CAP_DRAW` = `SOURCE_DRAW`: the test facts `sample_facts_per_relation`
keeps, so a capped BELIEF run probes the facts the multiple-choice and QA probes of that source probe).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import ConfigError, DataError
from ..facts import Fact, FactSet
from .cap import SOURCE_DRAW
from .multiprompt_templates import (
    DEFAULT_QA_TEMPLATES,
    DROPPED_COLUMNS,
    ROOT_MARKERS,
    SOURCE_FILES,
    SOURCE_PATHS,
    STYLES,
    TEMPLATE_COLUMNS,
    TEMPLATE_SOURCES,
    RawTemplate,
    check_template_sources,
    collect_templates,
    data_root_of,
    gather_templates,
    is_y_last,
    load_belief_qa_templates,
    normalize_template,
    render_causal,
    render_mlm,
    source_counts,
    template_source_metrics,
    template_style,
    templates_root_for,
)
from .prepared import Prepared

log = logging.getLogger(__name__)

FACT_COLUMNS = ("fact_id", "relation", "subject", "subject_id", "subject_aliases", "object", "object_id", "gold", "gold_ids")
DATASET_KIND = "multiprompt"
#: the draw `--max-facts-per-relation` keeps pairs with (`Prepared.cap_draw`, `factprobe.datasets.cap`): over
#: the test facts, so a capped run probes the facts the other probes of the same source and cap probe (until
#: issue 39 it drew over the pairs under its own name, "multiprompt", and shared almost none)
CAP_DRAW = SOURCE_DRAW


# ------------------------------------------------------------------ facts
@dataclass(frozen=True)
class MultiPromptItem:
    """One subject-relation pair (a row of `MultiPromptSet.facts`); the probes' item."""

    fact_id: str
    relation: str
    subject: str
    subject_id: str | None
    object: str
    object_id: str | None
    gold: tuple[str, ...]
    gold_ids: tuple[str | None, ...] = ()
    subject_aliases: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MultiPromptItem:
        return cls(
            d["fact_id"],
            d["relation"],
            d["subject"],
            d.get("subject_id"),
            d["object"],
            d.get("object_id"),
            tuple(d.get("gold") or ()),
            tuple(d.get("gold_ids") or ()),
            tuple(d.get("subject_aliases") or ()),
        )


def build_pairs(
    test: FactSet,
    train: FactSet | None = None,
    aliases: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, list[MultiPromptItem]]:
    """{relation: items}, one item per (relation, subject key) of the test facts (module docstring),
    in file order; every pair (the cap is the framework's: `CAP_DRAW`). `aliases` maps a subject id
    (or label) to extra labels."""
    everything = list(test) + (list(train) if train is not None else [])
    objects: dict[tuple[str, str], dict[str, list[str]]] = defaultdict(dict)  # (rel, subject key) -> object key -> labels
    labels_of: dict[str, list[str]] = defaultdict(list)  # subject key -> labels in any file
    for f in everything:
        labs = objects[(f.relation, f.subject_key)].setdefault(f.object_key, [])
        if f.object not in labs:
            labs.append(f.object)
        if f.subject not in labels_of[f.subject_key]:
            labels_of[f.subject_key].append(f.subject)
    first_fact: dict[tuple[str, str], Fact] = {}
    for f in test:
        first_fact.setdefault((f.relation, f.subject_key), f)
    by_rel: dict[str, list[Fact]] = defaultdict(list)
    for (rel, _), f in first_fact.items():
        by_rel[rel].append(f)
    out: dict[str, list[MultiPromptItem]] = {}
    for rel, facts in by_rel.items():
        items = []
        for f in facts:
            objs = objects[(rel, f.subject_key)]
            order = [f.object_key] + [k for k in objs if k != f.object_key]
            gold = list(dict.fromkeys([f.object] + [lab for k in order for lab in objs[k]]))
            gold_ids = [k if k != lab else None for k in order for lab in objs[k][:1]]
            extra = list(aliases.get(f.subject_key, ())) + list(aliases.get(f.subject, ())) if aliases else []
            al = [a for a in dict.fromkeys(labels_of[f.subject_key] + extra) if a and a != f.subject]
            items.append(
                MultiPromptItem(
                    f.fact_id, rel, f.subject, f.subject_id, f.object, f.object_id, tuple(gold), tuple(gold_ids), tuple(al)
                )
            )
        out[rel] = items
    return out


# ------------------------------------------------------------------ the set
@dataclass
class MultiPromptSet:
    """Templates and facts of a multi-prompt dataset (contract in the module docstring)."""

    templates: pd.DataFrame
    facts: pd.DataFrame
    dropped: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(DROPPED_COLUMNS)))
    dropped_relations: dict[str, str] = field(default_factory=dict)

    @property
    def relations(self) -> list[str]:
        """Relations with both facts and templates, in fact order."""
        have = set(self.templates["relation"])
        return [r for r in dict.fromkeys(self.facts["relation"]) if r in have]

    def templates_of(self, relation: str) -> pd.DataFrame:
        """The relation's template rows, in order."""
        return self.templates[self.templates["relation"] == relation].reset_index(drop=True)

    def items(self) -> dict[str, list[MultiPromptItem]]:
        """{relation: items} (the probes' view of `facts`)."""
        out: dict[str, list[MultiPromptItem]] = {}
        for rec in self.facts.to_dict("records"):
            out.setdefault(rec["relation"], []).append(MultiPromptItem.from_dict(rec))
        return out

    def for_causal(self) -> MultiPromptSet:
        """A copy without the templates whose `[Y]` is not last (they move to `dropped`)."""
        bad = self.templates[~self.templates["y_last"]]
        more = bad.assign(reason="[Y] not last (causal)")[list(DROPPED_COLUMNS)]
        dropped = pd.concat([self.dropped, more], ignore_index=True) if len(more) else self.dropped
        return MultiPromptSet(
            self.templates[self.templates["y_last"]].reset_index(drop=True), self.facts, dropped, dict(self.dropped_relations)
        )

    def template_counts(self) -> dict[str, int]:
        return {r: int(n) for r, n in self.templates.groupby("relation", sort=False).size().items()}

    # ---- Prepared (the probes' and the pipeline's dataset)
    def to_prepared(self, test: FactSet, train: FactSet | None = None, info: dict | None = None) -> Prepared:
        """A `Prepared` (kind "multiprompt"): items per relation, the templates in
        `info["multiprompt_templates"]` (records) and the dropped templates in
        `info["multiprompt_dropped"]`; read back with `MultiPromptSet.from_prepared`."""
        facts = {"test": test}
        if train is not None and len(train):
            facts["train"] = train
        rels = self.relations
        items = {r: v for r, v in self.items().items() if r in rels}
        meta = dict(info or {})
        meta.update(
            multiprompt_templates=self.templates[self.templates["relation"].isin(rels)].to_dict("records"),
            multiprompt_dropped=self.dropped.to_dict("records"),
            template_counts=self.template_counts(),
        )
        return Prepared(
            kind=DATASET_KIND, items=items, facts=facts, dropped=dict(self.dropped_relations), info=meta, cap_draw=CAP_DRAW
        )

    @classmethod
    def from_prepared(cls, prepared: Prepared) -> MultiPromptSet:
        """The set back from a `to_prepared` dataset (also after `Prepared.save`/`load`)."""
        if prepared.kind != DATASET_KIND or "multiprompt_templates" not in prepared.info:
            raise DataError(f"not a multi-prompt dataset (kind {prepared.kind!r}); build it with prepare_multiprompt")
        templates = pd.DataFrame(prepared.info["multiprompt_templates"], columns=list(TEMPLATE_COLUMNS)).astype({"y_last": bool})
        facts = pd.DataFrame([it.to_dict() for its in prepared.items.values() for it in its], columns=list(FACT_COLUMNS))
        dropped = pd.DataFrame(prepared.info.get("multiprompt_dropped", []), columns=list(DROPPED_COLUMNS))
        return cls(templates, facts, dropped, dict(prepared.dropped))


def _facts_frame(items: Mapping[str, list[MultiPromptItem]]) -> pd.DataFrame:
    return pd.DataFrame([it.to_dict() for its in items.values() for it in its], columns=list(FACT_COLUMNS))


def build_multiprompt(
    data_root: str | Path | None = None,
    relations: Sequence[str] | None = None,
    *,
    test: FactSet | None = None,
    train: FactSet | None = None,
    template_sources: Sequence[str] = TEMPLATE_SOURCES,
    qa_templates: str | Path | None = None,
    aliases: Mapping[str, Sequence[str]] | None = None,
    drop_backwards: bool = True,
) -> MultiPromptSet:
    """Build the multi-prompt set (contract in the module docstring).

    `data_root` (default `factprobe.paths.data_root()`) holds `lama/`, `pararel/` and `lpaqa/`.
    Facts: `test` (default: LAMA T-REx under `<data_root>/lama`) and `train` (default: LPAQA's
    T-REx training facts under `<data_root>/lpaqa/trex_train` when present; they only add
    correct objects to `gold`, never pairs). `relations` restricts both (unknown ids raise
    ConfigError). A relation with facts but no template is left out and named in
    `dropped_relations`."""
    from ..paths import data_root as default_root
    from ..sources import load_facts

    root = Path(data_root) if data_root is not None else default_root()
    rels = list(relations) if relations else None
    if test is None:
        test = load_facts("lama", str(root / "lama"), rels)
        if train is None and (root / "lpaqa" / "trex_train").is_dir():
            from ..sources.lpaqa import load_lpaqa_train

            full = load_lpaqa_train(root / "lpaqa" / "trex_train")
            train = FactSet([f for f in full if f.relation in test.relations], dict(test.relations), full.source)
    elif rels:
        test = test.select(rels)
    items = build_pairs(test, train, aliases)
    order = list(items)
    raw = gather_templates(root, order, test, template_sources, qa_templates)
    templates, dropped = collect_templates(raw, root, drop_backwards)
    have = set(templates["relation"])
    missing = {r: f"{r}: no template from {', '.join(template_sources)}" for r in order if r not in have}
    kept = {r: v for r, v in items.items() if r in have}
    return MultiPromptSet(templates, _facts_frame(kept), dropped, missing)


def prepare_multiprompt(
    base,
    template_sources: Sequence[str] = TEMPLATE_SOURCES,
    qa_templates: str | Path | None = None,
    templates_root: str | Path | None = None,
) -> Prepared:
    """The `Prepared` dataset of a BELIEF run from a `BaseConfig`: test facts from the configured
    source (`--source/--data/--relations`), training facts only from `--train-data` (they add
    correct objects), templates from `templates_root_for(base.data, templates_root)` (the docstring of
    `factprobe.datasets.multiprompt_templates`; its note, if any, is logged and kept in `info["templates_note"]`). Raises
    ConfigError when no relation has both facts and templates; DataError for a missing source."""
    from ..sources import load_facts

    test = load_facts(base.source, base.data, None)
    if base.relations:
        test = test.select(base.relations)
    train = None
    if base.train_data:
        full = load_facts("lpaqa-train", base.train_data, None)
        train = FactSet([f for f in full if f.relation in test.relations], dict(test.relations), full.source)
    root, note = templates_root_for(base.data, templates_root)
    if note:
        log.warning("note: %s", note)
    mp = build_multiprompt(
        root,
        None,
        test=test,
        train=train,
        template_sources=template_sources,
        qa_templates=qa_templates,
    )
    if mp.facts.empty:
        why = "; ".join(mp.dropped_relations.values()) or "no facts"
        raise ConfigError(f"no relation of {test.source or base.source} has multi-prompt templates ({why})")
    info = {
        "templates_root": str(root),
        "templates_note": note,
        "template_sources": list(template_sources),
        "qa_templates": str(Path(qa_templates) if qa_templates else DEFAULT_QA_TEMPLATES),
    }
    return mp.to_prepared(test, train, info)


__all__ = [
    "DATASET_KIND",
    "DEFAULT_QA_TEMPLATES",
    "DROPPED_COLUMNS",
    "FACT_COLUMNS",
    "STYLES",
    "TEMPLATE_COLUMNS",
    "ROOT_MARKERS",
    "SOURCE_FILES",
    "SOURCE_PATHS",
    "TEMPLATE_SOURCES",
    "MultiPromptItem",
    "MultiPromptSet",
    "RawTemplate",
    "build_multiprompt",
    "build_pairs",
    "check_template_sources",
    "collect_templates",
    "data_root_of",
    "gather_templates",
    "source_counts",
    "template_source_metrics",
    "templates_root_for",
    "is_y_last",
    "load_belief_qa_templates",
    "normalize_template",
    "prepare_multiprompt",
    "render_causal",
    "render_mlm",
    "template_style",
]
