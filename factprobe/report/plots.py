"""Figures: per-relation accuracy bars and the model x relation accuracy heatmap.

Inputs are plain metrics dicts (`metrics.json` content) keyed by model name; outputs are
matplotlib Figures (Agg backend; nothing is shown on screen).
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def _relations(metrics_by_model: dict[str, dict]) -> list[str]:
    return sorted({r for m in metrics_by_model.values() for r in m.get("per_relation", {})})


def relation_bars(metrics_by_model: dict[str, dict], title: str = "accuracy per relation"):
    """Grouped bars: one group per relation, one bar per model, with 95% bootstrap error bars."""
    rels = _relations(metrics_by_model)
    models = list(metrics_by_model)
    width = 0.8 / max(len(models), 1)
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(rels) * max(1, len(models)) + 2), 4))
    x = np.arange(len(rels))
    for i, model in enumerate(models):
        per = metrics_by_model[model].get("per_relation", {})
        acc = [per.get(r, {}).get("accuracy", np.nan) for r in rels]
        ci = [per.get(r, {}).get("accuracy_ci", [np.nan, np.nan]) for r in rels]
        err = np.array([[max(a - c[0], 0) for a, c in zip(acc, ci)], [max(c[1] - a, 0) for a, c in zip(acc, ci)]])
        ax.bar(x + i * width - 0.4 + width / 2, acc, width, yerr=np.nan_to_num(err), capsize=2, label=model)
    ax.set_xticks(x, rels, rotation=45, ha="right")
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def accuracy_heatmap(metrics_by_model: dict[str, dict], title: str = "accuracy: model x relation"):
    """Heatmap of per-relation accuracy, models as rows, with the value printed in each cell."""
    rels = _relations(metrics_by_model)
    models = list(metrics_by_model)
    grid = np.array([[metrics_by_model[m].get("per_relation", {}).get(r, {}).get("accuracy", np.nan) for r in rels] for m in models])
    fig, ax = plt.subplots(figsize=(max(5, 0.8 * len(rels) + 3), max(2.5, 0.6 * len(models) + 1.5)))
    im = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(rels)), rels, rotation=45, ha="right")
    ax.set_yticks(range(len(models)), models)
    for i in range(len(models)):
        for j in range(len(rels)):
            if not np.isnan(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", color="white" if grid[i, j] < 0.6 else "black", fontsize=8)
    fig.colorbar(im, ax=ax, label="accuracy")
    ax.set_title(title)
    fig.tight_layout()
    return fig
