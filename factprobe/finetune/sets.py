"""Fine-tuning sets of yuan2024 section 5: known, unknown, mixed, counterfactual and regular.

All five are drawn from the TRAIN split of the QA dataset that `factprobe probe qa` builds from
the same data options (`prepare_qa`: `--source --data --train-data --relations --seed
--qa-train-per-relation --qa-templates`), so no training question is ever an evaluation question
(`build_qa` keeps every test subject out of the train split; `check_no_overlap` refuses any
that slips in, naming the facts):

- `regular` (5.1): the train split, no known/unknown filter.
- `counterfactual` (5.2): the regular set with each answer replaced by another answer of the
  same relation ("inner-property shuffle"), with the rules of counterfactual ICL
  (`factprobe.datasets.counterfactual.shuffle_answers`: never the item's own answer nor another
  correct answer of its subject; a relation without any other answer keeps its true answers).
- `known` / `unknown` / `mixed` (5.3): the train facts the base model answers right / wrong in
  its known/unknown table (`known_unknown.parquet`, `factprobe.datasets.known_unknown`); `mixed`
  is half known (the first `size // 2`) and half unknown.

Sizes: `size` examples (default: for known/unknown/mixed min(#known, #unknown), so the three
sets have equal size; for regular/counterfactual the whole split), each drawn with
`random.Random(stable_seed(seed, "finetune", kind))` from its pool sorted by fact id; the drawn
examples keep that pool order. The counterfactual set is the regular set of the same size.

Format (the QA probe's zero-shot prompt, Table 6): `prompt` = `qa_prompt(exemplar_block([]),
question)` = "Instruction: ...\\nQuestion: <q>\\nAnswer:", `target` = " <answer>\\n" (the newline
is where the QA probe stops generating). `TrainSet.digest` is the sha256 of the canonical JSON of
the examples (order included): equal digests mean equal training data.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..datasets.counterfactual import correct_object_keys, shuffle_answers
from ..datasets.known_unknown import MAKE_ONE, read_known_unknown
from ..datasets.qa import QAItem, prepare_qa, qa_train_items
from ..errors import ConfigError, DataError
from ..framework.config import BaseConfig
from ..io import atomic_write_json, atomic_write_jsonl, read_jsonl
from ..probes.qa import exemplar_block, qa_prompt
from ..seeding import stable_rng
from .config import NEEDS_TABLE, TRAIN_SETS

EXAMPLES_FILE = "train_set.jsonl"
INFO_FILE = "train_set.json"


@dataclass(frozen=True)
class TrainExample:
    """One instruction-QA training example: `prompt` (no loss) and `target` (the loss).

    `answer` is the answer trained on (shuffled for counterfactual), `true_answer` the fact's
    object; `known` is the base model's verdict (None when no table was used)."""

    fact_id: str
    relation: str
    subject: str
    question: str
    answer: str
    true_answer: str
    prompt: str
    target: str
    shuffled: bool = False
    known: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainExample:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass
class TrainSet:
    """A built training set: its kind, examples, content digest and build facts (`info`)."""

    kind: str
    examples: list[TrainExample]
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return examples_digest(self.examples)

    def __len__(self) -> int:
        return len(self.examples)

    def save(self, folder: str | Path) -> None:
        """`<folder>/train_set.jsonl` (one example per line) and `<folder>/train_set.json`
        (kind, n, digest, info)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_jsonl(folder / EXAMPLES_FILE, [e.to_dict() for e in self.examples])
        atomic_write_json(folder / INFO_FILE, {"kind": self.kind, "n": len(self), "digest": self.digest, "info": self.info})

    @classmethod
    def load(cls, folder: str | Path) -> TrainSet:
        """Read a saved set back; DataError when a file is missing or the digest does not match."""
        folder = Path(folder)
        try:
            meta = json.loads((folder / INFO_FILE).read_text(encoding="utf-8"))
            examples = [TrainExample.from_dict(d) for _, d in read_jsonl(folder / EXAMPLES_FILE)]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise DataError(f"{folder}: not a saved training set ({e})") from None
        ts = cls(meta["kind"], examples, meta.get("info", {}))
        if ts.digest != meta.get("digest"):
            raise DataError(
                f"{folder / EXAMPLES_FILE}: digest {ts.digest} does not match {meta.get('digest')} "
                f"in {INFO_FILE} (the file was changed)"
            )
        return ts


def examples_digest(examples: Sequence[TrainExample]) -> str:
    """sha256 (hex) of the canonical JSON of `examples` (sorted keys, no spaces, in order)."""
    text = json.dumps([e.to_dict() for e in examples], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def qa_format(question: str) -> str:
    """The QA probe's zero-shot prompt for `question` (instruction, question, `Answer:`)."""
    return qa_prompt(exemplar_block([]), question)


def make_example(item: QAItem, answer: str | None = None, shuffled: bool = False, known: bool | None = None) -> TrainExample:
    """A training example of `item`, trained to answer `answer` (default: its object)."""
    answer = item.object if answer is None else answer
    return TrainExample(
        item.fact_id,
        item.relation,
        item.subject,
        item.question,
        answer,
        item.object,
        qa_format(item.question),
        f" {answer}\n",
        shuffled,
        known,
    )


def _sample(items: Sequence[QAItem], n: int, seed: int, tag: str) -> list[QAItem]:
    """`n` of `items` drawn from (seed, tag); items sorted by fact id, the draw keeps that order."""
    ordered = sorted(items, key=lambda it: (it.relation, it.fact_id))
    if n >= len(ordered):
        return ordered
    keep = set(stable_rng(seed, "finetune", tag).sample(range(len(ordered)), n))
    return [it for i, it in enumerate(ordered) if i in keep]


def check_no_overlap(examples: Sequence[TrainExample] | Sequence[QAItem], eval_items: Sequence[QAItem]) -> None:
    """ConfigError naming the facts when a training example is an evaluation fact: the same fact
    id, or the same (relation, subject) (by subject label, case-insensitively)."""
    ids = {it.fact_id for it in eval_items}
    subjects = {(it.relation, it.subject.casefold()) for it in eval_items}
    hits = [e.fact_id for e in examples if e.fact_id in ids or (e.relation, e.subject.casefold()) in subjects]
    if hits:
        raise ConfigError(
            f"the training set overlaps the evaluation facts in {len(hits)} fact(s): "
            f"{', '.join(hits[:5])}{' ...' if len(hits) > 5 else ''}; training on evaluation facts is "
            "refused (was the known/unknown table made with other data, --seed or --train-data?)"
        )


def _table_verdicts(path: str, model: str, pool: Sequence[QAItem], eval_items: Sequence[QAItem]) -> dict[str, bool]:
    """{fact_id: known} for the pool facts in the table's train rows; refuses a table whose train
    rows are evaluation facts of this run, and one that covers none of the pool."""
    df = read_known_unknown(path, model)
    train = df[df["split"] == "train"]
    eval_ids = {it.fact_id for it in eval_items}
    clash = sorted(set(train["fact_id"]) & eval_ids)
    if clash:
        raise ConfigError(
            f"{path}: the known/unknown table lists {len(clash)} evaluation fact(s) of this run as "
            f"training facts: {', '.join(clash[:5])}{' ...' if len(clash) > 5 else ''}; training on "
            "evaluation facts is refused (make the table with the same --source/--data/--seed)"
        )
    pool_ids = {it.fact_id for it in pool}
    hit = train[train["fact_id"].isin(pool_ids)]
    if hit.empty:
        raise ConfigError(
            f"{path}: the known/unknown table covers none of this run's {len(pool_ids)} train-split "
            "facts (was it made with the same data, seed and --qa-train-per-relation, and --split all?)"
        )
    return dict(zip(hit["fact_id"], hit["known"].astype(bool)))


def build_train_set(
    kind: str,
    *,
    model: str,
    source: str = "countryinfo",
    data: str | None = None,
    train_data: str | None = None,
    relations: list[str] | None = None,
    seed: int = 0,
    qa_train_per_relation: int | None = 50,
    qa_templates: str | None = None,
    size: int | None = None,
    known_unknown: str | None = None,
) -> TrainSet:
    """Build the `kind` training set (rules in the module docstring).

    `model` is the base model the known/unknown table must belong to. Raises ConfigError for an
    unknown kind, a missing table (naming the command that makes one), a table of another model,
    a set larger than its pool (naming the counts) and any overlap with evaluation facts.
    """
    if kind not in TRAIN_SETS:
        raise ConfigError(f"train_set: unknown value {kind!r}; choose one of {', '.join(TRAIN_SETS)}")
    if size is not None and size < 1:
        raise ConfigError(f"train_size={size!r}: must be >= 1")
    base = BaseConfig(model=model, source=source, data=data, train_data=train_data, relations=relations, seed=seed)
    prepared = prepare_qa(base, max_train_per_relation=qa_train_per_relation, templates_path=qa_templates)
    by_rel = qa_train_items(prepared)
    pool = [it for its in by_rel.values() for it in its]
    eval_items = [it for its in prepared.items.values() for it in its]
    info: dict[str, Any] = {
        "pool": len(pool),
        "eval_facts": len(eval_items),
        "source": source,
        "seed": seed,
        "relations": sorted(by_rel),
        "known_unknown": known_unknown,
    }
    if kind in NEEDS_TABLE:
        if not known_unknown:
            raise ConfigError(
                f"train set {kind!r} needs the base model's known/unknown table (--known-unknown); "
                + MAKE_ONE.format(model=model, shots=10)
            )
        verdicts = _table_verdicts(known_unknown, model, pool, eval_items)
        known = [it for it in pool if verdicts.get(it.fact_id) is True]
        unknown = [it for it in pool if verdicts.get(it.fact_id) is False]
        info.update(n_known=len(known), n_unknown=len(unknown))
        n = size if size is not None else min(len(known), len(unknown))
        need = {"known": (n, 0), "unknown": (0, n), "mixed": (n // 2, n - n // 2)}[kind]
        if n < 1 or need[0] > len(known) or need[1] > len(unknown):
            raise ConfigError(
                f"train set {kind!r} of {n} examples needs {need[0]} known and {need[1]} unknown train "
                f"facts; the table has {len(known)} known and {len(unknown)} unknown of {len(pool)} "
                "(lower --train-size, or raise --qa-train-per-relation and remake the table)"
            )
        picked = [(it, True) for it in _sample(known, need[0], seed, f"known-{kind}")] + [
            (it, False) for it in _sample(unknown, need[1], seed, f"unknown-{kind}")
        ]
        examples = [make_example(it, known=k) for it, k in picked]
    else:
        n = size if size is not None else len(pool)
        if n > len(pool) or not pool:
            raise ConfigError(
                f"train set {kind!r} of {n} examples: the train split holds {len(pool)} facts "
                "(lower --train-size or raise --qa-train-per-relation)"
            )
        items = _sample(pool, n, seed, "regular")
        if kind == "regular":
            examples = [make_example(it) for it in items]
        else:
            facts = [*prepared.facts.get("test", ()), *prepared.facts.get("train", ())]
            shuffled = shuffle_answers(items, by_rel, seed, tag="finetune-shuffle", correct_objects=correct_object_keys(facts))
            examples = [make_example(it, ex.shown_answer, ex.shuffled) for it, ex in zip(items, shuffled)]
            info["unshuffled"] = sum(not e.shuffled for e in examples)
    check_no_overlap(examples, eval_items)
    info["n"] = len(examples)
    return TrainSet(kind, examples, info)
