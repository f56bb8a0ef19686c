"""What a probe run logs to MLflow, in one place (used by the CLI and by the probe component).

What is logged is what the probe declares (`factprobe.framework.base.Probe`, reporting hooks); this
module never tests a probe's name or the shape of its metrics. Logged per run: every config field
as a parameter; the probe's flat metrics (`metric_dict`: `Probe.flat_metrics`, names made safe for
MLflow, None never logged) and its stepped metrics (`Probe.stepped_metrics`, e.g. counterfactual
`em_by_k/<setting>` against k); the headline under its family's name (`headline/<family>`) with
its summary row (metric, value, 95% interval, n) as the tag `factprobe.headline` (JSON), from which
the parent run's description is built (`summary_markdown`); the per-fact table (the probe's
`per_fact_columns`; parquet artifact `tables/per_fact.parquet` plus `log_table` JSON, joinable
across runs on `fact_id`); the per-relation table (`Probe.relation_table`); every file the run
wrote (`results.jsonl`, `metrics.json`, a probe's extra files such as `known_unknown.parquet`)
under `results/`; the probe's figures (`Probe.run_figures`, `figures/<name>.png`); the test items
as an MLflow dataset input (`log_input`) whose digest is the data digest; and a model's
known/unknown table, when the probe wrote one, as a second dataset input (`known_unknown-<model>`,
context `known_unknown`).

Metric names of the built-in probes, as in metrics.json: `accuracy`, `macro_accuracy`, `accuracy/<relation>`,
`prob_mass/<relation>`, `n/<relation>`, `accuracy_at_k/<K>`, `coverage_at_k/<K>`, `accuracy_ci_low/high`
(multiple choice; runs logged before 2026-11-26 used `acc` for `accuracy`);
`<metric>/<relation>` and `<metric>/<group>/<key>` for the other probes' `per_<group>` tables
(`em/P36`, `coherency/cardinality/N-1`, `em/shots/0`); counterfactual `em/<setting>/k<k>`.
MLflow allows letters, digits and `_ - . / : space` only: `acc@1` is logged as `acc_1`. An id in a
name (the key of a `per_<group>` table: a relation, a template) is one name segment: `/` and every
character MLflow refuses become `_`, `%` becomes `pct`, an id starting with `..` gets a leading `_` (relation
`a/b` -> `accuracy/a_b`, `../../etc` -> `accuracy/_.._.._etc`); two ids that come out alike are told
apart by `-<8 hex of the SHA-256 of the id>` (`factprobe_ops.tracking.metric_keys`). Every id or name
so changed is listed in the run's `tables/metric_keys.json` (kind, original, logged); metrics.json
and the per-fact and per-relation tables keep the original ids.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from factprobe.framework.base import Probe
from factprobe.framework.reporting import metric_key, model_label

from .conventions import headline_metric_name, tag
from .metric_keys import safe_ids
from .run import TrackedRun

CONFIG_PARAM = "config_json"
KNOWN_UNKNOWN_FILE = "known_unknown.parquet"  # factprobe.datasets.known_unknown.FILE_NAME
HEADLINE_TAG = tag("headline")


def probe_of(name: str | None) -> Probe:
    """The registered probe `name`; for a name that is not registered (an old run, a plug-in not
    loaded here) a bare `Probe` of that name, whose defaults log every number and draw nothing."""
    from factprobe.framework.registry import load_probes

    known = load_probes().get(str(name))
    return known if known is not None else type("UnregisteredProbe", (Probe,), {"name": str(name or "")})()


def safe_table_ids(metrics: dict) -> tuple[dict, dict[str, str]]:
    """`metrics` with the keys of every `per_<group>` table made single metric-name segments
    (`metric_keys.safe_ids`), and {original id: logged id} of those changed (the module docstring)."""
    out, renamed = dict(metrics), {}
    for group, table in metrics.items():
        if not (isinstance(group, str) and group.startswith("per_") and isinstance(table, dict)):
            continue
        names = safe_ids([str(k) for k in table])
        out[group] = {names[str(k)]: v for k, v in table.items()}
        renamed.update({k: v for k, v in names.items() if k != v})
    return out, renamed


def metric_dict(metrics: dict, probe: Probe | None = None, renamed: dict[str, str] | None = None) -> dict[str, float]:
    """The run's flat metrics as MLflow metric names: `probe.flat_metrics` (default: the probe named
    by `metrics["probe"]`) of `metrics` with safe table ids (`safe_table_ids`), names made safe
    (`metric_key`), None (no items) never logged. The ids changed are added to `renamed` when given."""
    probe = probe or probe_of(metrics.get("probe"))
    safe, changed = safe_table_ids(metrics)
    if renamed is not None:
        renamed.update(changed)
    return {metric_key(k): v for k, v in probe.flat_metrics(safe).items() if v is not None}


def headline(probe: str, metrics: dict) -> dict | None:
    """The probe run's headline: {"name": `headline/<family>` (the probe's `headline_metric`),
    "metric": the metrics.json key, "value", "ci": [lo, hi] or None, "n"}; None when the probe
    declares no headline or the run has no headline number (no items)."""
    row = probe_of(probe).headline_row(metrics)
    if row is None:
        return None
    return {
        "name": headline_metric_name(row["family"]),
        "metric": row["metric"],
        "value": row["value"],
        "ci": row["ci"],
        "n": row["n"],
    }


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


def per_fact_table(results: pd.DataFrame | Path, probe: Probe) -> pd.DataFrame:
    """The slim per-fact table (no option lists, prompts or token ids) that runs are joined on:
    the probe's `per_fact_columns` that the results have. `results` is the rows as a DataFrame, or a
    results.jsonl file, read one row at a time with only those fields kept (issue 40 item 3: a run's
    rows are never all in memory; the table is the same)."""
    if isinstance(results, Path):
        from factprobe.framework.row_stream import Projector, iter_rows

        keep = Projector(probe.per_fact_columns, probe.name)
        results = pd.DataFrame([dict(keep.project(r)) for r in iter_rows(results)])
    cols = [c for c in probe.per_fact_columns if c in results.columns] or list(probe.per_fact_columns)
    return results[cols].copy() if len(results) else pd.DataFrame(columns=cols)


def per_relation_table(metrics: dict, probe: Probe | None = None) -> pd.DataFrame:
    """The probe's per-relation table (`Probe.relation_table`; default: the probe named in `metrics`)."""
    return (probe or probe_of(metrics.get("probe"))).relation_table(metrics)


def run_files(out_dir: Path) -> list[Path]:
    """Every file a finished probe run wrote into its folder (results, metrics, run config, model
    revision and the probe's extra files), not the lock or a leftover checkpoint."""
    from factprobe.framework.checkpoint import CHECKPOINT, LOCK

    return sorted(
        p for p in Path(out_dir).iterdir() if p.is_file() and p.name not in (LOCK, CHECKPOINT) and not p.name.startswith(".")
    )


def log_probe_outcome(run: TrackedRun, outcome, cfg) -> None:
    """Log metrics, tables, files, the dataset and a figure for a finished probe."""
    if not run.active:
        return
    m = outcome.metrics
    probe = probe_of(cfg.probe)
    run.set_tags({tag("dataset_digest"): m.get("data_digest", ""), tag("model_revision"): m.get("model_revision", "")})
    log_identity(run, m)
    renamed: dict[str, str] = {}
    run.log_metrics(metric_dict(m, probe, renamed))
    run.record_renamed_ids(renamed)
    record_headline(run, cfg.probe, m)
    table = per_fact_table(outcome.out_dir / "results.jsonl", probe)  # streamed from the file, not the rows in memory
    run.log_parquet(table, "tables/per_fact.parquet")
    run.log_table(table, "tables/per_fact.json")
    run.log_table(per_relation_table(m, probe), "tables/per_relation.json")
    run.log_artifact(outcome.out_dir / "results.jsonl", "results")
    run.log_artifact(outcome.out_dir / "metrics.json", "results")
    items = table[[c for c in ("fact_id", "relation", "subject", "gold") if c in table.columns]].drop_duplicates("fact_id")
    run.log_input(
        items,
        name=probe.input_name(cfg),
        source=str(cfg.base.data or cfg.base.source),
        digest=m.get("data_digest"),
        also_parent=True,
    )
    log_known_unknown(run, outcome.out_dir, cfg.base.model)
    for path in run_files(outcome.out_dir):  # a probe's extra files (results/metrics were logged above)
        if path.name not in ("results.jsonl", "metrics.json", "run_config.json", "model_revision.txt"):
            run.log_artifact(path, "results")
    for step, values in sorted(probe.stepped_metrics(m).items()):  # e.g. EM against k: one run's Figure 7
        run.log_metrics({metric_key(k): v for k, v in values.items()}, step=step)
    _log_run_figures(run, probe, m, cfg.base.model)


def log_identity(run: TrackedRun, metrics: dict) -> None:
    """The run's measurement identity (`metrics["identity"]`, factprobe.identity) as tags
    `factprobe.<model_revision|data_digest|config_key|numerics|dtype|device|device_name|identity_key>`
    and params `identity.*` (model revision, data digest, each numerics field, each input location)."""
    from factprobe.identity import RunIdentity, identity_of

    found = identity_of(metrics)
    if found is None:
        return
    ident = RunIdentity.from_dict(found)
    run.set_tags({tag(k): v for k, v in ident.tags().items()})
    run.log_params(ident.params())


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


def _log_run_figures(run: TrackedRun, probe: Probe, m: dict, model: str) -> None:
    """The probe's figures of this run (`Probe.run_figures`) as `figures/<name>.png`."""
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        return
    for name, fig in probe.run_figures(m, model).items():
        run.log_figure(fig, f"figures/{name}.png")
        plt.close(fig)
