"""What the four multiple-choice probes (IC-LKE, EIC-LKE, HGP, MMP) share.

- `MCConfig`: the data fields of a multiple-choice item set (choices, small-relation policy).
- `ExamplesConfig`: in-context examples (IC-LKE, EIC-LKE).
- `MCProbe`: `prepare` (through `factprobe.datasets.mc_dataset`), the result row of an item and the
  metrics (`factprobe.metrics.multiple_choice`), so each probe module only builds its contexts.
- `relation_examples`: the in-context examples of a relation, a function of (seed, relation,
  training facts, the relation's test subjects) only: never of which facts are still to score,
  so a fact sees the same context in a 10-fact run, a 200-fact run and a resumed run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import ConfigBase, option
from ..datasets.examples import sample_examples
from ..datasets.prepared import Prepared
from ..errors import ContextTooLongError
from ..facts import Fact, MCItem
from ..framework.base import Probe, Session
from ..framework.config import RunConfig
from ..framework.reporting import Headline, ReportPart, ReportRun, generic_flat_metrics, model_label, top_level_metrics
from ..metrics import multiple_choice as mc

ON_TOO_LONG = ("truncate", "refuse")


@dataclass
class MCConfig(ConfigBase):
    """Fields of a multiple-choice item set."""

    choices: int = option(100, "options per item, gold included (wu2024: 100)")
    skip_small_relations: bool = option(
        False, "skip requested relations whose distractor pool is smaller than --choices instead of refusing the run"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check(self.choices >= 2, "choices", self.choices, "must be at least 2")


@dataclass
class ExamplesConfig(MCConfig):
    """In-context examples drawn from the relation's training facts."""

    examples: int = option(50, "in-context examples per relation (wu2024: 50)")
    separator: str = option(" ", "between subject and object (and, in the paper format, between examples)")
    drop_self_examples: bool = option(
        False, "never use a training fact whose subject equals its object as an example (the share is reported either way)"
    )
    on_too_long: str = option(
        "truncate", "examples longer than the model's window: drop the earliest (truncate) or refuse", choices=ON_TOO_LONG
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check(self.examples >= 0, "examples", self.examples, "must be >= 0")
        self.check(bool(self.separator), "separator", self.separator, "must not be empty")


def relation_examples(session: Session, relation: str, n: int) -> list[Fact]:
    """`n` training facts of `relation` for the prompt (see the module docstring); notes a shortfall."""
    cfg = session.cfg
    test_subjects = [f for f in session.prepared.test if f.relation == relation]
    examples = sample_examples(
        session.prepared.train,
        relation,
        n,
        seed=cfg.base.seed,
        exclude_subjects=test_subjects,
        drop_self=getattr(cfg.params, "drop_self_examples", False),
    )
    if len(examples) < n:
        session.note(f"{relation}: only {len(examples)} training facts for {n} examples")
    return examples


def fit_examples(
    session: Session, relation: str, examples: list[Fact], prefix_of: Callable[[list[Fact]], str], tail_text: str
) -> list[Fact]:
    """Drop the earliest examples until `prefix_of(examples) + tail_text` fits the model's window.

    `tail_text` is the longest fact-specific continuation of the relation (subject and option);
    it is computed over all of the relation's items, so truncation never depends on what is left
    to score."""
    scorer = session.scorer
    tail = len(scorer.encode_continuation(tail_text)) + 2
    kept = list(examples)
    while kept and len(scorer.encode_context(prefix_of(kept))) + tail > scorer.max_length:
        if session.cfg.params.on_too_long == "refuse":
            raise ContextTooLongError(
                f"{len(examples)} examples for {relation} exceed the model's context window of "
                f"{scorer.max_length} tokens; lower --examples"
            )
        kept = kept[1:]
    if len(kept) < len(examples):
        session.note(
            f"{relation}: context longer than the model's window ({scorer.max_length} tokens); "
            f"kept the last {len(kept)} of {len(examples)} examples"
        )
    if not kept and examples:
        raise ContextTooLongError(f"{relation}: even one example does not fit the context window")
    return kept


def longest(items: Sequence[MCItem]) -> tuple[str, str]:
    """The longest subject and the longest option of a relation's items."""
    return max((it.subject for it in items), key=len), max((o for it in items for o in it.options), key=len)


def item_row(
    item: MCItem, context: str, logprobs: Sequence[float] | np.ndarray, probe: str, template: str | None = None
) -> dict[str, Any]:
    """One result row: the item, the exact context scored, and its option log-probs and verdict."""
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


class MCProbe(Probe):
    """Base of the multiple-choice probes: shared data, rows, metrics and reporting."""

    dataset = "mc"
    config_class = MCConfig
    headline_metric = Headline("accuracy", "accuracy")
    headline_keys = ("accuracy",)
    per_fact_columns = ("fact_id", "relation", "subject", "gold", "prediction", "correct", "gold_prob", "confidence", "template")
    metric_columns = ("relation", "correct", "gold_prob", "confidence", "template")  # `metrics`, HGP/MMP's template_summary
    relation_metric = "accuracy"
    fact_verdict = "correct"
    report_group = "multiple-choice"  # the four probes share one heatmap, one set of bars, one summary

    def prepare(self, cfg: RunConfig) -> Prepared:
        from ..datasets.mc_dataset import prepare_mc

        return prepare_mc(cfg.base, choices=cfg.params.choices, skip_small_relations=cfg.params.skip_small_relations)

    def metrics(self, rows: Sequence[dict], prepared: Prepared, cfg: RunConfig) -> dict:
        import pandas as pd

        df = pd.DataFrame(rows, columns=None if rows else ["relation", "correct", "gold_prob", "confidence"])
        m = mc.summarize(df, n_boot=1000, seed=cfg.base.seed)
        m["dropped_relations"] = dict(prepared.dropped)
        m.update(prepared.info)
        if rows and "template" in rows[0]:
            per_t = df.groupby(["relation", "template"])["correct"].mean()
            m["per_template"] = {f"{r}|{t}": float(v) for (r, t), v in per_t.items()}
        return m

    # ---- reporting (the names are unchanged since the first probes, so runs stay comparable)
    def input_name(self, cfg: RunConfig) -> str:
        """`<source>-mc<choices>`: the four probes test the same items."""
        return f"{cfg.base.source}-mc{cfg.params.choices}"

    def flat_metrics(self, metrics: Mapping[str, Any]) -> dict[str, Any]:
        """Every top-level number under its metrics.json name (`accuracy`, `macro_accuracy`, `prob_mass`,
        `n`, ...), `accuracy_ci_low/high`, `accuracy/<relation>`, `prob_mass/<relation>`, `n/<relation>`,
        `accuracy_at_k/<K>` and `coverage_at_k/<K>` (the share of facts Accuracy@K keeps; runs from
        before it have none). One name per quantity on screen, in files and in MLflow (issue 22)."""
        if "accuracy" not in metrics:
            return generic_flat_metrics(metrics)
        out = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        lo, hi = metrics.get("accuracy_ci", [None, None])
        if lo is not None:
            out["accuracy_ci_low"], out["accuracy_ci_high"] = lo, hi
        for rel, m in metrics.get("per_relation", {}).items():
            out[f"accuracy/{rel}"] = m.get("accuracy")
            out[f"prob_mass/{rel}"] = m.get("prob_mass")
            out[f"n/{rel}"] = m.get("n")
        for k, m in metrics.get("accuracy_at_k", {}).items():
            out[f"accuracy_at_k/{k}"] = m["accuracy"]
            if "coverage" in m:
                out[f"coverage_at_k/{k}"] = m["coverage"]
        return out

    def run_figures(self, metrics: Mapping[str, Any], model: str) -> dict[str, Any]:
        """The per-relation accuracy bars and, for a run with items, Accuracy@K and the coverage at K
        against K (`accuracy_at_k`, appendix D)."""
        figures = super().run_figures(metrics, model)
        if metrics.get("accuracy_at_k") and metrics.get("n"):
            from ..report.cross_model_plots import accuracy_at_k_figure

            figures["accuracy_at_k"] = accuracy_at_k_figure(
                metrics, title=f"{self.name} {model_label(model)}: Accuracy@K and coverage"
            )
        return figures

    def relation_table(self, metrics: Mapping[str, Any]):
        """One row per relation: accuracy, prob_mass (the gold option's probability mass), n and the 95% interval."""
        import pandas as pd

        rows = [
            {
                "relation": r,
                "accuracy": m.get("accuracy"),
                "prob_mass": m.get("prob_mass"),
                "n": m.get("n"),
                "ci_low": m.get("accuracy_ci", [None, None])[0],
                "ci_high": m.get("accuracy_ci", [None, None])[1],
            }
            for r, m in sorted(metrics.get("per_relation", {}).items())
        ]
        return pd.DataFrame(rows)

    def relation_text(self, metrics: Mapping[str, Any]) -> str | None:
        return format_relation_table(metrics) if "per_relation" in metrics and "accuracy" in metrics else None

    def report(self, runs: Sequence[ReportRun], everything: Sequence[ReportRun]) -> ReportPart:
        """The model x relation accuracy heatmap and per-relation bars of every multiple-choice run,
        the summary table (accuracy with CI, macro accuracy, prob mass, n) shown first, and
        `accuracy/<probe>/<model>[/<relation>]` metrics."""
        from ..report.html import accuracy_summary_html, accuracy_summary_markdown, summary_rows
        from ..report.plots import accuracy_heatmap, relation_bars

        metrics = {r.name: r.metrics for r in runs if r.metrics.get("accuracy") is not None and r.metrics.get("per_relation")}
        part = ReportPart()
        if not metrics:
            return part
        part.figures["accuracy heatmap (model x relation)"] = ("accuracy_heatmap", accuracy_heatmap(metrics))
        part.figures["per-relation accuracy"] = ("per_relation_accuracy", relation_bars(metrics))
        part.summary_html = accuracy_summary_html(metrics)
        part.summary_markdown = accuracy_summary_markdown(metrics)
        part.tables["summary"] = summary_rows(metrics)
        part.mlflow_only = ("summary",)
        for r in runs:
            if r.name not in metrics:  # no items: its numbers as any probe's
                part.metrics.update(top_level_metrics([r]))
                continue
            part.metrics[f"accuracy/{r.metric_name}"] = r.metrics["accuracy"]
            for rel, m in r.metrics.get("per_relation", {}).items():
                part.metrics[f"accuracy/{r.metric_name}/{rel}"] = m["accuracy"]
        return part


def format_relation_table(metrics: Mapping[str, Any]) -> str:
    """Plain-text per-relation table for the terminal (multiple-choice metrics)."""
    nan = float("nan")

    def num(v) -> float:
        return nan if v is None else float(v)

    def ci(v) -> str:
        lo, hi = v or [None, None]
        return f"[{num(lo):.3f}, {num(hi):.3f}]"

    lines = [f"{'relation':<14}{'n':>6}{'accuracy':>10}{'95% CI':>18}{'prob_mass':>11}"]
    for rel, m in sorted(metrics.get("per_relation", {}).items()):
        lines.append(
            f"{rel:<14}{m['n']:>6}{num(m['accuracy']):>10.3f}{ci(m.get('accuracy_ci')):>18}{num(m.get('prob_mass')):>11.3f}"
        )
    lines.append(
        f"{'micro':<14}{metrics['n']:>6}{num(metrics['accuracy']):>10.3f}{ci(metrics.get('accuracy_ci')):>18}"
        f"{num(metrics.get('prob_mass')):>11.3f}"
    )
    lines.append(f"{'macro':<14}{'':>6}{num(metrics.get('macro_accuracy')):>10.3f}{ci(metrics.get('macro_accuracy_ci')):>18}")
    return "\n".join(lines)
