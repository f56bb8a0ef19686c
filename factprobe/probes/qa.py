"""QA recall (yuan2024 FACT-Bench, sections 2-3, Tables 6-7): closed-book questions, greedy answers.

The prompt (Table 6 for k = 0, Table 7 for k > 0), one line per part::

    Instruction: answer the following question. Don't include explanation. Keep the answer as concise as possible.
    Question: <exemplar question 1>
    Answer: <exemplar answer 1>
    ...
    Question: <test question>
    Answer:

The k exemplars are ONE block drawn once with the seed from the train split, across relations
(`factprobe.datasets.counterfactual.draw_exemplars`). The same block precedes every question of the
run, and every model given the same data and seed gets the same block; the generation engine
runs it once (`Generator.greedy(shared_prefix=block)`, whose KV is reused across batches).
Greedy decoding; the answer stops at a newline or at `Question:`; at most `--max-new-tokens`.

Scores (`factprobe.metrics.qa`): EM, F1 and Contains against every gold alias (all correct
objects of the subject, by id), with SQuAD normalisation and dates as `Month D, YYYY`. An empty
or whitespace-only answer is wrong and counted (`n_empty`).

`--shots` takes one k or a list (`0,10`): each k is its own block and its own rows (key
`fact_id#<split>#<k>shot`, with k as asked). A block can hold fewer exemplars than asked (a small
train split, or a block cut to fit the model's window; noted): rows keep `shots_asked` and `shots`
(the k used), and metrics.json labels every score with the k USED: `shots` lists the k used,
`shots_asked` the k asked, `per_shots` is keyed by the k used (so MLflow logs `em/shots/3` when 5
was asked and 3 were used), and `shots_capped` / `shots_note` say which k were capped. With `--split train|all`, a train item that is itself an exemplar of
the block is asked with a second block drawn from the rest of the split (group `regular-alt`),
so no question is ever answered with its own answer in the prompt. The regular k-shot answers (the first k > 0) also make the model's
known/unknown table, `known_unknown.parquet` (`factprobe.datasets.known_unknown`), for the facts of
`--split` (`all` covers the train split that counterfactual ICL and fine-tuning draw from).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..config import ConfigBase, option
from ..datasets.counterfactual import Exemplar, draw_exemplars
from ..datasets.prepared import Prepared
from ..datasets.qa import QAItem, qa_info_summary, qa_train_items
from ..errors import ContextTooLongError
from ..framework.base import Probe, Session
from ..framework.config import RunConfig
from ..framework.registry import register
from ..framework.reporting import Headline, MapVerdict, ReportPart, ReportRun
from ..metrics import qa as qam

INSTRUCTION = "Instruction: answer the following question. Don't include explanation. Keep the answer as concise as possible."
STOP = ("\n", "Question:")
SPLITS = ("eval", "train", "all")
#: prompts per generation batch (and per checkpoint)
BATCH = 16


def split_ints(value: Any, name: str) -> list[int] | None:
    """`"10,15"`, `[10, 15]` or `10` -> [10, 15]; None/"" -> None. Raises ConfigError on junk."""
    from ..errors import ConfigError

    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    parts = value.split(",") if isinstance(value, str) else (value if isinstance(value, (list, tuple)) else [value])
    out = []
    for p in parts:
        try:
            f = float(str(p).strip())
            if f != int(f):
                raise ValueError
        except ValueError:
            raise ConfigError(f"{name}={value!r}: expected whole numbers, e.g. 10 or 10,15,20,32") from None
        out.append(int(f))
    if not out:
        raise ConfigError(f"{name}={value!r}: give at least one number")
    return list(dict.fromkeys(out))


def exemplar_block(exemplars: Sequence[Exemplar]) -> str:
    """The instruction and the exemplars' `Question: ...\\nAnswer: ...` lines, ending in a newline."""
    return "".join([INSTRUCTION + "\n"] + [f"Question: {e.question}\nAnswer: {e.shown_answer}\n" for e in exemplars])


def qa_prompt(block: str, question: str) -> str:
    """The exact text generated from: the block, then the test question and `Answer:`."""
    return f"{block}Question: {question}\nAnswer:"


@dataclass
class QAConfig(ConfigBase):
    """Fields shared by the QA and counterfactual probes."""

    shots: list[int] | None = option(
        None,
        "exemplars in the shared block: one k or a list, e.g. 0,10 "
        "(qa default: 10; counterfactual default: 10,15,20,32, Figure 7)",
    )
    max_new_tokens: int = option(16, "most tokens generated per answer (it also stops at a newline or 'Question:')")
    qa_train_per_relation: int | None = option(
        50,
        "train-split facts per relation in the exemplar pool (counterfactual ICL sorts these into known and unknown); empty: all",
    )
    qa_templates: str | None = option(None, "question templates file (default: factprobe/datasets/data/qa_templates.tsv)")

    DEFAULT_SHOTS = (10,)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.shots = split_ints(self.shots, "shots") or list(self.DEFAULT_SHOTS)
        self.check(all(k >= 0 for k in self.shots), "shots", self.shots, "must be >= 0")
        self.check(self.max_new_tokens >= 1, "max_new_tokens", self.max_new_tokens, "must be >= 1")
        self.check(
            self.qa_train_per_relation is None or self.qa_train_per_relation >= 1,
            "qa_train_per_relation",
            self.qa_train_per_relation,
            "must be >= 1",
        )


@dataclass
class QAProbeConfig(QAConfig):
    """The QA probe's own fields."""

    split: str = option(
        "eval", "which facts to ask: eval (the evaluation split), train (the exemplar pool) or all", choices=SPLITS
    )


@dataclass(frozen=True)
class QATask:
    """One question to generate an answer for, in one setting with k exemplars."""

    item: QAItem
    setting: str  # "regular", "known-shuffle", ...
    shots: int  # k asked for (the block may hold fewer: see the row's `shots`)

    @property
    def key(self) -> str:
        tail = f"{self.shots}shot" if self.setting == "regular" else f"{self.setting}@{self.shots}"
        return f"{self.item.fact_id}#{self.item.split}#{tail}"


@dataclass
class BlockState:
    """What the batches of one group share: its exemplars and their text."""

    exemplars: list[Exemplar]
    block: str
    generator: Any


def pool_items(prepared: Prepared) -> list[QAItem]:
    """The train split (exemplar pool) of a QA dataset, relations in order."""
    return [it for its in qa_train_items(prepared).values() for it in its]


def regular_block(prepared: Prepared, k: int, seed: int, alt: bool = False) -> list[QAItem]:
    """The regular k-shot block (drawn once from the train split). `alt=True`: the block for the
    train items that are themselves in the regular block (drawn from the rest of the split), so
    no question is ever asked with its own answer among the exemplars."""
    pool = pool_items(prepared)
    if not alt:
        return draw_exemplars(pool, k, seed, "regular")
    taken = {it.fact_id for it in draw_exemplars(pool, k, seed, "regular")}
    return draw_exemplars([it for it in pool if it.fact_id not in taken], k, seed, "regular-alt")


def regular_groups(
    prepared: Prepared, items: Sequence[QAItem], k: int, seed: int, name: str = "regular", setting: str = "regular"
) -> dict[str, list[QATask]]:
    """Tasks answered with the regular block, `{name}@k`; items inside that block go to
    `{name}-alt@k`, answered with `regular_block(alt=True)`."""
    in_block = {it.fact_id for it in regular_block(prepared, k, seed)}
    out = {f"{name}@{k}": [QATask(it, setting, k) for it in items if it.fact_id not in in_block]}
    alt = [QATask(it, setting, k) for it in items if it.fact_id in in_block]
    if alt:
        out[f"{name}-alt@{k}"] = alt
    return out


def fit_block(session: Session, group: str, exemplars: list[Exemplar], questions: Sequence[str]) -> BlockState:
    """The group's block, dropping the LAST exemplars until the longest question (in tokens) + the
    answer fit the model's window (noted): what is kept is the first exemplars of the draw, i.e.
    the block a smaller k would get, with the answer-type coverage exemplars, which come first.
    Refuses when even the bare instruction does not fit."""
    p = session.cfg.params
    gen = session.generator
    # the longest prompts, in tokens (a question short in characters can be long in tokens)
    by_tokens = sorted(dict.fromkeys(questions), key=lambda q: len(gen.encode(q)), reverse=True)[:3] or [""]
    kept = list(exemplars)
    while True:
        block = exemplar_block(kept)
        lengths = {q: len(gen.encode(qa_prompt(block, q))) for q in by_tokens}
        longest = max(lengths, key=lengths.get)
        n = lengths[longest]
        if n + p.max_new_tokens <= gen.max_length:
            break
        if not kept:
            raise ContextTooLongError(
                f"{group}: the longest question ({longest[:60]!r}) alone takes {n} tokens + "
                f"{p.max_new_tokens} new; the model's window is {gen.max_length}"
            )
        kept = kept[:-1]
    if len(kept) < len(exemplars):
        session.note(
            f"{group}: the block does not fit the model's window ({gen.max_length} tokens); "
            f"kept the first {len(kept)} of {len(exemplars)} exemplars"
        )
    session.generator_for_rows(BATCH, n + p.max_new_tokens)
    return BlockState(kept, block, gen)


def generate_rows(session: Session, state: BlockState, batch: Sequence[QATask], probe: str) -> list[dict]:
    """Greedy answers for a batch of tasks sharing `state`'s block, scored into result rows."""
    p = session.cfg.params
    prompts = [qa_prompt(state.block, t.item.question) for t in batch]
    gens = state.generator.greedy(prompts, max_new_tokens=p.max_new_tokens, stop=STOP, shared_prefix=state.block)
    exemplars = [e.to_dict() for e in state.exemplars]
    rows = []
    for t, prompt, g in zip(batch, prompts, gens):
        it = t.item
        scores = qam.score_answer(g.text, it.gold, it.answer_type)
        rows.append(
            {
                "key": t.key,
                "fact_id": it.fact_id,
                "probe": probe,
                "relation": it.relation,
                "subject": it.subject,
                "subject_id": it.subject_id,
                "split": it.split,
                "setting": t.setting,
                "shots": len(state.exemplars),
                "shots_asked": t.shots,
                "question": it.question,
                "prompt": prompt,
                "answer": g.text,
                "answer_token_ids": list(g.token_ids),
                "finish_reason": g.finish_reason,
                "gold": list(it.gold),
                "answer_type": it.answer_type,
                "popularity": it.popularity,
                **scores,
                # for `factprobe compare` / the regression gate, which join runs on fact_id + correct
                "prediction": g.text.strip(),
                "correct": bool(scores["em"] >= 1.0),
                "exemplars": exemplars,
            }
        )
    return rows


def shots_labels(by_k: dict[int, Sequence[dict]]) -> dict[int, int]:
    """{k asked: the k actually used}: the most exemplars any of its rows' blocks held (`shots`,
    capped by a small train split or by the model's window; the main block, which every eval
    question gets; only train items inside it may get a smaller alternative block); k when no row."""
    return {k: max((int(r["shots"]) for r in rs), default=k) for k, rs in by_k.items()}


def qa_summary(rows: Sequence[dict]) -> dict:
    """`summarize_qa` of result rows, with popularity buckets (quartiles over the rows' items)."""
    import pandas as pd

    cols = ["relation", "answer_type", "em", "f1", "contains", "empty", "popularity"]
    df = pd.DataFrame(list(rows), columns=None if rows else cols)
    if rows and df["popularity"].notna().any():
        df["popularity_bucket"] = qam.popularity_bucket(df["popularity"].tolist())
    return qam.summarize_qa(df[[c for c in df.columns if c != "popularity"]])


#: per-fact columns of the generated-answer probes (QA, counterfactual ICL)
ANSWER_COLUMNS = (
    "fact_id",
    "relation",
    "subject",
    "question",
    "answer",
    "gold",
    "em",
    "f1",
    "contains",
    "correct",
    "setting",
    "shots",
    "shots_asked",
    "split",
)


#: the row fields the QA metrics and the known/unknown table read (`Probe.metric_columns`)
QA_METRIC_COLUMNS = (
    "fact_id",
    "relation",
    "subject",
    "question",
    "answer",
    "answer_type",
    "split",
    "shots",
    "shots_asked",
    "em",
    "f1",
    "contains",
    "empty",
    "popularity",
)


class QAProbe(Probe):
    name = "qa"
    description = "closed-book QA recall (yuan2024): instruction + k shared exemplars + question, greedy answer"
    config_class = QAProbeConfig
    dataset = "qa"
    batch_size = BATCH
    headline_metric = Headline("em", "em")
    headline_keys = ("em", "f1", "contains")
    per_fact_columns = ANSWER_COLUMNS
    metric_columns = QA_METRIC_COLUMNS
    relation_metric = "em"
    relation_metric_title = "EM"
    #: the knowledge map: a fact is known when its eval-split answers are exact matches (several k: by majority)
    map_verdict = MapVerdict(("correct",), "majority", (("split", "eval"),))

    def headline(self, metrics):
        """The default line plus the k its numbers are at: `em 0.200, ... over 30 items at k=0` (the
        top-level scores are those of the first `--shots`, by the k used; see `qa_reporting.headline_k`)."""
        from .qa_reporting import headline_k

        return headline_k(super().headline(metrics), metrics)

    def relation_text(self, metrics):
        """EM, F1 and Contains at every k the run asked, each with its 95% interval (`qa_reporting.shots_text`)."""
        from .qa_reporting import shots_text

        return shots_text(metrics)

    def flat_metrics(self, metrics):
        """The default flat metrics plus the intervals (`em_ci_low`, `em_ci_high/shots/<k>`, ...: `qa_reporting.ci_flat`)."""
        from .qa_reporting import ci_flat

        return {**super().flat_metrics(metrics), **ci_flat(metrics)}

    def report(self, runs: Sequence[ReportRun], everything: Sequence[ReportRun]) -> ReportPart:
        """EM per relation across models and the `qa` table (`factprobe.probes.qa_reporting`)."""
        from .qa_reporting import qa_report

        return qa_report(runs)

    def prepare(self, cfg: RunConfig) -> Prepared:
        from ..datasets.qa import prepare_qa

        p = cfg.params
        return prepare_qa(cfg.base, max_train_per_relation=p.qa_train_per_relation, templates_path=p.qa_templates)

    def items_for_split(self, cfg: RunConfig, prepared: Prepared) -> list[QAItem]:
        split = cfg.params.split
        out: list[QAItem] = []
        if split in ("train", "all"):
            out += pool_items(prepared)
        if split in ("eval", "all"):
            out += [it for its in prepared.items.values() for it in its]
        return out

    def groups(self, cfg: RunConfig, prepared: Prepared) -> dict[str, list[QATask]]:
        items = self.items_for_split(cfg, prepared)
        out: dict[str, list[QATask]] = {}
        for k in cfg.params.shots:
            out.update(regular_groups(prepared, items, k, cfg.base.seed))
        return out

    def item_keys(self, cfg, prepared, item: QATask) -> list[str]:
        return [item.key]

    def open_relation(self, session: Session, group: str) -> BlockState:
        name, k = group.split("@")[0], int(group.split("@")[1])
        cfg = session.cfg
        drawn = regular_block(session.prepared, k, cfg.base.seed, alt=name.endswith("-alt"))
        if len(drawn) < k:
            session.note(
                f"{group}: the train split holds only {len(drawn)} items for {k} exemplars; "
                f"k capped at {len(drawn)} (scores are labelled with the k used)"
            )
        questions = [t.item.question for t in self.groups(cfg, session.prepared)[group]]
        return fit_block(session, group, [Exemplar.of(it) for it in drawn], questions)

    def score_batch(self, session: Session, state: BlockState, batch: Sequence[QATask]) -> list[dict]:
        return generate_rows(session, state, batch, self.name)

    def metrics(self, rows, prepared: Prepared, cfg: RunConfig) -> dict:
        shots = cfg.params.shots
        by_k = {k: [r for r in rows if r["shots_asked"] == k] for k in shots}
        first = by_k[shots[0]]
        m = qa_summary([r for r in first if r["split"] == "eval"] or first)
        labels = shots_labels(by_k)
        m["shots"] = [labels[k] for k in shots]  # the k actually used (metrics.json, MLflow em/shots/<k>, report)
        m["shots_asked"] = shots
        capped = {str(k): labels[k] for k in shots if labels[k] != k}
        if capped:
            m["shots_capped"] = capped
            m["shots_note"] = "; ".join(
                f"--shots {k}: only {used} exemplar(s) used (the train split or the model's window is too small), labelled {used}"
                for k, used in capped.items()
            )
        if len(shots) > 1:
            m["per_shots"] = {}
            for k, v in by_k.items():
                key = str(labels[k]) if str(labels[k]) not in m["per_shots"] else f"{labels[k]}-asked{k}"
                m["per_shots"][key] = {**qa_summary(v), "shots_asked": k}
        if cfg.params.split != "eval":
            m["per_split"] = {s: qa_summary([r for r in first if r["split"] == s]) for s in ("train", "eval")}
        m["dropped_relations"] = dict(prepared.dropped)
        m.update(qa_info_summary(prepared))
        return m

    def artifacts(self, rows, prepared, cfg: RunConfig, metrics: dict) -> dict[str, Any]:
        from ..datasets.known_unknown import FILE_NAME, known_unknown_table

        regular = next((k for k in cfg.params.shots if k > 0), None)
        if regular is None:
            return {}
        picked = [r for r in rows if r["shots_asked"] == regular]
        return {FILE_NAME: known_unknown_table(picked, cfg.base.model, metrics.get("model_revision", ""))}


register(QAProbe())
