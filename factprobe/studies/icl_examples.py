"""`factprobe study icl-examples`: IC-LKE accuracy against the number of in-context examples n
(wu2024 section 3, Figure 1).

    factprobe study icl-examples --model smollm2-135m-instruct --source lama --relations P36 \\
        --n 0,1,2,5,10,20,30,50 --draws 3

What is measured
----------------
For every draw d (K = `--draws` seeded draws) and every n of `--n`: the IC-LKE accuracy (micro,
over every item of every relation) when each relation's prompt holds the FIRST n examples of draw
d. A draw is one `sample_examples(train, relation, max(--n), seed_d)` per relation (one example per
subject, the relation's test subjects excluded, as the IC-LKE probe draws them), so the examples
for n are a prefix of the examples for every larger n of the same draw. Draw 0 uses the run's
seed itself: its examples at n = max(--n) are exactly those of `factprobe probe ic-lke --examples
max(--n)`; draw d > 0 uses `draw_seed(seed, d)`. The prompt, the options and the scoring are the
IC-LKE probe's (`factprobe/probes/ic_lke.py`: `relation_prefix`, `fact_context`,
`option_continuation`, the scorer's one context rule, `score_choices` over batches of the probe's size).

- n = 0 is zero-context scoring: no examples, the context is the bare subject (the paper's x; the
  tokenizer's own special tokens once, as for every n: docs/probes.md "Contexts"), as
  `ic-lke --examples 0`; it does not depend on the draw, so it is scored once and its accuracy
  repeated for every draw (std 0).
- n larger than a relation's training split (fewer usable examples than n): n is capped at what
  there is, with one note naming the relation, the capped n and the cap. n whose examples do not
  fit the model's window: capped at the most that fit for every draw (`--on-too-long truncate`,
  noted) or refused (`refuse`). A capped n reuses the scores of its cap: nothing is scored twice.
- `<out>/metrics.json` (the dict `run` returns): `curve`, one record per n with `n`, `mean`,
  `std` (the sample standard deviation over the draws, ddof=1; null with one draw), `draws` (the
  accuracy of each draw), `n_items` and `n_used` (per relation, the examples actually used);
  `n95`, the smallest n whose mean reaches 95% of the mean at the largest n (`n95_threshold`);
  `per_relation`, the same curve per relation; `capped`; the draws' seeds; model, revision and
  data digest; the scorer's token counts.
- `<out>/curve.jsonl`: one row per (n, draw): accuracy, correct, n_items, seed, per-relation
  accuracy and examples used. `<out>/scores.jsonl`: one row per scored (relation, examples used,
  draw) and item: fact_id, correct, gold_prob, prediction (draw null for 0 examples, shared by all
  draws). `<out>/curve.png`: mean +- std per n on a symlog x axis, each draw's points, n95 marked.

How the examples' prefix is reused across n
-------------------------------------------
The scorer already shares a relation's examples prefix across its facts (a `PrefixCache`). Here
the n values of one draw are scored in increasing order, and the prefix cache of n is built by
`Scorer.extend`-ing the cache of the previous n with only the tokens of the examples it adds
(`PrefixChain`). So each example token of a draw is forwarded once per relation, not once per n
(recomputing forwards the sum over n of the prefix lengths: 841 tokens instead of 372 for LAMA
P36 with SmolLM2 and the default n list). This holds when the token ids of the shorter prefix text are a prefix of the
longer one's (true for the BPE tokenizers we use: each example starts with the separator); when a
tokenizer merges across the boundary the cache is recomputed from scratch for that n (exact, just
not shared) and `prefix_recomputed` counts it. Only the KV of the last prefix is kept. The facts'
own tokens must be forwarded again for every n (they attend to a different context), so the
whole-run saving is the prefix's share of the work: `benchmarks/bench_icl_examples.py` measured
the prefix 1.78x faster and the whole curve 1.09x faster with 10 facts x 20 options (less with
more options or facts, where the facts dominate). The extended cache equals a fresh forward of the same tokens up to float rounding (tested
to 1e-4 against the IC-LKE probe's own scores at the same examples).

Over 500 lines: one study, the examples curve (the shared-prefix scoring across n, n95 and its draws, the figure);
ruff format's one-argument-per-line calls take it past 500.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import option
from ..datasets.examples import sample_examples
from ..errors import ConfigError, ContextTooLongError
from ..facts import Fact, MCItem
from ..framework.config import BaseConfig
from ..io import atomic_write_jsonl
from ..probes.ic_lke import ICLKE, PROMPT_FORMATS, fact_context, option_continuation, relation_prefix
from ..probes.mc import ON_TOO_LONG, MCConfig, item_row, longest
from ..seeding import stable_seed
from .base import Study, StudyContext, StudyHeadline
from .registry import register

DEFAULT_N = (0, 1, 2, 5, 10, 20, 30, 50)
#: the share of the accuracy at the largest n that n95 must reach (wu2024 Figure 1's dashed lines)
SATURATION = 0.95


def parse_n_list(value: Any) -> list[int]:
    """`"0,1,5"`, `[0, 1, 5]` or `5` -> [0, 1, 5]. ConfigError (one line naming the value) unless
    every entry is a whole number >= 0 and the list is non-empty, ascending and without repeats."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ConfigError(f"n={value!r}: give at least one number of examples, e.g. 0,1,2,5,10")
    parts = value.split(",") if isinstance(value, str) else (list(value) if isinstance(value, (list, tuple)) else [value])
    out = []
    for p in parts:
        try:
            f = math.nan if isinstance(p, bool) else float(str(p).strip())
        except ValueError:
            f = math.nan
        if not math.isfinite(f) or f != int(f):
            raise ConfigError(f"n={value!r}: {str(p).strip()!r} is not a whole number")
        out.append(int(f))
    if any(k < 0 for k in out):
        raise ConfigError(f"n={value!r}: numbers of examples must be >= 0")
    if out != sorted(set(out)):
        raise ConfigError(f"n={value!r}: give each n once, in increasing order (e.g. 0,1,2,5,10)")
    return out


@dataclass
class ICLExamplesConfig(MCConfig):
    """The curve's own options, plus IC-LKE's prompt options (`ic_lke.ICLKEConfig` without `examples`)."""

    n: list[int] | None = option(None, "numbers of in-context examples, increasing (default: 0,1,2,5,10,20,30,50)")
    draws: int = option(5, 'seeded example draws per n, the mean and std are over these (wu2024 Figure 1: "five random seeds")')
    separator: str = option(" ", "between subject and object (and, in the paper format, between examples)")
    prompt_format: str = option(
        "paper",
        "paper: x1 S y1 S ... x S option (Eq. 1); official: the ZeroPrompt_LKE code's 'x1 S y1 , ... xn S yn x S S option'",
        choices=PROMPT_FORMATS,
    )
    drop_self_examples: bool = option(False, "never use a training fact whose subject equals its object as an example")
    on_too_long: str = option(
        "truncate",
        "examples longer than the model's window: cap n at the most that fit (truncate) or refuse",
        choices=ON_TOO_LONG,
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self.n = parse_n_list(list(DEFAULT_N) if self.n is None else self.n)
        self.check(isinstance(self.draws, int) and self.draws >= 1, "draws", self.draws, "must be >= 1")
        self.check(bool(self.separator), "separator", self.separator, "must not be empty")


def draw_seed(seed: int, draw: int) -> int:
    """The example-sampling seed of draw `draw`: the run's seed for draw 0 (so draw 0 at the
    largest n is the IC-LKE probe's own examples), a stable hash of (seed, draw) otherwise."""
    return seed if draw == 0 else stable_seed(seed, "icl-examples draw", draw) % (2**32)


# ------------------------------------------------------------------ planning (no model forward)
@dataclass
class RelationPlan:
    """One relation's items and example draws. `cap`: the most examples usable by every draw (the
    training split and the model's window); n examples means `min(n, cap)`."""

    relation: str
    items: list[MCItem]
    draws: list[list[Fact]]
    cap: int

    def used(self, n: int) -> int:
        return min(n, self.cap)


def _fits(scorer, examples: Sequence[Fact], k: int, cfg: ICLExamplesConfig, tail: int) -> bool:
    text = relation_prefix(examples[:k], cfg.separator, cfg.prompt_format)
    return len(scorer.encode_context(text)) + tail <= scorer.max_length


def plan_relation(
    scorer,
    relation: str,
    items: list[MCItem],
    train,
    test_facts: Iterable[Fact],
    cfg: ICLExamplesConfig,
    seed: int,
    note: Callable[[str], None],
) -> RelationPlan:
    """Draw the relation's examples (module docstring) and find the cap; notes each capped n once."""
    n_max = max(cfg.n)
    test_facts = list(test_facts)
    draws = [
        sample_examples(
            train, relation, n_max, seed=draw_seed(seed, d), exclude_subjects=test_facts, drop_self=cfg.drop_self_examples
        )
        for d in range(cfg.draws)
    ]
    cap = min(len(e) for e in draws)
    if cap < n_max:
        over = [n for n in cfg.n if n > cap]
        note(
            f"{relation}: n={','.join(map(str, over))} capped at {cap}: the training examples available "
            "(one per subject, test subjects excluded)"
        )
    sep, fmt = cfg.separator, cfg.prompt_format
    subject, opt = longest(items)
    tail_text = (f"{sep}{subject}" if fmt == "paper" else f"{subject}{sep}") + option_continuation(opt, sep)
    tail = len(scorer.encode_continuation(tail_text)) + 2  # as the IC-LKE probe's fit_examples
    fit = cap
    for examples in draws:
        while fit > 0 and not _fits(scorer, examples, fit, cfg, tail):
            fit -= 1
    if fit < cap:
        over = [n for n in cfg.n if n > fit]
        if cfg.on_too_long == "refuse" or fit == 0:
            raise ContextTooLongError(
                f"{relation}: n={','.join(map(str, over))} examples exceed the model's context window of "
                f"{scorer.max_length} tokens" + ("; lower --n" if fit else " even with one example")
            )
        note(
            f"{relation}: n={','.join(map(str, over))} capped at {fit}: the model's window "
            f"({scorer.max_length} tokens) holds no more examples"
        )
    return RelationPlan(relation, list(items), [e[:fit] for e in draws], fit)


# ------------------------------------------------------------------ scoring
class PrefixChain:
    """Prefix caches of growing texts: each `get(text)` extends the previous cache by the new
    tokens when its token ids start with the previous ones (`reuse=True`), else runs the prefix
    from scratch. `extended` counts the extensions, `recomputed` the prefixes run from scratch
    although an earlier one existed (a tokenization that does not extend, or `reuse=False`)."""

    def __init__(self, scorer, reuse: bool = True) -> None:
        self.scorer = scorer
        self.reuse = reuse
        self.last = None
        self.extended = 0
        self.recomputed = 0

    def get(self, text: str):
        """The PrefixCache of `text` (encoded as a context), or None for an empty text."""
        if not text:
            return None
        ids = self.scorer.encode_context(text)
        last = self.last
        if self.reuse and last is not None and len(last) and list(last.token_ids) == ids[: len(last)]:
            cache = last if len(ids) == len(last) else self.scorer.extend(last, ids[len(last) :])
            self.extended += 1
        else:
            cache = self.scorer.prefix(ids)
            self.recomputed += last is not None
        self.last = cache
        return cache


def score_items(
    scorer, items: Sequence[MCItem], examples: Sequence[Fact], cache, cfg: ICLExamplesConfig, keep_logprobs: bool = False
) -> list[dict]:
    """IC-LKE rows of `items` with `examples` in the prompt (`cache`: the PrefixCache of the
    examples' text, right-stripped, or None), scored as `ICLKE.score_batch` does, batch by batch.
    Rows are slim (fact_id, relation, gold_index, prediction, correct, gold_prob) plus `logprobs`
    and `context` with `keep_logprobs`."""
    from ..lm.scorer import ChoiceRequest

    sep, fmt = cfg.separator, cfg.prompt_format
    prefix_text = relation_prefix(examples, sep, fmt)
    rows = []
    for b in range(0, len(items), ICLKE.batch_size):
        batch = items[b : b + ICLKE.batch_size]
        contexts = [fact_context(prefix_text, it.subject, sep, fmt) for it in batch]
        reqs = [ChoiceRequest(c, [option_continuation(o, sep) for o in it.options]) for c, it in zip(contexts, batch)]
        for it, c, s in zip(batch, contexts, scorer.score_choices(reqs, shared_prefix=cache)):
            full = item_row(it, c, s, ICLKE.name)
            row = {k: full[k] for k in ("fact_id", "relation", "gold_index", "prediction", "correct", "gold_prob")}
            if keep_logprobs:
                row.update(logprobs=full["logprobs"], context=c)
            rows.append(row)
    return rows


@dataclass
class CurveScores:
    """Rows of every scored (relation, examples used, draw): `rows[(relation, k, draw)]`, draw
    None for k = 0 (shared by every draw). `prefix_extended` / `prefix_recomputed`: PrefixChain counts."""

    plans: dict[str, RelationPlan]
    rows: dict[tuple[str, int, int | None], list[dict]] = field(default_factory=dict)
    prefix_extended: int = 0
    prefix_recomputed: int = 0

    def rows_at(self, relation: str, n: int, draw: int) -> list[dict]:
        k = self.plans[relation].used(n)
        return self.rows[(relation, k, None if k == 0 else draw)]


def score_curve(
    scorer,
    plans: Mapping[str, RelationPlan],
    cfg: ICLExamplesConfig,
    *,
    reuse_prefix: bool = True,
    keep_logprobs: bool = False,
    progress: bool = False,
    on_batch: Callable[[int, int], None] | None = None,
) -> CurveScores:
    """Score every distinct (relation, examples used, draw) once: per relation the 0-example
    rows, then per draw the used counts in increasing order through one `PrefixChain`.
    `on_batch(done, total)`: called after each (relation, examples used, draw) with the items scored so far."""
    from tqdm.auto import tqdm

    out = CurveScores(plans=dict(plans))
    todo = {r: sorted({p.used(n) for n in cfg.n}) for r, p in plans.items()}
    total = sum(len(p.items) * sum(1 if k == 0 else len(p.draws) for k in todo[r]) for r, p in plans.items())
    with tqdm(total=total, desc="icl-examples", unit="item", disable=not progress) as bar:
        for rel, plan in plans.items():
            if 0 in todo[rel]:
                out.rows[(rel, 0, None)] = score_items(scorer, plan.items, [], None, cfg, keep_logprobs)
                bar.update(len(plan.items))
                if on_batch:
                    on_batch(bar.n, total)
            for d, examples in enumerate(plan.draws):
                chain = PrefixChain(scorer, reuse=reuse_prefix)
                for k in (k for k in todo[rel] if k > 0):
                    cache = chain.get(relation_prefix(examples[:k], cfg.separator, cfg.prompt_format).rstrip())
                    out.rows[(rel, k, d)] = score_items(scorer, plan.items, examples[:k], cache, cfg, keep_logprobs)
                    bar.update(len(plan.items))
                    if on_batch:
                        on_batch(bar.n, total)
                out.prefix_extended += chain.extended
                out.prefix_recomputed += chain.recomputed
    return out


# ------------------------------------------------------------------ metrics (pure)
def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    import numpy as np

    arr = np.asarray(values, dtype=float)
    if arr.size == 0 or np.isnan(arr).any():
        return math.nan, math.nan
    return float(arr.mean()), (float(arr.std(ddof=1)) if arr.size > 1 else math.nan)


def curve_records(accuracy: Mapping[int, Sequence[float]]) -> list[dict]:
    """{n: [accuracy of each draw]} -> one record per n (ascending): n, mean, std (ddof=1), draws."""
    out = []
    for n in sorted(accuracy):
        mean, std = _mean_std(accuracy[n])
        out.append({"n": n, "mean": mean, "std": std, "draws": [float(a) for a in accuracy[n]]})
    return out


def n95(curve: Sequence[Mapping[str, Any]], share: float = SATURATION) -> tuple[int | None, float]:
    """(smallest n whose mean reaches `share` x the mean at the largest n, that threshold);
    (None, nan) when the mean at the largest n is undefined."""
    if not curve or curve[-1]["mean"] is None or math.isnan(curve[-1]["mean"]):
        return None, math.nan
    threshold = share * curve[-1]["mean"]
    return next(r["n"] for r in curve if r["mean"] is not None and r["mean"] >= threshold), threshold


def curve_metrics(scores: CurveScores, cfg: ICLExamplesConfig, seed: int) -> tuple[dict, list[dict]]:
    """(metrics, curve.jsonl rows) from the scores: micro accuracy per (n, draw) over every item."""
    plans = scores.plans
    table: list[dict] = []
    overall: dict[int, list[float]] = {}
    per_rel: dict[str, dict[int, list[float]]] = {r: {} for r in plans}
    for n in cfg.n:
        overall[n] = []
        for d in range(cfg.draws):
            correct = n_items = 0
            rel_acc, used = {}, {}
            for rel, plan in plans.items():
                rows = scores.rows_at(rel, n, d)
                c = sum(bool(r["correct"]) for r in rows)
                rel_acc[rel] = c / len(rows) if rows else math.nan
                used[rel] = plan.used(n)
                per_rel[rel].setdefault(n, []).append(rel_acc[rel])
                correct += c
                n_items += len(rows)
            acc = correct / n_items if n_items else math.nan
            overall[n].append(acc)
            table.append(
                {
                    "n": n,
                    "draw": d,
                    "seed": draw_seed(seed, d),
                    "accuracy": acc,
                    "correct": correct,
                    "n_items": n_items,
                    "per_relation": rel_acc,
                    "n_used": used,
                }
            )
    curve = curve_records(overall)
    n_items = sum(len(p.items) for p in plans.values())
    for rec in curve:
        rec["n_items"] = n_items
        rec["n_used"] = {rel: p.used(rec["n"]) for rel, p in plans.items()}
    at, threshold = n95(curve)
    capped = {rel: {"cap": p.cap, "n": [n for n in cfg.n if n > p.cap]} for rel, p in plans.items() if p.cap < max(cfg.n)}
    metrics = {
        "curve": curve,
        "n95": at,
        "n95_threshold": threshold,
        "n_largest": cfg.n[-1],
        "per_relation": {rel: curve_records(v) for rel, v in per_rel.items()},
        "capped": capped,
        "draws": cfg.draws,
        "draw_seeds": [draw_seed(seed, d) for d in range(cfg.draws)],
        "n_items": n_items,
        "relations": list(plans),
        "prefix_extended": scores.prefix_extended,
        "prefix_recomputed": scores.prefix_recomputed,
    }
    return metrics, table


# ------------------------------------------------------------------ figure
def curve_figure(metrics: Mapping[str, Any], title: str):
    """mean +- std per n (symlog x axis, so n = 0 shows), each draw's accuracies as dots, n95 dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    curve = metrics["curve"]
    ns = np.array([r["n"] for r in curve], dtype=float)
    mean = np.array([np.nan if r["mean"] is None else r["mean"] for r in curve], dtype=float)
    std = np.nan_to_num(np.array([np.nan if r["std"] is None else r["std"] for r in curve], dtype=float))
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for r in curve:
        ax.scatter([r["n"]] * len(r["draws"]), r["draws"], s=10, color="tab:blue", alpha=0.35, linewidths=0)
    ax.plot(ns, mean, marker="o", color="tab:blue", label=f"mean over {metrics['draws']} draw(s)")
    ax.fill_between(ns, mean - std, mean + std, color="tab:blue", alpha=0.2, label="± std")
    if metrics.get("n95") is not None:
        ax.axvline(metrics["n95"], color="tab:red", linestyle="--", label=f"n95 = {metrics['n95']}")
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xticks(ns, [str(int(n)) for n in ns])
    ax.set_xlim(ns.min() - 0.3, ns.max() * 1.15 + 0.3)
    ax.set_ylim(0, 1)
    ax.set_xlabel("in-context examples n")
    ax.set_ylabel("accuracy")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------ the study
def _print_note(msg: str) -> None:
    print(f"note: {msg}", file=sys.stderr)


def examples_curve(
    base: BaseConfig,
    cfg: ICLExamplesConfig,
    out: str | Path,
    progress: bool = True,
    note: Callable[[str], None] = _print_note,
    *,
    loaded=None,
    on_batch: Callable[[int, int], None] | None = None,
    prepared=None,
) -> dict[str, Any]:
    """Run the curve (module docstring) into the existing folder `out`: writes curve.jsonl,
    scores.jsonl and curve.png, returns the metrics (not written: the caller writes metrics.json).
    `on_batch(done, total)`: progress in items scored (`score_curve`).
    `loaded`: an already loaded `LoadedModel` of `base.model` (else loaded here); `prepared`: the
    items `ICLExamplesStudy.prepare` read (else read here)."""
    from ..datasets.mc_dataset import prepare_mc
    from ..lm.scorer import Scorer
    from ..models import load_model, require_kind

    out = Path(out)
    if prepared is None:
        prepared = prepare_mc(base, choices=cfg.choices, skip_small_relations=cfg.skip_small_relations)
    for why in prepared.dropped.values():
        note(f"dropped {why}")
    if loaded is None:
        loaded = load_model(
            base.model,
            device=base.device,
            dtype=base.dtype,
            base_model=base.base_model,
            device_map=base.device_map,
            max_memory=base.max_memory,
        )
    require_kind(loaded, ("causal",), "study icl-examples")
    scorer = Scorer(
        loaded.model, loaded.tokenizer, device=loaded.device, token_budget=base.token_budget, max_length=loaded.max_length
    )
    plans = {
        rel: plan_relation(
            scorer, rel, items, prepared.train, (f for f in prepared.test if f.relation == rel), cfg, base.seed, note
        )
        for rel, items in prepared.items.items()
    }
    scores = score_curve(scorer, plans, cfg, progress=progress, on_batch=on_batch)
    metrics, table = curve_metrics(scores, cfg, base.seed)
    s = scorer.stats
    metrics.update(
        model=base.model,
        model_revision=getattr(loaded, "revision", "") or "",
        model_is_random=bool(getattr(loaded, "is_random", False)),
        data_digest=prepared.digest(),
        dropped_relations=dict(prepared.dropped),
        tokens_forwarded=s.total_tokens,
        prefix_tokens=s.prefix_tokens,
        forwards=s.forwards,
        tokenization_fallbacks=s.fallbacks,
    )
    atomic_write_jsonl(out / "curve.jsonl", table)
    atomic_write_jsonl(
        out / "scores.jsonl",
        (
            {"relation": rel, "n_used": k, "draw": d, **{c: r[c] for c in ("fact_id", "correct", "gold_prob", "prediction")}}
            for (rel, k, d), rows in scores.rows.items()
            for r in rows
        ),
    )
    fig = curve_figure(
        metrics,
        f"IC-LKE accuracy vs in-context examples\n{Path(base.model).name}"
        + (" (RANDOM weights, not a result)" if metrics["model_is_random"] else ""),
    )
    from ..report.plots import save_png  # matplotlib loads only when a figure is drawn

    save_png(fig, out / "curve.png")  # closes the figure
    return metrics


def _fmt(v: Any) -> str:
    return "   n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:6.3f}"


class ICLExamplesStudy(Study):
    name = "icl-examples"
    description = "IC-LKE accuracy against the number of in-context examples (wu2024 Figure 1)"
    config_class = ICLExamplesConfig
    uses_base = True
    headline_metric = StudyHeadline(
        "n95", higher_is_better=False, label="fewest in-context examples reaching 95% of the accuracy at the largest n"
    )

    def prepare(self, ctx: StudyContext) -> Any:
        """The multiple-choice items (the data is read and checked before the MLflow run opens)."""
        from ..datasets.mc_dataset import prepare_mc

        assert ctx.base is not None
        return prepare_mc(ctx.base, choices=ctx.cfg.choices, skip_small_relations=ctx.cfg.skip_small_relations)  # type: ignore[attr-defined]

    def run(self, ctx: StudyContext) -> dict[str, Any]:
        assert ctx.base is not None
        return examples_curve(
            ctx.base,
            ctx.cfg,
            ctx.out,
            ctx.progress,
            ctx.note,  # type: ignore[arg-type]
            on_batch=ctx.batch_progress(f"icl-examples {Path(ctx.base.model).name}"),
            prepared=ctx.prepared,
        )

    def summary(self, metrics: Mapping[str, Any]) -> list[str]:
        curve = metrics.get("curve") or []
        lines = [
            f"IC-LKE accuracy by number of in-context examples ({metrics.get('draws')} draw(s), "
            f"{metrics.get('n_items')} items, {metrics.get('model')})"
            + ("; RANDOM weights, not a result" if metrics.get("model_is_random") else ""),
            f"{'n':>5} {'mean':>6} {'std':>6}  draws",
        ]
        for r in curve:
            lines.append(f"{r['n']:>5} {_fmt(r['mean'])} {_fmt(r['std'])}  " + " ".join(_fmt(a).strip() for a in r["draws"]))
        if metrics.get("n95") is not None:
            lines.append(
                f"n95 = {metrics['n95']}: the smallest n reaching 95% of the mean accuracy at n={metrics.get('n_largest')} "
                f"(>= {metrics['n95_threshold']:.3f})"
            )
        for rel, c in (metrics.get("capped") or {}).items():
            lines.append(f"{rel}: n={','.join(map(str, c['n']))} used {c['cap']} examples (capped)")
        return lines

    def flat_metrics(self, metrics: Mapping[str, Any]) -> dict[str, float]:
        """`n95`, `n_items`, `accuracy/n/<n>` (mean) and `accuracy_std/n/<n>` per n of the curve."""
        out: dict[str, float] = {}
        for key in ("n95", "n95_threshold", "n_items", "draws"):
            v = metrics.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[key] = float(v)
        for r in metrics.get("curve") or []:
            for name, v in (("accuracy", r["mean"]), ("accuracy_std", r["std"])):
                if v is not None:
                    out[f"{name}/n/{r['n']}"] = float(v)
        return out


STUDY = register(ICLExamplesStudy())
