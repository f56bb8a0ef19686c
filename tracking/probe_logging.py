"""What a probe run logs to MLflow, in one place (used by the CLI and by the probe component).

Logged per run: every config field as a parameter; metrics (`metric_dict`); the per-fact table
(parquet artifact `tables/per_fact.parquet` plus `log_table` JSON, joinable across runs on
`fact_id`); the per-relation table; every file the run wrote (`results.jsonl`, `metrics.json`,
a probe's extra files such as `known_unknown.parquet`) under `results/`; a per-relation figure;
the test items as an MLflow dataset input (`log_input`) whose digest is the data digest; and a
model's known/unknown table, when the probe wrote one, as a second dataset input
(`known_unknown-<model>`, context `known_unknown`).

Metric names (MLflow allows letters, digits and `_ - . / : space` only):
- every top-level number of `metrics.json` (`acc`/`macro_acc` for multiple-choice accuracy);
- multiple-choice probes (metrics with `accuracy`): `acc/<relation>`, `prob_mass/<relation>`,
  `n/<relation>`, `acc_at_k/<K>`, `acc_ci_low/high`, exactly as before;
- other probes (QA, counterfactual ICL, coherency, ...): `<metric>/<relation>` for every number of
  a `per_relation` entry (`em/P36`, `coherency_round1/P19`), and `<metric>/<group>/<key>` for the
  other `per_<group>` tables (`coherency/cardinality/N-1`, `em/answer_type/date`, `em/shots/0`);
- the headline, one name per probe family across pipelines (`headline`): `headline/accuracy`
  (multiple choice), `headline/em` (QA, counterfactual ICL), `headline/coherency`,
  `headline/belief_accuracy` (BELIEF-ICL `acc`, BELIEF-MLM `acc@1`); the row of the pipeline's
  summary table (metric, value, 95% interval, n) also goes in the tag `factprobe.headline` (JSON),
  from which the parent run's description is built (`summary_markdown`);
- counterfactual ICL `settings` (`<setting>@<k>`): `em/<setting>/k<k>` (also `f1/`, `contains/`),
  e.g. `em/known-shuffle/k10`; and EM per setting logged against k as the step of
  `em_by_k/<setting>`, so the MLflow UI draws Figure 7 of one run.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from .conventions import HEADLINE_METRICS, tag
from .run import TrackedRun

CONFIG_PARAM = "config_json"
#: per-fact columns of multiple-choice probes (plus `template` where the probe has one)
PER_FACT_COLUMNS = ["fact_id", "relation", "subject", "gold", "prediction", "correct", "gold_prob", "confidence"]
#: generated answers (QA, counterfactual ICL): recognised by an `em` column
QA_PER_FACT_COLUMNS = ["fact_id", "relation", "subject", "question", "answer", "gold", "em", "f1", "contains",
                       "correct", "setting", "shots", "shots_asked", "split"]
#: coherency rounds (two rows per fact): recognised by a `coherent` column
COHERENCY_PER_FACT_COLUMNS = ["key", "fact_id", "relation", "cardinality", "subject", "gold", "round",
                              "first_prediction", "second_prediction", "first_correct", "coherent"]
KNOWN_UNKNOWN_FILE = "known_unknown.parquet"  # factprobe.build.known_unknown.FILE_NAME
_BAD_METRIC_CHARS = re.compile(r"[^\w.\- :/]")


def metric_key(text: str) -> str:
    """`text` as part of an MLflow metric name: `%` becomes `pct`, other characters MLflow
    refuses become `_` (`top-25%` -> `top-25pct`)."""
    return _BAD_METRIC_CHARS.sub("_", str(text).replace("%", "pct"))


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _mc_metric_dict(metrics: dict, out: dict) -> None:
    """Multiple-choice names (unchanged since the first probes: runs stay comparable)."""
    lo, hi = metrics.get("accuracy_ci", [None, None])
    if lo is not None:
        out["acc_ci_low"], out["acc_ci_high"] = lo, hi
    for rel, m in metrics.get("per_relation", {}).items():
        out[f"acc/{rel}"] = m.get("accuracy")
        out[f"prob_mass/{rel}"] = m.get("prob_mass")
        out[f"n/{rel}"] = m.get("n")
    for k, m in metrics.get("accuracy_at_k", {}).items():
        out[f"acc_at_k/{k}"] = m["accuracy"]


def _generic_metric_dict(metrics: dict, out: dict) -> None:
    """Every number of every `per_<group>` table and of counterfactual `settings`."""
    for group, table in metrics.items():
        if not (group.startswith("per_") and isinstance(table, dict)):
            continue
        prefix = "" if group == "per_relation" else f"{metric_key(group[len('per_'):])}/"
        for key, entry in table.items():
            if isinstance(entry, dict):
                for name, v in entry.items():
                    if _number(v):
                        out[f"{metric_key(name)}/{prefix}{metric_key(key)}"] = v
    for group, entry in (metrics.get("settings") or {}).items():
        setting, _, k = str(group).rpartition("@")
        if not isinstance(entry, dict) or not setting:
            continue
        for name in ("em", "f1", "contains"):
            if _number(entry.get(name)):
                out[f"{name}/{metric_key(setting)}/k{metric_key(k)}"] = entry[name]


def metric_dict(metrics: dict) -> dict[str, float]:
    """Flatten probe metrics into MLflow metric names (see the module docstring): every top-level
    number (any probe), with the multiple-choice names `acc`, `prob_mass`, `macro_acc`, plus
    per-relation and Accuracy@K values; for other probes every per-relation / per-group number and
    the counterfactual settings. None (no items) is never logged."""
    renamed = {"accuracy": "acc", "macro_accuracy": "macro_acc"}
    out = {renamed.get(k, k): v for k, v in metrics.items() if _number(v)}
    if "accuracy" in metrics:
        _mc_metric_dict(metrics, out)
    else:
        _generic_metric_dict(metrics, out)
    # Probes may name metrics as their paper does (`acc@1`); MLflow refuses `@`, so `acc@1` is logged as `acc_1`.
    return {metric_key(k): v for k, v in out.items() if v is not None}


HEADLINE_TAG = tag("headline")


def _wilson(p: float, n: int) -> list[float]:
    """95% Wilson score interval of a proportion `p` over `n` items."""
    import math

    z = 1.959963984540054
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return [max(0.0, mid - half), min(1.0, mid + half)]


def headline(probe: str, metrics: dict) -> dict | None:
    """The probe run's headline: {"name": the MLflow metric name of its family (`HEADLINE_METRICS`),
    "metric": the metrics.json key, "value", "ci": [lo, hi] or None, "n"}; None when the run has no
    headline number (no items). The interval is the one metrics.json gives (`<key>_ci`), else the
    Wilson interval of the proportion over n items."""
    if probe.startswith("belief"):
        family, key = "belief_accuracy", "acc@1" if "acc@1" in metrics else "acc"
    elif "accuracy" in metrics:
        family, key = "accuracy", "accuracy"
    elif "coherency" in metrics:
        family, key = "coherency", "coherency"
    elif "em" in metrics:
        family, key = "em", "em"
    else:
        return None
    value = metrics.get(key)
    if not _number(value):
        return None
    n = metrics.get("n", metrics.get("n_items"))
    n = int(n) if _number(n) else None
    ci = metrics.get(f"{key}_ci")
    if not (isinstance(ci, (list, tuple)) and len(ci) == 2 and all(_number(v) for v in ci)):
        ci = _wilson(float(value), n) if n and 0 <= value <= 1 else None
    return {"name": HEADLINE_METRICS[family], "metric": key, "value": value, "ci": list(ci) if ci else None, "n": n}


def record_headline(run: TrackedRun, probe: str, metrics: dict) -> None:
    """Log the run's headline metric under its family name and its summary row as a tag."""
    h = headline(probe, metrics)
    if h is not None:
        run.log_metrics({h["name"]: h["value"]})
        run.set_tags({HEADLINE_TAG: json.dumps(h)})


def summary_markdown(rows: list[dict]) -> str:
    """The summary table `make run` prints, in Markdown: one row per {"model", "probe", and a
    `headline` dict}, as model x probe x headline metric with its 95% interval and n."""
    lines = ["| model | probe | metric | value | 95% CI | n |", "|---|---|---|---|---|---|"]
    for r in rows:
        h = r["headline"]
        ci = f"{h['ci'][0]:.3f}-{h['ci'][1]:.3f}" if h.get("ci") else ""
        n = "" if h.get("n") is None else h["n"]
        lines.append(f"| {model_label(r['model'])} | {r['probe']} | {h['metric']} | {h['value']:.3f} | {ci} | {n} |")
    return "\n".join(lines)


def per_fact_table(results: pd.DataFrame) -> pd.DataFrame:
    """The slim per-fact table (no option lists, prompts or token ids) that runs are joined on.
    Its columns follow the rows' kind: coherency rounds (`coherent`), generated answers (`em`),
    else multiple choice."""
    if "coherent" in results.columns:
        wanted = COHERENCY_PER_FACT_COLUMNS
    elif "em" in results.columns:
        wanted = QA_PER_FACT_COLUMNS
    else:
        wanted = PER_FACT_COLUMNS + ["template"]
    cols = [c for c in wanted if c in results.columns] or PER_FACT_COLUMNS
    return results[cols].copy() if len(results) else pd.DataFrame(columns=cols)


def per_relation_table(metrics: dict) -> pd.DataFrame:
    """One row per relation: multiple-choice accuracy, prob mass, n and CI; for other probes
    every number or string of the relation's entry (`em`, `f1`, ..., `coherency_round1`, `cardinality`)."""
    if "accuracy" not in metrics:
        return pd.DataFrame([{"relation": r, **{k: v for k, v in m.items() if _number(v) or isinstance(v, str) or v is None}}
                             for r, m in sorted(metrics.get("per_relation", {}).items()) if isinstance(m, dict)])
    rows = [
        {"relation": r, "accuracy": m.get("accuracy"), "prob_mass": m.get("prob_mass"), "n": m.get("n"),
         "ci_low": m.get("accuracy_ci", [None, None])[0], "ci_high": m.get("accuracy_ci", [None, None])[1]}
        for r, m in sorted(metrics.get("per_relation", {}).items())
    ]
    return pd.DataFrame(rows)


def model_label(model: str) -> str:
    """A model as a short name: a path (a local folder, a tiny random test model) -> its folder name."""
    if "/" in model and (model.startswith(("/", ".", "~")) or Path(model).expanduser().exists()):
        return Path(model).name
    return model


def run_files(out_dir: Path) -> list[Path]:
    """Every file a finished probe run wrote into its folder (results, metrics, run config, model
    revision and the probe's extra files), not the lock or a leftover checkpoint."""
    from factprobe.probes.checkpoint import CHECKPOINT, LOCK

    return sorted(p for p in Path(out_dir).iterdir()
                  if p.is_file() and p.name not in (LOCK, CHECKPOINT) and not p.name.startswith("."))


def log_probe_outcome(run: TrackedRun, outcome, cfg) -> None:
    """Log metrics, tables, files, the dataset and a figure for a finished probe."""
    if not run.active:
        return
    m = outcome.metrics
    run.set_tags({tag("dataset_digest"): m.get("data_digest", ""), tag("model_revision"): m.get("model_revision", "")})
    run.log_metrics(metric_dict(m))
    record_headline(run, cfg.probe, m)
    table = per_fact_table(outcome.results)
    run.log_parquet(table, "tables/per_fact.parquet")
    run.log_table(table, "tables/per_fact.json")
    run.log_table(per_relation_table(m), "tables/per_relation.json")
    run.log_artifact(outcome.out_dir / "results.jsonl", "results")
    run.log_artifact(outcome.out_dir / "metrics.json", "results")
    items = table[[c for c in ("fact_id", "relation", "subject", "gold") if c in table.columns]].drop_duplicates("fact_id")
    choices = getattr(cfg.params, "choices", None)
    run.log_input(items, name=f"{cfg.base.source}-mc{choices}" if choices else f"{cfg.base.source}-{cfg.probe}",
                  source=str(cfg.base.data or cfg.base.source), digest=m.get("data_digest"), also_parent=True)
    log_known_unknown(run, outcome.out_dir, cfg.base.model)
    for path in run_files(outcome.out_dir):  # a probe's extra files (results/metrics were logged above)
        if path.name not in ("results.jsonl", "metrics.json", "run_config.json", "model_revision.txt"):
            run.log_artifact(path, "results")
    by_k: dict[int, dict[str, float]] = {}
    for row in m.get("figure7") or []:  # EM against k as metric steps: the UI's chart of one run's Figure 7
        if _number(row.get("em")):
            by_k.setdefault(int(row["shots"]), {})[f"em_by_k/{metric_key(row['setting'])}"] = row["em"]
    for k, values in sorted(by_k.items()):
        run.log_metrics(values, step=k)
    _log_run_figure(run, m, cfg)


def log_known_unknown(run: TrackedRun, out_dir: Path, model: str) -> None:
    """`known_unknown.parquet` (when the probe wrote one) as a dataset input of the run, named
    `known_unknown-<model>` (context `known_unknown`; digest of its fact ids and verdicts), and tags
    with its known/unknown counts. The file itself is logged under `results/` with the others."""
    path = Path(out_dir) / KNOWN_UNKNOWN_FILE
    if not path.is_file():
        return
    import hashlib

    df = pd.read_parquet(path)
    cols = [c for c in ("fact_id", "split", "known") if c in df.columns]
    digest = hashlib.sha256(df[cols].to_json(orient="split", index=False).encode()).hexdigest()[:16]
    run.log_input(df, name=f"known_unknown-{model_label(model)}", source=str(path), digest=digest, context="known_unknown")
    if "known" in df.columns:
        known = df["known"].astype(bool)
        counts = {"known_unknown/n_known": int(known.sum()), "known_unknown/n_unknown": int((~known).sum())}
        if "split" in df.columns:
            for split in sorted(df["split"].astype(str).unique()):
                part = known[df["split"].astype(str) == split]
                counts[f"known_unknown/n_known/{metric_key(split)}"] = int(part.sum())
                counts[f"known_unknown/n_unknown/{metric_key(split)}"] = int((~part).sum())
        run.log_metrics(counts)


def _log_run_figure(run: TrackedRun, m: dict, cfg) -> None:
    """One figure per run: multiple-choice accuracy per relation, counterfactual Figure 7 (this
    model), coherency per relation and cardinality, or QA EM per relation."""
    try:
        import matplotlib.pyplot as plt

        from factprobe.report import plots
    except ImportError:
        return
    model = model_label(cfg.base.model)
    if m.get("accuracy") is not None and m.get("per_relation"):
        fig, name = plots.relation_bars({cfg.base.model: m}, title=f"{cfg.probe} accuracy per relation"), "per_relation_accuracy"
    elif m.get("figure7"):
        fig, name = plots.figure7({model: m}, title=f"{cfg.probe}: EM against k ({model})"), "figure7_em_vs_k"
    elif any(k.startswith("coherency_round") for k in m) and m.get("per_relation"):
        fig, name = plots.coherency_bars({model: m}, title=f"{cfg.probe} per relation and cardinality ({model})"), "coherency"
    elif m.get("em") is not None and m.get("per_relation"):
        fig, name = plots.relation_bars({model: m}, title=f"{cfg.probe} EM per relation", metric="em"), "per_relation_em"
    else:
        return
    run.log_figure(fig, f"figures/{name}.png")
    plt.close(fig)
