"""Run a multiple-choice probe end to end: data -> items -> contexts -> scorer -> rows -> metrics.

Contract
--------
`run_probe(cfg, out_dir)` writes, atomically:

- `out_dir/results.jsonl`: one line per scored item (per fact; per fact and template for
  HGP/MMP) with relation, subject, gold, correct_objects, options, logprobs (summed log-prob per
  option, same order), prediction, correct, gold_prob, confidence, context and fact_id.
- `out_dir/metrics.json`: accuracy, prob_mass, n, per_relation {rel: {accuracy, n, ...}},
  macro accuracy, bootstrap intervals, Accuracy@K, token counts, dropped relations.
- `out_dir/run_config.json`: the config and its results key.
- `out_dir/model_revision.txt`: the revision of the weights that scored the rows (see
  `LoadedModel.revision`); a resume with different weights is refused, and a rerun with nothing
  left to score still reports the revision.

While running, finished rows are appended to `out_dir/checkpoint.jsonl` (flushed and fsynced per
batch). A rerun with the same `out_dir` and config keeps every row already scored and scores only
the rest; a truncated last checkpoint line (a crash mid-write) is ignored. A different config in
the same `out_dir` is refused rather than mixed.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ..build.examples import sample_examples, split_train_test
from ..build.nobel_mc import build_nobel_mc_items
from ..build.trex_mc import build_mc_items, sample_facts_per_relation
from ..errors import ConfigError, ContextTooLongError
from ..facts import Fact, FactSet, MCItem
from ..io import atomic_write_json, atomic_write_jsonl, atomic_write_text
from ..metrics import multiple_choice as mc
from ..paths import data_root
from ..sources import load_facts
from . import eic_lke, ic_lke, prompt_lke
from .config import ProbeConfig

CHECKPOINT = "checkpoint.jsonl"
RESULTS = "results.jsonl"
METRICS = "metrics.json"
RUN_CONFIG = "run_config.json"
MODEL_REVISION = "model_revision.txt"
TRAIN_FRACTION = 0.5  # without --train-data: share of each relation's facts (by subject) used for examples
FACTS_PER_BATCH = 8  # facts scored per scorer call (IC-LKE / prompts); a checkpoint per batch


@dataclass
class PreparedData:
    """Test items grouped by relation, the training facts, and what was dropped and why."""

    items: dict[str, list[MCItem]]
    train: FactSet
    test: FactSet
    dropped: dict[str, str] = field(default_factory=dict)

    @property
    def n_items(self) -> int:
        return sum(len(v) for v in self.items.values())


@dataclass
class ProbeOutcome:
    out_dir: Path
    results: pd.DataFrame
    metrics: dict
    prepared: PreparedData
    n_scored_now: int
    n_resumed: int
    notes: list[str]


def prepare_data(cfg: ProbeConfig) -> PreparedData:
    """Load facts, pick training facts for examples, and build the multiple-choice items."""
    test = load_facts(cfg.source, cfg.data, None)
    if cfg.relations:
        test = test.select(cfg.relations)
    if cfg.train_data:
        train = load_facts("lpaqa-train", cfg.train_data, None)
        train = FactSet([f for f in train if f.relation in test.relations], dict(test.relations), train.source)
    else:
        train, test = split_train_test(test, train_fraction=TRAIN_FRACTION, seed=cfg.seed)
    if cfg.source == "nobel":
        test = sample_facts_per_relation(test, cfg.max_facts_per_relation, seed=cfg.seed)
        items_list, dropped = build_nobel_mc_items(test, n_choices=cfg.choices, seed=cfg.seed)
    else:
        items_list, dropped = build_mc_items(
            test, n_choices=cfg.choices, seed=cfg.seed, max_facts_per_relation=cfg.max_facts_per_relation
        )
    items: dict[str, list[MCItem]] = {}
    for it in items_list:
        items.setdefault(it.relation, []).append(it)
    if cfg.relations:
        bad = {r: dropped[r] for r in cfg.relations if r in dropped}
        if bad:
            raise ConfigError(
                "cannot probe requested relation(s): " + "; ".join(f"{r}: {why}" for r, why in bad.items())
            )
    if not items:
        why = "; ".join(f"{r}: {w}" for r, w in dropped.items()) or "no facts"
        raise ConfigError(f"no relation of {test.source or cfg.source} can be probed with --choices {cfg.choices} ({why})")
    return PreparedData(items=items, train=train, test=test, dropped=dropped)


def save_prepared(prepared: PreparedData, folder: str | Path) -> None:
    """Write prepared data to `folder` (items.jsonl, train.jsonl, test.jsonl, meta.json), atomically
    per file; `load_prepared` reads it back. This is the data-build step's output artifact."""
    folder = Path(folder)
    atomic_write_jsonl(folder / "items.jsonl", [it.to_dict() for its in prepared.items.values() for it in its])
    atomic_write_jsonl(folder / "train.jsonl", [f.to_dict() for f in prepared.train])
    atomic_write_jsonl(folder / "test.jsonl", [f.to_dict() for f in prepared.test])
    rels = {r.id: asdict(r) for r in list(prepared.test.relations.values()) + list(prepared.train.relations.values())}
    atomic_write_json(folder / "meta.json", {
        "dropped": prepared.dropped, "relations": rels, "test_source": prepared.test.source,
        "train_source": prepared.train.source, "digest": prepared.test.digest(), "n_items": prepared.n_items,
    })


def load_prepared(folder: str | Path) -> PreparedData:
    """Read what `save_prepared` wrote; a missing or malformed file raises DataError with its line."""
    from ..errors import DataError
    from ..facts import Relation
    from ..io import read_jsonl

    folder = Path(folder)
    meta_path = folder / "meta.json"
    if not meta_path.exists():
        raise DataError(f"{folder}: not a prepared dataset (no meta.json)")
    meta = json.loads(meta_path.read_text())
    rels = {k: Relation(**v) for k, v in meta["relations"].items()}
    items: dict[str, list[MCItem]] = {}
    for _, rec in read_jsonl(folder / "items.jsonl", required=("relation", "subject", "gold", "options")):
        it = MCItem.from_dict(rec)
        items.setdefault(it.relation, []).append(it)
    def facts(name: str) -> list[Fact]:
        return [Fact(**rec) for _, rec in read_jsonl(folder / name, required=("relation", "subject", "object"))]
    train = FactSet(facts("train.jsonl"), {k: v for k, v in rels.items()}, meta.get("train_source", ""))
    test = FactSet(facts("test.jsonl"), {k: v for k, v in rels.items()}, meta.get("test_source", ""))
    return PreparedData(items=items, train=train, test=test, dropped=meta.get("dropped", {}))


def _row(item: MCItem, context: str, logprobs: np.ndarray, probe: str, template: str | None = None) -> dict:
    lp = [float(x) for x in logprobs]
    pred = mc.predict(lp)
    probs = mc.option_probs(lp)
    row = {
        "key": item.fact_id if template is None else f"{item.fact_id}#{template}",
        "fact_id": item.fact_id,
        "probe": probe,
        "relation": item.relation,
        "subject": item.subject,
        "subject_id": item.subject_id,
        "gold": item.gold,
        "gold_index": item.gold_index,
        "correct_objects": list(item.correct_objects),
        "options": list(item.options),
        "logprobs": lp,
        "prediction": None if pred is None else item.options[pred],
        "correct": bool(pred is not None and pred == item.gold_index),
        "gold_prob": float(probs[item.gold_index]),
        "confidence": float(probs.max()),
        "context": context,
    }
    if template is not None:
        row["template"] = template
    return row


def _read_rows(path: Path) -> list[dict]:
    """Rows of a jsonl results/checkpoint file; a truncated final line is dropped."""
    rows: list[dict] = []
    if not path.exists():
        return rows
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break  # torn write at a crash: the fact is simply scored again
            raise ConfigError(f"{path}:{i + 1}: corrupt line in a results file; move it away to start over")
    return rows


class _Checkpoint:
    """Append-only row log, fsynced per batch."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fh = None

    def append(self, rows: Iterable[dict]) -> None:
        if self.fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Make sure a torn final line from an earlier crash is terminated before appending.
            if self.path.exists() and self.path.stat().st_size:
                with self.path.open("rb") as fh:
                    fh.seek(-1, os.SEEK_END)
                    torn = fh.read(1) != b"\n"
                if torn:
                    good = _read_rows(self.path)
                    atomic_write_jsonl(self.path, good)
            self.fh = self.path.open("a", encoding="utf-8")
        for r in rows:
            self.fh.write(json.dumps(r, ensure_ascii=False) + "\n")
        self.fh.flush()
        os.fsync(self.fh.fileno())

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None


def _fit_examples(scorer, examples: list[Fact], items: Sequence[MCItem], cfg: ProbeConfig, note: Callable[[str], None]) -> list[Fact]:
    """Drop the earliest examples until the longest fact context + option fits the window."""
    sep = cfg.separator
    longest_subject = max((it.subject for it in items), key=len)
    longest_option = max((o for it in items for o in it.options), key=len)
    tail = len(scorer.encode_continuation(f"{sep}{longest_subject}{sep}{longest_option}")) + 2
    kept = list(examples)
    while kept and len(scorer.encode_context(ic_lke.relation_prefix(kept, sep))) + tail > scorer.max_length:
        if cfg.on_too_long == "refuse":
            raise ContextTooLongError(
                f"{len(examples)} examples for {items[0].relation} exceed the model's context window of "
                f"{scorer.max_length} tokens; lower --examples"
            )
        kept = kept[1:]
    if len(kept) < len(examples):
        note(
            f"{items[0].relation}: context longer than the model's window ({scorer.max_length} tokens); "
            f"kept the last {len(kept)} of {len(examples)} examples"
        )
    if not kept and examples:
        raise ContextTooLongError(f"{items[0].relation}: even one example does not fit the context window")
    return kept


def _test_subjects(items: Sequence[MCItem]) -> list[str]:
    """Ids and labels of the test subjects: in-context examples must avoid both."""
    return [it.subject_id or it.subject for it in items] + [it.subject for it in items]


def _empty_context_text(tokenizer) -> str:
    """What an empty context becomes: the BOS (else EOS) token text, as the harness does."""
    return tokenizer.bos_token or tokenizer.eos_token or ""


def _score_ic_lke(scorer, cfg, rel, items, train, note, emit) -> None:
    sep = cfg.separator
    examples = sample_examples(train, rel, cfg.examples, seed=cfg.seed, exclude_subjects=_test_subjects(items))
    if len(examples) < cfg.examples:
        note(f"{rel}: only {len(examples)} training facts for {cfg.examples} examples")
    examples = _fit_examples(scorer, examples, items, cfg, note)
    prefix_text = ic_lke.relation_prefix(examples, sep)
    prefix = scorer.prefix(prefix_text) if prefix_text else None
    for b in range(0, len(items), FACTS_PER_BATCH):
        batch = items[b : b + FACTS_PER_BATCH]
        contexts = [ic_lke.fact_context(prefix_text, it.subject, sep) for it in batch]
        if not prefix_text:
            contexts = [_empty_context_text(scorer.tokenizer) + c for c in contexts]
        from ..lm.scorer import ChoiceRequest

        reqs = [ChoiceRequest(c, [ic_lke.option_continuation(o, sep) for o in it.options]) for c, it in zip(contexts, batch)]
        scores = scorer.score_choices(reqs, shared_prefix=prefix)
        emit([_row(it, c, s, cfg.probe) for it, c, s in zip(batch, contexts, scores)])


def _score_eic_lke(scorer, cfg, rel, items, train, note, emit) -> None:
    sep = cfg.separator
    per_seq = cfg.eic_tests_per_sequence
    n_between = cfg.eic_interleave * (per_seq - 1)
    pool = sample_examples(
        train, rel, cfg.examples + n_between, seed=cfg.seed,
        exclude_subjects=_test_subjects(items),
    )
    lead, rest = pool[: cfg.examples], pool[cfg.examples :]
    if len(pool) < cfg.examples + n_between:
        note(f"{rel}: only {len(pool)} training facts for {cfg.examples + n_between} EIC-LKE examples")
    lead = _fit_examples(scorer, lead, items, cfg, note)
    prefix_text = ic_lke.relation_prefix(lead, sep) or _empty_context_text(scorer.tokenizer)
    prefix = scorer.prefix(prefix_text)
    k = cfg.eic_interleave
    between = [rest[i * k : (i + 1) * k] for i in range(per_seq - 1)]
    for b in range(0, len(items), per_seq):
        group = items[b : b + per_seq]
        scores = eic_lke.score_eic_group(scorer, prefix, group, between, sep)
        rows = []
        for i, (it, s) in enumerate(zip(group, scores)):
            ctx = prefix_text + "".join(
                f"{sep}{g.subject}{sep}<option>" + "".join(f"{sep}{e.subject}{sep}{e.object}" for e in between[j])
                for j, g in enumerate(group[:i])
            ) + f"{sep}{it.subject}"
            rows.append(_row(it, ctx, s, cfg.probe))
        emit(rows)


def _templates(cfg: ProbeConfig, rel: str) -> list[str]:
    from ..sources import lpaqa

    root = Path(cfg.prompts_root) if cfg.prompts_root else data_root() / "lpaqa" / "prompts"
    pick = lpaqa.hgp_templates if cfg.probe == "hgp" else lpaqa.mmp_templates
    return pick(root, rel, k=cfg.templates_per_relation)


def _score_prompts(scorer, cfg, rel, items, train, note, emit, templates) -> None:
    from ..lm.scorer import ChoiceRequest

    for template in templates:
        for b in range(0, len(items), FACTS_PER_BATCH):
            batch = items[b : b + FACTS_PER_BATCH]
            reqs, contexts = [], []
            for it in batch:
                pairs = [prompt_lke.fill_template(template, it.subject, o) for o in it.options]
                ctx = pairs[0][0] or _empty_context_text(scorer.tokenizer)
                contexts.append(ctx)
                reqs.append(ChoiceRequest(ctx, [cont for _, cont in pairs]))
            scores = scorer.score_choices(reqs)
            emit([_row(it, c, s, cfg.probe, template) for it, c, s in zip(batch, contexts, scores)])


def compute_metrics(rows: Sequence[dict], prepared: PreparedData | None = None, n_boot: int = 1000, seed: int = 0) -> dict:
    """metrics.json content from result rows (pure; see `factprobe.metrics.multiple_choice`)."""
    df = pd.DataFrame(rows, columns=None if rows else ["relation", "correct", "gold_prob", "confidence"])
    m = mc.summarize(df, n_boot=n_boot, seed=seed)
    if prepared is not None:
        m["dropped_relations"] = dict(prepared.dropped)
    if rows and "template" in rows[0]:
        per_t = df.groupby(["relation", "template"])["correct"].mean()
        m["per_template"] = {f"{r}|{t}": float(v) for (r, t), v in per_t.items()}
    return m


def run_probe(
    cfg: ProbeConfig,
    out_dir: str | Path,
    loaded=None,
    progress: bool = True,
    log: Callable[[str], None] = print,
    on_batch: Callable[[int, int], None] | None = None,
    prepared: PreparedData | None = None,
) -> ProbeOutcome:
    """Run (or resume) a probe; see the module docstring for the files written.

    `loaded` is an optional `factprobe.lm.models.LoadedModel` (else the model is loaded here,
    only if something is left to score). `on_batch(done, total)` is called after each batch.
    `prepared` skips data loading (the pipeline's data-build step made it already).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    key = cfg.results_key()
    cfg_path = out / RUN_CONFIG
    if cfg_path.exists():
        old = json.loads(cfg_path.read_text())
        if old.get("results_key") != key:
            raise ConfigError(
                f"{out} holds results of a different configuration (results key {old.get('results_key')} != {key}); "
                "use another --out or remove that folder"
            )
    else:
        atomic_write_json(cfg_path, {"results_key": key, "config": cfg.to_dict()})

    prepared = prepared or prepare_data(cfg)
    notes: list[str] = []

    def note(msg: str) -> None:
        notes.append(msg)
        log(f"note: {msg}")

    for rel, why in prepared.dropped.items():
        note(f"dropped {rel}: {why}")

    done: dict[str, dict] = {}
    for r in _read_rows(out / RESULTS) + _read_rows(out / CHECKPOINT):
        done.setdefault(r["key"], r)
    templates = {rel: _templates(cfg, rel) for rel in prepared.items} if cfg.probe in ("hgp", "mmp") else {}
    for rel, ts in templates.items():
        if not ts:
            raise ConfigError(f"no {cfg.probe.upper()} prompts for relation {rel} under the LPAQA prompts folder")

    def keys_for(item: MCItem) -> list[str]:
        return [f"{item.fact_id}#{t}" for t in templates[item.relation]] if templates else [item.fact_id]

    total = sum(len(keys_for(it)) for its in prepared.items.values() for it in its)
    resumed = sum(1 for its in prepared.items.values() for it in its for k in keys_for(it) if k in done)
    n_new = 0
    rev_path = out / MODEL_REVISION
    revision = rev_path.read_text().strip() if rev_path.exists() else ""  # the weights that scored the rows so far
    if resumed < total:
        if loaded is None:
            from ..lm.models import load_model

            loaded = load_model(cfg.model, device=cfg.device, dtype=cfg.dtype)
        now = getattr(loaded, "revision", "") or ""
        if resumed and revision and now and now != revision:
            raise ConfigError(
                f"{out} holds {resumed} results scored with model revision {revision}, but {cfg.model} is now "
                f"{now}; use another --out or remove that folder rather than mix weights"
            )
        if now and now != revision:
            atomic_write_text(rev_path, now + "\n")
        revision = now
        from ..lm.scorer import Scorer

        scorer = Scorer(loaded.model, loaded.tokenizer, device=loaded.device, token_budget=cfg.token_budget, max_length=loaded.max_length)
        ckpt = _Checkpoint(out / CHECKPOINT)
        bar = tqdm(total=total, initial=resumed, desc=f"{cfg.probe} {cfg.model}", unit="item", disable=not progress)

        def emit(rows: list[dict]) -> None:
            nonlocal n_new
            fresh = [r for r in rows if r["key"] not in done]
            ckpt.append(fresh)
            for r in fresh:
                done[r["key"]] = r
            n_new += len(fresh)
            bar.update(len(fresh))
            if on_batch:
                on_batch(len(done), total)

        try:
            for rel, items in prepared.items.items():
                todo = [it for it in items if any(k not in done for k in keys_for(it))]
                if not todo:
                    continue
                if cfg.probe == "ic-lke":
                    _score_ic_lke(scorer, cfg, rel, todo, prepared.train, note, emit)
                elif cfg.probe == "eic-lke":
                    _score_eic_lke(scorer, cfg, rel, todo, prepared.train, note, emit)
                else:
                    _score_prompts(scorer, cfg, rel, todo, prepared.train, note, emit, templates[rel])
        finally:
            bar.close()
            ckpt.close()
        stats = scorer.stats
        token_stats = {"tokens_forwarded": stats.total_tokens, "forwards": stats.forwards,
                       "tokenization_fallbacks": stats.fallbacks, "naive_tokens": stats.naive_tokens,
                       "token_savings": stats.savings}
    else:
        token_stats = {}
    token_stats["model_revision"] = revision

    ordered = [done[k] for its in prepared.items.values() for it in its for k in keys_for(it) if k in done]
    metrics = compute_metrics(ordered, prepared, seed=cfg.seed)
    metrics.update(token_stats)
    metrics["n_resumed"] = resumed
    metrics["notes"] = notes
    metrics["probe"] = cfg.probe
    metrics["model"] = cfg.model
    metrics["data_digest"] = prepared.test.digest()
    atomic_write_jsonl(out / RESULTS, ordered)
    atomic_write_json(out / METRICS, metrics)
    (out / CHECKPOINT).unlink(missing_ok=True)
    return ProbeOutcome(out, pd.DataFrame(ordered), metrics, prepared, n_new, resumed, notes)


def format_relation_table(metrics: dict) -> str:
    """Plain-text per-relation table for the terminal."""
    lines = [f"{'relation':<14}{'n':>6}{'accuracy':>10}{'95% CI':>18}{'gold prob':>11}"]
    for rel, m in sorted(metrics.get("per_relation", {}).items()):
        lo, hi = m.get("accuracy_ci", [float("nan")] * 2)
        lines.append(f"{rel:<14}{m['n']:>6}{m['accuracy']:>10.3f}{f'[{lo:.3f}, {hi:.3f}]':>18}{m.get('prob_mass', float('nan')):>11.3f}")
    lo, hi = metrics.get("accuracy_ci", [float("nan")] * 2)
    lines.append(f"{'micro':<14}{metrics['n']:>6}{metrics['accuracy']:>10.3f}{f'[{lo:.3f}, {hi:.3f}]':>18}{metrics['prob_mass']:>11.3f}")
    lo, hi = metrics.get("macro_accuracy_ci", [float("nan")] * 2)
    lines.append(f"{'macro':<14}{'':>6}{metrics.get('macro_accuracy', float('nan')):>10.3f}{f'[{lo:.3f}, {hi:.3f}]':>18}")
    return "\n".join(lines)
