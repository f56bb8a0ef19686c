"""Factual coherency (youssef2024, Algorithm 1): does the model get back where it started?

For each item (a relation and a subject, `factprobe.datasets.coherency`) two rounds of two steps each.
Every step is typed querying (Kassner et al. 2021; youssef2024 section 3.2): the model ranks a
fixed set of candidate entities and predicts the top one.

- Round 1 starts from the subject S. Step 1: `template_obj` with [X] = S ranks the relation's
  object-side candidates -> O'. Step 2: `template_sub` with [Y] = O' ranks the subject-side
  candidates -> S'. Coherent when S' partially matches S.
- Round 2 starts from the item's gold object O. Step 1: `template_sub` with [Y] = O ranks the
  subject-side candidates -> S'. Step 2: `template_obj` with [X] = S' ranks the object-side
  candidates -> O'. Coherent when O' partially matches O.

Which answers are excluded (section 2: "we exclude all correct entities except the ground truth
subject S in the second inference step"; Algorithm 1; the authors' `main_autoregressive.py`):
only in the SECOND step of each round, for every relation whatever its cardinality.
- Round 1, step 2 asks "[Y]=O' ... [X]?": every subject that is correct for the PREDICTED object O'
  (a fact (s, R, O') in any loaded file, test or training, matched by entity id) is removed from
  the candidates, except the gold subject S.
- Round 2, step 2 asks "[X]=S' ... [Y]?": every object that is correct for the PREDICTED subject S'
  is removed, except the gold object O.
An entity is removed by id; a candidate label stays while any entity carrying it is not removed.
The first step of a round excludes nothing (the paper excludes nothing there), so in round 1
any of an N-M subject's gold objects can be predicted and counts as correct.

Scoring (`--candidate-score`). The default `sum` is the paper's "most probable entity" (section
3.2: typed querying chooses "the most probable entity"): a candidate's score is the exact summed
log-prob of its continuation from the shared-prefix scorer (`Scorer.score_choices`, one
`ChoiceRequest` per query with every candidate as an option: the query text runs once and the
candidates are packed). The query text is the template up to the predicted slot (the other slot
filled; the whitespace before the slot moves into the continuation, as the harness does). Where
the predicted slot is not at the end of the template, the continuation is the candidate PLUS the
rest of the filled template, so candidates are ranked by the probability of the whole filled
sentence (the text before the slot is common to all of them). A template that starts with the
predicted slot has an empty context: the scorer's stand-in BOS (else EOS) token (docs/probes.md). `mean` divides that sum by
the candidate's scored tokens. Ties go to the first candidate in label order. Candidates are
every distinct label of the relation's entities (test + training facts), sorted;
`--max-candidates` caps them at a seeded sample per relation and side, plus the entity the query
must be able to return, and only when asked.

`authors` reproduces what `paulyoussef/coherency` (commit d0acafe) actually computes
(`factprobe.probes.coherency_authors`, where the steps of their code are listed line by line); it is not
the default because it is not the paper's "most probable entity": a candidate's later tokens are scored
after the model's own greedy tokens, not after the candidate's earlier tokens.

Correctness and coherency are reported separately (appendix A): `first_correct` is the first
step's prediction against the gold (round 1: any correct object of the pair; round 2: the
subject), `coherent` is the second prediction against the round's starting entity, NOT
conditioned on `first_correct` (section 2: "regardless of its correctness"). Matching is the
paper's partial match (`factprobe.metrics.coherency.partial_match`; newutils.py lines 419-427).
`--authors-filters` adds the two filters of the authors' code that the paper does not describe,
and `--candidate-score authors` turns them on: a fact whose subject and object labels are equal
or contain one another (case-sensitive, as main_autoregressive.py lines 99 and 113) is dropped
before the items are built, and a second prediction equal to the first (stripped, lower-cased)
is incoherent (lines 165 and 170).

An evidence paragraph (`item.context`, from a triples file's `context` column) is prepended to
every query of the item (section 3.4).

Over 500 lines: one probe, Algorithm 1's two rounds; the authors'-code mode is already in coherency_authors, and ruff
format's one-argument-per-line calls take it past 500.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..config import ConfigBase, option
from ..datasets.coherency import CoherencyItem, RelationTables, prepared_tables
from ..datasets.prepared import Prepared
from ..errors import ConfigError
from ..framework.base import Probe, Session
from ..framework.config import RunConfig
from ..framework.registry import register
from ..framework.reporting import Headline, MapVerdict, ReportPart, ReportRun, model_label, top_level_metrics
from ..seeding import stable_rng
from .coherency_authors import authors_candidate_scores

CANDIDATE_SCORES = ("sum", "mean", "authors")
SUBJECT_SLOT, OBJECT_SLOT = "[X]", "[Y]"


@dataclass
class CoherencyConfig(ConfigBase):
    """Coherency's own fields."""

    coherency_templates: str | None = option(
        None, "templates file (default: coherency/relations_autoregressive.jsonl under the data root)"
    )
    max_candidates: int | None = option(
        None,
        "cap every query's candidates: a fixed seeded sample of this many of the relation's entities per side, "
        "plus the entity the query must be able to return (default: all candidates, as the paper)",
    )
    candidate_score: str = option(
        "sum",
        "rank candidates by their summed log-prob (the entity's probability, the paper's 'most probable "
        "entity'), their per-token mean log-prob, or as the authors' code does (authors: each candidate token "
        "scored after the model's greedy continuation, averaged per token, candidate without its leading "
        "space; turns --authors-filters on)",
        choices=CANDIDATE_SCORES,
    )
    authors_filters: bool = option(
        False,
        "apply the two filters of the authors' code that the paper does not describe: skip facts whose "
        "subject and object labels contain one another, and count a second prediction equal to the first "
        "as incoherent (always on with --candidate-score authors)",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.candidate_score == "authors":
            self.authors_filters = True  # the authors' scoring comes with the authors' filters
        self.check(
            self.max_candidates is None or self.max_candidates >= 2,
            "max_candidates",
            self.max_candidates,
            "must be at least 2 (or empty for all candidates)",
        )
        if self.coherency_templates is not None:
            self.coherency_templates = str(self.coherency_templates).strip() or None


# ------------------------------------------------------------------ query text
def split_template(template: str, target: str, value: str) -> tuple[str, str, str]:
    """(context, whitespace, rest) of `template` around the `target` slot, the other slot = `value`.

    The context is the text before the slot without its trailing whitespace; that whitespace
    starts every continuation; `rest` is the filled text after the slot (trailing whitespace
    dropped). Continuation of candidate c: `whitespace + c + rest`."""
    given = SUBJECT_SLOT if target == OBJECT_SLOT else OBJECT_SLOT
    before, after = template.split(target, 1)
    before, after = before.replace(given, value), after.replace(given, value)
    context = before.rstrip()
    return context, before[len(context) :], after.rstrip()


def authors_query(template: str, target: str, value: str, paragraph: str | None) -> str:
    """The authors' query text: the template with the given slot = `value` and the predicted slot
    removed, the space before it kept (main_autoregressive.py line 22); a paragraph goes first."""
    given = SUBJECT_SLOT if target == OBJECT_SLOT else OBJECT_SLOT
    query = template.replace(given, value).replace(target, "")
    return f"{paragraph.rstrip()} {query}" if paragraph else query


def build_query(
    template: str, target: str, value: str, candidates: Sequence[str], paragraph: str | None, empty_context: str
) -> tuple[str, list[str]]:
    """(context, continuations): the exact text scored for one query (see the module docstring)."""
    context, space, rest = split_template(template, target, value)
    if paragraph:
        if context:
            context = f"{paragraph.rstrip()} {context}"
        else:
            context, space = paragraph.rstrip(), " "
    elif not context:
        context = empty_context
    return context, [f"{space}{c}{rest}" for c in candidates]


# ------------------------------------------------------------------ per-relation state
def _label_order(label: str) -> tuple[str, str]:
    return label.casefold(), label


@dataclass
class _Side:
    """Candidate entities of one side (objects or subjects) of a relation, grouped by label."""

    label_of: dict[str, str]  # entity key -> label
    keys_of: dict[str, set[str]] = field(default_factory=dict)  # label -> entity keys
    pool: list[str] = field(default_factory=list)  # candidate labels (sorted; a sample with --max-candidates)

    @classmethod
    def build(cls, label_of: dict[str, str], cap: int | None, seed_parts: tuple) -> _Side:
        keys_of: dict[str, set[str]] = {}
        for key, label in label_of.items():
            keys_of.setdefault(label, set()).add(key)
        labels = sorted(keys_of, key=_label_order)
        if cap is not None and len(labels) > cap:
            keep = set(stable_rng(*seed_parts).sample(range(len(labels)), cap))
            labels = [lab for i, lab in enumerate(labels) if i in keep]
        return cls(label_of, keys_of, labels)

    def candidates(self, excluded_keys: set[str], required: Sequence[str] = ()) -> tuple[list[str], list[str]]:
        """(candidate labels, labels removed): a label is removed when every entity with it is excluded;
        `required` labels are always offered."""
        removed = [lab for lab in self.pool if self.keys_of[lab] <= excluded_keys]
        gone = set(removed)
        keep = [lab for lab in self.pool if lab not in gone]
        extra = [lab for lab in dict.fromkeys(required) if lab not in set(keep)]
        if extra:
            keep = sorted(keep + extra, key=_label_order)
        return keep, removed


@dataclass
class _RelationState:
    relation: str
    template_obj: str
    template_sub: str
    cardinality: str
    tables: RelationTables
    objects: _Side
    subjects: _Side


# ------------------------------------------------------------------ the probe
@dataclass
class _Step:
    """One query: what was asked, which candidates, and (after scoring) the outcome."""

    context: str
    candidates: list[str]
    continuations: list[str]
    gold_labels: list[str]
    removed: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)

    def prediction(self) -> int:
        best = 0
        for i, s in enumerate(self.scores):
            if s > self.scores[best]:
                best = i
        return best

    def summary(self, prefix: str) -> dict[str, Any]:
        i = self.prediction()
        gold_scores = [self.scores[j] for j, c in enumerate(self.candidates) if c in set(self.gold_labels)]
        gold = max(gold_scores) if gold_scores else None
        return {
            f"{prefix}_prediction": self.candidates[i],
            f"{prefix}_score": float(self.scores[i]),
            f"{prefix}_gold_score": None if gold is None else float(gold),
            f"{prefix}_gold_rank": None if gold is None else 1 + sum(1 for s in self.scores if s > gold),
            f"{prefix}_candidates": len(self.candidates),
        }


class Coherency(Probe):
    name = "coherency"
    description = (
        "factual coherency (youssef2024): predict the object, then the subject back from it with the "
        "inverse template, and the other way round; typed querying over the relation's entities"
    )
    config_class = CoherencyConfig
    dataset = "coherency"
    model_kinds = ("causal",)
    batch_size = 4  # items (2 rows each); each item is 4 queries over hundreds of candidates
    headline_metric = Headline("coherency", "coherency")
    headline_keys = ("coherency", "coherency_round1", "coherency_round2", "correct_round1", "correct_round2")
    #: the knowledge map: a fact is known when both rounds are right at the first step and coherent
    map_verdict = MapVerdict(("first_correct", "coherent"), "all")
    metric_columns = ("key", "fact_id", "relation", "cardinality", "round", "first_correct", "coherent")
    per_fact_columns = (
        "key",
        "fact_id",
        "relation",
        "cardinality",
        "subject",
        "gold",
        "round",
        "first_prediction",
        "second_prediction",
        "first_correct",
        "coherent",
    )
    #: the coherency table's numbers (overall, per relation, per cardinality)
    TABLE_KEYS = ("coherency", "coherency_round1", "coherency_round2", "correct_round1", "correct_round2", "n_items")

    # ---- reporting
    def run_figures(self, metrics, model: str):
        """Coherency of both rounds per relation and per cardinality (`coherency`)."""
        if not (any(k.startswith("coherency_round") for k in metrics) and metrics.get("per_relation")):
            return {}
        from ..report.plots import coherency_bars

        label = model_label(model)
        return {"coherency": coherency_bars({label: dict(metrics)}, title=f"{self.name} per relation and cardinality ({label})")}

    def report(self, runs: Sequence[ReportRun], everything: Sequence[ReportRun]) -> ReportPart:
        """Per-relation / per-cardinality bars across models (`figures/coherency.png`), the `coherency`
        table (per model: overall, per relation, per cardinality) and every top-level number."""
        from ..report.plots import coherency_bars

        part = ReportPart(metrics=top_level_metrics(runs))
        coh = {r.label: r.metrics for r in runs if "coherency_round1" in r.metrics and "per_relation" in r.metrics}
        if coh:
            part.figures["coherency per relation and cardinality"] = ("coherency", coherency_bars(coh))
        rows = []
        for r in runs:
            model, m = r.label, r.metrics
            if "coherency_round1" not in m or "per_relation" not in m:
                continue
            rows.append({"model": model, "group": "overall", "key": "*", **{k: m.get(k) for k in self.TABLE_KEYS}})
            for group, table in (("relation", m.get("per_relation") or {}), ("cardinality", m.get("per_cardinality") or {})):
                for key, entry in table.items():
                    if group == "cardinality" and not entry.get("n_items"):
                        continue
                    rows.append({"model": model, "group": group, "key": key, **{k: entry.get(k) for k in self.TABLE_KEYS}})
        if rows:
            part.tables["coherency"] = rows
        return part

    def prepare(self, cfg: RunConfig) -> Prepared:
        from ..datasets.coherency import prepare_coherency

        return prepare_coherency(cfg.base, cfg.params.coherency_templates, drop_overlapping_labels=cfg.params.authors_filters)

    def validate(self, cfg: RunConfig, prepared: Prepared) -> None:
        if prepared.kind != "coherency":
            raise ConfigError(f"probe coherency needs a coherency dataset, got a {prepared.kind!r} one")
        templates = prepared.info.get("coherency_templates", {})
        missing = [rel for rel in prepared.items if rel not in templates]
        if missing:
            raise ConfigError(f"coherency dataset has no templates for {', '.join(missing)}")
        if cfg.params.candidate_score == "authors":
            for rel in prepared.items:
                for name, slot in (("template_obj", OBJECT_SLOT), ("template_sub", SUBJECT_SLOT)):
                    t = templates[rel][name]
                    if not t.rstrip().endswith(slot):
                        raise ConfigError(
                            f"--candidate-score authors: {name} {t!r} of {rel} does not end with {slot}; "
                            "the authors' scoring continues the query with the candidate, so the "
                            "predicted slot must come last (use --candidate-score sum or mean)"
                        )

    def item_keys(self, cfg: RunConfig, prepared: Prepared, item: CoherencyItem) -> list[str]:
        return [f"{item.fact_id}#r1", f"{item.fact_id}#r2"]

    def open_relation(self, session: Session, relation: str) -> _RelationState:
        p, seed = session.cfg.params, session.cfg.base.seed
        prepared = session.prepared
        t = prepared.info["coherency_templates"][relation]
        tables = prepared_tables(prepared, relation)
        rel = prepared.test.relations.get(relation)
        return _RelationState(
            relation=relation,
            template_obj=t["template_obj"],
            template_sub=t["template_sub"],
            cardinality=rel.cardinality if rel else "unknown",
            tables=tables,
            objects=_Side.build(tables.objects, p.max_candidates, (seed, "coherency_candidates", relation, "object")),
            subjects=_Side.build(tables.subjects, p.max_candidates, (seed, "coherency_candidates", relation, "subject")),
        )

    # ---- the two steps
    def _step(
        self,
        session: Session,
        template: str,
        target: str,
        value: str,
        side: _Side,
        excluded: set[str],
        gold_labels: list[str],
        required: list[str],
        paragraph: str | None,
    ) -> _Step:
        cands, removed = side.candidates(excluded, required)
        if session.cfg.params.candidate_score == "authors":
            return _Step(authors_query(template, target, value, paragraph), cands, list(cands), gold_labels, removed)
        ctx, conts = build_query(template, target, value, cands, paragraph, "")  # empty: the scorer's stand-in token
        return _Step(ctx, cands, conts, gold_labels, removed)

    def _score(self, session: Session, steps: list[_Step]) -> None:
        from ..lm.scorer import ChoiceRequest

        scorer = session.scorer
        if session.cfg.params.candidate_score == "authors":
            banned = session.generator.eos_token_ids  # what model.generate's min_new_tokens bans
            for s in steps:
                s.scores = authors_candidate_scores(scorer, s.context, s.candidates, banned)
            return
        results = scorer.score_choices([ChoiceRequest(s.context, s.continuations) for s in steps])
        for s, lp in zip(steps, results):
            scores = [float(x) for x in lp]
            if session.cfg.params.candidate_score == "mean":
                counts = continuation_token_counts(scorer, s.context, s.continuations)
                scores = [x / n for x, n in zip(scores, counts)]
            s.scores = scores

    def score_batch(self, session: Session, state: _RelationState, batch: Sequence[CoherencyItem]) -> list[dict]:
        t = state.tables
        first: list[tuple[_Step, _Step]] = []
        for it in batch:
            subject_label = t.subjects[it.subject_entity]
            object_label = t.objects[it.object_entity]
            gold_objects = [t.objects[k] for k, _ in it.gold_objects if k in t.objects]
            r1 = self._step(
                session,
                state.template_obj,
                OBJECT_SLOT,
                it.subject,
                state.objects,
                set(),
                gold_objects,
                [object_label],
                it.context,
            )
            r2 = self._step(
                session,
                state.template_sub,
                SUBJECT_SLOT,
                it.gold,
                state.subjects,
                set(),
                [subject_label],
                [subject_label],
                it.context,
            )
            first.append((r1, r2))
        self._score(session, [s for pair in first for s in pair])

        second: list[tuple[_Step, _Step]] = []
        for it, (r1, r2) in zip(batch, first):
            subject_label = t.subjects[it.subject_entity]
            object_label = t.objects[it.object_entity]
            o_pred = r1.candidates[r1.prediction()]
            # round 1: subjects correct for the predicted object, except the gold subject
            excl_s = set().union(*(t.subjects_of.get(k, set()) for k in state.objects.keys_of[o_pred])) - {it.subject_entity}
            s2 = self._step(
                session,
                state.template_sub,
                SUBJECT_SLOT,
                o_pred,
                state.subjects,
                excl_s,
                [subject_label],
                [subject_label],
                it.context,
            )
            s_pred = r2.candidates[r2.prediction()]
            # round 2: objects correct for the predicted subject, except the gold object
            excl_o = set().union(*(t.objects_of.get(k, set()) for k in state.subjects.keys_of[s_pred])) - {it.object_entity}
            o2 = self._step(
                session,
                state.template_obj,
                OBJECT_SLOT,
                s_pred,
                state.objects,
                excl_o,
                [object_label],
                [object_label],
                it.context,
            )
            second.append((s2, o2))
        self._score(session, [s for pair in second for s in pair])

        rows = []
        for it, (r1, r2), (s2, o2) in zip(batch, first, second):
            rows.append(self._row(session, state, it, 1, r1, s2))
            rows.append(self._row(session, state, it, 2, r2, o2))
        return rows

    def _row(
        self, session: Session, state: _RelationState, it: CoherencyItem, rnd: int, step1: _Step, step2: _Step
    ) -> dict[str, Any]:
        from ..metrics.coherency import partial_match

        first, second = step1.candidates[step1.prediction()], step2.candidates[step2.prediction()]
        start = it.subject if rnd == 1 else it.gold
        gold_first = [g for _, g in it.gold_objects] if rnd == 1 else [it.subject]
        coherent = partial_match(second, start)
        if session.cfg.params.authors_filters and second.strip().casefold() == first.strip().casefold():
            coherent = False
        return {
            "key": f"{it.fact_id}#r{rnd}",
            "fact_id": it.fact_id,
            "probe": self.name,
            "relation": it.relation,
            "cardinality": state.cardinality,
            "subject": it.subject,
            "subject_id": it.subject_id,
            "gold": it.gold,
            "object_id": it.object_id,
            "gold_objects": [g for _, g in it.gold_objects],
            "round": rnd,
            "start": start,
            "first_prediction": first,
            "second_prediction": second,
            "first_correct": any(partial_match(first, g) for g in gold_first),
            "coherent": coherent,
            "context": step1.context,
            "second_context": step2.context,
            "excluded": step2.removed,
            "evidence": bool(it.context),
            **{k: v for k, v in step1.summary("first").items() if k != "first_prediction"},
            **{k: v for k, v in step2.summary("second").items() if k != "second_prediction"},
        }

    def metrics(self, rows: Sequence[dict], prepared: Prepared, cfg: RunConfig) -> dict:
        from ..metrics.coherency import summarize

        cards = {rel: r.cardinality for rel, r in prepared.test.relations.items()}
        m = summarize(rows, cards)
        m["dropped_relations"] = dict(prepared.dropped)
        m["candidate_score"] = cfg.params.candidate_score
        m["max_candidates"] = cfg.params.max_candidates
        for k in (
            "coherency_templates_file",
            "object_candidates",
            "subject_candidates",
            "skipped_overlapping_labels",
        ):
            if k in prepared.info:
                m[k] = prepared.info[k]
        m["items_with_context"] = sum(1 for its in prepared.items.values() for it in its if it.context)  # the capped items
        return m


def continuation_token_counts(scorer, context: str, continuations: Sequence[str]) -> list[int]:
    """Tokens the scorer scores for each continuation (for per-token means): the joint encoding
    split where the scorer splits it (`split_point`)."""
    from ..lm.scorer import encode_choices

    _, wholes, starts = encode_choices(scorer.tokenizer, context, continuations)
    return [max(1, len(w) - s) for w, s in zip(wholes, starts)]


register(Coherency())
