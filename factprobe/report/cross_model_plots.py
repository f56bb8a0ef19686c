"""Figures of the cross-model maps (Wu et al. 2024, Figures 5, 6 and 8) and of Accuracy@K.

- `heatmap_figure`: model x relation accuracy (Figure 5), rows in a given model order.
- `pearson_figure`: Pearson r of per-relation accuracy between models (Figure 6 / Table 14).
- `accuracy_at_k_figure`: one run's Accuracy@K and coverage against the threshold K (appendix D,
  Figure 8), from its `metrics.json` content.

Inputs are the frames of `metrics.cross_model` and plain metrics dicts; outputs are matplotlib
Figures (Agg backend, the house style of `report.plots`). A NaN or None value is left blank (a cell)
or out (a line), never drawn as 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd


def _ordered(frame: pd.DataFrame, order: Sequence[str] | None) -> list[str]:
    models = list(frame.index)
    if order is None:
        return models
    missing = [m for m in order if m not in models]
    if missing:
        raise ValueError(f"order names model(s) not in the table: {missing}; it has {models}")
    return list(order) + [m for m in models if m not in order]


def _cell_text(ax, grid: np.ndarray, dark_below: float, fmt: str = "{:.2f}") -> None:
    for i in range(grid.shape[0]):
        for j in range(grid.shape[1]):
            v = grid[i, j]
            if not np.isnan(v):
                ax.text(j, i, fmt.format(v), ha="center", va="center", fontsize=7, color="white" if v < dark_below else "black")


def heatmap_figure(matrix: pd.DataFrame, order: Sequence[str] | None = None, title: str = "accuracy: model x relation"):
    """Figure 5: `matrix` (models x relations, as `metrics.cross_model.accuracy_matrix`) with the models
    as rows in `order` (e.g. `order_models`; models not named follow in the matrix's order), relations
    as columns, the value printed in each cell; a NaN cell (the model did not run the relation) is blank."""
    models = _ordered(matrix, order)
    rels = list(matrix.columns)
    grid = matrix.loc[models, rels].to_numpy(dtype=float) if models else np.zeros((0, len(rels)))
    fig, ax = plt.subplots(figsize=(max(5, 0.6 * len(rels) + 3), max(2.5, 0.45 * len(models) + 1.5)))
    im = ax.imshow(np.ma.masked_invalid(grid), vmin=0, vmax=1, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(rels)), rels, rotation=45, ha="right")
    ax.set_yticks(range(len(models)), models)
    if grid.size <= 600:  # beyond that the numbers are unreadable
        _cell_text(ax, grid, dark_below=0.6)
    fig.colorbar(im, ax=ax, label="accuracy")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def pearson_figure(pearson: pd.DataFrame, order: Sequence[str] | None = None, title: str = "Pearson r of per-relation accuracy"):
    """Figure 6: the symmetric model x model matrix of `metrics.cross_model.pearson_matrix`, rows and
    columns in `order`, r printed in each cell (blank where r is undefined), on a -1..1 diverging scale."""
    models = _ordered(pearson, order)
    grid = pearson.loc[models, models].to_numpy(dtype=float) if models else np.zeros((0, 0))
    side = max(3.5, 0.5 * len(models) + 2)
    fig, ax = plt.subplots(figsize=(side + 1, side))
    im = ax.imshow(np.ma.masked_invalid(grid), vmin=-1, vmax=1, cmap="coolwarm", aspect="equal")
    ax.set_xticks(range(len(models)), models, rotation=45, ha="right")
    ax.set_yticks(range(len(models)), models)
    if len(models) <= 25:
        for i in range(len(models)):
            for j in range(len(models)):
                v = grid[i, j]
                if not np.isnan(v):
                    ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="white" if abs(v) > 0.6 else "black")
    fig.colorbar(im, ax=ax, label="Pearson r")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def _num(value) -> float:
    return np.nan if value is None else float(value)


def accuracy_at_k_figure(metrics: Mapping, title: str = "Accuracy@K and coverage"):
    """Appendix D / Figure 8 for one run: Accuracy@K (accuracy over the facts whose confidence is >= K)
    and the coverage at K (the share of facts kept) against K, from a multiple-choice run's metrics
    (`metrics["accuracy_at_k"]`: {str(K): {"accuracy", "n", "coverage"}}, as `summarize` writes it). The
    overall accuracy is drawn as a dotted reference. A K that keeps no fact has no accuracy point.
    Raises ValueError when the metrics hold no `accuracy_at_k`."""
    at_k = metrics.get("accuracy_at_k")
    if not at_k:
        raise ValueError("the metrics hold no 'accuracy_at_k' (not a multiple-choice run?)")
    ks = sorted(at_k, key=float)
    x = np.array([float(k) for k in ks])
    acc = np.array([_num(at_k[k].get("accuracy")) for k in ks])
    cov = np.array([_num(at_k[k].get("coverage")) for k in ks])
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    ax.plot(x, acc, marker="o", color="tab:blue", label="Accuracy@K")
    if not np.isnan(cov).all():
        ax.plot(x, cov, marker="s", linestyle="--", color="tab:orange", label="coverage (share kept)")
    overall = _num(metrics.get("accuracy"))
    if not np.isnan(overall):
        ax.axhline(overall, color="grey", linestyle=":", linewidth=1, label=f"accuracy (all) {overall:.2f}")
    ax.set_xlabel("confidence threshold K")
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("share")
    n = metrics.get("n")
    ax.set_title(title + (f" (n = {n})" if n is not None else ""))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


__all__ = ["accuracy_at_k_figure", "heatmap_figure", "pearson_figure"]
