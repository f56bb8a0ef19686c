"""`factprobe study icl-sequence`: the position study with injected examples (wu2024 section 3,
Figure 2).

One long sequence of `--length` (subject, object) examples of a relation, written as IC-LKE writes
its examples (`x1 S y1 S x2 S y2 ...`; `factprobe.studies.sequence_data`), and the probability of
every object given everything before it (Figure 2a). Variants replace `--replace` positions with
`unknown` (fictitious subjects, plausible objects) or `incorrect` (true subjects, wrong objects)
examples, placed at `random` positions or as one `block` (Figures 2b-2e). `--kind none` replaces
nothing (`--replace` is ignored). `--train-data` (LPAQA training facts) never enters the sequence:
an incorrect object is wrong against those facts too, and a fictitious subject equals none of
their subjects (data that is true somewhere is never "incorrect" or "fictitious").

How a probability is computed: ONE forward pass of the whole sequence per relation, not one per
position. The object at position i has `prefix` = the exact text before it; its log-prob is the
sum of its token log-probs given everything before them, split as the scorer and
`factprobe.lm.naive.naive_logprob(model, tokenizer, prefix, object)` split it (whitespace at the
end of the prefix goes to the object, the harness rule; `prob = exp(logprob)`). The one forward
gives exactly that number whenever the tokens of `prefix + object` are a prefix of the whole
sequence's tokens; for a position where they are not (a token merged across the object's end),
that position is scored on its own (exact; counted in `tokenization_fallbacks`).

A variant run also scores the clean sequence (the same examples without replacements; one more
forward), so every row carries `prob_clean` and the metrics give the paired drop.

Outputs in `<out>`:
- `positions.jsonl`: one row per (relation, position): `relation`, `position`, `subject`, `object`,
  `replaced`, `kind` (`unknown`/`incorrect` on replaced rows, else null), `fictitious_subject`,
  `group` (`replaced`, `after_replaced` = right after a replaced one, or `correct` = the rest),
  `replaced_before` (replaced examples before the position: how many its context holds),
  `prob`, `logprob`, `prefix`, and for variants `prob_clean`, `original_subject`/`original_object`
  (the clean example at a replaced position);
- `metrics.json` (returned): pooled over relations, `mean_prob_correct` (the `correct` group:
  Figure 2's blue dots and dashed line), `mean_prob_replaced`, `mean_prob_after_replaced`,
  `mean_prob_not_replaced` (correct + after_replaced), each with a 95% bootstrap `_ci` and its
  `n_`; for variants `drop_<group>` = mean of (prob_clean - prob) over that group's positions
  (with `_ci`); `per_relation` (the same per relation, plus tokens and fallbacks); `curve` (Figure
  2a): per position the mean prob over relations, its centred moving average (`--smooth`), the
  clean mean and the share of relations replaced there;
- `positions.png` (prob per position, one panel per relation, replaced positions red, the ones
  right after them cyan, the mean of the correct ones dashed) and `groups.png` (mean prob by group,
  variant against clean, and the smoothed curves).

Over 500 lines: one study, the position study (one forward of a whole sequence, the placements, the figure); its data
build is already in sequence_data, and ruff format's one-argument-per-line calls add the rest.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..config import ConfigBase, option
from ..errors import ConfigError, DataError
from ..io import atomic_write_jsonl
from .base import Study, StudyContext, StudyHeadline
from .registry import register
from .sequence_data import KINDS, PLACEMENTS, SequenceExample, build_sequence, sequence_texts

GROUPS = ("correct", "replaced", "after_replaced")
POSITIONS_FILE = "positions.jsonl"
MAX_PANELS = 12  # positions.png draws at most this many relations


@dataclass
class ICLSequenceConfig(ConfigBase):
    """The position study's own options (module docstring)."""

    length: int = option(200, "examples in the sequence (wu2024: 200)")
    replace: int = option(40, "examples replaced in a variant (wu2024: 40); ignored with --kind none")
    kind: str = option(
        "none",
        "none: the clean sequence (Figure 2a); unknown: fictitious subjects with plausible objects; "
        "incorrect: true subjects with wrong objects",
        choices=KINDS,
    )
    placement: str = option("random", "replaced examples at random positions or as one contiguous block", choices=PLACEMENTS)
    separator: str = option(" ", "between subject and object and between examples (IC-LKE's paper format)")
    smooth: int = option(11, "window (positions) of the centred moving average of the curve")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check(self.length >= 1, "length", self.length, "must be >= 1")
        self.check(self.replace >= 0, "replace", self.replace, "must be >= 0")
        self.check(
            self.kind == "none" or self.replace <= self.length, "replace", self.replace, f"must be <= length ({self.length})"
        )
        self.check(bool(self.separator), "separator", self.separator, "must not be empty")
        self.check(self.smooth >= 1, "smooth", self.smooth, "must be >= 1")

    @property
    def replaced(self) -> int:
        """Positions actually replaced: 0 with kind none."""
        return 0 if self.kind == "none" else self.replace


# ------------------------------------------------------------------ scoring: one forward per sequence
@dataclass
class SequenceScores:
    """Summed log-probs of each position's object, and what it cost."""

    logprobs: list[float]
    tokens: int  # tokens of the whole sequence (the one forward)
    fallbacks: int  # positions scored on their own (tokenization broke at the object's end)


def _too_long(relation: str, lengths: Sequence[int], window: int) -> ConfigError:
    fits = sum(1 for n in lengths if n <= window)
    return ConfigError(
        f"relation {relation}: the sequence of {len(lengths)} examples is {lengths[-1]} tokens, over the "
        f"model's context window of {window} tokens; use --length {fits} or fewer"
    )


def score_sequence(scorer, prefixes: Sequence[str], objects: Sequence[str], relation: str = "") -> SequenceScores:
    """log P(objects[i] | prefixes[i]) for every i from ONE forward of the whole sequence
    `prefixes[-1] + objects[-1]` (module docstring), where `prefixes[i] + objects[i]` is a prefix
    of the next text. `scorer` is a `factprobe.lm.scorer.Scorer`. ConfigError (one line naming the
    lengths and a --length that fits) when the sequence exceeds the model's context window."""
    from ..lm.scorer import ChoiceRequest, Segment, split_point, split_trailing_whitespace

    pairs = [split_trailing_whitespace(p, o) for p, o in zip(prefixes, objects)]
    enc = scorer.tokenizer([c for c, _ in pairs] + [c + o for c, o in pairs], add_special_tokens=True)["input_ids"]
    ctx_ids, end_ids = enc[: len(pairs)], enc[len(pairs) :]
    whole = list(end_ids[-1])
    if len(whole) > scorer.max_length:
        raise _too_long(relation, [len(e) for e in end_ids], scorer.max_length)
    spans: list[tuple[int, int]] = []
    own: list[int] = []  # positions scored on their own
    for i, (c, e) in enumerate(zip(ctx_ids, end_ids)):
        start = split_point(c, e)
        if 0 < start < len(e) and list(e) == whole[: len(e)]:
            spans.append((start, len(e)))
        else:
            own.append(i)
    one = sorted(set(range(len(pairs))) - set(own))
    logprobs = [math.nan] * len(pairs)
    if spans:
        (sums,) = scorer.score_segments(scorer.prefix([]), [Segment(whole, -1, spans)])
        for i, v in zip(one, sums):
            logprobs[i] = v
    for i in own:
        logprobs[i] = float(scorer.score_choices([ChoiceRequest(prefixes[i], [objects[i]])])[0][0])
    return SequenceScores(logprobs=logprobs, tokens=len(whole), fallbacks=len(own))


# ------------------------------------------------------------------ rows and metrics (pure)
def position_rows(
    relation: str,
    examples: Sequence[SequenceExample],
    prefixes: Sequence[str],
    logprobs: Sequence[float],
    clean_logprobs: Sequence[float] | None = None,
) -> list[dict[str, Any]]:
    """The `positions.jsonl` rows of one relation (module docstring)."""
    rows = []
    before = 0  # replaced examples in the context of position i (block vs random compares equal counts)
    for i, (ex, prefix, lp) in enumerate(zip(examples, prefixes, logprobs)):
        after = not ex.replaced and i > 0 and examples[i - 1].replaced
        row: dict[str, Any] = {
            "relation": relation,
            "position": ex.position,
            "subject": ex.subject,
            "object": ex.object,
            "replaced": ex.replaced,
            "kind": ex.kind,
            "fictitious_subject": ex.fictitious_subject,
            "group": "replaced" if ex.replaced else "after_replaced" if after else "correct",
            "replaced_before": before,
            "prob": math.exp(lp),
            "logprob": lp,
            "prefix": prefix,
        }
        if clean_logprobs is not None:
            row["prob_clean"] = math.exp(clean_logprobs[i])
            row["original_subject"], row["original_object"] = ex.original_subject, ex.original_object
        rows.append(row)
        before += bool(ex.replaced)
    return rows


def _mean_ci(values: Sequence[float]) -> tuple[float, list[float] | None]:
    from ..metrics.bootstrap import bootstrap_ci

    if not values:
        return math.nan, None
    mean = float(sum(values) / len(values))
    if len(values) < 2:
        return mean, None
    lo, hi = bootstrap_ci(values)
    return mean, [float(lo), float(hi)]


def group_metrics(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Mean prob (95% bootstrap interval, n) of each group and of all non-replaced rows; with
    `prob_clean` in the rows also the paired drop clean - variant per group."""
    groups = {g: [r for r in rows if r["group"] == g] for g in GROUPS}
    groups["not_replaced"] = groups["correct"] + groups["after_replaced"]
    out: dict[str, Any] = {}
    paired = bool(rows) and all("prob_clean" in r for r in rows)
    for g, members in groups.items():
        out[f"mean_prob_{g}"], out[f"mean_prob_{g}_ci"] = _mean_ci([r["prob"] for r in members])
        out[f"n_{g}"] = len(members)
        if paired:
            out[f"mean_prob_clean_{g}"], _ = _mean_ci([r["prob_clean"] for r in members])
            out[f"drop_{g}"], out[f"drop_{g}_ci"] = _mean_ci([r["prob_clean"] - r["prob"] for r in members])
    return out


def _moving_average(values: Sequence[float], window: int) -> list[float]:
    half = window // 2
    out = []
    for i in range(len(values)):
        part = [v for v in values[max(0, i - half) : i + (window - half)] if not math.isnan(v)]
        out.append(sum(part) / len(part) if part else math.nan)
    return out


def position_curve(rows: Sequence[Mapping[str, Any]], smooth: int) -> list[dict[str, Any]]:
    """Figure 2a's curve: per position the mean prob over relations, its centred moving average
    (window `smooth`), the clean mean (variants) and the share of relations replaced there."""
    by_pos: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        by_pos[r["position"]].append(r)
    positions = sorted(by_pos)
    mean = [sum(r["prob"] for r in by_pos[p]) / len(by_pos[p]) for p in positions]
    smoothed = _moving_average(mean, smooth)
    curve = []
    for p, m, s in zip(positions, mean, smoothed):
        rec: dict[str, Any] = {
            "position": p,
            "prob": m,
            "smoothed": s,
            "replaced_share": sum(r["replaced"] for r in by_pos[p]) / len(by_pos[p]),
        }
        if all("prob_clean" in r for r in by_pos[p]):
            rec["prob_clean"] = sum(r["prob_clean"] for r in by_pos[p]) / len(by_pos[p])
        curve.append(rec)
    if curve and "prob_clean" in curve[0]:
        for rec, s in zip(curve, _moving_average([c["prob_clean"] for c in curve], smooth)):
            rec["smoothed_clean"] = s
    return curve


# ------------------------------------------------------------------ the study
def _relations(ctx: StudyContext, facts) -> list[str]:
    """The relations to study: the named ones (too few facts: DataError), else every relation
    with enough distinct subjects (the others are skipped with a note)."""
    from .sequence_data import distinct_subject_facts

    base, cfg = ctx.base, ctx.cfg
    by_rel = facts.by_relation()
    available = {r: len(distinct_subject_facts(by_rel.get(r, []))) for r in (base.relations or list(by_rel))}
    small = {r: n for r, n in available.items() if n < cfg.length}
    if base.relations and small:
        r, n = next(iter(small.items()))
        raise DataError(
            f"relation {r}: {n} facts with distinct subjects available, {cfg.length} requested (--length {n} or fewer)"
        )
    for r, n in small.items():
        ctx.note(f"relation {r} skipped: {n} facts with distinct subjects, {cfg.length} requested")
    keep = [r for r in available if r not in small]
    if not keep:
        raise DataError(
            f"no relation of {facts.source or base.source} has {cfg.length} facts with distinct subjects "
            f"(most: {max(available.values(), default=0)}); use a smaller --length"
        )
    return keep


class ICLSequenceStudy(Study):
    """Figure 2 of wu2024 (module docstring)."""

    name = "icl-sequence"
    description = "object probability at every position of one long example sequence, with unknown or incorrect examples injected (wu2024 Figure 2)"
    config_class = ICLSequenceConfig
    uses_base = True
    headline_metric = StudyHeadline("mean_prob_correct", label="mean object probability at the correct examples")

    def prepare(self, ctx: StudyContext) -> None:
        """Read the facts and check that the relations have enough of them before the MLflow run opens
        (a DataError here leaves no run and no files); `run` reads them again (cheap next to scoring).
        Options that do not apply are refused by `run` in its own words."""
        from dataclasses import replace

        from ..sources import load_facts

        base = ctx.base
        if base is None or base.max_facts_per_relation:
            return None
        facts = load_facts(base.source, base.data, None)
        if base.relations:
            facts = facts.select(base.relations)
        _relations(replace(ctx, note=lambda msg: None), facts)  # its notes are given once, by run
        return None

    def run(self, ctx: StudyContext) -> dict[str, Any]:
        from tqdm.auto import tqdm

        from ..lm.scorer import Scorer
        from ..models import load_model, require_kind
        from ..sources import load_facts

        base, cfg = ctx.base, ctx.cfg
        if base is None:
            raise ConfigError("icl-sequence needs the model and data options")
        if base.max_facts_per_relation:
            raise ConfigError(
                "icl-sequence draws its sequence from all facts of each relation; "
                "--max-facts-per-relation does not apply (remove it)"
            )
        facts = load_facts(base.source, base.data, None)
        # the training facts are a loaded source too: never drawn into the sequence, but what they hold true is
        # never an "incorrect" example, and their subjects are never "fictitious" (sequence_data)
        known = load_facts("lpaqa-train", base.train_data, None).facts if base.train_data else []
        if base.relations:
            facts = facts.select(base.relations)
        relations = _relations(ctx, facts)
        sequences = {
            r: build_sequence(facts.facts, r, cfg.length, cfg.replaced, cfg.kind, cfg.placement, base.seed, known_facts=known)
            for r in relations
        }
        cleans = (
            {r: build_sequence(facts.facts, r, cfg.length, 0, "none", cfg.placement, base.seed) for r in relations}
            if cfg.kind != "none"
            else {}
        )

        loaded = load_model(
            base.model,
            device=base.device,
            dtype=base.dtype,
            base_model=base.base_model,
            device_map=base.device_map,
            max_memory=base.max_memory,
        )
        require_kind(loaded, ("causal",), self.name)
        if loaded.is_random:
            ctx.note(f"{loaded.name} has RANDOM weights: these numbers are not a result")
        scorer = Scorer(
            loaded.model, loaded.tokenizer, device=loaded.device, token_budget=base.token_budget, max_length=loaded.max_length
        )
        rows: list[dict[str, Any]] = []
        per_relation: dict[str, Any] = {}
        for r in tqdm(relations, desc="icl-sequence", unit="relation", disable=not ctx.progress):
            seq = sequences[r]
            prefixes = sequence_texts(seq, cfg.separator)
            scores = score_sequence(scorer, prefixes, [e.object for e in seq], r)
            clean = None
            if cleans:
                cseq = cleans[r]
                clean = score_sequence(scorer, sequence_texts(cseq, cfg.separator), [e.object for e in cseq], r)
            rel_rows = position_rows(r, seq, prefixes, scores.logprobs, clean.logprobs if clean else None)
            rows += rel_rows
            per_relation[r] = {
                **group_metrics(rel_rows),
                "tokens": scores.tokens,
                "tokenization_fallbacks": scores.fallbacks + (clean.fallbacks if clean else 0),
            }
        atomic_write_jsonl(ctx.out / POSITIONS_FILE, rows)
        metrics: dict[str, Any] = {
            "model": loaded.name,
            "revision": loaded.revision,
            "source": base.source,
            "relations": relations,
            "length": cfg.length,
            "replace": cfg.replaced,
            "kind": cfg.kind,
            "placement": cfg.placement if cfg.kind != "none" else None,
            **group_metrics(rows),
            "per_relation": per_relation,
            "curve": position_curve(rows, cfg.smooth),
            "forwards": scorer.stats.forwards,
            "tokens_forwarded": scorer.stats.total_tokens,
            "tokenization_fallbacks": sum(p["tokenization_fallbacks"] for p in per_relation.values()),
        }
        title = f"{loaded.name}, {base.source}: {cfg.kind}" + (
            f" ({cfg.placement}, {cfg.replaced} of {cfg.length})" if cfg.kind != "none" else f" ({cfg.length} examples)"
        )
        for name, fig in (
            ("positions.png", positions_figure(rows, title, MAX_PANELS)),
            ("groups.png", groups_figure(rows, metrics["curve"], title)),
        ):
            from ..report.plots import save_png  # matplotlib loads only when a figure is drawn

            save_png(fig, ctx.out / name)
        if len(relations) > MAX_PANELS:
            ctx.note(f"positions.png draws the first {MAX_PANELS} of {len(relations)} relations")
        return metrics

    def summary(self, metrics: Mapping[str, Any]) -> list[str]:
        def f(v: Any) -> str:
            return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"

        head = (
            f"icl-sequence {metrics.get('kind')}"
            + (f"/{metrics['placement']}" if metrics.get("placement") else "")
            + f": {len(metrics.get('relations') or [])} relation(s) x {metrics.get('length')} positions, "
            f"{metrics.get('replace')} replaced, {metrics.get('forwards')} forward(s)"
        )
        lines = [
            head,
            f"mean object prob: correct {f(metrics.get('mean_prob_correct'))} (n={metrics.get('n_correct')}), "
            f"replaced {f(metrics.get('mean_prob_replaced'))} (n={metrics.get('n_replaced')}), "
            f"right after a replaced one {f(metrics.get('mean_prob_after_replaced'))} "
            f"(n={metrics.get('n_after_replaced')})",
        ]
        if "drop_not_replaced" in metrics:
            lines.append(
                f"drop against the clean sequence (clean - this): not replaced {f(metrics.get('drop_not_replaced'))}, "
                f"right after a replaced one {f(metrics.get('drop_after_replaced'))}"
            )
        return lines

    def flat_metrics(self, metrics: Mapping[str, Any]) -> dict[str, float]:
        out = {
            k: float(v)
            for k, v in metrics.items()
            if isinstance(v, (int, float))
            and not isinstance(v, bool)
            and (k.startswith(("mean_prob", "drop_", "n_")) or k in ("forwards", "tokens_forwarded", "tokenization_fallbacks"))
        }
        for rel, m in (metrics.get("per_relation") or {}).items():
            for k in ("mean_prob_correct", "mean_prob_replaced", "mean_prob_after_replaced", "drop_not_replaced"):
                v = m.get(k)
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    out[f"per_relation/{re.sub(r'[^a-z0-9_.]', '_', rel.lower())}/{k}"] = float(v)
        return out


# ------------------------------------------------------------------ figures (matplotlib, Agg)
_COLORS = {"correct": "tab:blue", "after_replaced": "tab:cyan", "replaced": "tab:red"}
_LABELS = {"correct": "correct", "after_replaced": "right after a replaced one", "replaced": "replaced"}


def _top(rows: Sequence[Mapping[str, Any]]) -> float:
    """Upper y limit: 1 (the paper's scale) unless every probability is small, then a little
    above the largest (a small model's probabilities would be a flat line at 0)."""
    most = max([r["prob"] for r in rows] + [r.get("prob_clean", 0.0) for r in rows] + [0.0])
    return min(1.02, max(0.05, 1.1 * most))


def positions_figure(rows: Sequence[Mapping[str, Any]], title: str, max_panels: int = MAX_PANELS):
    """Figure 2a-2e: the object's probability at each position, one panel per relation (at most
    `max_panels`), coloured by group; the dashed line is the mean of the correct ones."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_rel: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        by_rel[r["relation"]].append(r)
    rels = list(by_rel)[:max_panels]
    ncols = 1 if len(rels) == 1 else 2
    nrows = math.ceil(len(rels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(7 * ncols, 3.2 * nrows), squeeze=False)
    for ax, rel in zip(axes.flat, rels):
        for g in GROUPS:
            pts = [r for r in by_rel[rel] if r["group"] == g]
            if pts:
                ax.scatter(
                    [r["position"] for r in pts],
                    [r["prob"] for r in pts],
                    s=10,
                    color=_COLORS[g],
                    label=f"{_LABELS[g]} ({len(pts)})",
                )
        correct = [r["prob"] for r in by_rel[rel] if r["group"] == "correct"]
        if correct:
            ax.axhline(sum(correct) / len(correct), color="tab:blue", linestyle="--", linewidth=1)
        ax.set_ylim(-0.02 * _top(by_rel[rel]), _top(by_rel[rel]))
        ax.set_xlabel("position in the sequence")
        ax.set_ylabel("P(object)")
        ax.set_title(rel, fontsize=10)
        ax.legend(fontsize=7, loc="best")
    for ax in list(axes.flat)[len(rels) :]:
        ax.axis("off")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def groups_figure(rows: Sequence[Mapping[str, Any]], curve: Sequence[Mapping[str, Any]], title: str):
    """Figure 2b-2e summarised: left, the mean probability of each group (and, for a variant, of
    the same positions in the clean sequence); right, the smoothed curve over positions (mean over
    relations), variant and clean, with the replaced positions shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4), gridspec_kw={"width_ratios": [1, 2]})
    paired = bool(rows) and all("prob_clean" in r for r in rows)
    present = [g for g in GROUPS if any(r["group"] == g for r in rows)]
    width = 0.4 if paired else 0.6
    for k, g in enumerate(present):
        probs = [r["prob"] for r in rows if r["group"] == g]
        left.bar(k - (width / 2 if paired else 0), sum(probs) / len(probs), width, color=_COLORS[g])
        if paired:
            clean = [r["prob_clean"] for r in rows if r["group"] == g]
            left.bar(k + width / 2, sum(clean) / len(clean), width, color=_COLORS[g], alpha=0.35, hatch="//")
    left.set_xticks(range(len(present)), [f"{_LABELS[g]}\n(n={sum(r['group'] == g for r in rows)})" for g in present], fontsize=8)
    top = _top(rows)
    left.set_ylim(0, top)
    left.set_ylabel("mean P(object)" + (" (hatched: clean sequence)" if paired else ""))
    xs = [c["position"] for c in curve]
    for c in curve:
        if c["replaced_share"] > 0:
            right.axvspan(
                c["position"] - 0.5, c["position"] + 0.5, color="tab:red", alpha=0.25 * c["replaced_share"], linewidth=0
            )
    right.plot(xs, [c["prob"] for c in curve], color="tab:blue", alpha=0.3, linewidth=0.8)
    right.plot(xs, [c["smoothed"] for c in curve], color="tab:blue", label="this sequence (smoothed)")
    if curve and "smoothed_clean" in curve[0]:
        right.plot(xs, [c["smoothed_clean"] for c in curve], color="black", linestyle="--", label="clean sequence (smoothed)")
    right.set_ylim(0, top)
    right.set_xlabel("position in the sequence (red: replaced)")
    right.set_ylabel("P(object), mean over relations")
    right.legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


STUDY = register(ICLSequenceStudy())
