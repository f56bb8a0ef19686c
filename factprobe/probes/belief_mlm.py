"""BELIEF for masked LMs (zhao2024, section 2; draft formulas 1-6): many `[MASK]` prompts per fact.

Data: the multi-prompt set (`factprobe.datasets.multiprompt`): one item per subject-relation pair
with every correct object as gold, and the relation's templates (LAMA, ParaRel, LPAQA
paraphrases, hand-written questions; `--template-sources`, `--max-templates`). Templates, the
LAMA relation file and the common vocabulary come from the data root the facts come from (the one
holding `--data`), or from `--templates-root`; when they come from another place than the facts
(or `--data` is in no data root), a note says so and metrics.json names `templates_root` and
`templates_note`. A template source that is asked for but missing under that root is an error
naming the path (leave it out with `--template-sources`); metrics.json lists `template_sources`
actually used, with the number of templates from each. `--draws` is at most
`factprobe.metrics.belief.MAX_DRAWS` (refused with the config, before any scoring). Every template of
the relation is asked for every pair: `render_mlm(template, subject, tokenizer.mask_token)`; both
`[Y]`-last and `[Y]`-inside templates are used (a masked LM sees both sides).

Single-token objects only, as LAMA. Vocabulary filter (`--vocab`):
- `model` (default, zhao2024's setting: the answer is ranked over "the entire vocabulary given by
  the model"): every token of the model's vocabulary except special tokens is a candidate; gold
  objects must be one token. It costs the same forwards as `common` (the softmax is over the full
  vocabulary either way; only the ranking is wider), so it is affordable on CPU for BERT-sized
  models.
- `common` (LAMA's setting, not the paper's): pairs keep only gold objects in LAMA's common
  vocabulary (`lama/common_vocab_cased.txt`, or `--vocab-file`), and the model ranks only the
  common-vocab words that are one token of its tokenizer (the output distribution restricted to
  them, as LAMA does). Pairs without such a gold are left out before scoring (counted per
  relation in metrics.json, `vocab_filter`).
A gold object is one token when `tokenizer(" " + label)` without special tokens is exactly one id
(the leading space makes BPE/SentencePiece vocabularies give their word-initial token). A pair
whose golds are all multi-token for this tokenizer yields rows with `skipped` set (the reason) and
is left out of every metric.

Per prompt: the model's distribution at the mask (softmax over the full vocabulary, in float32),
restricted to the candidates. `prediction`/`answer` = the top candidate (decoded, stripped);
`rank` = rank of the golden object = the highest-ranked correct token (stable descending sort;
`correct` = rank 1); `confidence` = the top candidate's probability; `confidence@10` = the
probability mass of the top 10 candidates (the confidence of Acc@10 for Overconf@10).

Metrics (`factprobe.metrics.belief.summarize_belief`): `acc@1`, `acc@10`, `mrr` (means over
`--draws` draws of one template per relation, seeded with `--seed`), each with `_range` and
`_stdev`; `consist` (exact agreement of predicted tokens; relations with one template are listed
under `consist_undefined`); `overconf@1`, `overconf@10` (10 equal-size bins; the bins are in
`calibration`); `coverage_avg|max|oracle`; `per_relation`; `bias_single`, `bias_multi` (prompt
bias from content-free subjects "N/A", "", "?", section 5.4; `--no-bias` skips it).

Rows (`results.jsonl`): one per (pair, template) with `key` `<fact_id>#<template_id>`,
`row_type` "fact". With bias on, each relation also has one `row_type` "content_free" row per
template (key `<relation>#content-free#<template_id>`, `fact_id` None) holding the
template's distribution over the relation's single-token gold objects (`candidate_probs`,
averaged over the three content-free subjects). Extra files: `belief_templates.parquet`
(per-template accuracy: which templates help), `belief_relations.parquet`,
`belief_calibration.parquet`.

Over 500 lines: one probe (config, items, scoring, metrics) whose masked-LM scoring path has no counterpart to share;
ruff format's one-argument-per-line calls take it past 500.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import ConfigBase, option
from ..datasets.multiprompt import MultiPromptItem, MultiPromptSet, render_mlm, template_source_metrics
from ..datasets.prepared import Prepared
from ..errors import ConfigError, DataError, ModelError
from ..framework.base import Probe, Session
from ..framework.config import RunConfig
from ..framework.registry import register
from ..framework.reporting import Headline
from ..seeding import stable_rng
from .belief_config import (
    belief_qa_templates_field,
    check_shared_fields,
    draws_field,
    max_templates_field,
    template_sources_field,
    templates_root_field,
)

VOCABS = ("common", "model")
COMMON_VOCAB = ("lama", "common_vocab_cased.txt")
TOP_K = 10
CONTENT_FREE = "content_free"


@dataclass
class BeliefMLMConfig(ConfigBase):
    """BELIEF (masked LM) fields."""

    draws: int = draws_field()
    vocab: str = option(
        "model",
        "candidate vocabulary: the model's whole vocabulary (zhao2024's setting) or LAMA's "
        "common vocabulary (single tokens of the model; LAMA's setting)",
        choices=VOCABS,
    )
    vocab_file: str | None = option(
        None, "common vocabulary file (default: lama/common_vocab_cased.txt under the templates' data root)"
    )
    template_sources: str = template_sources_field()
    max_templates: int | None = max_templates_field()
    belief_qa_templates: str | None = belief_qa_templates_field()
    templates_root: str | None = templates_root_field()
    bias: bool = option(True, "measure prompt bias with content-free subjects (N/A, empty, ?)")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_shared_fields(self)


@dataclass(frozen=True)
class ContentFreeItem:
    """The content-free prompts of one relation (prompt bias); not a fact."""

    relation: str

    @property
    def fact_id(self) -> str:
        return f"{self.relation}#content-free"


@dataclass
class _Vocab:
    """Candidate token ids and the id -> text map of the run's tokenizer."""

    ids: Any  # torch.LongTensor of candidate ids
    position: dict[int, int]  # token id -> column in the candidate distribution
    text: dict[int, str] = field(default_factory=dict)


@dataclass
class _RelationState:
    relation: str
    templates: list[dict[str, Any]]
    vocab: _Vocab
    bias_ids: list[int]  # candidate objects of the relation (content-free distribution)
    bias_labels: list[str]


def single_token_id(tokenizer, label: str) -> int | None:
    """The one token id of `label` (with a leading space), or None when it is several tokens."""
    ids = tokenizer(" " + label.strip(), add_special_tokens=False)["input_ids"]
    return ids[0] if len(ids) == 1 else None


def read_common_vocab(path: str | Path) -> list[str]:
    """The words of a LAMA common-vocabulary file (one per line). DataError when it is missing."""
    from ..io import read_text

    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: common vocabulary file not found (pass --vocab-file or --vocab model)")
    return [w.strip() for w in read_text(path).splitlines() if w.strip()]


def common_vocab_path(params: BeliefMLMConfig, prepared: Prepared) -> Path:
    """`--vocab-file`, else `lama/common_vocab_cased.txt` under the data root the templates come from
    (`prepared.info["templates_root"]`, the facts' data root; `factprobe.paths.data_root()` when unset)."""
    from ..paths import data_root

    if params.vocab_file:
        return Path(params.vocab_file)
    root = prepared.info.get("templates_root")
    return (Path(root) if root else data_root()).joinpath(*COMMON_VOCAB)


class BeliefMLM(Probe):
    name = "belief-mlm"
    description = (
        "BELIEF for masked LMs (zhao2024): every template of the relation as a [MASK] prompt; Acc@1/@10, "
        "MRR with range and stdev over template draws, consistency, overconfidence, coverage, prompt bias"
    )
    config_class = BeliefMLMConfig
    dataset = "multiprompt"
    model_kinds = ("masked",)
    batch_size = 4  # pairs per batch (each asked with every template of its relation)
    headline_metric = Headline("acc@1", "belief_accuracy")
    headline_keys = ("acc@1", "acc@10", "mrr", "acc@1_range", "acc@1_stdev", "consist", "overconf@1", "overconf@10")
    #: the predictions table (`predictions`: fact rows not skipped) and the content-free rows' prompt bias
    metric_columns = (
        "fact_id",
        "relation",
        "template_id",
        "correct",
        "prediction",
        "rank",
        "confidence",
        f"confidence@{TOP_K}",
        "row_type",
        "skipped",
        "candidate_probs",
    )

    # ---- data
    def prepare(self, cfg: RunConfig) -> Prepared:
        from ..datasets.multiprompt import prepare_multiprompt

        return prepare_multiprompt(
            cfg.base, cfg.params.template_sources.split(","), cfg.params.belief_qa_templates, cfg.params.templates_root
        )

    def validate(self, cfg: RunConfig, prepared: Prepared) -> None:
        """Choose each relation's templates (all, or a seeded sample of `--max-templates`) and
        apply the common-vocabulary filter; both recorded in `prepared.info`."""
        mp = MultiPromptSet.from_prepared(prepared)
        p = cfg.params
        chosen: dict[str, list[dict[str, Any]]] = {}
        for rel in prepared.items:
            recs = mp.templates_of(rel).to_dict("records")
            if p.max_templates is not None and len(recs) > p.max_templates:
                keep = set(stable_rng(cfg.base.seed, "belief-templates", rel).sample(range(len(recs)), p.max_templates))
                recs = [r for i, r in enumerate(recs) if i in keep]
            chosen[rel] = recs
        prepared.info["belief_mlm_templates"] = chosen
        prepared.info.pop("belief_items", None)  # a dataset validated before under another --vocab
        prepared.info.pop("belief_vocab_filter", None)
        if p.vocab == "common":
            words = set(read_common_vocab(common_vocab_path(p, prepared)))
            kept: dict[str, list[MultiPromptItem]] = {}
            counts: dict[str, dict[str, int]] = {}
            for rel, items in prepared.items.items():
                ok = [it for it in items if any(g in words for g in it.gold)]
                kept[rel] = ok
                counts[rel] = {"kept": len(ok), "not_in_common_vocab": len(items) - len(ok)}
            prepared.info["belief_vocab_filter"] = counts
            prepared.info["belief_items"] = {rel: [it.fact_id for it in its] for rel, its in kept.items()}
        if not any(self.groups(cfg, prepared).values()):
            raise ConfigError("belief-mlm: no pair has a gold object in the common vocabulary; use --vocab model")

    def groups(self, cfg: RunConfig, prepared: Prepared) -> dict[str, list[Any]]:
        keep = prepared.info.get("belief_items")
        out: dict[str, list[Any]] = {}
        for rel, items in prepared.items.items():
            wanted = None if keep is None else set(keep.get(rel, ()))
            its = [it for it in items if wanted is None or it.fact_id in wanted]
            if its:
                out[rel] = ([ContentFreeItem(rel)] if cfg.params.bias else []) + its
        return out

    def item_keys(self, cfg: RunConfig, prepared: Prepared, item: Any) -> list[str]:
        templates = prepared.info["belief_mlm_templates"][item.relation]
        if isinstance(item, ContentFreeItem):
            return [f"{item.relation}#content-free#{t['template_id']}" for t in templates]
        return [f"{item.fact_id}#{t['template_id']}" for t in templates]

    def check_model(self, cfg: RunConfig, prepared: Prepared, loaded: Any) -> None:
        if not getattr(loaded.tokenizer, "mask_token", None) or loaded.tokenizer.mask_token_id is None:
            raise ModelError(
                f"model {loaded.name}: its tokenizer has no mask token; belief-mlm needs a masked LM with a [MASK]-style token"
            )

    # ---- scoring
    def _vocab(self, session: Session) -> _Vocab:
        import torch

        cached = session._engines.get("belief_vocab")
        if cached is not None:
            return cached
        tok = session.loaded.tokenizer
        p = session.cfg.params
        if p.vocab == "common":
            words = read_common_vocab(common_vocab_path(p, session.prepared))
            ids = sorted({i for i in (single_token_id(tok, w) for w in words) if i is not None})
        else:
            special = set(tok.all_special_ids)
            ids = [i for i in range(len(tok)) if i not in special]
        if not ids:
            raise ModelError(f"model {session.loaded.name}: no candidate token in the {p.vocab} vocabulary")
        special = set(tok.all_special_ids)
        ids = [i for i in ids if i not in special]
        vocab = _Vocab(torch.tensor(ids, dtype=torch.long), {i: n for n, i in enumerate(ids)})
        session._engines["belief_vocab"] = vocab
        return vocab

    def open_relation(self, session: Session, relation: str) -> _RelationState:
        vocab = self._vocab(session)
        tok = session.loaded.tokenizer
        items = [it for it in self.groups(session.cfg, session.prepared).get(relation, []) if isinstance(it, MultiPromptItem)]
        labels: dict[int, str] = {}
        for it in items:
            for g in it.gold:
                i = single_token_id(tok, g)
                if i is not None and i in vocab.position:
                    labels.setdefault(i, g)
        return _RelationState(
            relation, session.prepared.info["belief_mlm_templates"][relation], vocab, list(labels), list(labels.values())
        )

    def _mask_distributions(self, session: Session, prompts: list[str], who: list[str]):
        """Softmax (float32) over the full vocabulary at the single mask of each prompt: [n, V]."""
        import torch

        from ..lm.body import decoder_parts

        m = session.loaded
        tok, model = m.tokenizer, m.model
        parts = decoder_parts(model)
        budget = session.cfg.base.token_budget or (8192 if m.device.type == "cuda" else 2048)
        out = []
        order = list(range(len(prompts)))
        enc_all = tok(prompts, add_special_tokens=True)["input_ids"]
        for n, ids in enumerate(enc_all):
            k = sum(1 for i in ids if i == tok.mask_token_id)
            if k != 1:
                raise DataError(f"{who[n]}: prompt {prompts[n]!r} has {k} mask tokens after tokenisation; expected 1")
            if len(ids) > m.max_length:
                from ..errors import ContextTooLongError

                raise ContextTooLongError(f"{who[n]}: prompt has {len(ids)} tokens, the model's window is {m.max_length}")
        per = max(1, budget // max(len(x) for x in enc_all))
        with torch.no_grad():
            for b in range(0, len(order), per):
                chunk = enc_all[b : b + per]
                width = max(len(x) for x in chunk)
                pad = tok.pad_token_id if tok.pad_token_id is not None else 0
                ids = torch.tensor([x + [pad] * (width - len(x)) for x in chunk], device=m.device)
                att = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in chunk], device=m.device)
                hidden = parts.body(input_ids=ids, attention_mask=att).last_hidden_state
                rows, cols = (ids == tok.mask_token_id).nonzero(as_tuple=True)
                logits = parts.head(hidden[rows, cols].unsqueeze(1)).squeeze(1)
                out.append(torch.softmax(logits.float(), dim=-1).cpu())
        return torch.cat(out, dim=0)

    def score_batch(self, session: Session, state: _RelationState, batch: Sequence[Any]) -> list[dict]:
        import torch

        tok = session.loaded.tokenizer
        mask = tok.mask_token
        vocab = state.vocab
        rows: list[dict] = []
        prompts: list[str] = []
        who: list[str] = []
        plan: list[tuple[Any, dict, str, list[int]]] = []  # (item, template, subject, gold ids)
        for it in batch:
            if isinstance(it, ContentFreeItem):
                continue
            gold_ids = list(
                dict.fromkeys(i for i in (single_token_id(tok, g) for g in it.gold) if i is not None and i in vocab.position)
            )
            if not gold_ids:
                rows += [
                    self._skipped_row(it, t, "no gold object is a single token of the model's candidate vocabulary")
                    for t in state.templates
                ]
                continue
            for t in state.templates:
                prompts.append(render_mlm(t["template"], it.subject, mask))
                who.append(f"fact {it.fact_id} ({t['template_id']})")
                plan.append((it, t, prompts[-1], gold_ids))
        if any(isinstance(it, ContentFreeItem) for it in batch):
            rows += self._content_free_rows(session, state)
        if not prompts:
            return rows
        probs = self._mask_distributions(session, prompts, who)[:, vocab.ids]  # [n, candidates]
        order = torch.argsort(probs, dim=1, descending=True, stable=True)
        ranks = torch.empty_like(order)
        ranks.scatter_(1, order, torch.arange(1, probs.shape[1] + 1).expand_as(order))
        top = order[:, :TOP_K]
        for n, (it, t, prompt, gold_ids) in enumerate(plan):
            cols = [vocab.position[g] for g in gold_ids]
            gold_ranks = ranks[n, cols]
            best = int(torch.argmin(gold_ranks))
            rank = int(gold_ranks[best])
            top_ids = [int(vocab.ids[j]) for j in top[n]]
            top_text = [self._text(tok, vocab, i) for i in top_ids]
            rows.append(
                {
                    "key": f"{it.fact_id}#{t['template_id']}",
                    "row_type": "fact",
                    "fact_id": it.fact_id,
                    "probe": self.name,
                    "relation": it.relation,
                    "subject": it.subject,
                    "template_id": t["template_id"],
                    "template": t["template"],
                    "source": t["source"],
                    "style": t["style"],
                    "prompt": prompt,
                    "prediction": top_text[0],
                    "answer": top_text[0],
                    "correct": rank == 1,
                    "rank": rank,
                    "confidence": float(probs[n, top[n, 0]]),
                    f"confidence@{TOP_K}": float(probs[n, top[n]].sum()),
                    "golden_object": self._text(tok, vocab, gold_ids[best]),
                    "gold": list(it.gold),
                    "top10": top_text,
                    "n_candidates": int(probs.shape[1]),
                    "skipped": None,
                }
            )
        return rows

    @staticmethod
    def _text(tok, vocab: _Vocab, token_id: int) -> str:
        if token_id not in vocab.text:
            vocab.text[token_id] = tok.decode([token_id]).strip()
        return vocab.text[token_id]

    def _skipped_row(self, it: MultiPromptItem, t: dict, why: str) -> dict:
        return {
            "key": f"{it.fact_id}#{t['template_id']}",
            "row_type": "fact",
            "fact_id": it.fact_id,
            "probe": self.name,
            "relation": it.relation,
            "subject": it.subject,
            "template_id": t["template_id"],
            "template": t["template"],
            "correct": None,
            "gold": list(it.gold),
            "skipped": why,
        }

    def _content_free_rows(self, session: Session, state: _RelationState) -> list[dict]:
        from ..metrics.belief import CONTENT_FREE_SUBJECTS

        mask = session.loaded.tokenizer.mask_token
        rows = []
        if len(state.bias_ids) < 2:
            return [
                {
                    "key": f"{state.relation}#content-free#{t['template_id']}",
                    "row_type": CONTENT_FREE,
                    "fact_id": None,
                    "probe": self.name,
                    "relation": state.relation,
                    "template_id": t["template_id"],
                    "candidate_probs": None,
                    "skipped": "fewer than two single-token candidate objects",
                }
                for t in state.templates
            ]
        prompts = [render_mlm(t["template"], s, mask) for t in state.templates for s in CONTENT_FREE_SUBJECTS]
        who = [f"{state.relation} content-free ({t['template_id']})" for t in state.templates for _ in CONTENT_FREE_SUBJECTS]
        probs = self._mask_distributions(session, prompts, who)[:, state.bias_ids]
        k = len(CONTENT_FREE_SUBJECTS)
        for n, t in enumerate(state.templates):
            mean = probs[n * k : (n + 1) * k].mean(dim=0)
            rows.append(
                {
                    "key": f"{state.relation}#content-free#{t['template_id']}",
                    "row_type": CONTENT_FREE,
                    "fact_id": None,
                    "probe": self.name,
                    "relation": state.relation,
                    "template_id": t["template_id"],
                    "template": t["template"],
                    "candidate_probs": {lab: float(v) for lab, v in zip(state.bias_labels, mean)},
                    "skipped": None,
                }
            )
        return rows

    # ---- metrics
    @staticmethod
    def predictions(rows: Sequence[dict]):
        """The scored fact rows as a predictions table (`factprobe.metrics.belief`)."""
        import pandas as pd

        df = pd.DataFrame([r for r in rows if r.get("row_type", "fact") == "fact" and not r.get("skipped")])
        if not df.empty:
            df["correct"] = df["correct"].astype(bool)
        return df

    def metrics(self, rows: Sequence[dict], prepared: Prepared, cfg: RunConfig) -> dict:
        import pandas as pd

        from ..metrics.belief import prompt_bias, summarize_belief

        df = self.predictions(rows)
        skipped = sorted({r["fact_id"] for r in rows if r.get("row_type", "fact") == "fact" and r.get("skipped")})
        m: dict[str, Any] = {}
        if not df.empty:
            m = summarize_belief(
                df,
                accuracies={"acc@1": "acc@1", f"acc@{TOP_K}": f"acc@{TOP_K}", "mrr": "mrr"},
                overconf={"overconf@1": 1, f"overconf@{TOP_K}": TOP_K},
                n_draws=cfg.params.draws,
                seed=cfg.base.seed,
            )
        else:
            m = {"acc@1": None, "reason": "no pair could be scored (every gold object is multi-token)"}
        cf = [r for r in rows if r.get("row_type") == CONTENT_FREE and r.get("candidate_probs")]
        if cf:
            dist = pd.DataFrame(
                [
                    {"relation": r["relation"], "template_id": r["template_id"], "candidate": c, "prob": p}
                    for r in cf
                    for c, p in r["candidate_probs"].items()
                ]
            )
            bias = prompt_bias(dist)
            m.update(bias_single=bias["bias_single"], bias_multi=bias["bias_multi"])
            for rel, b in bias["per_relation"].items():
                if rel in m.get("per_relation", {}):
                    m["per_relation"][rel].update(bias_single=b["single"], bias_multi=b["multi"])
        m.update(
            n_skipped_pairs=len(skipped),
            skipped_pairs=skipped[:50],
            vocab=cfg.params.vocab,
            vocab_filter=prepared.info.get("belief_vocab_filter"),
            dropped_relations=dict(prepared.dropped),
            templates_per_relation={r: len(t) for r, t in prepared.info.get("belief_mlm_templates", {}).items()},
        )
        m.update(
            template_source_metrics(
                prepared, prepared.info.get("belief_mlm_templates", {}), cfg.params.template_sources.split(",")
            )
        )
        return m

    def artifacts(self, rows, prepared, cfg: RunConfig, metrics: dict) -> dict[str, Any]:
        from ..metrics.belief import belief_tables

        df = self.predictions(rows)
        if df.empty:
            return {}
        return belief_tables(df, prepared.info["belief_mlm_templates"], metrics)


register(BeliefMLM())
