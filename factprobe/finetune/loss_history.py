"""The loss history of a fine-tuning run: `loss_history.json` ([{step, loss, learning_rate, grad_norm}],
never a NaN: a non-finite value is null) and its curve, `loss.png`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def loss_history(log_history: Sequence[dict]) -> list[dict]:
    """[{step, loss, learning_rate, grad_norm}] of the trainer's log entries that carry a loss."""
    out = []
    for e in log_history:
        if "loss" in e and "step" in e:
            out.append(
                {
                    "step": int(e["step"]),
                    "loss": finite_or_none(e["loss"]),
                    "learning_rate": finite_or_none(e.get("learning_rate")),
                    "grad_norm": finite_or_none(e.get("grad_norm")),
                }
            )
    return out


def finite_or_none(x: Any) -> float | None:
    """`float(x)` when it is a finite number, else None (so a NaN is never written as a number)."""
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def plot_loss(history: Sequence[dict], path: Path, title: str) -> None:
    """The loss curve as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(
        [h["step"] for h in history], [h["loss"] if h["loss"] is not None else float("nan") for h in history], marker="o", ms=3
    )
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss (answer tokens)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
