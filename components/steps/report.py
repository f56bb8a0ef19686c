"""Step: aggregate all (model, probe) results into figures, tables and an HTML + Markdown report.

Every probe writes its own part (`Probe.report`, factprobe/framework/base.py): the runs are grouped
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

Cross-model maps (`cross_model_parts`, Wu et al. 2024 section 4.2): built in the science package
(`factprobe.probes.cross_model`) for every probe that declares a per-fact verdict and has runs of two
or more models, read in the headline's direction (`factprobe.framework.verdict`); this step lays them out
and logs them like every other part.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from factprobe_ops.tracking.context import RunContext


def load_failures(dirs: list[str]) -> list[dict]:
    """[{"model", "probe", "error"}] of the probe output folders a tolerant probe step marked failed
    (`failed.json`, components/steps/probe.py)."""
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

    from factprobe.framework.reporting import ReportRun, model_label

    runs, seen = [], {}
    for d in dirs:
        if (Path(d) / "failed.json").exists():
            continue
        cfg = json.loads((Path(d) / "run_config.json").read_text())["config"]
        name = f"{cfg['probe']}:{cfg['model']}"
        seen[name] = seen.get(name, 0) + 1
        if unique and seen[name] > 1:
            name = f"{name}#{seen[name]}"
        runs.append(
            ReportRun(
                name=name,
                probe=cfg["probe"],
                model=cfg["model"],
                label=model_label(str(cfg["model"])),
                metrics=json.loads((Path(d) / "metrics.json").read_text()),
                config=cfg,
                dir=Path(d),
            )
        )
    return runs


def cross_model_parts(runs: list) -> list:
    """The cross-model maps' report parts of `runs` (`ReportRun`s): one per probe with a per-fact
    verdict and runs of two or more models, built by `factprobe.probes.cross_model.cross_model_parts`."""
    from factprobe.probes.cross_model import cross_model_parts as parts

    return parts(runs)


def metric_safe(run_name: str) -> str:
    """`<probe>:<model>` as part of an MLflow metric name: `<probe>/<model>`, a model path reduced
    to its folder name (MLflow refuses names that resolve like other paths, e.g. with `//`)."""
    from factprobe.framework.reporting import model_label

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
    from factprobe.framework.registry import probe_names

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


def run_report(
    result_dirs: list[str], html_path: str, md_path: str, context: RunContext | str, html_artifact: str = "report/report.html"
) -> dict[str, dict]:
    """Write the HTML and Markdown reports; log figures, tables and metrics to the parent run of
    `context` (the pipeline run's `RunContext` or its JSON; see the module docstring). Returns the
    metrics by run name (`<probe>:<model>`, unique)."""
    return write_report(result_dirs, html_path, md_path, context, html_artifact)[0]


def write_report(
    result_dirs: list[str], html_path: str, md_path: str, context: RunContext | str, html_artifact: str = "report/report.html"
) -> tuple[dict[str, dict], list]:
    """`run_report`, returning also the report parts (`ReportPart`, one per report group)."""
    import json

    import matplotlib.pyplot as plt
    import pandas as pd

    from factprobe.framework.reporting import metric_key
    from factprobe.io import atomic_write_text
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
    shown = {
        name: (rows.to_dict("records") if isinstance(rows, pd.DataFrame) else rows)
        for name, rows in tables.items()
        if not any(name in p.mlflow_only for p in parts)
    }
    title = f"factprobe {ctx.pipeline}: {len(runs)} run(s)"
    summaries_html = [p.summary_html for p in parts if p.summary_html]
    summaries_md = [p.summary_markdown for p in parts if p.summary_markdown]
    atomic_write_text(html_path, html_page(title, summaries_html, {t: figure_png(f) for t, (_, f) in figs.items()}, shown))
    atomic_write_text(md_path, markdown_page(title, summaries_md, shown))
    if ctx.tracked:
        with TrackedRun.parent_of(ctx) as run:  # the parent run: logged into, not ended (the finalize step ends it)
            for stem, fig in figs.values():
                run.log_figure(fig, f"figures/{stem}.png")
            for name, rows in tables.items():
                df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows)
                run.log_table(df, f"tables/{name}.json")
                if any(name in p.parquet for p in parts):
                    run.log_parquet(df, f"tables/{name}.parquet")
            if failures:
                run.set_tags(
                    {"factprobe.failed_models": ", ".join(sorted({f"{f['probe']}:{f['model']}" for f in failures}))[:5000]}
                )
            run.log_text(json.dumps(everything, indent=1, default=float), "summary/summary.json")
            run.log_text(Path(html_path).read_text(), html_artifact)  # .html: the MLflow UI renders it
            # names made safe for MLflow (`acc@1/belief-mlm/<model>` -> `acc_1/...`; unsafe names used to fail the step)
            run.log_metrics({metric_key(k): v for p in parts for k, v in p.metrics.items()})
    plt.close("all")
    return everything, parts
