"""What a probe declares about its own reporting, and the defaults every probe gets.

A probe (`factprobe.framework.base.Probe`) says through class attributes and hooks what a person
looks at and what the operations layer (tracking/, components/, the CLI) logs and draws; that
layer never tests a probe's name or the shape of its metrics:

- `headline_metric` (`Headline`): the one number of a run, its metrics.json key, the probe family
  it is logged under (`headline/<family>` in MLflow, the same on every pipeline) and a short label;
- `headline_keys`: the top-level numbers of the terminal line (`em 0.412, f1 0.530 over 200 items`);
- `per_fact_columns`: the slim per-fact table runs are joined on (`tables/per_fact.parquet`);
- `relation_metric`: the per-relation number drawn as bars (per run and across runs);
- `fact_verdict`: the boolean per-fact column every gate joins runs on (`compare`, `regress`,
  `baseline promote`, the nightly paired test, the cross-model maps; `factprobe.framework.verdict`),
  the headline being the share of facts where it is True (None: not compared fact by fact);
- hooks `flat_metrics`, `stepped_metrics`, `relation_table`, `relation_text`, `run_figures` (per
  run) and `report` (across the runs of a pipeline, grouped by `report_group`).

This module holds the data types of those declarations and the default implementations. Nothing
here imports mlflow or kfp: figures are matplotlib Figures, tables pandas DataFrames or lists of
dicts, metrics plain {name: number} dicts; tracking/ logs them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: per-fact columns of a probe that declares none (the multiple-choice columns, plus `template`)
DEFAULT_PER_FACT_COLUMNS = (
    "fact_id",
    "relation",
    "subject",
    "gold",
    "prediction",
    "correct",
    "gold_prob",
    "confidence",
    "template",
)
_BAD_NAME_CHARS = re.compile(r"[^\w.\- :/]")


def number(v: Any) -> bool:
    """True for an int or float that is not a bool."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def metric_key(text: Any) -> str:
    """`text` as part of a metric name: `%` becomes `pct`, characters other than letters, digits and
    `_ - . / : space` become `_` (`top-25%` -> `top-25pct`, `acc@1` -> `acc_1`)."""
    return _BAD_NAME_CHARS.sub("_", str(text).replace("%", "pct"))


def model_label(model: str) -> str:
    """A model as a short name: a path (a local folder, a tiny random test model) -> its folder name."""
    if "/" in model and (model.startswith(("/", ".", "~")) or Path(model).expanduser().exists()):
        return Path(model).name
    return model


def wilson(p: float, n: int) -> list[float]:
    """95% Wilson score interval of a proportion `p` over `n` items."""
    z = 1.959963984540054
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return [max(0.0, mid - half), min(1.0, mid + half)]


@dataclass(frozen=True)
class Headline:
    """A probe's headline number.

    `metric`: its metrics.json key (`accuracy`, `em`, `acc@1`); `family`: the probe family it is
    logged under, `headline/<family>` on every probe run whatever the pipeline, so runs of one
    family sort by one column (`accuracy`, `em`, `coherency`, `belief_accuracy`); `label`: the
    short name in step outputs (KFP metrics `<label>-<probe>-<model>`; default: `metric`);
    `higher_is_better`: its direction, which every gate reads with the per-fact verdict
    (`factprobe.framework.verdict`: under a lower-is-better headline a fact is right when its verdict is False)."""

    metric: str
    family: str
    label: str = ""
    higher_is_better: bool = True

    def __post_init__(self) -> None:
        if not self.metric or not self.family:
            raise ValueError(f"Headline needs a metric and a family, got {self.metric!r}, {self.family!r}")
        if metric_key(self.family) != self.family:
            raise ValueError(f"Headline family {self.family!r}: letters, digits and _ - . : only")

    @property
    def short(self) -> str:
        return self.label or self.metric

    def row(self, metrics: Mapping[str, Any]) -> dict | None:
        """{"family", "metric", "value", "ci": [lo, hi] or None, "n"} of a run, None when the run has
        no headline number (no items). The interval is the one metrics.json gives (`<metric>_ci`),
        else the Wilson interval of a proportion over n items."""
        value = metrics.get(self.metric)
        if not number(value):
            return None
        n = metrics.get("n", metrics.get("n_items"))
        n = int(n) if number(n) else None
        ci = metrics.get(f"{self.metric}_ci")
        if not (isinstance(ci, (list, tuple)) and len(ci) == 2 and all(number(v) for v in ci)):
            ci = wilson(float(value), n) if n and 0 <= value <= 1 else None
        return {"family": self.family, "metric": self.metric, "value": value, "ci": list(ci) if ci else None, "n": n}


#: how the several rows of one fact become one verdict in the knowledge map (`MapVerdict.rule`)
MAP_RULES = ("majority", "all", "any")


@dataclass(frozen=True)
class MapVerdict:
    """What the knowledge map (`factprobe.knowledge_maps`) reads as one verdict per fact from a probe's
    per-fact table, for a probe whose rows are several per fact (templates, rounds, settings) or that
    declares no gate verdict (`Probe.map_verdict`). The rows kept are those whose column equals the
    value for every (column, value) of `where`; a kept row is right when every column of `columns` is
    True; a fact is right under `rule`: "majority" (more than half of its kept rows; a tie is wrong),
    "all" or "any". Declaring it does not make a probe's runs gated (`fact_verdict` does that)."""

    columns: tuple[str, ...]
    rule: str = "majority"
    where: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if not self.columns or self.rule not in MAP_RULES:
            raise ValueError(
                f"MapVerdict needs columns and a rule of {', '.join(MAP_RULES)}, got {self.columns!r}, {self.rule!r}"
            )


@dataclass
class ReportRun:
    """One finished probe run as the cross-run report sees it: `name` (`<probe>:<model>`, unique in a
    report), the probe, the model as configured and its short `label`, the run's metrics.json,
    run config (flat dict) and folder (for the probe's extra files)."""

    name: str
    probe: str
    model: str
    label: str
    metrics: dict
    config: dict = field(default_factory=dict)
    dir: Path | None = None

    @property
    def metric_name(self) -> str:
        """`<probe>/<model label>` as part of a metric name."""
        return f"{self.probe}/{self.label}"


@dataclass
class ReportPart:
    """What one group of probes adds to a pipeline's report.

    - `figures`: {title: (file stem, Figure)}; logged as `figures/<stem>.png`, inlined in the HTML;
    - `tables`: {name: rows (list of dicts) or DataFrame}; logged as `tables/<name>.json`, written as
      Markdown and HTML sections (except those named in `mlflow_only`); those named in `parquet`
      also as `tables/<name>.parquet`;
    - `metrics`: {name: number} for the parent run;
    - `summary_html` / `summary_markdown`: a section shown first on the page (e.g. the
      multiple-choice summary table)."""

    figures: dict[str, tuple[str, Any]] = field(default_factory=dict)
    tables: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    summary_html: str = ""
    summary_markdown: str = ""
    parquet: tuple[str, ...] = ()
    mlflow_only: tuple[str, ...] = ()


# ------------------------------------------------------------------ defaults of the Probe hooks
def generic_flat_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Every top-level number under its metrics.json name (`accuracy`, `macro_accuracy`, ...), and
    `<metric>/<relation>` for every number of a `per_relation` entry, `<metric>/<group>/<key>` for
    the other `per_<group>` tables (`coherency/cardinality/N-1`, `em/answer_type/date`)."""
    out = {k: v for k, v in metrics.items() if number(v)}
    for group, table in metrics.items():
        if not (group.startswith("per_") and isinstance(table, dict)):
            continue
        prefix = "" if group == "per_relation" else f"{metric_key(group[len('per_') :])}/"
        for key, entry in table.items():
            if isinstance(entry, dict):
                for name, v in entry.items():
                    if number(v):
                        out[f"{metric_key(name)}/{prefix}{metric_key(key)}"] = v
    return out


def generic_relation_table(metrics: Mapping[str, Any]):
    """One row per relation with every number, string or None of its `per_relation` entry."""
    import pandas as pd

    return pd.DataFrame(
        [
            {"relation": r, **{k: v for k, v in m.items() if number(v) or isinstance(v, str) or v is None}}
            for r, m in sorted((metrics.get("per_relation") or {}).items())
            if isinstance(m, dict)
        ]
    )


def top_level_metrics(runs: Sequence[ReportRun]) -> dict[str, float]:
    """`<metric>/<probe>/<model>` for every top-level number of every run (the parent run's view)."""
    return {f"{k}/{r.metric_name}": v for r in runs for k, v in r.metrics.items() if number(v)}


def relation_rows(runs: Sequence[ReportRun], headline: Headline | None, relation_metric: str | None) -> list[dict]:
    """A probe's default report table: per run its headline number over all items, then its
    `relation_metric` per relation; columns model, relation, the metric(s), n."""
    rows = []
    for r in runs:
        m = r.metrics
        cols = [c for c in dict.fromkeys(x for x in (headline.metric if headline else None, relation_metric) if x)]
        rows.append({"model": r.label, "relation": "overall", **{c: m.get(c) for c in cols}, "n": m.get("n", m.get("n_items"))})
        if relation_metric:
            for rel, entry in sorted((m.get("per_relation") or {}).items()):
                if isinstance(entry, dict):
                    rows.append(
                        {
                            "model": r.label,
                            "relation": rel,
                            **{c: entry.get(c) for c in cols},
                            "n": entry.get("n", entry.get("n_items")),
                        }
                    )
    return rows
