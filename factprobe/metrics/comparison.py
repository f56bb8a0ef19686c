"""Compare two runs fact by fact: subsumption, McNemar, per-relation correlation, regression gate.

Both runs are per-fact tables with columns `fact_id, relation, correct` (the table every probe
logs). They are inner-joined on `fact_id`, so every paired statistic is computed on the facts
both runs answered.

- subsumption rate (Wu et al. 2024, section 4.2.2):
  eta(theta1 | theta2, F) = |phi1 ∩ phi2| / |phi1|, phi = the set of facts of F a model gets
  right; the share of what model 1 knows that model 2 also knows. Two aggregates:
  `eta_pooled` takes F = all joined facts; `eta_relation_mean` takes F = each relation's facts and
  averages over relations, as the paper's Tables 1 and 10 ("average subsumption rate ... over the
  relations"). A relation where model 1 knows no fact has no eta and is left out of the mean.
- McNemar's test on the discordant pairs: exact two-sided binomial test when there are fewer
  than 25 discordant facts, else the chi-square test with continuity correction.
- Pearson correlation of per-relation accuracies (paper, Figure 6).
- `regression_gate` (`factprobe.metrics.gate`): the pass/fail rule for CI and nightly runs, on `compare_runs`.
- `check_same_data` (`factprobe.metrics.same_data`): two runs built from different data are refused.
- `align_templates`: prompt baselines (HGP/MMP) score every fact once per template. Two such runs
  are paired per (fact, template); a template run against a one-row-per-fact run (IC-LKE, ...)
  is first reduced to one verdict per fact (majority of its templates by default), so both runs
  are joined on the same `fact_id`, which is the same across probes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from ..errors import DataError
from .bootstrap import paired_bootstrap_diff

# the same-data check (`factprobe.metrics.same_data`), importable from here as before
from .same_data import DATA_OPTIONS, SUBSET_OPTIONS, check_same_data, data_differences, describe_differences  # noqa: F401

# Below this many discordant facts the chi-square approximation is poor; use the exact test.
EXACT_MCNEMAR_BELOW = 25
COMPARE_COLUMNS = ("relation", "correct")
#: how a fact's per-template verdicts become one: majority (> half right; a tie is wrong, as a
#: tied argmax is), any (some template right: an oracle over prompts), all (every template right)
TEMPLATE_RULES = ("majority", "any", "all")


def _has_templates(df: pd.DataFrame) -> bool:
    return "template" in df.columns and df["template"].notna().any()


def collapse_templates(df: pd.DataFrame, rule: str = "majority") -> pd.DataFrame:
    """One row per `fact_id` from a per-(fact, template) table: `correct` by `rule` (TEMPLATE_RULES),
    plus `n_templates` and `template_accuracy` (the share of its templates answered right)."""
    if rule not in TEMPLATE_RULES:
        raise ValueError(f"template rule must be one of {', '.join(TEMPLATE_RULES)}, got {rule!r}")
    _check_columns(df, "fact_id", "with templates")
    ok = _as_bool_array(df["correct"], "'correct'")
    g = df.assign(correct=ok).groupby("fact_id", sort=False)
    share = g["correct"].mean()
    n = g["correct"].size()
    verdict = {"majority": share > 0.5, "any": share > 0, "all": share == 1.0}[rule]
    out = g[["relation"]].first()
    out["correct"] = verdict.astype(bool)
    out["n_templates"] = n.astype(int)
    out["template_accuracy"] = share.astype(float)
    return out.reset_index()


def align_templates(df_a: pd.DataFrame, df_b: pd.DataFrame, rule: str = "majority") -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """Make two per-fact tables joinable on `fact_id` (see the module docstring).

    Both with templates: the key becomes `fact_id#template` (paired per prompt). One with
    templates: that one is collapsed by `rule` (`collapse_templates`). Neither: unchanged.
    Returns (a, b, a one-line note saying what was done, or "")."""
    ta, tb = _has_templates(df_a), _has_templates(df_b)
    if ta and tb:
        a, b = df_a.copy(), df_b.copy()
        for d in (a, b):
            d["fact_id"] = d["fact_id"].astype(str) + "#" + d["template"].astype(str)
        return a, b, "both runs score one row per (fact, template): paired per template"
    if ta or tb:
        which = "a" if ta else "b"
        templated = df_a if ta else df_b
        collapsed = collapse_templates(templated, rule)
        note = (
            f"run {which} scores {len(templated)} (fact, template) rows: reduced to {len(collapsed)} facts, "
            f"a fact counting as right by the {rule!r} rule over its templates"
        )
        return (collapsed, df_b, note) if ta else (df_a, collapsed, note)
    return df_a, df_b, ""


def _as_bool_array(values: Sequence[bool] | np.ndarray | pd.Series, name: str) -> np.ndarray:
    arr = np.asarray(values).ravel()
    if arr.dtype != bool:
        series = pd.Series(arr)
        if arr.dtype.kind not in "iufO" or series.isna().any() or not series.isin([0, 1]).all():
            raise ValueError(f"{name} must be bool or 0/1 (no missing values), got dtype {arr.dtype}")
    return arr.astype(bool)


def _aligned(correct_a, correct_b, names=("correct_a", "correct_b")) -> tuple[np.ndarray, np.ndarray]:
    a = _as_bool_array(correct_a, names[0])
    b = _as_bool_array(correct_b, names[1])
    if a.shape != b.shape:
        raise ValueError(f"{names[0]} and {names[1]} must be aligned per fact; lengths {a.size} vs {b.size}")
    return a, b


def subsumption_rate(correct_1: Sequence[bool], correct_2: Sequence[bool]) -> float:
    """eta(theta1 | theta2) = |phi1 ∩ phi2| / |phi1|; NaN when model 1 knows no fact.

    Inputs are aligned per fact (row i is the same fact in both).
    """
    known_1, known_2 = _aligned(correct_1, correct_2, ("correct_1", "correct_2"))
    n_known_1 = int(known_1.sum())
    if n_known_1 == 0:
        return float("nan")
    return int((known_1 & known_2).sum()) / n_known_1


def subsumption_by_relation(correct_1: Sequence[bool], correct_2: Sequence[bool], relations: Sequence[object]) -> dict:
    """eta(theta1 | theta2) pooled over all facts and averaged over relations.

    Inputs are aligned per fact. Returns::

        {"eta_pooled", "eta_relation_mean", "n_relations" (relations with a defined eta),
         "per_relation": {rel: eta}}

    `per_relation` holds NaN for a relation where model 1 knows no fact; such relations are left
    out of `eta_relation_mean` (NaN when none is left).
    """
    known_1, known_2 = _aligned(correct_1, correct_2, ("correct_1", "correct_2"))
    rel = np.asarray(relations, dtype=object).ravel().astype(str)
    if rel.shape != known_1.shape:
        raise ValueError(f"relations must be aligned per fact; lengths {rel.size} vs {known_1.size}")
    per_relation = {r: subsumption_rate(known_1[rel == r], known_2[rel == r]) for r in sorted(set(rel.tolist()))}
    defined = [v for v in per_relation.values() if not math.isnan(v)]
    return {
        "eta_pooled": subsumption_rate(known_1, known_2),
        "eta_relation_mean": float(np.mean(defined)) if defined else float("nan"),
        "n_relations": len(defined),
        "per_relation": per_relation,
    }


def mcnemar(correct_a: Sequence[bool], correct_b: Sequence[bool]) -> dict:
    """McNemar's test for two aligned 0/1 vectors (same facts, two runs).

    `b01` counts facts run a gets wrong and run b gets right; `b10` the reverse. Under H0 (equal
    accuracy) a discordant fact is equally likely to go either way.

    - `b01 + b10 < 25`: exact two-sided binomial test (`scipy.stats.binomtest(b01, b01 + b10, 0.5)`,
      which for p = 1/2 is min(1, 2 * P(X <= min(b01, b10))), X ~ Bin(b01 + b10, 1/2));
      `statistic` is min(b01, b10); `method` = "exact".
    - otherwise: chi-square with continuity correction (Edwards),
      statistic = (|b01 - b10| - 1)^2 / (b01 + b10), p = P(chi2_1 > statistic)
      (`scipy.stats.chi2.sf`); `method` = "chi2_cc".

    No discordant facts gives p = 1 (method "exact").
    """
    from scipy.stats import binomtest, chi2

    a, b = _aligned(correct_a, correct_b)
    b01 = int((~a & b).sum())
    b10 = int((a & ~b).sum())
    n = b01 + b10
    if n < EXACT_MCNEMAR_BELOW:
        statistic = float(min(b01, b10))
        p_value = min(1.0, float(binomtest(b01, n, 0.5).pvalue)) if n else 1.0
        method = "exact"
    else:
        statistic = max(0.0, abs(b01 - b10) - 1.0) ** 2 / n
        p_value = float(chi2.sf(statistic, df=1))
        method = "chi2_cc"
    return {"b01": b01, "b10": b10, "statistic": float(statistic), "p_value": float(p_value), "method": method}


def pearson_per_relation(acc_a: dict[str, float], acc_b: dict[str, float]) -> float:
    """Pearson r of per-relation accuracies over the relations both runs have.

    NaN when fewer than two relations are shared or either side is constant over them
    (`scipy.stats.pearsonr` is undefined there). Two relations give r = +-1, as the formula does.
    """
    from scipy.stats import pearsonr

    shared = sorted(set(acc_a) & set(acc_b))
    if len(shared) < 2:
        return float("nan")
    x = np.array([acc_a[r] for r in shared], dtype=float)
    y = np.array([acc_b[r] for r in shared], dtype=float)
    if np.isnan(x).any() or np.isnan(y).any() or np.ptp(x) == 0.0 or np.ptp(y) == 0.0:
        return float("nan")
    return float(pearsonr(x, y).statistic)


def _check_columns(df: pd.DataFrame, key: str, name: str) -> None:
    missing = [c for c in (key, *COMPARE_COLUMNS) if c not in df.columns]
    if missing:
        raise DataError(f"run {name}: per-fact table lacks column(s) {missing}; has {list(df.columns)}")


def _check_table(df: pd.DataFrame, key: str, name: str) -> None:
    _check_columns(df, key, name)
    dup = df[key][df[key].duplicated()]
    if len(dup):
        examples = ", ".join(map(repr, dup.unique()[:3]))
        raise DataError(
            f"run {name}: {dup.nunique()} duplicate {key!r} value(s), e.g. {examples}; "
            f"each fact must appear once to be joined fact by fact"
        )


def join_runs(df_a: pd.DataFrame, df_b: pd.DataFrame, key: str = "fact_id") -> pd.DataFrame:
    """Inner join of two per-fact tables: columns `key, relation, correct_a, correct_b`.

    Raises DataError (a ValueError) for missing columns, duplicate keys, an empty join, or a fact
    whose relation differs between the runs.
    """
    _check_table(df_a, key, "a")
    _check_table(df_b, key, "b")
    left = df_a[[key, "relation", "correct"]].rename(columns={"correct": "correct_a"})
    right = df_b[[key, "relation", "correct"]].rename(columns={"correct": "correct_b", "relation": "relation_b"})
    joined = left.merge(right, on=key, how="inner", validate="one_to_one")
    if joined.empty:
        raise DataError(
            f"the runs share no {key!r}: run a has {len(df_a)} facts, run b {len(df_b)}; they test different facts "
            f"(a different --source, --data, --train-data, --relations or --seed; compare names it when both runs "
            f"carry their configuration)"
        )
    clash = joined["relation"].astype(str) != joined["relation_b"].astype(str)
    if clash.any():
        row = joined[clash].iloc[0]
        raise DataError(
            f"{int(clash.sum())} fact(s) have a different relation in the two runs, e.g. {row[key]!r}: "
            f"{row['relation']!r} vs {row['relation_b']!r}"
        )
    joined = joined.drop(columns="relation_b")
    for col in ("correct_a", "correct_b"):
        try:
            joined[col] = _as_bool_array(joined[col], f"run {col[-1]} 'correct'")
        except ValueError as e:  # a user's table: one DataError line, not a traceback
            raise DataError(f"{e}; compare joins multiple-choice facts, one boolean verdict each") from None
    return joined


def compare_runs(
    df_a: pd.DataFrame,
    df_b: pd.DataFrame,
    key: str = "fact_id",
    n_boot: int = 2000,
    seed: int = 0,
    alpha: float = 0.05,
    metric: str | tuple[str, str] = "acc",
) -> dict:
    """Compare run b against run a on the facts both answered.

    `metric` names the compared proportion (a probe's headline metric, e.g. "accuracy"; a pair
    names run a's and run b's): the proportions are returned as `<metric>_a` and `<metric>_b`,
    overall and per relation (the default "acc" gives `acc_a` / `acc_b`). Returns, with the default::

        {"acc_a", "acc_b", "diff" (= acc_b - acc_a), "diff_ci" [lo, hi] (paired bootstrap),
         "mcnemar" {b01, b10, statistic, p_value, method},
         "subsumption_a_given_b" (eta(a|b) pooled: share of a's known facts that b also knows),
         "subsumption_b_given_a" (eta(b|a) pooled),
         "eta_pooled_a_given_b", "eta_pooled_b_given_a" (the same two values, named as in the paper),
         "eta_relation_mean_a_given_b", "eta_relation_mean_b_given_a" (eta per relation, averaged
         over the relations where it is defined: the paper's Table 1),
         "eta_relations_a_given_b", "eta_relations_b_given_a" (how many relations that mean is over),
         "pearson_per_relation", "n_joined", "n_only_a", "n_only_b",
         "per_relation": {rel: {"acc_a", "acc_b", "diff", "n", "eta_a_given_b", "eta_b_given_a"}}}
    """
    ka, kb = (f"{metric}_a", f"{metric}_b") if isinstance(metric, str) else (f"{metric[0]}_a", f"{metric[1]}_b")
    joined = join_runs(df_a, df_b, key)
    a = joined["correct_a"].to_numpy(dtype=bool)
    b = joined["correct_b"].to_numpy(dtype=bool)
    diff, lo, hi = paired_bootstrap_diff(a, b, n_boot=n_boot, seed=seed, alpha=alpha)

    per_relation: dict[str, dict] = {}
    relation = joined["relation"].astype(str).to_numpy()
    for rel in sorted(set(relation.tolist())):
        mask = relation == rel
        acc_a, acc_b = float(a[mask].mean()), float(b[mask].mean())
        per_relation[rel] = {ka: acc_a, kb: acc_b, "diff": acc_b - acc_a, "n": int(mask.sum())}

    a_given_b = subsumption_by_relation(a, b, relation)
    b_given_a = subsumption_by_relation(b, a, relation)
    for rel, entry in per_relation.items():
        entry["eta_a_given_b"] = a_given_b["per_relation"][rel]
        entry["eta_b_given_a"] = b_given_a["per_relation"][rel]
    shared = set(joined[key].tolist())
    return {
        ka: float(a.mean()),
        kb: float(b.mean()),
        "diff": diff,
        "diff_ci": [lo, hi],
        "mcnemar": mcnemar(a, b),
        "subsumption_a_given_b": a_given_b["eta_pooled"],
        "subsumption_b_given_a": b_given_a["eta_pooled"],
        "eta_pooled_a_given_b": a_given_b["eta_pooled"],
        "eta_pooled_b_given_a": b_given_a["eta_pooled"],
        "eta_relation_mean_a_given_b": a_given_b["eta_relation_mean"],
        "eta_relation_mean_b_given_a": b_given_a["eta_relation_mean"],
        "eta_relations_a_given_b": a_given_b["n_relations"],
        "eta_relations_b_given_a": b_given_a["n_relations"],
        "pearson_per_relation": pearson_per_relation(
            {r: v[ka] for r, v in per_relation.items()}, {r: v[kb] for r, v in per_relation.items()}
        ),
        "n_joined": len(joined),
        "n_only_a": int((~df_a[key].isin(shared)).sum()),
        "n_only_b": int((~df_b[key].isin(shared)).sum()),
        "per_relation": per_relation,
    }


__all__ = [
    "EXACT_MCNEMAR_BELOW",
    "TEMPLATE_RULES",
    "align_templates",
    "collapse_templates",
    "compare_runs",
    "join_runs",
    "mcnemar",
    "pearson_per_relation",
    "subsumption_by_relation",
    "subsumption_rate",
]
