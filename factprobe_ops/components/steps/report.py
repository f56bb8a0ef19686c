"""Step: aggregate all (model, probe) results into figures, tables and an HTML + Markdown report.

Every probe writes its own part (`Probe.report`, factprobe/probes/base.py): the runs are grouped
by the probe's `report_group` (the four multiple-choice probes share one: the model x relation
accuracy heatmap, per-relation bars and the summary table shown first), in registry order, and each
group's probe returns its figures, tables and parent-run metrics; this step only lays them out and
logs them. It never tests a probe's name or the shape of its metrics. The built-in parts:
multiple choice (heatmap, bars, summary, `acc/<probe>/<model>[/<relation>]`), QA (EM per relation,
`qa` table), counterfactual ICL (Figures 7 and 6 across models, `counterfactual_icl` table),
coherency (per relation and cardinality, `coherency` table), BELIEF-ICL (calibration plot, belief
tables); any other probe: its `relation_metric` per relation and a table named after it. Runs
other than multiple choice and BELIEF-ICL also log every top-level number as `<metric>/<probe>/<model>`.
Folders of failed (tolerant) probe steps are named in a `failed` table and a tag.

Cross-model maps (`cross_model_parts`, Wu et al. 2024 section 4.2): for every probe that declares a
per-fact verdict (`Probe.fact_verdict`) and has runs of two or more models, the model x relation
heatmap (Figure 5 order: families by the accuracy of their model closest to 7B, models by mean accuracy), the Pearson r between models with its
within/across-family means and the subsumption eta of smaller in larger models of a family and of
fine-tuned models in their base, as figures, tables (`cross_model_<probe>`, `cross_model_pearson_<probe>`,
`cross_model_families_<probe>`, `cross_model_eta_<probe>`) and parent-run metrics (`pearson_within/<probe>`, `pearson_across/<probe>`,
`eta/<probe>/<small> vs <large>`); family and size from each model's config
(`factprobe.report.model_meta`). Runs on different fact sets are mapped on the facts they share, and
the table says so.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from factprobe_ops.tracking.context import RunContext


def load_failures(dirs: list[str]) -> list[dict]:
    """[{"model", "probe", "error"}] of the probe output folders a tolerant probe step marked failed
    (`failed.json`, factprobe_ops/components/steps/probe.py)."""
    import json

    return [json.loads((Path(d) / "failed.json").read_text()) for d in dirs if (Path(d) / "failed.json").exists()]


def load_results(dirs: list[str]) -> dict[str, dict]:
    """{"<probe>:<model>": metrics} from probe output folders (metrics.json + run_config.json);
    folders of failed probe steps (`load_failures`) are left out."""
    return {r.name: r.metrics for r in load_runs(dirs, unique=False)}


def load_runs(dirs: list[str], unique: bool = True) -> list:
    """The finished runs of the probe output folders as `ReportRun`s (failed folders left out);
    names `<probe>:<model>`, made unique with `#2`, `#3`, ... when `unique` (e.g. the runs of one
    model in several settings)."""
    import json

    from factprobe.probes.reporting import ReportRun, model_label

    runs, seen = [], {}
    for d in dirs:
        if (Path(d) / "failed.json").exists():
            continue
        cfg = json.loads((Path(d) / "run_config.json").read_text())["config"]
        name = f"{cfg['probe']}:{cfg['model']}"
        seen[name] = seen.get(name, 0) + 1
        if unique and seen[name] > 1:
            name = f"{name}#{seen[name]}"
        runs.append(ReportRun(name=name, probe=cfg["probe"], model=cfg["model"], label=model_label(str(cfg["model"])),
                              metrics=json.loads((Path(d) / "metrics.json").read_text()), config=cfg, dir=Path(d)))
    return runs


def cross_model_parts(runs: list) -> list:
    """One `ReportPart` per probe (registry order) that declares a per-fact verdict and has runs of
    at least two models, with one run each (a model run in several settings is left out of its
    probe's maps, and a note row says so when other models are there): the cross-model maps described in the module docstring.
    Maps that cannot be drawn (the runs ask the facts differently, share no fact) become a note row
    in the `cross_model_notes` table instead of failing the report."""
    import pandas as pd

    from factprobe.errors import FactprobeError
    from factprobe.probes.registry import probe_names
    from factprobe.probes.reporting import ReportPart
    from factprobe.report.cross_model_maps import RunFacts, align_runs, build_maps, maps_figures
    from factprobe.report.model_meta import resolve_model_meta
    from factprobe_ops.tracking.probe_logging import probe_of

    by_probe: dict[str, list] = {}
    for r in runs:
        if r.dir is not None and (r.dir / "results.jsonl").exists() and getattr(probe_of(r.probe), "fact_verdict", None):
            by_probe.setdefault(r.probe, []).append(r)
    rank = {n: i for i, n in enumerate(probe_names())}
    parts, notes = [], []
    for name in sorted(by_probe, key=lambda n: rank.get(n, len(rank))):
        probe = probe_of(name)
        per_model: dict[str, list] = {}
        for r in by_probe[name]:
            per_model.setdefault(str(r.model), []).append(r)
        for model, rs in per_model.items():
            if len(rs) > 1 and len(per_model) > 1:  # one model in several settings alone: nothing to map
                notes.append({"probe": name, "note": f"{model} has {len(rs)} runs ({', '.join(r.name for r in rs)}); "
                                                     f"left out of the cross-model maps, which take one run per model"})
        single = [rs[0] for rs in per_model.values() if len(rs) == 1]
        if len(single) < 2:
            continue
        verdict = probe.fact_verdict
        facts = []
        for r in single:
            df = pd.read_json(r.dir / "results.jsonl", lines=True)
            if verdict != "correct":
                df = df.drop(columns=[c for c in ("correct",) if c in df.columns]).rename(columns={verdict: "correct"})
            facts.append(RunFacts(model=str(r.model), table=df, ref=str(r.dir), digest=r.metrics.get("data_digest"),
                                  config=r.config, probe=name))
        head = probe.headline_metric
        metric = head.metric if head else verdict
        try:
            aligned = align_runs(facts, intersect=True)
            maps = build_maps(aligned, resolve_model_meta([f.model for f in facts]), metric)
        except FactprobeError as e:
            notes.append({"probe": name, "note": f"no cross-model maps: {e}"})
            continue
        res = maps.result
        part = ReportPart()
        figs = maps_figures(maps, metric)
        part.figures[f"{name}: {metric}, model x relation (Figure 5 order)"] = (f"cross_model_heatmap_{name}", figs["heatmap"])
        part.figures[f"{name}: Pearson r of per-relation {metric} between models"] = (f"cross_model_pearson_{name}", figs["pearson"])
        meta = {m["label"]: m for m in res["models"]}
        part.tables[f"cross_model_{name}"] = [
            {"model": lab, "family": meta[lab]["family"],
             "size": None if meta[lab]["size"] is None else int(meta[lab]["size"]), "base": meta[lab]["base"],
             metric: meta[lab]["accuracy"], **res["heatmap"][lab]} for lab in res["order"]]
        fc = res["family_correlation"]
        part.tables[f"cross_model_pearson_{name}"] = [{"model": lab, **res["pearson"][lab]} for lab in res["order"]]
        part.tables[f"cross_model_families_{name}"] = [
            {"model pairs": "within a family", "mean Pearson r": fc["within"], "pairs": fc["n_within"]},
            {"model pairs": "across families", "mean Pearson r": fc["across"], "pairs": fc["n_across"]}]
        eta_rows = [{"pair": k, "kind": "size", "eta_pooled": v["pooled"], "eta_relation_mean": v["relation_mean"],
                     "n_joined": v["n_joined"], "n_small_known": v["n_small_known"]} for k, v in res["eta"].items()]
        eta_rows += [{"pair": k, "kind": "fine-tuned", "eta_pooled": v["eta"], "eta_relation_mean": v["eta_relation_mean"],
                      "n_joined": v["n_joined"], "n_small_known": v["n_finetuned_known"],
                      "accuracy_delta": v["accuracy_delta"]} for k, v in res["base_vs_finetuned"].items()]
        if eta_rows:
            part.tables[f"cross_model_eta_{name}"] = eta_rows
        for note in res["notes"]:
            notes.append({"probe": name, "note": note})
        for key, value in (("within", fc["within"]), ("across", fc["across"])):
            if value is not None:
                part.metrics[f"pearson_{key}/{name}"] = value
        for k, v in res["eta"].items():
            if v["pooled"] is not None:
                part.metrics[f"eta/{name}/{k}"] = v["pooled"]
        for k, v in res["base_vs_finetuned"].items():
            if v["eta"] is not None:
                part.metrics[f"eta/{name}/{k}"] = v["eta"]
        parts.append(part)
    if notes:
        parts.append(ReportPart(tables={"cross_model_notes": notes}))
    return parts


def metric_safe(run_name: str) -> str:
    """`<probe>:<model>` as part of an MLflow metric name: `<probe>/<model>`, a model path reduced
    to its folder name (MLflow refuses names that resolve like other paths, e.g. with `//`)."""
    from factprobe.probes.reporting import model_label

    probe, _, model = run_name.partition(":")
    return f"{probe}/{model_label(model)}"


def report_parts(runs: list) -> list:
    """One `ReportPart` per report group of `runs` (registry order), from the group's probe."""
    from factprobe_ops.tracking.probe_logging import probe_of

    groups: dict[str, list] = {}
    probes = {}
    for r in runs:
        probe = probe_of(r.probe)
        key = probe.report_group or r.probe
        groups.setdefault(key, []).append(r)
        probes.setdefault(key, probe)
    from factprobe.probes.registry import probe_names

    rank = {n: i for i, n in enumerate(probe_names())}
    order = sorted(groups, key=lambda k: min(rank.get(r.probe, len(rank)) for r in groups[k]))
    return [probes[k].report(groups[k], runs) for k in order]


def headline_scalars(by_run: dict[str, dict]) -> dict[str, float]:
    """{`<label>-<probe>-<model>`: headline value} of every run (`run_report`'s result, by
    `<probe>:<model>`) whose probe declares a headline: the report components' KFP metrics,
    e.g. `accuracy-ic-lke-smollm2` (multiple choice), `em-qa-smollm2`."""
    from factprobe_ops.tracking.probe_logging import probe_of

    out = {}
    for name, m in by_run.items():
        spec = probe_of(name.partition(":")[0]).headline_metric
        value = m.get(spec.metric) if spec else None
        if value is not None:
            out[f"{spec.short}-{name.replace(':', '-').replace('/', '_')}"] = value
    return out


def run_report(result_dirs: list[str], html_path: str, md_path: str, context: RunContext | str,
               html_artifact: str = "report/report.html") -> dict[str, dict]:
    """Write the HTML and Markdown reports; log figures, tables and metrics to the parent run of
    `context` (the pipeline run's `RunContext` or its JSON; see the module docstring). Returns the
    metrics by run name (`<probe>:<model>`, unique)."""
    return write_report(result_dirs, html_path, md_path, context, html_artifact)[0]


def write_report(result_dirs: list[str], html_path: str, md_path: str, context: RunContext | str,
                 html_artifact: str = "report/report.html") -> tuple[dict[str, dict], list]:
    """`run_report`, returning also the report parts (`ReportPart`, one per report group)."""
    import json

    import matplotlib.pyplot as plt
    import pandas as pd

    from factprobe.io import atomic_write_text
    from factprobe.probes.reporting import metric_key
    from factprobe.report.html import figure_png, html_page, markdown_page
    from factprobe_ops.tracking.context import RunContext
    from factprobe_ops.tracking.run import TrackedRun

    ctx = RunContext.from_json(context)
    runs = load_runs(result_dirs)
    everything = {r.name: r.metrics for r in runs}
    parts = report_parts(runs) + cross_model_parts(runs)
    failures = load_failures(result_dirs)  # named in the report and tagged; the others are reported as usual
    figs = {title: fig for p in parts for title, fig in p.figures.items()}  # title -> (file stem, figure)
    tables = {name: rows for p in parts for name, rows in p.tables.items()}
    if failures:
        tables["failed"] = failures
    shown = {name: (rows.to_dict("records") if isinstance(rows, pd.DataFrame) else rows) for name, rows in tables.items()
             if not any(name in p.mlflow_only for p in parts)}
    title = f"factprobe {ctx.pipeline}: {len(runs)} run(s)"
    summaries_html = [p.summary_html for p in parts if p.summary_html]
    summaries_md = [p.summary_markdown for p in parts if p.summary_markdown]
    atomic_write_text(html_path, html_page(title, summaries_html, {t: figure_png(f) for t, (_, f) in figs.items()}, shown))
    atomic_write_text(md_path, markdown_page(title, summaries_md, shown))
    if ctx.tracked:
        run = TrackedRun.parent_of(ctx)
        run.__enter__()
        for stem, fig in figs.values():
            run.log_figure(fig, f"figures/{stem}.png")
        for name, rows in tables.items():
            df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows)
            run.log_table(df, f"tables/{name}.json")
            if any(name in p.parquet for p in parts):
                run.log_parquet(df, f"tables/{name}.parquet")
        if failures:
            run.set_tags({"factprobe.failed_models": ", ".join(sorted({f"{f['probe']}:{f['model']}" for f in failures}))[:5000]})
        run.log_text(json.dumps(everything, indent=1, default=float), "summary/summary.json")
        run.log_text(Path(html_path).read_text(), html_artifact)  # .html: the MLflow UI renders it
        # names made safe for MLflow (`acc@1/belief-mlm/<model>` -> `acc_1/...`; unsafe names used to fail the step)
        run.log_metrics({metric_key(k): v for p in parts for k, v in p.metrics.items()})
    plt.close("all")
    return everything, parts
