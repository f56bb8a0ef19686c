"""Multiple-choice metrics of IC-LKE (Wu et al. 2024, `papers/wu2024-*`).

Per item the scorer gives one summed log-prob per option, `log P(y_j | sigma)` (Eq. 2: the
product of the option's token probabilities, in log space). From those:

- prediction (Eq. 3): the argmax over the options. A tie for the maximum (exact float equality)
  has no prediction and counts as wrong: the paper's argmax does not say which tied option wins,
  and a model that cannot separate the gold from a distractor does not know the fact.
- accuracy (Eq. 4): the share of items whose prediction is the gold.
- probability mass on the gold: the option probabilities normalised across the choices
  (appendix C: "the resulting values are normalized across multiple choices"), read at the gold.
- confidence: the normalised probability of the predicted option (for a tie, the tied maximum).
- Accuracy@K (appendix D): accuracy over the items whose confidence is >= K, and the coverage at
  K, the share of all items kept (n_kept / n): Accuracy@K alone rewards a K that keeps a few sure items.

Per-item functions take one item's option log-probs; `summarize` takes a per-fact table with
columns `relation, correct, gold_prob, confidence` and returns plain numbers; `template_summary`
takes the per-(fact, template) table of the HGP/MMP baselines. Undefined values (no items, no
kept item at a threshold) are NaN; pass the result through `metrics.json_safe.json_safe` before
writing strict JSON.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from .bootstrap import bootstrap_ci, stratified_bootstrap_ci

DEFAULT_THRESHOLDS: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
SUMMARY_COLUMNS = ("relation", "correct", "gold_prob", "confidence")


def _logprob_array(logprobs: Sequence[float] | np.ndarray) -> np.ndarray:
    arr = np.asarray(logprobs, dtype=float).ravel()
    if arr.size == 0:
        raise ValueError("logprobs is empty: an item needs at least one option")
    if np.isnan(arr).any() or np.isposinf(arr).any():
        raise ValueError(f"logprobs must be finite or -inf, got {arr.tolist()!r}")
    if np.isneginf(arr).all():
        raise ValueError("every option has log-prob -inf; the options cannot be normalised")
    return arr


def _check_gold(gold_index: int, n_options: int) -> int:
    if isinstance(gold_index, (bool, np.bool_)) or not isinstance(gold_index, (int, np.integer)):
        raise TypeError(f"gold_index must be an int, got {gold_index!r}")
    if not 0 <= gold_index < n_options:
        raise IndexError(f"gold_index {gold_index} out of range for {n_options} options")
    return int(gold_index)


def predict(logprobs: Sequence[float] | np.ndarray) -> int | None:
    """Index of the option with the largest summed log-prob; None when the maximum is tied."""
    arr = _logprob_array(logprobs)
    top = arr.max()
    winners = np.flatnonzero(arr == top)
    return int(winners[0]) if winners.size == 1 else None


def option_probs(logprobs: Sequence[float] | np.ndarray) -> np.ndarray:
    """Softmax over the options: P(y_j | sigma) normalised to sum to 1 across the candidates.

    Computed as `exp(l_j - logsumexp(l))` with the maximum subtracted first, so log-probs of
    -1000 (long multi-token objects) do not underflow to 0/0.
    """
    arr = _logprob_array(logprobs)
    shifted = arr - arr.max()
    weights = np.exp(shifted)
    return weights / weights.sum()


def is_correct(logprobs: Sequence[float] | np.ndarray, gold_index: int) -> bool:
    """True iff the unique argmax is the gold option (a tie is wrong)."""
    arr = _logprob_array(logprobs)
    gold = _check_gold(gold_index, arr.size)
    return predict(arr) == gold


def gold_prob(logprobs: Sequence[float] | np.ndarray, gold_index: int) -> float:
    """Probability mass on the gold after normalising over the candidates."""
    probs = option_probs(logprobs)
    return float(probs[_check_gold(gold_index, probs.size)])


def confidence(logprobs: Sequence[float] | np.ndarray) -> float:
    """Normalised probability of the predicted option; for a tie, that of the tied maximum."""
    return float(option_probs(logprobs).max())


def accuracy(correct: Sequence[bool] | np.ndarray) -> float:
    """Share of correct items (Eq. 4); NaN for no items."""
    arr = np.asarray(correct, dtype=bool).ravel()
    return float(arr.mean()) if arr.size else float("nan")


def prob_mass(gold_probs: Sequence[float] | np.ndarray) -> float:
    """Mean normalised probability on the gold; NaN for no items."""
    arr = np.asarray(gold_probs, dtype=float).ravel()
    return float(arr.mean()) if arr.size else float("nan")


def accuracy_at_k(
    confidences: Sequence[float] | np.ndarray,
    correct: Sequence[bool] | np.ndarray,
    thresholds: Iterable[float] = DEFAULT_THRESHOLDS,
) -> dict[float, tuple[float, int]]:
    """Appendix D: for each K, accuracy over D_K = {items with confidence >= K}.

    Returns `{K: (accuracy, n_kept)}`; the accuracy is NaN where no item is kept. A tied item
    keeps its confidence (the tied maximum) and stays wrong, so ties lower Accuracy@K.
    """
    conf = np.asarray(confidences, dtype=float).ravel()
    corr = np.asarray(correct, dtype=bool).ravel()
    if conf.shape != corr.shape:
        raise ValueError(f"confidences and correct differ in length: {conf.size} vs {corr.size}")
    out: dict[float, tuple[float, int]] = {}
    for k in thresholds:
        kept = conf >= k
        n = int(kept.sum())
        out[float(k)] = (float(corr[kept].mean()) if n else float("nan"), n)
    return out


def coverage_at_k(
    confidences: Sequence[float] | np.ndarray, thresholds: Iterable[float] = DEFAULT_THRESHOLDS
) -> dict[float, float]:
    """For each K, the share of items whose confidence is >= K (the items Accuracy@K keeps).

    Returns `{K: n_kept / n}`: 1.0 at K <= the smallest confidence (K = 0 always), 0.0 at a K that
    keeps nothing; NaN for every K when there are no items.
    """
    conf = np.asarray(confidences, dtype=float).ravel()
    return {float(k): float((conf >= k).mean()) if conf.size else float("nan") for k in thresholds}


def _as_bool_series(values: pd.Series, name: str) -> pd.Series:
    """Coerce a 0/1 or bool column to bool, refusing NaN and other values instead of guessing."""
    if values.isna().any():
        raise ValueError(f"column {name!r} has missing values")
    if values.dtype != bool:
        bad = ~values.isin([0, 1, True, False])
        if bad.any():
            raise ValueError(f"column {name!r} must be bool or 0/1, got e.g. {values[bad].iloc[0]!r}")
    return values.astype(bool)


def _ci(pair: tuple[float, float]) -> list[float]:
    return [float(pair[0]), float(pair[1])]


def summarize(
    results: pd.DataFrame,
    n_boot: int = 1000,
    seed: int = 0,
    thresholds: Iterable[float] = DEFAULT_THRESHOLDS,
) -> dict:
    """All IC-LKE scalars for one run, from a per-fact table.

    `results` has one row per fact with columns `relation` (str), `correct` (bool),
    `gold_prob` (float) and `confidence` (float). Returns::

        {"accuracy", "accuracy_ci", "macro_accuracy", "macro_accuracy_ci",
         "prob_mass", "prob_mass_ci", "n",
         "per_relation": {rel: {"accuracy", "accuracy_ci", "prob_mass", "n"}},
         "accuracy_at_k": {str(K): {"accuracy", "n", "coverage"}}}

    `accuracy` is micro (over all facts); `macro_accuracy` is the unweighted mean of the
    per-relation accuracies, with a bootstrap that resamples within each relation. Intervals are
    95% percentile bootstrap intervals, `[lo, hi]`. In `accuracy_at_k`, `n` is the number of facts
    kept at K and `coverage` their share of all facts (`coverage_at_k`). An empty table gives NaNs
    and n = 0.
    """
    missing = [c for c in SUMMARY_COLUMNS if c not in results.columns]
    if missing:
        raise ValueError(f"results table lacks column(s) {missing}; has {list(results.columns)}")
    relation = results["relation"].astype(str).to_numpy()
    correct = _as_bool_series(results["correct"], "correct").to_numpy()
    gold_probs = results["gold_prob"].to_numpy(dtype=float)
    confidences = results["confidence"].to_numpy(dtype=float)

    per_relation: dict[str, dict] = {}
    for rel in sorted(set(relation.tolist())):
        mask = relation == rel
        per_relation[rel] = {
            "accuracy": accuracy(correct[mask]),
            "accuracy_ci": _ci(bootstrap_ci(correct[mask], n_boot=n_boot, seed=seed)),
            "prob_mass": prob_mass(gold_probs[mask]),
            "n": int(mask.sum()),
        }
    macro = float(np.mean([r["accuracy"] for r in per_relation.values()])) if per_relation else float("nan")
    thresholds = list(thresholds)
    at_k = accuracy_at_k(confidences, correct, thresholds)
    coverage = coverage_at_k(confidences, thresholds)
    return {
        "accuracy": accuracy(correct),
        "accuracy_ci": _ci(bootstrap_ci(correct, n_boot=n_boot, seed=seed)),
        "macro_accuracy": macro,
        "macro_accuracy_ci": _ci(stratified_bootstrap_ci(correct, relation, n_boot=n_boot, seed=seed)),
        "prob_mass": prob_mass(gold_probs),
        "prob_mass_ci": _ci(bootstrap_ci(gold_probs, n_boot=n_boot, seed=seed)),
        "n": int(correct.size),
        "per_relation": per_relation,
        "accuracy_at_k": {str(k): {"accuracy": acc, "n": n, "coverage": coverage[k]} for k, (acc, n) in at_k.items()},
    }


def template_summary(results: pd.DataFrame, ddof: int = 0) -> dict:
    """Per-template accuracy of a prompt baseline (HGP/MMP; Wu et al. 2024, Figure 3).

    `results` has one row per (fact, template) with columns `relation`, `template`, `correct`.
    Returns::

        {"per_template": {rel: {template: {"accuracy", "n"}}},
         "per_relation": {rel: {"mean", "stdev", "n_templates"}},
         "mean", "stdev", "n_templates"}

    `per_relation` gives the mean and standard deviation of the relation's per-template
    accuracies; the top-level `mean` / `stdev` are over every (relation, template) accuracy, the
    spread Figure 3 reports. `stdev` is `numpy.std(..., ddof=ddof)`: the population value by
    default (0.0 for one template); with `ddof=1` one template gives NaN. No rows give NaN and
    `n_templates` 0.
    """
    missing = [c for c in ("relation", "template", "correct") if c not in results.columns]
    if missing:
        raise ValueError(f"results table lacks column(s) {missing}; has {list(results.columns)}")
    correct = _as_bool_series(results["correct"], "correct")
    table = pd.DataFrame(
        {
            "relation": results["relation"].astype(str),
            "template": results["template"].astype(str),
            "correct": correct,
        }
    )
    per_template: dict[str, dict[str, dict]] = {}
    per_relation: dict[str, dict] = {}
    all_accuracies: list[float] = []
    for rel in sorted(set(table["relation"])):
        rows = table[table["relation"] == rel]
        accs = {}
        for template in sorted(set(rows["template"])):
            hits = rows.loc[rows["template"] == template, "correct"].to_numpy(dtype=bool)
            accs[template] = {"accuracy": accuracy(hits), "n": int(hits.size)}
        values = [a["accuracy"] for a in accs.values()]
        per_template[rel] = accs
        per_relation[rel] = {"mean": float(np.mean(values)), "stdev": _stdev(values, ddof), "n_templates": len(values)}
        all_accuracies += values
    return {
        "per_template": per_template,
        "per_relation": per_relation,
        "mean": float(np.mean(all_accuracies)) if all_accuracies else float("nan"),
        "stdev": _stdev(all_accuracies, ddof),
        "n_templates": len(all_accuracies),
    }


def _stdev(values: Sequence[float], ddof: int) -> float:
    """`numpy.std(values, ddof=ddof)`, NaN (without numpy's warning) when len(values) <= ddof."""
    return float(np.std(values, ddof=ddof)) if len(values) > ddof else float("nan")


__all__ = [
    "DEFAULT_THRESHOLDS",
    "accuracy",
    "accuracy_at_k",
    "confidence",
    "coverage_at_k",
    "gold_prob",
    "is_correct",
    "option_probs",
    "predict",
    "prob_mass",
    "summarize",
    "template_summary",
]
