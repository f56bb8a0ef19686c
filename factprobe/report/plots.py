"""Figures: per-relation bars, the model x relation accuracy heatmap, counterfactual ICL
(yuan2024 Figures 6 and 7) and factual coherency (youssef2024) per relation and cardinality.

Inputs are plain metrics dicts (`metrics.json` content) keyed by model name; outputs are
matplotlib Figures (Agg backend; nothing is shown on screen). A metric that is None (no items)
is left out of a figure, never drawn as 0.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np


def _relations(metrics_by_model: dict[str, dict]) -> list[str]:
    return sorted({r for m in metrics_by_model.values() for r in m.get("per_relation", {})})


def _num(value) -> float:
    return np.nan if value is None else float(value)


def relation_bars(metrics_by_model: dict[str, dict], title: str = "accuracy per relation", metric: str = "accuracy"):
    """Grouped bars: one group per relation, one bar per model; `metric` is a per-relation key
    (`accuracy`, with 95% bootstrap error bars from `accuracy_ci`; or e.g. QA's `em`)."""
    rels = _relations(metrics_by_model)
    models = list(metrics_by_model)
    width = 0.8 / max(len(models), 1)
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(rels) * max(1, len(models)) + 2), 4))
    x = np.arange(len(rels))
    for i, model in enumerate(models):
        per = metrics_by_model[model].get("per_relation", {})
        acc = [_num(per.get(r, {}).get(metric)) for r in rels]
        ci = [per.get(r, {}).get(f"{metric}_ci") or [np.nan, np.nan] for r in rels]
        err = np.array([[max(a - _num(c[0]), 0) for a, c in zip(acc, ci)], [max(_num(c[1]) - a, 0) for a, c in zip(acc, ci)]])
        ax.bar(x + i * width - 0.4 + width / 2, acc, width, yerr=np.nan_to_num(err), capsize=2, label=model)
    ax.set_xticks(x, rels, rotation=45, ha="right")
    ax.set_ylim(0, 1)
    ax.set_ylabel(metric)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def accuracy_heatmap(metrics_by_model: dict[str, dict], title: str = "accuracy: model x relation"):
    """Heatmap of per-relation accuracy, models as rows, with the value printed in each cell."""
    rels = _relations(metrics_by_model)
    models = list(metrics_by_model)
    grid = np.array(
        [[metrics_by_model[m].get("per_relation", {}).get(r, {}).get("accuracy", np.nan) for r in rels] for m in models]
    )
    fig, ax = plt.subplots(figsize=(max(5, 0.8 * len(rels) + 3), max(2.5, 0.6 * len(models) + 1.5)))
    im = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(rels)), rels, rotation=45, ha="right")
    ax.set_yticks(range(len(models)), models)
    for i in range(len(models)):
        for j in range(len(rels)):
            if not np.isnan(grid[i, j]):
                ax.text(
                    j,
                    i,
                    f"{grid[i, j]:.2f}",
                    ha="center",
                    va="center",
                    color="white" if grid[i, j] < 0.6 else "black",
                    fontsize=8,
                )
    fig.colorbar(im, ax=ax, label="accuracy")
    ax.set_title(title)
    fig.tight_layout()
    return fig


# --- counterfactual ICL (yuan2024 section 4) ----------------------------------------------------

_SETTING_STYLE = {  # known: blue, unknown: orange; shuffled answers dashed
    "known-unshuffle": ("tab:blue", "-", "o"),
    "known-shuffle": ("tab:blue", "--", "s"),
    "unknown-unshuffle": ("tab:orange", "-", "o"),
    "unknown-shuffle": ("tab:orange", "--", "s"),
}


def _regular_k(m: dict):
    """k0 of a counterfactual run's regular/counterfactual setting (asked, from `settings`)."""
    return next((int(k.split("@")[1]) for k in (m.get("settings") or {}) if k.startswith("regular@")), None)


def figure7(
    metrics_by_model: dict[str, dict], metric: str = "em", zero_shot: dict[str, float] | None = None, title: str | None = None
):
    """yuan2024 Figure 7: `metric` (EM by default) against k, one line per setting (known /
    unknown exemplars, true / shuffled answers), one panel per model.

    `metrics_by_model` holds counterfactual `metrics.json` dicts (their `figure7` rows: setting,
    shots, shots_used, em, f1, contains). A point whose block held fewer exemplars than k asked
    (the model knows too few facts, or the window was too short) is drawn hollow, labelled with
    the k used. Horizontal lines: the regular k0-shot score (`regular`) and, when given,
    `zero_shot[model]` (the qa probe's 0-shot score)."""
    models = list(metrics_by_model)
    fig, axes = plt.subplots(1, max(len(models), 1), figsize=(4.2 * max(len(models), 1) + 1, 3.8), sharey=True, squeeze=False)
    for ax, model in zip(axes[0], models):
        m = metrics_by_model[model]
        rows = m.get("figure7") or []
        settings = list(dict.fromkeys(r["setting"] for r in rows))
        ks = sorted({int(r["shots"]) for r in rows})
        for s in settings:
            color, line, marker = _SETTING_STYLE.get(s, (None, "-", "o"))
            pts = sorted(
                ((int(r["shots"]), r.get(metric), r.get("shots_used")) for r in rows if r["setting"] == s), key=lambda p: p[0]
            )
            xs, ys = [p[0] for p in pts], [_num(p[1]) for p in pts]
            drawn = ax.plot(xs, ys, linestyle=line, marker=marker, color=color, label=s)[0]
            for k, y, used in pts:
                if used is not None and y is not None and int(used) < k:
                    ax.plot([k], [y], marker=marker, markersize=9, markerfacecolor="white", color=drawn.get_color())
                    ax.annotate(f"k={int(used)}", (k, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
        regular = (m.get("regular") or {}).get(metric)
        if regular is not None:
            k0 = _regular_k(m)
            ax.axhline(regular, color="gray", linestyle=":", label=f"regular {k0}-shot" if k0 is not None else "regular")
        if zero_shot and zero_shot.get(model) is not None:
            ax.axhline(zero_shot[model], color="black", linestyle="-.", linewidth=1, label="zero-shot")
        ax.set_xticks(ks) if ks else None
        ax.set_xlabel("k (exemplars)")
        ax.set_title(model, fontsize=9)
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(metric.upper() if metric in ("em", "f1") else metric)
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.suptitle(title or f"counterfactual ICL: {metric} against k (yuan2024 Figure 7)", fontsize=10)
    fig.tight_layout()
    return fig


def regular_vs_counterfactual_bars(
    metrics_by_model: dict[str, dict], metrics: tuple[str, ...] = ("em", "f1", "contains"), title: str | None = None
):
    """yuan2024 Figure 6: the regular k0-shot score against the counterfactual one (the same
    exemplars with answers shuffled within their relation), one group per model, one panel per
    metric. Inputs: counterfactual `metrics.json` dicts (their `regular` and `counterfactual`)."""
    models = list(metrics_by_model)
    fig, axes = plt.subplots(
        1, len(metrics), figsize=(max(3.2, 1.2 * len(models) + 1.5) * len(metrics), 3.8), sharey=True, squeeze=False
    )
    x = np.arange(len(models))
    for ax, metric in zip(axes[0], metrics):
        for i, (kind, color) in enumerate((("regular", "tab:green"), ("counterfactual", "tab:red"))):
            vals = [_num((metrics_by_model[m].get(kind) or {}).get(metric)) for m in models]
            bars = ax.bar(x + (i - 0.5) * 0.38, vals, 0.38, color=color, label=kind)
            for b, v in zip(bars, vals):
                if not np.isnan(v):
                    ax.text(b.get_x() + b.get_width() / 2, v + 0.01, f"{v:.2f}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(x, models, rotation=20, ha="right", fontsize=8)
        ax.set_ylim(0, 1)
        ax.set_title(metric, fontsize=9)
    k0 = next((_regular_k(metrics_by_model[m]) for m in models), None)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title or f"regular vs counterfactual {k0 if k0 is not None else ''}-shot (yuan2024 Figure 6)", fontsize=10)
    fig.tight_layout()
    return fig


# --- factual coherency (youssef2024) ------------------------------------------------------------

CARDINALITIES = ("1-1", "N-1", "N-M")


def coherency_bars(metrics_by_model: dict[str, dict], title: str = "factual coherency per relation and cardinality"):
    """Coherency of round 1 (subject -> object -> subject) and round 2 (object -> subject ->
    object): left panel per relation, right panel per relation cardinality (1-1, N-1, N-M; the
    macro average over their relations). One colour per model; round 2 hatched. The legend gives
    each model's overall coherency per round. Inputs: coherency `metrics.json` dicts."""
    models = list(metrics_by_model)
    rels = _relations(metrics_by_model)
    cards = [
        c
        for c in CARDINALITIES
        if any((m.get("per_cardinality") or {}).get(c, {}).get("n_items") for m in metrics_by_model.values())
    ]
    cards += sorted({c for m in metrics_by_model.values() for c in (m.get("per_cardinality") or {})} - set(CARDINALITIES))
    bars_per_group = 2 * max(len(models), 1)
    width = 0.8 / bars_per_group
    fig, axes = plt.subplots(
        1,
        2,
        figsize=(max(6, 0.5 * len(rels) * bars_per_group / 2 + 2) + max(3, 1.2 * len(cards) + 1), 4),
        gridspec_kw={"width_ratios": [max(len(rels), 1), max(len(cards), 1)]},
        sharey=True,
    )
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, keys, group in ((axes[0], rels, "per_relation"), (axes[1], cards, "per_cardinality")):
        x = np.arange(len(keys))
        for i, model in enumerate(models):
            m = metrics_by_model[model]
            per = m.get(group) or {}
            for r, hatch in ((1, None), (2, "//")):
                vals = [_num(per.get(k, {}).get(f"coherency_round{r}")) for k in keys]
                j = 2 * i + (r - 1)
                label = f"{model} round {r} ({_num(m.get(f'coherency_round{r}')):.2f})" if group == "per_relation" else None
                ax.bar(
                    x + j * width - 0.4 + width / 2,
                    vals,
                    width,
                    color=colors[i % len(colors)],
                    hatch=hatch,
                    edgecolor="white" if hatch is None else "black",
                    linewidth=0.5,
                    label=label,
                )
        ax.set_xticks(x, keys, rotation=45 if group == "per_relation" else 0, ha="right" if group == "per_relation" else "center")
        ax.set_ylim(0, 1)
        ax.set_title("per relation" if group == "per_relation" else "per cardinality", fontsize=9)
    axes[0].set_ylabel("coherency")
    axes[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def save_png(fig, path, dpi: int = 110) -> None:
    """Write `fig` to `path` as PNG atomically (a temp file in the same folder, then a rename; a
    reader never sees half a file, a failed write leaves no temp file) and close the figure."""
    import os
    import tempfile
    from pathlib import Path

    from ..io import RESULT_FILE_MODE

    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".png", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=dpi, format="png")
        os.chmod(tmp, RESULT_FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        plt.close(fig)
