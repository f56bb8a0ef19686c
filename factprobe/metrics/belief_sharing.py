"""BELIEF knowledge sharing between two runs (zhao2024 section 6.4, Figure 4), over their predictions
tables (the contract of `factprobe.metrics.belief`).

Knowledge sharing rate (section 6.4, Figure 4): covered facts of a model = the (pair, template)
units it gets right (`unit="template"`, the paper's "correctly predicted facts for each
template") or the pairs some template gets right (`unit="fact"`); rate(a -> b) =
|covered_a ∩ covered_b| / |covered_a|, over the units both tables hold.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from ..errors import DataError

SHARING_UNITS = ("template", "fact")


def covered_units(df: pd.DataFrame, unit: str = "template") -> pd.Series:
    """Per unit (index: (fact_id, template_id) or fact_id), whether the model covers it."""
    if unit not in SHARING_UNITS:
        raise DataError(f"unit must be one of {', '.join(SHARING_UNITS)}, got {unit!r}")
    if unit == "template":
        return df.set_index(["fact_id", "template_id"])["correct"].astype(bool)
    return df.groupby("fact_id", sort=False)["correct"].any()


def knowledge_sharing_rate(a: pd.DataFrame, b: pd.DataFrame, unit: str = "template") -> float | None:
    """|covered_a ∩ covered_b| / |covered_a| over the units both tables hold (Figure 4: the share
    of what the left-listed model a knows that the top-listed model b also knows); None when a
    covers nothing."""
    ca, cb = covered_units(a, unit), covered_units(b, unit)
    common = ca.index.intersection(cb.index)
    if len(common) == 0:
        raise DataError("the two prediction tables share no (fact, template) unit to compare")
    ca, cb = ca.loc[common].to_numpy(), cb.loc[common].to_numpy()
    n = int(ca.sum())
    return float((ca & cb).sum() / n) if n else None


def sharing_matrix(runs: Mapping[str, pd.DataFrame], unit: str = "template") -> pd.DataFrame:
    """Knowledge sharing rates of every ordered pair of runs: cell [row a, column b] =
    `knowledge_sharing_rate(runs[a], runs[b])` (1.0 on the diagonal when a covers anything)."""
    names = list(runs)
    return pd.DataFrame(
        [[knowledge_sharing_rate(runs[a], runs[b], unit) for b in names] for a in names], index=names, columns=names, dtype=float
    )
