"""The closed-book QA dataset of FACT-Bench (Yuan et al. 2024, `papers/yuan2024-*`, sections 2-3):
facts -> one question per (relation, subject), with every accepted answer.

Questions (`factprobe.datasets.qa_questions`) come from hand-written templates, one line per relation,
and never contain a correct answer (`make_question`, `gives_away`).
`build_qa` tries the relation's templates in turn, starting at one chosen per fact from
(seed, fact id); when every template gives a correct answer away the subject is skipped and
counted per relation and reason (`SKIP_OBJECT_IN_QUESTION`, `SKIP_GOLD_IN_QUESTION`).

Items (`QAItem`): one per (relation, subject). N-M relations have several facts per subject;
they collapse into one item whose `gold` holds the labels of *every* correct object of the pair
over all loaded facts (test and training): subjects match by id (by case-insensitive label where
a side lacks an id, as `trex_mc._CorrectObjects`), and every label any file gives a correct
object is kept (an object id written two ways gives two golds); the item's own object first. The item keeps the first fact of the subject (file order) as its
`object`/`object_id`, so `QAItem.fact_id` equals that fact's `Fact.fact_id`.

Splits, per relation: eval items come from the test facts, train items (the exemplar pool for
in-context learning and fine-tuning) from the training facts. A training fact whose subject is a
subject of any of the relation's test facts (by key, or by case-insensitive label) is left out,
so no eval question is ever an exemplar. `max_facts_per_relation` draws the test facts with the
framework's cap (`cap.sample_facts_per_relation`) before the items are built: the same facts the
multiple-choice probes draw for the same seed, so results join by fact id; their subjects' items are
kept, and when duplicates (N-M) and give-aways leave fewer than the maximum, other items of the
relation, drawn from (seed, relation), fill it up (so the framework's cap, applied after `prepare`,
finds nothing to remove). `max_train_per_relation` samples the train items (after the exclusion).
Every draw is seeded from (seed, relation): one
relation's items never depend on another relation or its limit.

Popularity (the paper's top-25% / bottom-25% buckets): LAMA has none. A triples file may hold a
numeric `popularity` column (e.g. page views of the subject); `read_triples_popularity` reads it
as {fact_id: value} and `build_qa(popularity=...)` puts it on the items (`QAItem.popularity`,
None where unknown); `popularity_bucket` (from `metrics.qa`) turns values into buckets. Facts
and `Fact.to_dict()` are unchanged. A FactSet that carries a `popularity` attribute
({fact_id: value}) is used too.

`prepare_qa(base)` builds the `Prepared` dataset of a run (see its docstring); `qa_train_items`
reads the exemplar pool back from it.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, DataError
from ..facts import Fact, FactSet
from ..io import open_table
from ..metrics.qa import ANSWER_TYPES, popularity_bucket
from ..seeding import stable_rng, stable_seed
from .cap import sample_facts_per_relation
from .prepared import Prepared
from .qa_questions import (
    DEFAULT_TEMPLATES,
    SUBJECT_SLOT,
    QuestionTemplate,
    QuestionTemplates,
    gives_away,
    load_question_templates,
    make_question,
)

log = logging.getLogger(__name__)

__all__ = [
    "ANSWER_TYPES",
    "DEFAULT_TEMPLATES",
    "SKIP_EVAL_SUBJECT",
    "SKIP_GOLD_IN_QUESTION",
    "SKIP_OBJECT_IN_QUESTION",
    "SKIP_SAME_SUBJECT",
    "QABuild",
    "QAItem",
    "QuestionTemplate",
    "QuestionTemplates",
    "build_qa",
    "gives_away",
    "load_question_templates",
    "make_question",
    "popularity_bucket",
    "prepare_qa",
    "qa_info_summary",
    "qa_train_items",
    "read_triples_popularity",
]


SKIP_OBJECT_IN_QUESTION = "every template's question contains the object"
SKIP_GOLD_IN_QUESTION = "every template's question contains another correct answer of the subject"
SKIP_SAME_SUBJECT = "another fact of the same subject already gave the item (its object is a gold)"
SKIP_EVAL_SUBJECT = "the subject is a test subject of the relation (kept out of the exemplar pool)"
SPLITS = ("eval", "train")


def _template_order(templates: tuple[str, ...], seed: int, fact_id: str) -> list[str]:
    start = stable_seed(seed, "qa_template", fact_id) % len(templates)
    return list(templates[start:] + templates[:start])


# ------------------------------------------------------------------ items
@dataclass(frozen=True)
class QAItem:
    """One closed-book question about (relation, subject).

    `object`/`object_id` are those of the fact the item was made from; `gold` lists every
    accepted answer (the labels of all correct objects of the pair over test and training facts,
    by id; `object` first; no repeats). `split` is "eval" (from test facts) or "train" (exemplar
    pool). `popularity` is the fact's numeric popularity where the data has one, else None.
    `template` is the template the question was made from. `fact_id` equals the source fact's
    `Fact.fact_id`.
    """

    relation: str
    subject: str
    object: str
    question: str
    answer_type: str
    gold: tuple[str, ...]
    subject_id: str | None = None
    object_id: str | None = None
    split: str = "eval"
    popularity: float | None = None
    template: str = ""

    def __post_init__(self) -> None:
        if self.answer_type not in ANSWER_TYPES:
            raise ValueError(
                f"item {self.relation}/{self.subject}: answer_type must be one of {ANSWER_TYPES}, got {self.answer_type!r}"
            )
        if self.split not in SPLITS:
            raise ValueError(f"item {self.relation}/{self.subject}: split must be one of {SPLITS}, got {self.split!r}")
        if not self.gold or self.gold[0] != self.object:
            raise ValueError(
                f"item {self.relation}/{self.subject}: gold {list(self.gold)!r} must start with the object {self.object!r}"
            )
        if not self.question.strip():
            raise ValueError(f"item {self.relation}/{self.subject}: empty question")

    @property
    def fact_id(self) -> str:
        """`relation|subject_key|object_key`, as `Fact.fact_id` of the source fact."""
        return f"{self.relation}|{self.subject_id or self.subject}|{self.object_id or self.object}"

    def to_fact(self) -> Fact:
        return Fact(self.relation, self.subject, self.object, self.subject_id, self.object_id)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["gold"] = list(self.gold)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> QAItem:
        pop = d.get("popularity")
        return cls(
            relation=d["relation"],
            subject=d["subject"],
            object=d["object"],
            question=d["question"],
            answer_type=d["answer_type"],
            gold=tuple(d["gold"]),
            subject_id=d.get("subject_id"),
            object_id=d.get("object_id"),
            split=d.get("split", "eval"),
            popularity=None if pop is None else float(pop),
            template=d.get("template", ""),
        )


@dataclass
class QABuild:
    """Result of `build_qa`: eval and train items per relation (relations in test-file order),
    relations dropped entirely {relation: reason}, and facts skipped inside kept relations
    {relation: {reason: count}} for eval (`skipped`) and train (`train_skipped`). Skip counts
    cover all of a relation's facts, before any sampling."""

    eval: dict[str, list[QAItem]] = field(default_factory=dict)
    train: dict[str, list[QAItem]] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, dict[str, int]] = field(default_factory=dict)
    train_skipped: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def n_eval(self) -> int:
        return sum(map(len, self.eval.values()))

    @property
    def n_train(self) -> int:
        return sum(map(len, self.train.values()))


class _Golds:
    """Every accepted answer of a (relation, subject), over several fact lists.

    Subjects match by key (id, else label); a fact without a subject id also matches facts of
    the same relation whose subject label is equal up to case (as `trex_mc._CorrectObjects`).
    Unlike a map object id -> label, every distinct label of every correct object is kept, so
    an object written differently in the test and the training file ("NYC", "New York City",
    one id) gives both labels.
    """

    def __init__(self, facts: Iterable[Fact]) -> None:
        self.by_key: dict[tuple[str, str], dict[str, None]] = defaultdict(dict)
        self.by_label: dict[tuple[str, str], dict[str, None]] = defaultdict(dict)
        self.by_label_without_id: dict[tuple[str, str], dict[str, None]] = defaultdict(dict)
        for f in facts:
            label_key = (f.relation, f.subject.casefold())
            self.by_key[(f.relation, f.subject_key)][f.object] = None
            self.by_label[label_key][f.object] = None
            if f.subject_id is None:
                self.by_label_without_id[label_key][f.object] = None

    def of(self, fact: Fact) -> tuple[str, ...]:
        """The labels of every correct object of `fact`'s subject: the fact's object first, then
        the others in first-seen order, without repeats."""
        label_key = (fact.relation, fact.subject.casefold())
        out = {fact.object: None}
        out.update(self.by_key.get((fact.relation, fact.subject_key), {}))
        out.update(self.by_label.get(label_key, {}) if fact.subject_id is None else self.by_label_without_id.get(label_key, {}))
        return tuple(out)


def _popularity_of(sets: Iterable[FactSet], given: Mapping[str, float] | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for fs in sets:
        out.update(getattr(fs, "popularity", None) or {})
    out.update(given or {})
    return out


def _items(
    facts: list[Fact], qt: QuestionTemplate, correct: _Golds, seed: int, split: str, popularity: Mapping[str, float]
) -> tuple[list[QAItem], dict[str, int]]:
    """One item per subject of `facts` (first fact of each subject), and skip counts by reason."""
    items: list[QAItem] = []
    reasons: dict[str, int] = defaultdict(int)
    seen: set[str] = set()
    pop_of_subject: dict[str, float] = {}
    for f in facts:
        if f.fact_id in popularity and f.subject_key not in pop_of_subject:
            pop_of_subject[f.subject_key] = popularity[f.fact_id]
    for f in facts:
        if f.subject_key in seen:
            reasons[SKIP_SAME_SUBJECT] += 1
            continue
        seen.add(f.subject_key)
        gold = correct.of(f)
        question = template = None
        object_hit = False
        for t in _template_order(qt.templates, seed, f.fact_id):
            q = t.replace(SUBJECT_SLOT, f.subject)
            hit = gives_away(q, gold)
            if hit is None:
                question, template = q, t
                break
            object_hit = object_hit or gives_away(q, [f.object]) is not None
        if question is None:
            reasons[SKIP_OBJECT_IN_QUESTION if object_hit else SKIP_GOLD_IN_QUESTION] += 1
            continue
        pop = popularity.get(f.fact_id, pop_of_subject.get(f.subject_key))
        items.append(
            QAItem(
                relation=f.relation,
                subject=f.subject,
                object=f.object,
                question=question,
                answer_type=qt.answer_type,
                gold=gold,
                subject_id=f.subject_id,
                object_id=f.object_id,
                split=split,
                popularity=pop,
                template=template,
            )
        )
    return items, dict(reasons)


def _sample(items: list[QAItem], limit: int | None, seed: int, tag: str, relation: str) -> list[QAItem]:
    """At most `limit` of `items`, drawn from (seed, tag, relation); kept items keep their order."""
    if limit is None or len(items) <= limit:
        return items
    keep = set(stable_rng(seed, tag, relation).sample(range(len(items)), limit))
    return [it for i, it in enumerate(items) if i in keep]


def _select_eval(items: list[QAItem], sampled: list[Fact], limit: int | None, seed: int, relation: str) -> list[QAItem]:
    """The eval items of a relation under `limit`: first those whose subject is among the
    `sampled` facts (the multiple-choice probes' sample), then, when skips left fewer than
    `limit`, others drawn from (seed, relation) until `limit` is reached; in file order."""
    if limit is None or len(items) <= limit:
        return items
    subjects = {f.subject_key for f in sampled}
    chosen = [i for i, it in enumerate(items) if (it.subject_id or it.subject) in subjects][:limit]
    taken = set(chosen)
    rest = [i for i in range(len(items)) if i not in taken]
    if len(chosen) < limit:
        chosen += stable_rng(seed, "qa_fill", relation).sample(rest, limit - len(chosen))
    keep = set(chosen)
    return [it for i, it in enumerate(items) if i in keep]


def build_qa(
    test: FactSet,
    train: FactSet,
    templates: Mapping[str, QuestionTemplate] | None = None,
    seed: int = 0,
    max_facts_per_relation: int | None = None,
    max_train_per_relation: int | None = None,
    *,
    popularity: Mapping[str, float] | None = None,
) -> QABuild:
    """Eval and train QA items for every relation of `test` (rules in the module docstring).

    `templates` defaults to `load_question_templates()`. A relation of `test` without a template,
    or whose every fact is skipped, is reported in `dropped` (never an error); training facts of
    relations without test facts are ignored. `popularity` ({fact_id: value}) adds to any
    `popularity` attribute of the fact sets. Raises ConfigError for a limit below 1.
    """
    if templates is None:
        templates = load_question_templates()
    for name, value in (("max_facts_per_relation", max_facts_per_relation), ("max_train_per_relation", max_train_per_relation)):
        if value is not None and value < 1:
            raise ConfigError(f"{name} must be >= 1, got {value}")
    pops = _popularity_of((test, train), popularity)
    correct = _Golds([*test, *train])
    test_by_rel = test.by_relation()
    sampled_by_rel = sample_facts_per_relation(test, max_facts_per_relation, seed).by_relation()
    train_by_rel = train.by_relation()
    where = next((qt.where.rsplit(":", 1)[0] for qt in templates.values() if qt.where), "the question templates")
    build = QABuild()
    for rel, rel_facts in test_by_rel.items():
        qt = templates.get(rel)
        if qt is None:
            build.dropped[rel] = f"{rel}: no question template for this relation in {where}"
            continue
        items, reasons = _items(rel_facts, qt, correct, seed, "eval", pops)
        if reasons:
            build.skipped[rel] = reasons
        if not items:
            n = len({f.subject_key for f in rel_facts})
            build.dropped[rel] = f"{rel}: none of its {n} subjects gives a question without its answer ({reasons})"
        else:
            build.eval[rel] = _select_eval(items, sampled_by_rel.get(rel, []), max_facts_per_relation, seed, rel)
        test_keys = {f.subject_key for f in rel_facts}
        test_labels = {f.subject.casefold() for f in rel_facts}
        pool = [
            f for f in train_by_rel.get(rel, []) if f.subject_key not in test_keys and f.subject.casefold() not in test_labels
        ]
        n_leak = len(train_by_rel.get(rel, [])) - len(pool)
        train_items, train_reasons = _items(pool, qt, correct, seed, "train", pops)
        if n_leak:
            train_reasons = {SKIP_EVAL_SUBJECT: n_leak, **train_reasons}
        if train_reasons:
            build.train_skipped[rel] = train_reasons
        build.train[rel] = _sample(train_items, max_train_per_relation, seed, "qa_train", rel)
    total = {rel: sum(r.get(k, 0) for k in (SKIP_OBJECT_IN_QUESTION, SKIP_GOLD_IN_QUESTION)) for rel, r in build.skipped.items()}
    if any(total.values()):
        log.info("QA: skipped subjects whose question gives the answer away: %s", {k: v for k, v in total.items() if v})
    return build


# ------------------------------------------------------------------ popularity of triples files
POPULARITY_COLUMN = "popularity"


def _popularity_value(value: Any, where: str) -> float | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "nan", "none", "null")):
        return None
    if isinstance(value, bool):
        raise DataError(f"{where}: popularity must be a number, got {value!r}")
    try:
        number = float(value.replace(",", "") if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise DataError(f"{where}: popularity must be a number, got {value!r}") from None
    if math.isnan(number):
        return None
    if math.isinf(number):
        raise DataError(f"{where}: popularity must be finite, got {value!r}")
    return number


def read_triples_popularity(path: str | Path) -> dict[str, float]:
    """{fact_id: popularity} from the optional numeric `popularity` column of a triples file or
    folder (the files `sources.triples.triple_files` names; same columns and aliases as the
    triples reader). Empty / NaN values are absent; a value that is not a finite number raises
    DataError naming `file:line` (`file: row N` for parquet). A repeated fact keeps its first
    value. Files without the column contribute nothing."""
    from ..sources.triples import _column_map, _fact, triple_files

    out: dict[str, float] = {}
    for file in triple_files(path):
        with open_table(file) as table:
            if table.columns is not None and POPULARITY_COLUMN not in table.columns:
                continue
            for where, rec in table.records():
                if POPULARITY_COLUMN not in rec:
                    continue
                value = _popularity_value(rec[POPULARITY_COLUMN], where)
                if value is None:
                    continue
                colmap = _column_map(rec)
                if any(c not in colmap for c in ("subject", "relation", "object")):
                    continue  # the triples reader reports the missing columns
                out.setdefault(_fact(rec, colmap, where).fact_id, value)
    return out


# ------------------------------------------------------------------ prepared dataset
def prepare_qa(base, max_train_per_relation: int | None = None, templates_path: str | None = None) -> Prepared:
    """Load facts (`mc_dataset.load_test_and_train(base)`) and build the QA dataset of a run.

    `base` is a `framework.config.BaseConfig` (source, data, train_data, relations,
    max_facts_per_relation, seed). Returns `Prepared(kind="qa")` with `items` {relation: eval
    QAItems}, `facts` {"test", "train"} (the loaded fact sets), `dropped` {relation: reason} and
    `info`: `qa_train_items` {relation: [QAItem.to_dict()]} (read it with `qa_train_items`),
    `qa_skipped` / `qa_train_skipped` {relation: {reason: count}}, `qa_templates` (the template
    file used), `answer_types` {relation: type} and `qa_popularity` (whether any item has a
    popularity). Popularity is read from the `popularity` column of `--data` for source
    `triples`. Raises ConfigError when no relation has an eval item, naming why.
    """
    from .mc_dataset import load_test_and_train

    path = Path(templates_path) if templates_path else DEFAULT_TEMPLATES
    templates = load_question_templates(path)
    test, train = load_test_and_train(base)
    popularity = read_triples_popularity(base.data) if base.source == "triples" and base.data else None
    build = build_qa(
        test,
        train,
        templates,
        seed=base.seed,
        max_facts_per_relation=base.max_facts_per_relation,
        max_train_per_relation=max_train_per_relation,
        popularity=popularity,
    )
    if not build.eval:
        why = "; ".join(build.dropped.values()) or "no facts"
        raise ConfigError(f"no relation of {test.source or base.source} can be asked as questions ({why})")
    info = {
        "qa_templates": str(path),
        "answer_types": {rel: templates[rel].answer_type for rel in build.eval},
        "qa_skipped": build.skipped,
        "qa_train_skipped": build.train_skipped,
        "qa_popularity": any(it.popularity is not None for its in build.eval.values() for it in its),
        "qa_train_items": {rel: [it.to_dict() for it in its] for rel, its in build.train.items()},
    }
    return Prepared(
        kind="qa", items=dict(build.eval), facts={"test": test, "train": train}, dropped=dict(build.dropped), info=info
    )


def qa_train_items(prepared: Prepared) -> dict[str, list[QAItem]]:
    """The train QA items (the exemplar pool) of a `prepare_qa` dataset, {relation: items};
    also after `Prepared.save`/`load`. Raises DataError for a dataset that is not a QA one."""
    pool = prepared.info.get("qa_train_items")
    if prepared.kind != "qa" or not isinstance(pool, dict):
        raise DataError(f"not a QA dataset (kind {prepared.kind!r}, no qa_train_items): use prepare_qa")
    try:
        return {rel: [QAItem.from_dict(d) for d in items] for rel, items in pool.items()}
    except (KeyError, TypeError, ValueError) as e:
        raise DataError(f"malformed QA train item in the prepared dataset ({e})") from None


def qa_info_summary(prepared: Prepared) -> dict:
    """`prepared.info` fit for metrics.json: everything but the (large) train item dicts, which
    are replaced by their counts `qa_train_n` {relation: n}."""
    info = {k: v for k, v in prepared.info.items() if k != "qa_train_items"}
    info["qa_train_n"] = {rel: len(v) for rel, v in prepared.info.get("qa_train_items", {}).items()}
    return info
