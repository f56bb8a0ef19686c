"""BELIEF prompt bias (zhao2024 section 5.4): how much a prompt alone, with a content-free subject, favours
some candidates.

Prompt bias (section 5.4): content-free prompts (subjects `CONTENT_FREE_SUBJECTS`, their
distributions averaged per template); bias-level = 1 - H / H_max of the distribution over the
relation's candidate objects. Single-prompt bias: the mean bias-level over templates; multi-prompt
bias: the bias-level of the template-averaged distribution.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..errors import DataError

CONTENT_FREE_SUBJECTS = ("N/A", "", "?")


def bias_level(probs: Sequence[float] | np.ndarray) -> float | None:
    """1 - H / H_max of a distribution over candidates (renormalised first; section 5.4, formula 3).
    0 = uniform (no bias), 1 = all mass on one candidate. None for fewer than two candidates or no
    mass."""
    p = np.asarray(probs, dtype=float)
    if p.size < 2 or (p < 0).any() or p.sum() <= 0:
        return None
    p = p / p.sum()
    nz = p[p > 0]
    return float(1.0 - (-(nz * np.log(nz)).sum()) / np.log(p.size))


def prompt_bias(dist: pd.DataFrame) -> dict[str, Any]:
    """Single- and multi-prompt bias levels from content-free distributions.

    `dist` columns: `relation`, `template_id`, `candidate`, `prob`, and optionally
    `content_free` (the content-free subject; the distributions of one template are averaged over
    them, as Zhao et al. 2021 ensemble them). Returns {"bias_single", "bias_multi" (means over
    relations), "per_relation": {relation: {"single", "multi", "n_templates", "n_candidates"}}}."""
    missing = [c for c in ("relation", "template_id", "candidate", "prob") if c not in dist.columns]
    if missing:
        raise DataError(f"content-free distribution table lacks column(s) {', '.join(missing)}")
    per_t = dist.groupby(["relation", "template_id", "candidate"], sort=False)["prob"].mean()
    per_relation: dict[str, dict[str, Any]] = {}
    for rel, sub in per_t.groupby(level=0, sort=False):
        table = sub.droplevel(0).unstack("candidate").fillna(0.0)  # templates x candidates
        singles = [b for b in (bias_level(row) for row in table.to_numpy()) if b is not None]
        per_relation[rel] = {
            "single": float(np.mean(singles)) if singles else None,
            "multi": bias_level(table.to_numpy().mean(axis=0)),
            "n_templates": int(table.shape[0]),
            "n_candidates": int(table.shape[1]),
        }
    single = [v["single"] for v in per_relation.values() if v["single"] is not None]
    multi = [v["multi"] for v in per_relation.values() if v["multi"] is not None]
    return {
        "bias_single": float(np.mean(single)) if single else None,
        "bias_multi": float(np.mean(multi)) if multi else None,
        "per_relation": per_relation,
    }
