"""Step: aggregate all (model, probe) results; heatmap, per-relation bars, HTML + Markdown report."""
from pathlib import Path


def load_results(dirs: list[str]) -> dict[str, dict]:
    """{"<probe>:<model>": metrics} from probe output folders (metrics.json + run_config.json)."""
    import json
    from pathlib import Path

    out = {}
    for d in dirs:
        cfg = json.loads((Path(d) / "run_config.json").read_text())["config"]
        out[f"{cfg['probe']}:{cfg['model']}"] = json.loads((Path(d) / "metrics.json").read_text())
    return out


def metric_safe(run_name: str) -> str:
    """`<probe>:<model>` as part of an MLflow metric name: `<probe>/<model>`, a model path reduced
    to its folder name (MLflow refuses names that resolve like other paths, e.g. with `//`)."""
    probe, _, model = run_name.partition(":")
    if "/" in model and (model.startswith(("/", ".", "~")) or Path(model).expanduser().exists()):
        model = Path(model).name
    return f"{probe}/{model}"


def run_report(result_dirs: list[str], html_path: str, md_path: str, parent_run_id: str, tracking_uri: str,
               pipeline: str = "probe") -> dict[str, dict]:
    """Write the HTML and Markdown reports; log figures, the summary table and per-run metrics to
    the parent run. Returns the metrics by run name."""

    from pathlib import Path

    import matplotlib.pyplot as plt
    import pandas as pd

    from factprobe.io import atomic_write_text
    from factprobe.report.html import figure_png, html_report, markdown_report, summary_rows
    from factprobe.report.plots import accuracy_heatmap, relation_bars
    from tracking.run import TrackedRun

    from ._common import resolve_tracking_uri

    everything = load_results(result_dirs)
    # Figures and the accuracy table cover the runs with per-relation accuracy (multiple-choice
    # probes); every run's scalar metrics are logged below.
    metrics = {k: m for k, m in everything.items() if m.get("accuracy") is not None and m.get("per_relation")}
    heat, bars = accuracy_heatmap(metrics), relation_bars(metrics)
    figures = {"accuracy heatmap (model x relation)": figure_png(heat), "per-relation accuracy": figure_png(bars)}
    title = f"factprobe {pipeline}: {len(metrics)} run(s)"
    atomic_write_text(html_path, html_report(metrics, figures, title))
    atomic_write_text(md_path, markdown_report(metrics, title))
    uri = resolve_tracking_uri(tracking_uri)
    if uri is not None and parent_run_id:
        run = TrackedRun(pipeline=pipeline, tracking_uri=uri, required=True, run_id=parent_run_id)
        run.__enter__()
        run.log_figure(heat, "figures/accuracy_heatmap.png")
        run.log_figure(bars, "figures/per_relation_accuracy.png")
        run.log_table(pd.DataFrame(summary_rows(metrics)), "tables/summary.json")
        run.log_text(__import__("json").dumps(everything, indent=1, default=float), "summary/summary.json")
        run.log_text(Path(html_path).read_text(), "report/report.html")  # .html: the MLflow UI renders it
        flat = {f"{k}/{metric_safe(name)}": v for name, m in everything.items() if name not in metrics
                for k, v in m.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        for name, m in metrics.items():
            safe = metric_safe(name)
            flat[f"acc/{safe}"] = m["accuracy"]
            for rel, r in m.get("per_relation", {}).items():
                flat[f"acc/{safe}/{rel}"] = r["accuracy"]
        run.log_metrics(flat)
    plt.close("all")
    return everything
