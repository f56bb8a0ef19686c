"""Step: the before/after fine-tuning report (yuan2024 Tables 2-4) of `finetune_known_unknown`.

Reads the evaluation folders of the base model and of every adapter (each holds the probe's
`results.jsonl` and `finetune_setting.json`; an adapter's QA folder also the training's
`finetune_metrics.json` and `finetune_loss_history.json`), builds `factprobe.metrics.finetune_compare.comparison_table` (a
row for the base and one per setting, paired bootstrap intervals against the base), and writes
a Markdown and an HTML report, with each setting's knowledge-map diff against the base (facts gained
and lost under every probe, `steps/knowledge_map.finetune_knowledge_diffs`). On the MLflow parent run
it logs the table (`tables/finetune.json` and `.parquet`; the diffs as `tables/finetune_knowledge_map.json`),
the metrics `<metric>/<setting>` and `<metric>_diff/<setting>`, the figures
`figures/finetune_before_after.png` (bars with intervals) and `figures/finetune_loss.png` (loss
curves), the report, and the tag `factprobe.smoke_test` (true for a run below the paper's budget).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from factprobe_ops.tracking.context import RunContext

METRIC_LABELS = {"em": "EM", "f1": "F1", "contains": "Contains", "iclke_acc": "IC-LKE acc"}


def read_variants(qa_dirs: list[str], mc_dirs: list[str]):
    """{setting: VariantResults} from evaluation folders (`finetune_setting.json` names the setting)."""
    from factprobe.metrics.finetune_compare import VariantResults, mc_per_fact, qa_per_fact

    from .finetune_evaluate import evaluation_dirs

    qa, mc = evaluation_dirs(qa_dirs), evaluation_dirs(mc_dirs)
    out = {}
    for setting, d in qa.items():
        rows = pd.read_json(Path(d) / "results.jsonl", lines=True)
        mc_rows = None
        if setting in mc:
            mc_rows = mc_per_fact(pd.read_json(Path(mc[setting]) / "results.jsonl", lines=True))
        out[setting] = VariantResults(qa_per_fact(rows), mc_rows)
    return out


def read_losses(dirs: list[str]) -> dict[str, list[tuple[int, float]]]:
    """{setting: [(step, loss)]} from the adapters' evaluation folders (the evaluation step copies
    the training's `finetune_loss_history.json` there); the base model has none."""
    from .finetune import SETTING_FILE

    out = {}
    for d in dirs:
        p = Path(d)
        if not (p / SETTING_FILE).is_file():
            continue
        setting = json.loads((p / SETTING_FILE).read_text())["setting"]
        hist = p / "finetune_loss_history.json"
        if not hist.is_file():
            continue
        pairs: list[tuple[int, float]] = []
        if hist.is_file():
            data = json.loads(hist.read_text())
            entries = data if isinstance(data, list) else data.get("history", [])
            pairs = [(int(e["step"]), float(e["loss"])) for e in entries if "loss" in e and "step" in e]
        out[setting] = pairs
    return out


def before_after_figure(table: pd.DataFrame, title: str):
    """Grouped bars: one group per metric, one bar per setting (base first), with the paired
    bootstrap interval of each setting's difference to the base drawn around its bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    metrics = list(METRIC_LABELS)
    settings = table["setting"].tolist()
    width = 0.8 / max(len(settings), 1)
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(metrics) * max(1, len(settings)) / 2), 4))
    x = np.arange(len(metrics))
    for i, (_, row) in enumerate(table.iterrows()):
        vals = np.array([row[m] for m in metrics], dtype=float)
        base_vals = np.array([table.iloc[0][m] for m in metrics], dtype=float)
        lo = np.array([row[f"{m}_ci_low"] for m in metrics], dtype=float)
        hi = np.array([row[f"{m}_ci_high"] for m in metrics], dtype=float)
        err = np.nan_to_num(np.vstack([np.maximum(vals - (base_vals + lo), 0), np.maximum(base_vals + hi - vals, 0)]))
        ax.bar(x + i * width - 0.4 + width / 2, vals, width, yerr=err if i else None, capsize=2, label=row["setting"])
    ax.set_xticks(x, [METRIC_LABELS[m] for m in metrics])
    ax.set_ylim(0, 1)
    ax.set_ylabel("score")
    ax.text(
        0.99,
        0.98,
        "error bars: 95% paired bootstrap interval of the change vs base",
        transform=ax.transAxes,
        ha="right",
        va="top",
        fontsize=7,
    )
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def loss_figure(losses: dict[str, list[tuple[int, float]]], title: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for setting, pairs in losses.items():
        if pairs:
            ax.plot([s for s, _ in pairs], [v for _, v in pairs], marker="o", ms=3, label=setting)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss (answer tokens)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def run_finetune_report(
    qa_dirs: list[str], mc_dirs: list[str], html_path: str, md_path: str, ft: dict, context: RunContext | str
) -> pd.DataFrame:
    """Write the reports and log everything to the parent run of `context` (the pipeline run's
    `RunContext` or its JSON; module docstring); returns the table."""
    import html

    import matplotlib.pyplot as plt

    from factprobe.io import atomic_write_text
    from factprobe.metrics.finetune_compare import comparison_table, flat_metrics, markdown_table
    from factprobe.report.html import figure_png
    from factprobe_ops.tracking.context import RunContext
    from factprobe_ops.tracking.run import TrackedRun

    from .finetune import smoke_banner, smoke_tags

    ctx = RunContext.from_json(context)
    trigger = ctx.trigger
    table = comparison_table(read_variants(qa_dirs, mc_dirs))
    banner = smoke_banner(ft, trigger)
    losses = read_losses(qa_dirs)
    fig = before_after_figure(table, f"zero-shot QA and IC-LKE before and after fine-tuning\n{banner[:110]}")
    lfig = loss_figure(losses, "fine-tuning loss per setting")
    md = f"**{banner}**\n\n" + markdown_table(table)
    from factprobe.report.html import markdown_table as rows_markdown

    from .knowledge_map import finetune_knowledge_diffs

    knowledge, no_diff = finetune_knowledge_diffs(qa_dirs, mc_dirs)  # facts gained and lost under every probe (issue 39)
    md += "\n\n" + (
        no_diff or rows_markdown(knowledge.to_dict("records"), "Knowledge map: facts gained and lost against the base")
    )
    atomic_write_text(md_path, md)
    imgs = "".join(
        f'<img src="data:image/png;base64,{__import__("base64").b64encode(figure_png(f)).decode()}"/>' for f in (fig, lfig)
    )
    atomic_write_text(
        html_path, f"<html><body><p><b>{html.escape(banner)}</b></p><pre>{html.escape(md)}</pre>{imgs}</body></html>"
    )
    print(banner, flush=True)
    print(markdown_table(table), flush=True)
    if ctx.tracked:
        with TrackedRun.parent_of(ctx) as run:  # the parent run: logged into, not ended (the finalize step ends it)
            run.set_tags(smoke_tags(ft, trigger))
            run.log_table(table, "tables/finetune.json")
            run.log_parquet(table, "tables/finetune.parquet")
            if len(knowledge):
                run.log_table(knowledge, "tables/finetune_knowledge_map.json")
            run.log_metrics(flat_metrics(table))
            run.log_figure(fig, "figures/finetune_before_after.png")
            run.log_figure(lfig, "figures/finetune_loss.png")
            run.log_text(md, "report/finetune.md")
            run.log_text(Path(html_path).read_text(), "report/finetune.html")
    plt.close(fig)
    plt.close(lfig)
    best = table.iloc[1:].sort_values("em", ascending=False).head(1)
    if len(best):
        b = best.iloc[0]
        print(
            f"headline: finetune report: base EM {table.iloc[0]['em']:.3f}; best {b['setting']} EM {b['em']:.3f} "
            f"({b['em_diff']:+.3f} [{b['em_ci_low']:+.3f}, {b['em_ci_high']:+.3f}])",
            flush=True,
        )
    return table
