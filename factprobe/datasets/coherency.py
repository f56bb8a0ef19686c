"""The coherency dataset (youssef2024, Algorithm 1): templates, items and candidate tables.

Templates
---------
`<data root>/coherency/relations_autoregressive.jsonl` (the authors' file; `--coherency-templates`
overrides it): one JSON object per line with `relation`, `template_obj` (predicts `[Y]` from
`[X]`: "The capital of [X] is [Y]"), `template_sub` (predicts `[X]` from `[Y]`: "[Y] is the capital
of [X]") and optionally `type`, `label`, `description` (kept, not used: the cardinality comes from
the facts' `Relation`, i.e. `lama/relations.jsonl`). `load_coherency_templates` raises DataError
naming `file:line` for malformed JSON, a repeated relation, a template that is not text, a template
without exactly one `[X]` and one `[Y]`, or an unknown `type`; a missing file or bad bytes are
DataErrors from `factprobe.io`. A relation whose forward or inverse template is missing or empty
is not an error: it is skipped and reported in `dropped`.

Facts and items
---------------
- Test facts come from the configured source (`--relations` selects). Coherency uses no
  in-context examples, so the test facts are never split: without `--train-data` every test fact
  is probed; with it, the training facts (`load_test_and_train`) only add knowledge (candidates
  and correct answers), never items.
- One `CoherencyItem` per (relation, subject) of the test facts: N-M pairs are collapsed. Its
  starting object (round 2 starts there, and the item's `fact_id` names it) is the subject's first
  test fact; `gold_objects` lists every correct object of the pair, by entity id, from ALL loaded
  facts (test and training). Every subject gets its item: `--max-facts-per-relation` is applied
  by the framework after `prepare` (`factprobe.datasets.cap`; draw `CAP_DRAW` = `SOURCE_DRAW`: the
  test facts `sample_facts_per_relation` keeps, so a capped run asks about the facts IC-LKE, HGP, MMP
  and QA ask about, less the few that are not a subject's first fact).
- Candidate tables (`relation_tables`): the relation's object-side candidates are all distinct
  objects of the relation over test + training facts, by entity id (with their labels); the
  subject-side candidates are all distinct subjects. `subjects_of[object]` and
  `objects_of[subject]` (by id) are the correct answers the probe excludes in a second step. They
  are rebuilt from `Prepared.facts`, so a saved and reloaded dataset gives the same tables.
  Entity identity is the id where the data has one; a fact without an id is matched by label
  (case-insensitive) to the one id that label has in that role, else keyed by its label.

Evidence paragraphs
-------------------
No shipped source carries a per-fact paragraph. A triples file (`--source triples`; jsonl, csv or
parquet) may have an optional `context` column: its text is stored on the item of that fact (the
item's first test fact) and prepended to every query of the item (youssef2024 section 3.4 adds
LAMA's evidence paragraphs to the inputs). The triples reader ignores the column; this module
reads it (`read_fact_contexts`). Other sources carry none.

`prepare_coherency(base, templates_path) -> Prepared` (kind "coherency") puts it together; its
`info` holds the templates used per relation, candidate counts and the items skipped. How many of
the run's items carry a context is counted by the probe over the capped items (`items_with_context`).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, DataError
from ..facts import CARDINALITIES, Fact, FactSet
from ..io import open_table, read_jsonl
from .cap import SOURCE_DRAW
from .prepared import Prepared

log = logging.getLogger(__name__)

TEMPLATES_FILE = ("coherency", "relations_autoregressive.jsonl")
#: the draw `--max-facts-per-relation` keeps facts with (`Prepared.cap_draw`, `factprobe.datasets.cap`): over
#: the test facts, so a capped run asks about the facts the other probes of the same source and cap ask about
#: (until issue 39 it drew over the subjects under its own name, "coherency_items", and shared almost none)
CAP_DRAW = SOURCE_DRAW
SUBJECT_SLOT, OBJECT_SLOT = "[X]", "[Y]"


# ------------------------------------------------------------------ templates
@dataclass(frozen=True)
class CoherencyTemplates:
    """The two templates of one relation: `template_obj` predicts [Y] (the object) given [X];
    `template_sub` predicts [X] (the subject) given [Y]."""

    relation: str
    template_obj: str
    template_sub: str
    type: str | None = None


def default_templates_path() -> Path:
    from ..paths import data_root

    return data_root().joinpath(*TEMPLATES_FILE)


def _check_slots(template: str, where: str, name: str, relation: str) -> None:
    for slot in (SUBJECT_SLOT, OBJECT_SLOT):
        n = template.count(slot)
        if n != 1:
            what = "lacks" if n == 0 else f"has {n} of"
            raise DataError(
                f"{where}: {name} {template!r} of {relation} {what} the slot {slot}; "
                f"a template needs exactly one {SUBJECT_SLOT} and one {OBJECT_SLOT}"
            )


def load_coherency_templates(path: str | Path) -> tuple[dict[str, CoherencyTemplates], dict[str, str]]:
    """({relation: templates}, {relation: why skipped}) from a templates file (module docstring)."""
    path = Path(path)
    if path.is_dir():
        raise DataError(f"{path}: is a folder, expected the coherency templates file (jsonl)")
    out: dict[str, CoherencyTemplates] = {}
    dropped: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for lineno, rec in read_jsonl(path, required=("relation",)):
        where = f"{path}:{lineno}"
        if not isinstance(rec["relation"], str):
            raise DataError(f"{where}: relation must be text, got {rec['relation']!r}")
        rid = rec["relation"].strip()
        if rid in first_line:
            raise DataError(f"{where}: relation {rid} repeated (first at line {first_line[rid]})")
        first_line[rid] = lineno
        typ = rec.get("type")
        if typ not in (None, "") and typ not in CARDINALITIES:
            raise DataError(f"{where}: relation {rid} has type {typ!r}; expected one of {', '.join(CARDINALITIES)}")
        templates: dict[str, str | None] = {}
        for name in ("template_obj", "template_sub"):
            value = rec.get(name)
            if value is not None and not isinstance(value, str):
                raise DataError(f"{where}: {name} of {rid} must be text, got {type(value).__name__} {value!r}")
            value = (value or "").strip() or None
            if value is not None:
                _check_slots(value, where, name, rid)
            templates[name] = value
        missing = [n for n, v in templates.items() if v is None]
        if missing:
            what = " and ".join(
                {"template_obj": "forward template (template_obj)", "template_sub": "inverse template (template_sub)"}[m]
                for m in missing
            )
            dropped[rid] = f"{rid}: no {what} in {path.name}:{lineno}"
            continue
        out[rid] = CoherencyTemplates(rid, templates["template_obj"], templates["template_sub"], typ or None)  # type: ignore[arg-type]
    return out, dropped


# ------------------------------------------------------------------ items
@dataclass(frozen=True)
class CoherencyItem:
    """One (relation, subject) of the test facts.

    `gold`/`object_id` is the starting object (the subject's first test fact); `gold_objects` holds
    (entity key, label) of every correct object of the pair from all loaded facts, the starting
    object first; `subject_entity` is the subject's entity key in the candidate tables; `context`
    is an optional evidence paragraph prepended to every query of the item."""

    relation: str
    subject: str
    gold: str
    gold_objects: tuple[tuple[str, str], ...]
    subject_entity: str = ""
    subject_id: str | None = None
    object_id: str | None = None
    context: str | None = None

    def __post_init__(self) -> None:
        if not self.gold_objects:
            raise ValueError(f"item {self.relation}/{self.subject}: no gold objects")
        if not self.subject_entity:
            object.__setattr__(self, "subject_entity", self.subject_id or self.subject)

    @property
    def object_entity(self) -> str:
        """Entity key of the starting object (the first of `gold_objects`)."""
        return self.gold_objects[0][0]

    @property
    def fact_id(self) -> str:
        """The starting fact's id (`Fact.fact_id`), so rows join with other probes' per-fact tables."""
        return f"{self.relation}|{self.subject_id or self.subject}|{self.object_id or self.gold}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "relation": self.relation,
            "subject": self.subject,
            "gold": self.gold,
            "gold_objects": [list(g) for g in self.gold_objects],
            "subject_entity": self.subject_entity,
            "subject_id": self.subject_id,
            "object_id": self.object_id,
            "context": self.context,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CoherencyItem:
        return cls(
            relation=d["relation"],
            subject=d["subject"],
            gold=d["gold"],
            gold_objects=tuple((str(k), str(v)) for k, v in d["gold_objects"]),
            subject_entity=d.get("subject_entity") or "",
            subject_id=d.get("subject_id"),
            object_id=d.get("object_id"),
            context=d.get("context"),
        )


# ------------------------------------------------------------------ candidate tables
@dataclass
class RelationTables:
    """Entities of one relation by key (id where known) and who is correct for whom.

    `objects`/`subjects`: key -> label, first label seen (test facts come first).
    `objects_of[subject key]` / `subjects_of[object key]`: keys of the correct answers."""

    objects: dict[str, str] = field(default_factory=dict)
    subjects: dict[str, str] = field(default_factory=dict)
    objects_of: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    subjects_of: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))


def _key_resolver(facts: list[Fact], role: str):
    """key(fact) for `role` ("subject"/"object"): the id, else the one id its label has in this
    relation (case-insensitive), else the label."""
    ids_of_label: dict[str, set[str]] = defaultdict(set)
    for f in facts:
        ident = getattr(f, f"{role}_id")
        if ident:
            ids_of_label[getattr(f, role).casefold()].add(ident)

    def key(f: Fact) -> str:
        ident = getattr(f, f"{role}_id")
        if ident:
            return ident
        label = getattr(f, role)
        ids = ids_of_label.get(label.casefold(), set())
        return next(iter(ids)) if len(ids) == 1 else label

    return key


def relation_tables(facts: Iterable[Fact], relation: str) -> RelationTables:
    """The candidate tables of `relation` over `facts` (test facts first, then training facts)."""
    rel_facts = [f for f in facts if f.relation == relation]
    skey, okey = _key_resolver(rel_facts, "subject"), _key_resolver(rel_facts, "object")
    t = RelationTables()
    for f in rel_facts:
        s, o = skey(f), okey(f)
        t.subjects.setdefault(s, f.subject)
        t.objects.setdefault(o, f.object)
        t.objects_of[s].add(o)
        t.subjects_of[o].add(s)
    return t


def prepared_tables(prepared: Prepared, relation: str) -> RelationTables:
    """`relation_tables` over every fact set of a prepared dataset (test first)."""
    sets = [prepared.facts["test"]] + [fs for name, fs in prepared.facts.items() if name != "test"]
    return relation_tables((f for fs in sets for f in fs), relation)


# ------------------------------------------------------------------ evidence paragraphs
CONTEXT_COLUMN = "context"


@contextmanager
def _quiet_context_column() -> Iterator[None]:
    """Hide the triples reader's 'ignoring unknown field(s) 'context'' warning (we read it here)."""
    logger = logging.getLogger("factprobe.sources.triples")

    def keep(record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not (len(args) >= 3 and args[2] == repr(CONTEXT_COLUMN))

    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


def read_fact_contexts(path: str | Path) -> dict[str, str]:
    """{fact_id: paragraph} from the optional `context` column of a triples file or folder.

    Rows are read with the triples reader's own column names and aliases, so the fact ids are the
    ones `load_triples` gives. A context that is not text is a DataError naming file:line; an empty
    one is no context."""
    from ..sources._common import clean_text
    from ..sources.triples import _column_map, _fact, triple_files

    out: dict[str, str] = {}
    for file in triple_files(path):
        with open_table(file) as table:
            if table.columns is not None and CONTEXT_COLUMN not in table.columns:
                continue
            for where, rec in table.records():
                if CONTEXT_COLUMN not in rec:
                    continue
                text = clean_text(rec.get(CONTEXT_COLUMN), where, CONTEXT_COLUMN, required=False)
                if text is None:
                    continue
                fact = _fact(rec, _column_map(rec), where)
                out.setdefault(fact.fact_id, text)
    return out


# ------------------------------------------------------------------ the dataset
def load_coherency_facts(base) -> tuple[FactSet, FactSet]:
    """(test, known) facts for a `BaseConfig`: the source's facts, never split (no examples are
    needed), and the `--train-data` facts where given (else an empty set)."""
    from ..sources import load_facts
    from .mc_dataset import load_test_and_train

    with _quiet_context_column():
        if base.train_data:
            return load_test_and_train(base)
        test = load_facts(base.source, base.data, None)
    if base.relations:
        test = test.select(base.relations)
    return test, FactSet([], dict(test.relations), "")


def labels_overlap(subject: str, obj: str) -> bool:
    """The authors' "easy example" test (`paulyoussef/coherency` main_autoregressive.py lines 99 and
    113): the labels are equal or one contains the other, case-sensitive and unstripped, as their
    code compares them."""
    return subject == obj or subject in obj or obj in subject


def build_items(
    test: FactSet,
    known: FactSet,
    relations: Iterable[str],
    contexts: dict[str, str] | None = None,
    drop_overlapping_labels: bool = False,
) -> tuple[dict[str, list[CoherencyItem]], dict[str, int]]:
    """Items per relation (module docstring) and {relation: items skipped} by the authors' filter
    (`drop_overlapping_labels`: subject and object labels that contain one another, `labels_overlap`;
    tested on the subject's first test fact, the one the item starts from)."""
    contexts = contexts or {}
    by_rel = test.by_relation()
    items: dict[str, list[CoherencyItem]] = {}
    skipped: dict[str, int] = {}
    for rel in relations:
        facts = by_rel.get(rel, [])
        tables = relation_tables(list(facts) + [f for f in known if f.relation == rel], rel)
        skey = _key_resolver([f for f in list(facts) + list(known) if f.relation == rel], "subject")
        okey = _key_resolver([f for f in list(facts) + list(known) if f.relation == rel], "object")
        first: dict[str, Fact] = {}
        for f in facts:
            first.setdefault(skey(f), f)
        keys = list(first)
        if drop_overlapping_labels:
            kept = [k for k in keys if not labels_overlap(first[k].subject, first[k].object)]
            if len(kept) < len(keys):
                skipped[rel] = len(keys) - len(kept)
            keys = kept
        out = []
        for k in keys:
            f = first[k]
            gold_keys = [okey(f)] + sorted(tables.objects_of[k] - {okey(f)})
            out.append(
                CoherencyItem(
                    relation=rel,
                    subject=f.subject,
                    gold=f.object,
                    gold_objects=tuple((g, tables.objects[g]) for g in gold_keys),
                    subject_entity=k,
                    subject_id=f.subject_id,
                    object_id=f.object_id,
                    context=contexts.get(f.fact_id),
                )
            )
        if out:
            items[rel] = out
    return items, skipped


def prepare_coherency(base, templates_path: str | Path | None = None, drop_overlapping_labels: bool = False) -> Prepared:
    """Load templates and facts and build the coherency items (module docstring).

    Relations of the facts without usable templates are skipped and listed in `dropped`; a run
    with no relation left raises ConfigError."""
    path = Path(templates_path) if templates_path else default_templates_path()
    templates, no_template = load_coherency_templates(path)
    test, known = load_coherency_facts(base)
    contexts = read_fact_contexts(base.data) if base.source == "triples" and base.data else {}
    dropped: dict[str, str] = {}
    usable = []
    for rel in test.relations:
        if rel in templates:
            usable.append(rel)
        else:
            dropped[rel] = no_template.get(rel) or f"{rel}: no coherency templates in {path}"
    items, skipped = build_items(test, known, usable, contexts, drop_overlapping_labels)
    for rel in usable:
        if rel not in items:
            dropped[rel] = f"{rel}: no items" + (
                " left after dropping overlapping subject/object labels" if skipped.get(rel) else ""
            )
    if not items:
        raise ConfigError(
            f"no relation of {test.source or base.source} can be probed for coherency ("
            + ("; ".join(dropped.values()) or "no facts")
            + ")"
        )
    tables = {rel: relation_tables(list(test) + list(known), rel) for rel in items}
    info = {
        "coherency_templates_file": str(path),
        "coherency_templates": {
            rel: {"template_obj": templates[rel].template_obj, "template_sub": templates[rel].template_sub} for rel in items
        },
        "object_candidates": {rel: len(t.objects) for rel, t in tables.items()},
        "subject_candidates": {rel: len(t.subjects) for rel, t in tables.items()},
        "skipped_overlapping_labels": skipped,
    }
    facts = {"test": test, "train": known}
    return Prepared(kind="coherency", items=items, facts=facts, dropped=dropped, info=info, cap_draw=CAP_DRAW)
