"""What a probe run logs to MLflow, in one place (used by the CLI and by the probe component).

Logged per run: every config field as a parameter; `acc`, `prob_mass`, `macro_acc`, `n`,
`acc/<relation>`, `prob_mass/<relation>`, `acc_at_k/<K>` metrics; the per-fact table (parquet
artifact `tables/per_fact.parquet` plus `log_table` JSON, joinable across runs on `fact_id`);
the per-relation table; `results.jsonl` and `metrics.json`; a per-relation accuracy figure; and
the test items as an MLflow dataset input (`log_input`) whose digest is the data digest.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import pandas as pd

from .conventions import tag
from .run import TrackedRun

CONFIG_PARAM = "config_json"
PER_FACT_COLUMNS = ["fact_id", "relation", "subject", "gold", "prediction", "correct", "gold_prob", "confidence"]


def metric_dict(metrics: dict) -> dict[str, float]:
    """Flatten probe metrics into MLflow metric names: every top-level number (any probe), with the
    multiple-choice names `acc`, `prob_mass`, `macro_acc`, plus per-relation and Accuracy@K values."""
    renamed = {"accuracy": "acc", "macro_accuracy": "macro_acc"}
    out = {renamed.get(k, k): v for k, v in metrics.items()
           if isinstance(v, (int, float)) and not isinstance(v, bool)}
    lo, hi = metrics.get("accuracy_ci", [None, None])
    if lo is not None:
        out["acc_ci_low"], out["acc_ci_high"] = lo, hi
    for rel, m in metrics.get("per_relation", {}).items():
        out[f"acc/{rel}"] = m.get("accuracy")
        out[f"prob_mass/{rel}"] = m.get("prob_mass")
        out[f"n/{rel}"] = m.get("n")
    for k, m in metrics.get("accuracy_at_k", {}).items():
        out[f"acc_at_k/{k}"] = m["accuracy"]
    return {k: v for k, v in out.items() if v is not None}


def per_fact_table(results: pd.DataFrame) -> pd.DataFrame:
    """The slim per-fact table (no option lists) that runs are joined on."""
    cols = [c for c in PER_FACT_COLUMNS + ["template"] if c in results.columns] or PER_FACT_COLUMNS
    return results[cols].copy() if len(results) else pd.DataFrame(columns=cols)


def per_relation_table(metrics: dict) -> pd.DataFrame:
    rows = [
        {"relation": r, "accuracy": m.get("accuracy"), "prob_mass": m.get("prob_mass"), "n": m.get("n"),
         "ci_low": m.get("accuracy_ci", [None, None])[0], "ci_high": m.get("accuracy_ci", [None, None])[1]}
        for r, m in sorted(metrics.get("per_relation", {}).items())
    ]
    return pd.DataFrame(rows)


@contextmanager
def probe_run(cfg, tracking_uri: str | None, enabled: bool = True, required: bool = False, trigger: str = "local",
              parent_run_id: str | None = None, pipeline: str = "probe", run_name: str | None = None,
              extra_tags: dict | None = None, step_key: str | None = None) -> Iterator[TrackedRun]:
    """A TrackedRun for one probe, with its parameters and identifying tags already logged."""
    tags = {tag("model"): cfg.base.model, tag("probe"): cfg.probe, tag("trigger"): trigger, tag("source"): cfg.base.source,
            tag("config_key"): cfg.results_key(), **(extra_tags or {})}
    with TrackedRun(pipeline=pipeline, run_name=run_name or f"{cfg.probe}-{cfg.base.model}", tracking_uri=tracking_uri,
                    tags=tags, parent_run_id=parent_run_id, required=required, enabled=enabled, step_key=step_key) as run:
        # Every field as its own parameter (for the UI), and the whole config as JSON: the one
        # `RunConfig.from_dict` reads it back (tracking/compare.py), no Python repr parsing.
        run.log_params({**{k: v for k, v in cfg.to_dict().items() if k != "out"}, CONFIG_PARAM: cfg.to_json()})
        yield run


def log_probe_outcome(run: TrackedRun, outcome, cfg) -> None:
    """Log metrics, tables, files, the dataset and a figure for a finished probe."""
    if not run.active:
        return
    m = outcome.metrics
    run.set_tags({tag("dataset_digest"): m.get("data_digest", ""), tag("model_revision"): m.get("model_revision", "")})
    run.log_metrics(metric_dict(m))
    table = per_fact_table(outcome.results)
    run.log_parquet(table, "tables/per_fact.parquet")
    run.log_table(table, "tables/per_fact.json")
    run.log_table(per_relation_table(m), "tables/per_relation.json")
    run.log_artifact(outcome.out_dir / "results.jsonl", "results")
    run.log_artifact(outcome.out_dir / "metrics.json", "results")
    items = table[[c for c in ("fact_id", "relation", "subject", "gold") if c in table.columns]].drop_duplicates("fact_id")
    choices = getattr(cfg.params, "choices", None)
    run.log_input(items, name=f"{cfg.base.source}-mc{choices}" if choices else f"{cfg.base.source}-{cfg.probe}",
                  source=str(cfg.base.data or cfg.base.source), digest=m.get("data_digest"))
    if m.get("accuracy") is None or not m.get("per_relation"):
        return
    try:
        from factprobe.report.plots import relation_bars

        fig = relation_bars({cfg.base.model: m}, title=f"{cfg.probe} accuracy per relation")
        run.log_figure(fig, "figures/per_relation_accuracy.png")
        import matplotlib.pyplot as plt

        plt.close(fig)
    except ImportError:
        pass
