"""BELIEF-ICL (zhao2024 section 3, appendices D-E): multi-prompt fact probing of causal LMs by in-context learning.

Data: the multi-prompt set (`factprobe.datasets.multiprompt`, shared with `belief-mlm`): one item per
subject-relation pair with every correct object as gold, and the relation's templates
(`--template-sources`, `--max-templates`: a seeded sample per relation, the same one belief-mlm takes).
Templates come from the facts' data root or `--templates-root`, a missing asked source is an error,
metrics.json lists the sources used with their template counts, and `--draws` is bounded, all as
in belief-mlm (`factprobe.probes.belief_mlm`, `factprobe.datasets.multiprompt`).

Prompt (appendix E), one line per part::

    Predict the [MASK] in each sentence in one word.        <- instruction (--instruction mp)
    Q: [MASK] is the administrative center of Jiangsu.       <- demonstrations (none for zero-shot)
    A: Nanjing.
    ...
    Q: <the probed template, filled with the subject>
    A:

- `--instruction mp`: "Predict the [MASK] in each sentence in one word."; every template of the
  relation is a query, `[X]` filled with the subject and `[Y]` shown as `[MASK]` wherever it stands
  (`render_mlm(template, subject, "[MASK]")`), question templates included (appendix E.3 shows
  them with `[MASK]` after the question).
- `--instruction qa`: "Answer each question in one word." (appendix D); only the relation's
  question-style templates are queries (style "question": the hand-written `belief-qa` ones and any
  template whose text before `[Y]` ends in "?"), shown as the question without the answer slot
  (`render_causal`). A relation without a question template is left out (noted).
- A demonstration's answer is its object label followed by "." ("A: Nanjing.").

Contexts (`--setting`, section 3.1): `zero-shot` is the instruction alone; `4-random` shows 4
facts drawn from all relations of the run, each with a random template of its own relation;
`4-relation` 4 facts of the probed relation, each with a random template of the relation;
`4-template` 4 facts of the probed relation shown with the probed template itself. With `--instruction qa`
the random templates are question templates. Demonstration facts are the run's test facts (all
of them, not only the `--max-facts-per-relation` sample that is probed), one per subject-relation
pair (its first fact); the probed pair is never among its own demonstrations (any fact of the same
subject and relation is excluded). The draws are seeded per probed pair: the facts with
`stable_rng(seed, "belief-icl-demos", setting, fact_id)` (the same facts for MP and QA), their
templates with `stable_rng(seed, "belief-icl-demo-templates", setting, instruction, fact_id)`; so one
pair's prompts differ only in the probed template (4-template: also in the demonstrations'
template), and every model gets the same prompts. The demonstrations are drawn once per pair, not
per prompt: the paper does not say which, and this keeps the template the only thing that varies
between a pair's prompts (what consistency and fluctuation measure). When a relation has fewer than 5
pairs, its prompts have fewer demonstrations (noted).

Decoding: greedy (`Generator.greedy`), at most `--max-answer-tokens` tokens, stopping at a newline
or "Q:". Prompts that share their text up to the probed question (the pair's demonstration block)
share its KV cache. The answer is the generated text, stripped.

Confidence (section 3.2, 3)): `--samples` (default 100) multinomial samples of the same prompt
(temperature 1 over the whole vocabulary, no top-k/top-p), drawn together by `Generator.sample`
(ONE forward of the prompt; the samples decode from its shared KV cache), seeded with
`stable_seed(seed, "belief-icl-samples", fact_id, template_id)`. The confidence is the share of
samples that match the greedy answer (`consistency_match`, bidirectional); `--samples 0` skips
sampling (no confidence, no Overconf).

Matching (`factprobe.metrics.belief_match`, spaCy lookup lemmas, articles dropped): `correct` =
some gold label (every correct object of the pair) is contained in the answer (one-directional);
consistency compares two answers bidirectionally. An empty or whitespace-only answer is wrong,
agrees with nothing and is counted (`n_empty`, `empty_rate`).

Metrics (`factprobe.metrics.belief.summarize_belief`): `acc` (Acc@1, the mean over `--draws`
draws of one template per relation), `acc_range`, `acc_stdev`; `consist` (relations whose pairs
have a single template are listed in `consist_undefined` with the reason; `consist` is None with
`consist_reason` when no relation has two); `overconf` (10 equal-size confidence bins, in
`calibration.overconf`); `coverage_avg|max|oracle`; `per_relation`; `one_word_rate`. Table 4 of the
paper ("instruction following rates") reports two numbers per ICL setting, fact prediction (Acc@1)
and the one-word ratio; `instruction_following` holds exactly these two (`acc`, `one_word_rate`).
The one-word ratio is the share of prompts whose greedy answer is one word: one whitespace-separated
chunk holding a letter or digit (`belief_match.one_word`; "Paris." is one word, "New York" two).

Rows (`results.jsonl`): one per (pair, template), key `<fact_id>#<template_id>`, with `fact_id`,
`relation`, `subject`, `template_id`, `prompt` (exact text), `answer`, `correct`, `confidence`,
`n_samples`, and `gold`, `one_word`, `empty`, `finish_reason`, `n_samples_matching`,
`demonstrations` (fact id, relation and template id of each). Extra files:
`belief_templates.parquet` (per-template accuracy, one-word rate and confidence: which templates
help), `belief_relations.parquet`, `belief_calibration.parquet` (the bins of the calibration plot).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..config import ConfigBase, option
from ..datasets.multiprompt import MultiPromptItem, MultiPromptSet, render_causal, render_mlm, template_source_metrics
from ..datasets.prepared import Prepared
from ..errors import ConfigError
from ..facts import Fact
from ..framework.base import Probe, Session
from ..framework.config import RunConfig
from ..framework.registry import register
from ..framework.reporting import Headline, MapVerdict, ReportPart, ReportRun
from ..seeding import stable_rng, stable_seed
from .belief_config import (
    belief_qa_templates_field,
    check_shared_fields,
    draws_field,
    max_templates_field,
    template_sources_field,
    templates_root_field,
)

SETTINGS = ("zero-shot", "4-random", "4-relation", "4-template")
INSTRUCTIONS = {
    "mp": "Predict the [MASK] in each sentence in one word.",
    "qa": "Answer each question in one word.",
}
MASK = "[MASK]"
STOP = ("\n", "Q:")
QUESTION_STYLE = "question"
INFO_KEY = "belief_icl_templates"


@dataclass
class BeliefICLConfig(ConfigBase):
    """BELIEF-ICL fields (the data fields are shared with belief-mlm, so both probes use one dataset build)."""

    setting: str = option(
        "4-template",
        "ICL context: zero-shot (instruction only), 4-random (4 facts of any relation), "
        "4-relation (4 facts of the relation, random templates), 4-template (4 facts "
        "of the relation, the probed template)",
        choices=SETTINGS,
    )
    instruction: str = option(
        "mp",
        "task instruction: mp ('Predict the [MASK] in each sentence in one word.', every "
        "template) or qa ('Answer each question in one word.', question templates only)",
        choices=tuple(INSTRUCTIONS),
    )
    samples: int = option(
        100,
        "multinomial samples per prompt for the confidence (share matching the greedy answer); 0 skips sampling (no Overconf)",
    )
    max_answer_tokens: int = option(10, "most tokens generated per answer and per sample (it also stops at a newline or 'Q:')")
    draws: int = draws_field()
    template_sources: str = template_sources_field()
    max_templates: int | None = max_templates_field()
    belief_qa_templates: str | None = belief_qa_templates_field()
    templates_root: str | None = templates_root_field()

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check(self.samples >= 0, "samples", self.samples, "must be >= 0 (0: no confidence)")
        self.check(self.max_answer_tokens >= 1, "max_answer_tokens", self.max_answer_tokens, "must be >= 1")
        check_shared_fields(self)

    @property
    def shots(self) -> int:
        """Demonstrations per prompt: 0 for zero-shot, else the X of X-random/relation/template."""
        return 0 if self.setting == "zero-shot" else int(self.setting.split("-")[0])


# ------------------------------------------------------------------ prompt text
def render_query(template: str, subject: str, instruction: str) -> str:
    """The text after "Q: " for `template` filled with `subject`: MP shows `[Y]` as [MASK], QA the
    question without its answer slot."""
    if instruction == "qa":
        return render_causal(template, subject)
    return render_mlm(template, subject, MASK)


def answer_text(label: str) -> str:
    """A demonstration's answer line content: the label with a final period."""
    label = label.strip()
    return label if label.endswith(".") else label + "."


@dataclass(frozen=True)
class Demo:
    """One demonstration: a fact (its pair's first fact) shown with one template."""

    fact: Fact
    template_id: str
    template: str

    def to_dict(self) -> dict[str, str]:
        return {"fact_id": self.fact.fact_id, "relation": self.fact.relation, "template_id": self.template_id}


def demo_block(instruction: str, demos: Sequence[Demo]) -> str:
    """The instruction line and the demonstrations' `Q: ...\\nA: ...\\n` lines (ends in a newline)."""
    lines = [INSTRUCTIONS[instruction] + "\n"]
    for d in demos:
        lines.append(f"Q: {render_query(d.template, d.fact.subject, instruction)}\nA: {answer_text(d.fact.object)}\n")
    return "".join(lines)


def icl_prompt(block: str, query: str) -> str:
    """The exact prompt: the block, then `Q: <query>` and `A:` (the model continues after "A:")."""
    return f"{block}Q: {query}\nA:"


# ------------------------------------------------------------------ demonstration pool
@dataclass
class DemoPool:
    """Per relation, one fact per subject-relation pair (the pair's first test fact, file order), and
    per relation the templates usable for the instruction."""

    pairs: dict[str, list[Fact]]
    templates: dict[str, list[dict[str, Any]]]

    @classmethod
    def build(cls, prepared: Prepared, templates: dict[str, list[dict[str, Any]]]) -> DemoPool:
        seen: set[tuple[str, str]] = set()
        pairs: dict[str, list[Fact]] = {}
        for f in prepared.test:
            if f.relation not in templates or (f.relation, f.subject_key) in seen:
                continue
            seen.add((f.relation, f.subject_key))
            pairs.setdefault(f.relation, []).append(f)
        return cls(pairs, templates)

    def draw(self, item: MultiPromptItem, setting: str, instruction: str, seed: int) -> list[tuple[Fact, dict | None]]:
        """The pair's demonstration facts, each with its template (None = the probed template,
        4-template); never a fact of the probed pair itself (module docstring)."""
        if setting == "zero-shot":
            return []
        k = int(setting.split("-")[0])
        own_key = item.subject_id or item.subject
        if setting == "4-random":
            pool = [f for rel in self.pairs for f in self.pairs[rel]]
        else:
            pool = self.pairs.get(item.relation, [])
        fact_rng = stable_rng(seed, "belief-icl-demos", setting, item.fact_id)
        # k + 1 draws leave k after removing the probed pair, which appears at most once in the pool
        picked = [pool[i] for i in fact_rng.sample(range(len(pool)), min(k + 1, len(pool)))]
        facts = [f for f in picked if not (f.relation == item.relation and f.subject_key == own_key)][:k]
        if setting == "4-template":
            return [(f, None) for f in facts]
        tmpl_rng = stable_rng(seed, "belief-icl-demo-templates", setting, instruction, item.fact_id)
        return [(f, self.templates[f.relation][tmpl_rng.randrange(len(self.templates[f.relation]))]) for f in facts]


def choose_templates(
    prepared: Prepared, instruction: str, max_templates: int | None, seed: int
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, str]]:
    """({relation: template records} usable with the instruction, {relation: why it has none}).

    QA keeps the question-style templates; `max_templates` then keeps a seeded sample (the seed
    belief-mlm uses, so MP runs ask the same templates)."""
    mp = MultiPromptSet.from_prepared(prepared)
    chosen: dict[str, list[dict[str, Any]]] = {}
    missing: dict[str, str] = {}
    for rel in prepared.items:
        recs = mp.templates_of(rel).to_dict("records")
        if instruction == "qa":
            recs = [r for r in recs if r["style"] == QUESTION_STYLE and r["y_last"]]
        if max_templates is not None and len(recs) > max_templates:
            keep = set(stable_rng(seed, "belief-templates", rel).sample(range(len(recs)), max_templates))
            recs = [r for i, r in enumerate(recs) if i in keep]
        if recs:
            chosen[rel] = recs
        else:
            missing[rel] = f"{rel}: no question-style template for --instruction qa"
    return chosen, missing


# ------------------------------------------------------------------ the probe
@dataclass
class _PairPrompts:
    item: MultiPromptItem
    template: dict[str, Any]
    block: str
    prompt: str
    demos: list[Demo]


class BeliefICL(Probe):
    name = "belief-icl"
    description = (
        "BELIEF-ICL for causal LMs (zhao2024): every template of the relation after an instruction and 0 or 4 "
        "demonstrations; greedy answers matched with spaCy lemmas; Acc@1 with range/stdev over template "
        "draws, consistency, overconfidence from 100 shared-KV samples, coverage, one-word rate"
    )
    config_class = BeliefICLConfig
    dataset = "multiprompt"
    model_kinds = ("causal",)
    batch_size = 2  # pairs per batch (each asked with every template of its relation)
    headline_metric = Headline("acc", "belief_accuracy")
    headline_keys = ("acc", "acc_range", "acc_stdev", "consist", "overconf", "one_word_rate")
    #: the knowledge map: a fact is known when a majority of its templates' answers match the gold
    map_verdict = MapVerdict(("correct",), "majority")
    #: the predictions table of the metrics and the template table (`predictions`)
    metric_columns = ("fact_id", "relation", "template_id", "correct", "prediction", "confidence", "one_word", "empty")

    def report(self, runs: Sequence[ReportRun], everything: Sequence[ReportRun]) -> ReportPart:
        """Calibration plots, summary, per-relation, per-template and knowledge-sharing tables, and
        metrics per model, setting and instruction (`factprobe.probes.belief_reporting`)."""
        from .belief_reporting import belief_icl_report

        return belief_icl_report(runs)

    # ---- data
    def prepare(self, cfg: RunConfig) -> Prepared:
        from ..datasets.multiprompt import prepare_multiprompt

        return prepare_multiprompt(
            cfg.base, cfg.params.template_sources.split(","), cfg.params.belief_qa_templates, cfg.params.templates_root
        )

    def validate(self, cfg: RunConfig, prepared: Prepared) -> None:
        """Choose each relation's templates for the instruction (recorded in `prepared.info`)."""
        p = cfg.params
        chosen, missing = choose_templates(prepared, p.instruction, p.max_templates, cfg.base.seed)
        if not chosen:
            raise ConfigError(
                f"belief-icl --instruction {p.instruction}: no relation has a usable template "
                f"({'; '.join(missing.values()) or 'no relation'})"
            )
        prepared.info[INFO_KEY] = chosen
        prepared.info["belief_icl_missing"] = missing

    def groups(self, cfg: RunConfig, prepared: Prepared) -> dict[str, list[MultiPromptItem]]:
        chosen = prepared.info.get(INFO_KEY, {})
        return {rel: items for rel, items in prepared.items.items() if rel in chosen and items}

    def item_keys(self, cfg: RunConfig, prepared: Prepared, item: MultiPromptItem) -> list[str]:
        return [f"{item.fact_id}#{t['template_id']}" for t in prepared.info[INFO_KEY][item.relation]]

    # ---- scoring
    def _pool(self, session: Session) -> DemoPool:
        pool = session._engines.get("belief_icl_pool")
        if pool is None:
            pool = DemoPool.build(session.prepared, session.prepared.info[INFO_KEY])
            session._engines["belief_icl_pool"] = pool
            p = session.cfg.params
            if p.shots:
                for rel in self.groups(session.cfg, session.prepared):
                    have = (
                        len(pool.pairs.get(rel, [])) - 1
                        if p.setting != "4-random"
                        else sum(len(v) for v in pool.pairs.values()) - 1
                    )
                    if have < p.shots:
                        session.note(f"{rel}: only {max(have, 0)} other pair(s) to draw {p.shots} demonstrations from")
        return pool

    def prompts_for(self, session: Session, item: MultiPromptItem) -> list[_PairPrompts]:
        """The pair's prompts, one per template of its relation, in template order."""
        cfg = session.cfg
        p = cfg.params
        drawn = self._pool(session).draw(item, p.setting, p.instruction, cfg.base.seed)
        out = []
        shared_block = None
        for t in session.prepared.info[INFO_KEY][item.relation]:
            demos = [
                Demo(f, t["template_id"], t["template"]) if tm is None else Demo(f, tm["template_id"], tm["template"])
                for f, tm in drawn
            ]
            if shared_block is None or p.setting == "4-template":
                shared_block = demo_block(p.instruction, demos)
            query = render_query(t["template"], item.subject, p.instruction)
            out.append(_PairPrompts(item, t, shared_block, icl_prompt(shared_block, query), demos))
        return out

    def score_batch(self, session: Session, state: Any, batch: Sequence[MultiPromptItem]) -> list[dict]:
        from ..metrics import belief_match as bm

        p = session.cfg.params
        plan = [pp for it in batch for pp in self.prompts_for(session, it)]
        longest = max(len(session.generator.encode(pp.prompt)) for pp in plan)
        gen = session.generator_for_rows(max(p.samples, len(plan)), longest + p.max_answer_tokens)
        # Prompts with the same block (instruction + a pair's demonstrations) share its KV; for
        # 4-template only the instruction line is common to a batch.
        by_block: dict[str, list[int]] = {}
        for n, pp in enumerate(plan):
            key = pp.block if p.setting != "4-template" else INSTRUCTIONS[p.instruction] + "\n"
            by_block.setdefault(key, []).append(n)
        greedy: list[Any] = [None] * len(plan)
        for block, idx in by_block.items():
            outs = gen.greedy([plan[n].prompt for n in idx], max_new_tokens=p.max_answer_tokens, stop=STOP, shared_prefix=block)
            for n, g in zip(idx, outs):
                greedy[n] = g
        rows = []
        for pp, g in zip(plan, greedy):
            it, t = pp.item, pp.template
            answer = g.text.strip()
            samples: list[str] = []
            if p.samples:
                seed = stable_seed(session.cfg.base.seed, "belief-icl-samples", it.fact_id, t["template_id"])
                samples = [
                    s.text.strip()
                    for s in gen.sample(
                        pp.prompt,
                        n=p.samples,
                        max_new_tokens=p.max_answer_tokens,
                        temperature=1.0,
                        top_p=1.0,
                        top_k=0,
                        seed=seed,
                        stop=STOP,
                    )
                ]
            bm.normalize_many([answer, *samples])
            matching = sum(1 for s in samples if bm.consistency_match(answer, s))
            golds = list(it.gold)
            rows.append(
                {
                    "key": f"{it.fact_id}#{t['template_id']}",
                    "fact_id": it.fact_id,
                    "probe": self.name,
                    "relation": it.relation,
                    "subject": it.subject,
                    "template_id": t["template_id"],
                    "template": t["template"],
                    "source": t["source"],
                    "style": t["style"],
                    "setting": p.setting,
                    "instruction": p.instruction,
                    "prompt": pp.prompt,
                    "answer": answer,
                    "prediction": answer,
                    "correct": bm.accuracy_match(answer, golds),
                    "confidence": (matching / len(samples)) if samples else None,
                    "n_samples": len(samples),
                    "n_samples_matching": matching,
                    "one_word": bm.one_word(answer),
                    "empty": bm.is_empty(answer),
                    "finish_reason": g.finish_reason,
                    "gold": golds,
                    "demonstrations": [d.to_dict() for d in pp.demos],
                }
            )
        return rows

    # ---- metrics
    @staticmethod
    def predictions(rows: Sequence[dict]):
        """The result rows as a predictions table (`factprobe.metrics.belief`)."""
        import pandas as pd

        df = pd.DataFrame(list(rows))
        if not df.empty:
            df["correct"] = df["correct"].astype(bool)
            if df["confidence"].isna().any():
                df = df.drop(columns=["confidence"])
        return df

    def metrics(self, rows: Sequence[dict], prepared: Prepared, cfg: RunConfig) -> dict:
        from ..metrics.belief import summarize_belief
        from ..metrics.belief_match import consistency_match

        p = cfg.params
        df = self.predictions(rows)
        if df.empty:
            return {"acc": None, "reason": "no prompt was scored"}
        has_conf = "confidence" in df.columns
        m = summarize_belief(
            df,
            accuracies={"acc": "acc@1"},
            overconf={"overconf": 1} if has_conf else {},
            n_draws=p.draws,
            seed=cfg.base.seed,
            match=consistency_match,
        )
        if not has_conf:
            m["overconf"] = None
            m["overconf_reason"] = "--samples 0: no confidence was sampled"
        one_word = df["one_word"].astype(float)
        m["one_word_rate"] = float(one_word.mean())
        m["instruction_following"] = {"acc": m["acc"], "one_word_rate": m["one_word_rate"]}
        m["n_empty"] = int(df["empty"].sum())
        m["empty_rate"] = float(df["empty"].mean())
        m["mean_confidence"] = float(df["confidence"].mean()) if has_conf else None
        for rel, sub in df.groupby("relation", sort=False):
            entry = m["per_relation"].setdefault(rel, {})
            entry.update(one_word_rate=float(sub["one_word"].mean()), n_empty=int(sub["empty"].sum()))
            if has_conf:
                entry["confidence"] = float(sub["confidence"].mean())
        m.update(
            setting=p.setting,
            instruction=p.instruction,
            instruction_text=INSTRUCTIONS[p.instruction],
            shots=p.shots,
            samples=p.samples,
            max_answer_tokens=p.max_answer_tokens,
            dropped_relations=dict(prepared.dropped),
            relations_without_templates=prepared.info.get("belief_icl_missing", {}),
            templates_per_relation={r: len(t) for r, t in prepared.info.get(INFO_KEY, {}).items()},
        )
        m.update(template_source_metrics(prepared, prepared.info.get(INFO_KEY, {}), p.template_sources.split(",")))
        return m

    def artifacts(self, rows, prepared, cfg: RunConfig, metrics: dict) -> dict[str, Any]:
        from ..metrics.belief import belief_tables

        df = self.predictions(rows)
        if df.empty:
            return {}
        extra = df.groupby("template_id", sort=False).agg(one_word_rate=("one_word", "mean"), n_empty=("empty", "sum"))
        return belief_tables(df, prepared.info[INFO_KEY], metrics, per_template=extra)


register(BeliefICL())
