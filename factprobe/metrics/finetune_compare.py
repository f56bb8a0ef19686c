"""Before/after fine-tuning: one table with a row for the base model and one per training setting.

yuan2024 Tables 2-4 report zero-shot EM, F1 and Contains on the evaluation facts for the base
model and for each fine-tuned model (regular, counterfactual, known, unknown, mixed). This module
builds that table from per-fact results and adds, for every fine-tuned row, paired bootstrap
intervals of its difference to the base model (`bootstrap.paired_bootstrap_diff`, facts
resampled jointly) and McNemar's test on EM and IC-LKE correctness (`comparison.mcnemar`), on
the facts both runs answered (`comparison.join_runs`: the same inner join as `factprobe compare`).

Inputs, per variant (`"base"` and each setting):
- `qa`: per-fact zero-shot QA rows of the evaluation split (`qa_per_fact` picks them out of a
  `qa` probe's results: `split == "eval"`, `shots_asked == 0`): `fact_id, relation, em, f1,
  contains` (0/1, [0, 1], 0/1);
- `mc` (optional): per-fact IC-LKE rows (`fact_id, relation, correct`) on the same relations.

Output (`comparison_table`): one row per variant, base first, then `FINETUNE_SETTINGS` order,
columns `setting, qa_n, em, f1, contains, mc_n, iclke_acc` (fractions in [0, 1]) and for each
metric `m` of `em, f1, contains, iclke_acc`: `m_diff` (variant minus base on the shared facts),
`m_ci_low`, `m_ci_high` (paired percentile bootstrap, level 1 - alpha), plus `em_p` and
`iclke_p` (McNemar p) and `qa_n_shared`, `mc_n_shared`. The base row has no differences (NaN).
Pure pandas/numpy: no model, no tracking.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import DataError
from .bootstrap import paired_bootstrap_diff
from .comparison import join_runs, mcnemar

#: the training settings of yuan2024 section 5, in the order of the table
FINETUNE_SETTINGS = ("regular", "known", "unknown", "mixed", "counterfactual")
BASE = "base"
QA_METRICS = ("em", "f1", "contains")
MC_METRIC = "iclke_acc"


@dataclass(frozen=True)
class VariantResults:
    """Per-fact results of one model variant: zero-shot QA rows and (optionally) IC-LKE rows."""

    qa: pd.DataFrame
    mc: pd.DataFrame | None = None


def qa_per_fact(rows: pd.DataFrame, shots: int = 0, split: str = "eval") -> pd.DataFrame:
    """The per-fact zero-shot QA table of a `qa` probe's result rows (results.jsonl as a frame):
    rows with `split == split` and `shots_asked == shots`, columns `fact_id, relation, em, f1,
    contains, correct` (correct = EM). Raises DataError when no row matches or a fact repeats."""
    need = ("fact_id", "relation", "em", "f1", "contains")
    missing = [c for c in need if c not in rows.columns]
    if missing:
        raise DataError(f"QA results lack column(s) {missing}; has {list(rows.columns)}")
    picked = rows
    if "split" in rows.columns:
        picked = picked[picked["split"].astype(str) == split]
    if "shots_asked" in rows.columns:
        picked = picked[picked["shots_asked"].astype(int) == int(shots)]
    if picked.empty:
        raise DataError(
            f"QA results hold no {shots}-shot answers on the {split!r} split "
            f"(run the qa probe with shots including {shots} and split {split} or all)"
        )
    out = picked[list(need)].copy()
    out["correct"] = out["em"].astype(float) >= 1.0
    return out.reset_index(drop=True)


def mc_per_fact(rows: pd.DataFrame) -> pd.DataFrame:
    """The per-fact table of a multiple-choice probe (IC-LKE): `fact_id, relation, correct`."""
    missing = [c for c in ("fact_id", "relation", "correct") if c not in rows.columns]
    if missing:
        raise DataError(f"IC-LKE results lack column(s) {missing}; has {list(rows.columns)}")
    return rows[["fact_id", "relation", "correct"]].reset_index(drop=True)


def _paired(base: pd.DataFrame, other: pd.DataFrame, columns: tuple[str, ...], n_boot: int, seed: int, alpha: float) -> dict:
    """Paired differences (other - base) of `columns` on the facts both answered."""
    joined = join_runs(base, other)  # validates columns, duplicates, relations; inner join on fact_id
    keys = joined["fact_id"]
    b = base.set_index("fact_id").loc[keys]
    o = other.set_index("fact_id").loc[keys]
    out: dict = {"n_shared": len(joined), "p": mcnemar(joined["correct_a"], joined["correct_b"])["p_value"]}
    for col in columns:
        diff, lo, hi = paired_bootstrap_diff(
            b[col].astype(float).to_numpy(), o[col].astype(float).to_numpy(), n_boot=n_boot, seed=seed, alpha=alpha
        )
        out[col] = (diff, lo, hi)
    return out


def _qa_frame(df: pd.DataFrame) -> pd.DataFrame:
    """QA rows with `correct` (EM = 1) for the McNemar pairing."""
    return df.assign(correct=df["em"].astype(float) >= 1.0)


def _mean(df: pd.DataFrame | None, col: str) -> float:
    return float(df[col].astype(float).mean()) if df is not None and len(df) else math.nan


def comparison_table(
    variants: Mapping[str, VariantResults], n_boot: int = 2000, seed: int = 0, alpha: float = 0.05
) -> pd.DataFrame:
    """The before/after table (see the module docstring). `variants` must hold `"base"`; the other
    keys are settings (any name; `FINETUNE_SETTINGS` first, in order, then the rest sorted).
    Raises DataError when the base is missing or a variant's facts cannot be joined with the base's."""
    if BASE not in variants:
        raise DataError(f"no {BASE!r} results to compare against; got {sorted(variants)}")
    order = (
        [BASE]
        + [s for s in FINETUNE_SETTINGS if s in variants]
        + sorted(s for s in variants if s != BASE and s not in FINETUNE_SETTINGS)
    )
    base = variants[BASE]
    base_qa = _qa_frame(base.qa)
    base_mc = None if base.mc is None else base.mc.assign(iclke_acc=base.mc["correct"].astype(float))
    rows = []
    for name in order:
        v = variants[name]
        mc = None if v.mc is None else v.mc.assign(iclke_acc=v.mc["correct"].astype(float))
        row: dict = {
            "setting": name,
            "qa_n": len(v.qa),
            **{m: _mean(v.qa, m) for m in QA_METRICS},
            "mc_n": len(mc) if mc is not None else 0,
            MC_METRIC: _mean(mc, MC_METRIC),
        }
        for m in (*QA_METRICS, MC_METRIC):
            row.update({f"{m}_diff": math.nan, f"{m}_ci_low": math.nan, f"{m}_ci_high": math.nan})
        row.update({"em_p": math.nan, "iclke_p": math.nan, "qa_n_shared": 0, "mc_n_shared": 0})
        if name != BASE:
            try:
                qa = _paired(base_qa, _qa_frame(v.qa), QA_METRICS, n_boot, seed, alpha)
            except DataError as e:
                raise DataError(f"setting {name}: QA results cannot be paired with the base model's: {e}") from None
            row["qa_n_shared"], row["em_p"] = qa["n_shared"], qa["p"]
            for m in QA_METRICS:
                row[f"{m}_diff"], row[f"{m}_ci_low"], row[f"{m}_ci_high"] = qa[m]
            if mc is not None and base_mc is not None:
                try:
                    pm = _paired(base_mc, mc, (MC_METRIC,), n_boot, seed, alpha)
                except DataError as e:
                    raise DataError(f"setting {name}: IC-LKE results cannot be paired with the base model's: {e}") from None
                row["mc_n_shared"], row["iclke_p"] = pm["n_shared"], pm["p"]
                row[f"{MC_METRIC}_diff"], row[f"{MC_METRIC}_ci_low"], row[f"{MC_METRIC}_ci_high"] = pm[MC_METRIC]
        rows.append(row)
    return pd.DataFrame(rows)


def _pct(v: float) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:.2f}"


def _delta(row: pd.Series, m: str) -> str:
    d = row[f"{m}_diff"]
    if isinstance(d, float) and math.isnan(d):
        return ""
    return f" ({100 * d:+.2f} [{100 * row[f'{m}_ci_low']:+.2f}, {100 * row[f'{m}_ci_high']:+.2f}])"


def markdown_table(table: pd.DataFrame, title: str = "Fine-tuning: zero-shot QA and IC-LKE, before and after") -> str:
    """The table as Markdown in percent, like yuan2024 Tables 2-4: `EM (diff [CI])` per column."""
    lines = [
        f"## {title}",
        "",
        "| setting | EM | F1 | Contains | IC-LKE acc | QA facts | IC-LKE facts |",
        "|---|---|---|---|---|---|---|",
    ]
    for _, r in table.iterrows():
        cells = [f"{_pct(r[m])}{_delta(r, m)}" for m in (*QA_METRICS, MC_METRIC)]
        lines.append(f"| {r['setting']} | " + " | ".join(cells) + f" | {r['qa_n']} | {r['mc_n']} |")
    lines += [
        "",
        ("Percent; in parentheses the difference to the base model on the shared facts with its paired bootstrap interval."),
    ]
    return "\n".join(lines) + "\n"


def flat_metrics(table: pd.DataFrame) -> dict[str, float]:
    """`<metric>/<setting>` and `<metric>_diff/<setting>` (+ CI ends) for MLflow; NaN left out."""
    out: dict[str, float] = {}
    for _, r in table.iterrows():
        for m in (*QA_METRICS, MC_METRIC):
            for suffix in ("", "_diff", "_ci_low", "_ci_high"):
                v = r[f"{m}{suffix}"]
                if v is not None and not (isinstance(v, float) and np.isnan(v)):
                    out[f"{m}{suffix}/{r['setting']}"] = float(v)
    return out


__all__ = [
    "BASE",
    "FINETUNE_SETTINGS",
    "VariantResults",
    "comparison_table",
    "flat_metrics",
    "markdown_table",
    "mc_per_fact",
    "qa_per_fact",
]
