"""The map's figures as matplotlib Figures (Agg backend; nothing is shown): the probe-agreement matrix
of a model, its facts x probes heatmap ordered by agreement, and the models' knowledge sharing rates.
`factprobe.report.plots.save_png` writes them; the operations layer logs the files.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

#: rows drawn at most in a facts x probes heatmap: more facts are shown as evenly spaced rows of the sorted order
MAX_HEATMAP_ROWS = 2000
#: a matrix of more rows or columns is drawn without its numbers in the cells (text is most of a figure's
#: cost: 20 models x 10 probes took 14 s of CPU with them); the numbers are in the tables and on the page
MAX_ANNOTATED = 8


def _matrix(ax, values: np.ndarray, labels: Sequence[str], cols: Sequence[str], title: str, vmin: float, cmap: str) -> None:
    im = ax.imshow(np.ma.masked_invalid(values), vmin=vmin, vmax=1.0, cmap=cmap)
    ax.set_xticks(range(len(cols)), cols, rotation=45, ha="right")
    ax.set_yticks(range(len(labels)), labels)
    ax.set_title(title, fontsize=10)
    if max(values.shape) <= MAX_ANNOTATED:
        for i in range(values.shape[0]):
            for j in range(values.shape[1]):
                v = values[i, j]
                ax.text(j, i, "—" if not np.isfinite(v) else f"{v:.2f}", ha="center", va="center", fontsize=8)
    ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)


def agreement_figure(model: str, probes: Sequence[str], kappa: np.ndarray, eta: np.ndarray, n_facts: int):
    """Two panels over the probes of `model`: Cohen's kappa of every pair (relation mean; diagonal 1 where
    defined) and eta(row | column), the share of the facts the row's probe finds known that the column's
    probe also finds known (relation mean)."""
    size = max(4.0, 0.7 * len(probes) + 2.5)
    fig, (left, right) = plt.subplots(1, 2, figsize=(2 * size, size))
    _matrix(left, kappa, probes, probes, "Cohen's kappa", -1.0, "RdBu")
    _matrix(right, eta, probes, probes, "eta(row | column)", 0.0, "viridis")
    fig.suptitle(f"{model}: agreement between probes over {n_facts:,} facts (relation means)")
    fig.subplots_adjust(left=0.12, right=0.95, bottom=0.2, top=0.86, wspace=0.4)
    return fig


def facts_figure(model: str, probes: Sequence[str], right: np.ndarray, order: np.ndarray):
    """A facts x probes heatmap of `model` (`right`: facts x probes, bool), rows in `order` (most probes
    right first); at most `MAX_HEATMAP_ROWS` evenly spaced rows are drawn, the title says how many."""
    n = len(order)
    shown = order if n <= MAX_HEATMAP_ROWS else order[np.linspace(0, n - 1, MAX_HEATMAP_ROWS).astype(int)]
    fig, ax = plt.subplots(figsize=(max(5.0, 0.6 * len(probes) + 3), 6))
    ax.imshow(right[shown].astype(float), aspect="auto", interpolation="nearest", cmap="Greens", vmin=0, vmax=1)
    ax.set_xticks(range(len(probes)), probes, rotation=45, ha="right")
    ax.set_yticks([])
    ax.set_ylabel("facts: most probes right at the top")
    note = f"{n:,} facts" if n == len(shown) else f"{len(shown):,} of {n:,} facts, evenly spaced"
    ax.set_title(f"{model}: right (green) per fact and probe\n{note}", fontsize=10)
    fig.subplots_adjust(left=0.12, right=0.97, bottom=0.2, top=0.9)
    return fig


def sharing_figure(models: Sequence[str], rate: np.ndarray):
    """zhao2024 Figure 4's layout over robust sets: cell (row a, column b) = the share of a's facts known
    under every probe that b also knows under every probe."""
    size = max(4.0, 0.8 * len(models) + 2.5)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    _matrix(
        ax, rate, models, models, "knowledge sharing rate of robust facts (row's robust facts known by column)", 0.0, "viridis"
    )
    fig.subplots_adjust(left=0.2, right=0.95, bottom=0.2, top=0.92)
    return fig


__all__ = ["MAX_HEATMAP_ROWS", "agreement_figure", "facts_figure", "sharing_figure"]
