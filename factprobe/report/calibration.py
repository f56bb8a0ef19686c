"""Calibration plots of BELIEF / BELIEF-ICL (zhao2024 Figures 2 and 3): confidence bins against accuracy.

Input: per curve (a model, or one ICL setting of a model) the equal-size confidence bins that
`factprobe.metrics.belief.calibration_bins` computes and `metrics.json` stores under
`calibration[<name>]` (records with `bin`, `n`, `confidence`, `accuracy`). Output: a matplotlib
Figure (Agg backend) with one line per curve, the mean confidence of each bin on x and its
accuracy on y, and the diagonal of perfect calibration: points below the diagonal are
overconfident. Curves are grouped into panels (one per model, say), as Figure 2 shows the BERT
models and the ICL settings of Llama3-8B side by side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def calibration_figure(
    panels: Mapping[str, Mapping[str, Sequence[Mapping]]],
    title: str = "calibration: confidence vs Acc@1",
    overconf: Mapping[str, Mapping[str, float | None]] | None = None,
):
    """One panel per key of `panels` ({panel: {curve label: bins}}); each curve is its bins'
    (mean confidence, accuracy) points joined in order of confidence. `overconf` ({panel: {curve:
    value}}) adds each curve's Overconf to its legend label. Panels without bins are left out."""
    panels = {p: {c: list(b) for c, b in curves.items() if b} for p, curves in panels.items()}
    panels = {p: c for p, c in panels.items() if c}
    n = max(len(panels), 1)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 4.2), squeeze=False)
    for ax, (panel, curves) in zip(axes[0], panels.items()):
        ax.plot([0, 1], [0, 1], ls="--", color="grey", lw=1, label="perfect calibration")
        for label, bins in curves.items():
            pts = sorted((float(b["confidence"]), float(b["accuracy"])) for b in bins)
            oc = (overconf or {}).get(panel, {}).get(label)
            name = label if oc is None else f"{label} (overconf {oc:+.3f})"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=4, label=name)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("confidence (bin mean)")
        ax.set_ylabel("Acc@1")
        ax.set_title(panel, fontsize=10)
        ax.legend(fontsize=7, loc="upper left")
    if not panels:
        axes[0][0].text(0.5, 0.5, "no confidence bins", ha="center", va="center")
        axes[0][0].set_axis_off()
    fig.suptitle(title)
    fig.tight_layout()
    return fig
