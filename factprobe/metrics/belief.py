"""BELIEF metrics (zhao2024, sections 2, 5.4, 6.4, 7; formulas 1-6 of the draft): pure functions over a
predictions table.

Input contract: the predictions table
-------------------------------------
One row per (subject-relation pair, template), each prediction computed once (the cache):
- `fact_id` (str): the pair (`MultiPromptSet.facts.fact_id`);
- `relation` (str);
- `template_id` (str): unique over the whole set (`<relation>:<source>:<line>`);
- `correct` (bool): the top-1 prediction is a correct object (Acc@1);
- `rank` (int >= 1, optional; NaN/None = the gold is not ranked): rank of the golden object (the
  highest-ranked correct object) in the output distribution; Acc@K and MRR need it;
- `prediction` (str, optional): the normalised prediction, for Consist;
- `confidence` (float in [0, 1], optional): the probability of the top-1 prediction (masked LMs)
  or the share of samples matching the greedy answer (BELIEF-ICL); Overconf@1 needs it;
- `confidence@K` (float in [0, 1], optional): the probability mass of the top K predictions;
  Overconf@K for K > 1 needs it.
`check_predictions` validates it (DataError naming the column or the repeated key).

What is computed
----------------
- Acc@K = share of prompts whose golden object ranks <= K; MRR = mean of 1/rank (0 when unranked)
  (draft formulas 1-2).
- Draws (section 2.2): one template per subject-relation pair, the SAME template for every pair of
  a relation in one draw (as the paper's evaluation does); a draw's value is the mean over all
  pairs. `draw_values` repeats this N times from per-(relation, template) sums (each prediction
  computed once; a draw is a vectorised gather, O(N x relations) time, O(N) memory: relations are
  drawn one at a time; N is at most `MAX_DRAWS`, larger N is a DataError before any work). Relation r's template choices
  come from `numpy.random.default_rng([seed, stable hash of r])` over its templates sorted by
  `template_id`: the same seed gives the same template choices to every model probed on the same
  templates (`DEFAULT_DRAW_SEED` is shared), and a relation's draws never depend on the others.
  The mean of the N values is the reported accuracy; `range` = max - min and `stdev` = the
  population standard deviation (ddof=0) are the fluctuation (formulas 3-4). This is the paper's
  range (zhao2024 section 2.2: "the difference between the maximum and minimum accuracy values in
  V_Acc@1", N = 50,000 in section 5; factprobe's default N is 10,000), and the only one: the
  findings' fluctuation claim takes the same draws (`relation_template_draws`), so the probe's
  `acc_range` and the claim's `acc_range` are one number for one set of rows, draw count and seed.
  The range is a maximum over draws: it grows with N, so ranges compare only at equal N.
- Consist (formula 5): per pair, the share of its template pairs (i < j) whose predictions agree;
  mean over pairs. A pair with one template has no template pair: it is left out, and a relation
  whose pairs all have one template is reported as undefined with the reason, never NaN. Missing
  or empty predictions never agree with anything. Agreement is equality of the normalised
  prediction, or a `match(a, b)` function (BELIEF-ICL's bidirectional containment).
- Overconf@K (formula 6): prompts sorted by confidence (descending, stable), cut into M = 10 bins
  of equal SIZE (`numpy.array_split`: when the count does not divide by M the first
  `count % M` bins hold one prompt more; fewer prompts than M gives one prompt per bin);
  Overconf = sum_i |P_i| / |P| * (mean confidence_i - Acc@K_i). The paper writes the weight as
  |P_i| / M, which is a typo for the bin's share (with equal bins both are 1/M). Note that a
  signed, share-weighted sum equals mean confidence minus accuracy overall; the bins matter for
  the calibration plot (`calibration_bins`).
- Coverage (section 7, Table 8), per relation, then weighted by the relation's number of pairs:
  average = mean accuracy over the relation's templates; maximum = accuracy of its best template;
  oracle = share of pairs that some template gets right.
- Knowledge sharing rate (section 6.4, Figure 4): `factprobe.metrics.belief_sharing`.
- Prompt bias (section 5.4): `factprobe.metrics.belief_bias`.

Over 500 lines: one metric family (accuracy, fluctuation, consistency, overconfidence), each a short pure function
with its formula in the docstring; the bias and sharing parts are already in belief_bias and belief_sharing.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..errors import DataError
from ..seeding import stable_seed

# knowledge sharing and prompt bias (their own modules), importable from here as before
from .belief_bias import CONTENT_FREE_SUBJECTS, bias_level, prompt_bias  # noqa: F401
from .belief_sharing import SHARING_UNITS, covered_units, knowledge_sharing_rate, sharing_matrix  # noqa: F401

PREDICTION_COLUMNS = ("fact_id", "relation", "template_id", "correct", "rank", "prediction", "confidence")
REQUIRED_COLUMNS = ("fact_id", "relation", "template_id", "correct")
DEFAULT_DRAWS = 10_000
#: the most draws accepted (20 x the paper's 50,000): memory is O(draws) (a few float arrays of that
#: length, relations handled one at a time), so a typo such as 10**13 is refused before any scoring
MAX_DRAWS = 1_000_000
DEFAULT_DRAW_SEED = 0
N_BINS = 10
SINGLE_TEMPLATE_REASON = "every pair has a single template: consistency needs at least two prompts per pair"


# ------------------------------------------------------------------ the table
def check_predictions(df: pd.DataFrame, need: Sequence[str] = ()) -> pd.DataFrame:
    """Validate a predictions table (module docstring) and return it with `correct` as bool.

    Raises DataError naming the missing column(s), a repeated (fact_id, template_id), a `correct`
    value that is not a boolean, or a confidence outside [0, 1]."""
    missing = [c for c in (*REQUIRED_COLUMNS, *need) if c not in df.columns]
    if missing:
        raise DataError(f"predictions table lacks column(s) {', '.join(missing)} (has {', '.join(map(str, df.columns))})")
    if df.empty:
        raise DataError("predictions table is empty")
    dup = df.duplicated(["fact_id", "template_id"])
    if dup.any():
        row = df[dup].iloc[0]
        raise DataError(
            f"predictions table repeats fact {row['fact_id']!r} with template {row['template_id']!r}: "
            "one row per (pair, template)"
        )
    ok = df["correct"]
    if ok.dtype != bool:
        is_bool = ok.map(lambda v: isinstance(v, (bool, np.bool_)))
        if not is_bool.all():
            raise DataError(f"predictions table: 'correct' must be true/false, got {ok[~is_bool].iloc[0]!r}")
    for col in [c for c in df.columns if c == "confidence" or str(c).startswith("confidence@")]:
        conf = pd.to_numeric(df[col], errors="coerce")
        if conf.isna().any() or (conf < 0).any() or (conf > 1 + 1e-9).any():
            raise DataError(f"predictions table: {col!r} must be numbers in [0, 1]")
    return df.assign(correct=ok.astype(bool))


def _ranks(df: pd.DataFrame) -> np.ndarray:
    return pd.to_numeric(df["rank"], errors="coerce").to_numpy(dtype=float)


def hit_at_k(ranks: Sequence[float] | np.ndarray, k: int) -> np.ndarray:
    """1.0 where the rank is <= k, else 0.0 (NaN ranks: 0)."""
    r = np.asarray(ranks, dtype=float)
    return np.where(np.isnan(r), 0.0, (r <= k).astype(float))


def reciprocal_rank(ranks: Sequence[float] | np.ndarray) -> np.ndarray:
    """1 / rank (NaN ranks: 0)."""
    r = np.asarray(ranks, dtype=float)
    if (r[~np.isnan(r)] < 1).any():
        raise DataError("ranks start at 1")
    return np.where(np.isnan(r), 0.0, 1.0 / np.where(np.isnan(r), 1.0, r))


def acc_at_k(ranks: Sequence[float] | np.ndarray, k: int) -> float:
    """Acc@K (draft formula 1) over a set of prompts."""
    return float(hit_at_k(ranks, k).mean())


def mrr(ranks: Sequence[float] | np.ndarray) -> float:
    """MRR (draft formula 2) over a set of prompts."""
    return float(reciprocal_rank(ranks).mean())


def metric_values(df: pd.DataFrame, metric: str) -> np.ndarray:
    """Per-row values of `metric`: "acc@1" (from `correct`), "acc@K" (from `rank`) or "mrr"."""
    if metric == "acc@1":
        return df["correct"].to_numpy(dtype=float)
    if metric == "mrr":
        return reciprocal_rank(_ranks(df))
    if metric.startswith("acc@") and metric[4:].isdigit():
        return hit_at_k(_ranks(df), int(metric[4:]))
    raise DataError(f"unknown BELIEF metric {metric!r}; use acc@1, acc@K or mrr")


# ------------------------------------------------------------------ draws and fluctuation
@dataclass(frozen=True)
class DrawCache:
    """Per relation: its template ids (sorted), and per template the sum of the metric over the
    pairs that have that template and the number of such pairs."""

    relations: tuple[str, ...]
    template_ids: tuple[tuple[str, ...], ...]
    sums: tuple[np.ndarray, ...]
    counts: tuple[np.ndarray, ...]


def draw_cache(df: pd.DataFrame, values: np.ndarray) -> DrawCache:
    """The per-(relation, template) sums draws are taken from (values aligned with `df` rows).
    Relations and each relation's templates are sorted by name, so the cache (and the draws) do
    not depend on row order."""
    return _draw_caches(df, {"v": values})["v"]


def _draw_caches(df: pd.DataFrame, columns: Mapping[str, np.ndarray]) -> dict[str, DrawCache]:
    """One `DrawCache` per value column, sharing one grouping of the rows (numpy bincount)."""
    r_codes, r_names = pd.factorize(df["relation"].astype(str), sort=True)
    t_codes, t_names = pd.factorize(df["template_id"].astype(str), sort=True)
    n_t = max(len(t_names), 1)
    groups, inverse = np.unique(r_codes.astype(np.int64) * n_t + t_codes, return_inverse=True)
    counts = np.bincount(inverse).astype(float)
    sums = {k: np.bincount(inverse, weights=np.asarray(v, dtype=float), minlength=len(groups)) for k, v in columns.items()}
    rel_of = groups // n_t
    bounds = np.searchsorted(rel_of, np.arange(len(r_names) + 1))  # groups are sorted by relation, then template
    rels = tuple(str(r) for r in r_names)
    tids = tuple(tuple(str(t_names[g % n_t]) for g in groups[a:b]) for a, b in itertools.pairwise(bounds))
    return {
        k: DrawCache(
            rels,
            tids,
            tuple(s[a:b] for a, b in itertools.pairwise(bounds)),
            tuple(counts[a:b] for a, b in itertools.pairwise(bounds)),
        )
        for k, s in sums.items()
    }


def _relation_rng(seed: int, relation: str) -> np.random.Generator:
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, stable_seed("belief-draws", relation) & 0xFFFFFFFF])


def relation_template_draws(relation: str, n_templates: int, n_draws: int, seed: int) -> np.ndarray:
    """The template index (into `relation`'s templates sorted by `template_id`) of each of `n_draws`
    draws: THE draws of BELIEF's accuracy, range and stdev. Every range over template draws (the
    probes' `acc_range`, the findings' fluctuation claim) takes them from here, so one set of rows
    and one seed give one range."""
    return _relation_rng(seed, relation).integers(0, n_templates, size=n_draws)


def draw_template_indices(cache: DrawCache, n_draws: int = DEFAULT_DRAWS, seed: int = DEFAULT_DRAW_SEED) -> list[np.ndarray]:
    """Per relation of `cache`, the template index of each of `n_draws` draws (module docstring)."""
    _check_draws(n_draws)
    return list(_iter_template_indices(cache, n_draws, seed))


def _check_draws(n_draws: int) -> None:
    if not 1 <= n_draws <= MAX_DRAWS:
        raise DataError(f"n_draws must be between 1 and {MAX_DRAWS:,}, got {n_draws:,}")


def _iter_template_indices(cache: DrawCache, n_draws: int, seed: int):
    """`draw_template_indices` one relation at a time (memory O(n_draws), not O(n_draws x relations))."""
    for rel, t in zip(cache.relations, cache.template_ids):
        yield relation_template_draws(rel, len(t), n_draws, seed)


def draw_values(
    df: pd.DataFrame, metric: str = "acc@1", n_draws: int = DEFAULT_DRAWS, seed: int = DEFAULT_DRAW_SEED
) -> np.ndarray:
    """The N values V_metric: one per draw of one template per relation (module docstring)."""
    cache = draw_cache(df, metric_values(df, metric))
    return values_from_cache(cache, n_draws, seed)


def values_from_cache(cache: DrawCache, n_draws: int = DEFAULT_DRAWS, seed: int = DEFAULT_DRAW_SEED) -> np.ndarray:
    """Draw values from a `DrawCache`: sum over relations of the drawn templates' sums, divided by
    the number of pairs those templates cover."""
    _check_draws(n_draws)
    num = np.zeros(n_draws)
    den = np.zeros(n_draws)
    for idx, s, c in zip(_iter_template_indices(cache, n_draws, seed), cache.sums, cache.counts):
        num += s[idx]
        den += c[idx]
    return num / den


def fluctuation(values: Sequence[float] | np.ndarray) -> dict[str, float | int]:
    """{mean, range, stdev, min, max, n_draws} of draw values (formulas 3-4; stdev with ddof=0)."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        raise DataError("no draw values")
    return {
        "mean": float(v.mean()),
        "range": float(v.max() - v.min()),
        "stdev": float(v.std(ddof=0)),
        "min": float(v.min()),
        "max": float(v.max()),
        "n_draws": int(v.size),
    }


def belief_accuracy(
    df: pd.DataFrame, metric: str = "acc@1", n_draws: int = DEFAULT_DRAWS, seed: int = DEFAULT_DRAW_SEED
) -> dict[str, float | int]:
    """`fluctuation(draw_values(...))`: the accuracy (mean over draws) and its range and stdev."""
    return fluctuation(draw_values(df, metric, n_draws, seed))


def belief_accuracies(
    df: pd.DataFrame, metrics: Sequence[str] = ("acc@1",), n_draws: int = DEFAULT_DRAWS, seed: int = DEFAULT_DRAW_SEED
) -> dict[str, dict[str, float | int]]:
    """{metric: `belief_accuracy(df, metric, ...)`} for several metrics at once: one grouping of the
    rows and one set of template draws shared by all of them (the same draws each would make alone)."""
    caches = _draw_caches(df, {m: metric_values(df, m) for m in metrics})
    if not caches:
        return {}
    _check_draws(n_draws)
    first = next(iter(caches.values()))
    num = {m: np.zeros(n_draws) for m in caches}
    den = np.zeros(n_draws)  # the pair counts are the same for every metric
    for r, i in enumerate(_iter_template_indices(first, n_draws, seed)):
        den += first.counts[r][i]
        for m, cache in caches.items():
            num[m] += cache.sums[r][i]
    return {m: fluctuation(num[m] / den) for m in caches}


# ------------------------------------------------------------------ consistency
def _empty(v: Any) -> bool:
    return v is None or (isinstance(v, float) and np.isnan(v)) or (isinstance(v, str) and not v.strip())


def pair_consistency(predictions: Sequence[Any], match: Callable[[str, str], bool] | None = None) -> float | None:
    """Share of template pairs (i < j) of one subject-relation pair whose predictions agree;
    None for fewer than two predictions. Empty/missing predictions agree with nothing."""
    preds = list(predictions)
    n = len(preds)
    if n < 2:
        return None
    total = n * (n - 1) / 2
    if match is None:
        counts = pd.Series([p for p in preds if not _empty(p)], dtype=object).value_counts()
        return float((counts * (counts - 1) / 2).sum() / total)
    agree = sum(
        1
        for i in range(n)
        for j in range(i + 1, n)
        if not _empty(preds[i]) and not _empty(preds[j]) and match(preds[i], preds[j])
    )
    return agree / total


def consistency(
    df: pd.DataFrame,
    column: str = "prediction",
    match: Callable[[str, str], bool] | None = None,
) -> dict[str, Any]:
    """Consist (formula 5) with its per-relation values and the undefined relations.

    Returns {"consist": float | None, "n_pairs": pairs with >= 2 templates, "n_single_template_pairs",
    "per_relation": {relation: float | None}, "undefined": {relation: reason}, "reason": why
    `consist` is None (absent otherwise)}."""
    if column not in df.columns:
        raise DataError(f"predictions table lacks column {column!r} (needed for consistency)")
    per_pair: list[tuple[str, float | None]] = []
    if match is None:  # vectorised: agreeing template pairs = sum over equal predictions of C(n, 2)
        n = df.groupby(["relation", "fact_id"], sort=False).size()
        preds = df[column]
        full = df[~preds.map(_empty)] if preds.dtype == object else df[preds.notna()]
        same = full.groupby(["relation", "fact_id", column], sort=False).size()
        agree = (same * (same - 1) / 2).groupby(level=[0, 1], sort=False).sum().reindex(n.index, fill_value=0.0)
        value = agree / (n * (n - 1) / 2).where(n > 1)
        per_pair = [(rel, None if pd.isna(v) else float(v)) for (rel, _), v in value.items()]
    else:
        for (rel, _), group in df.groupby(["relation", "fact_id"], sort=False)[column]:
            per_pair.append((rel, pair_consistency(group.tolist(), match)))
    by_rel: dict[str, list[float]] = {}
    singles = 0
    for rel, value in per_pair:
        by_rel.setdefault(rel, [])
        if value is None:
            singles += 1
        else:
            by_rel[rel].append(value)
    per_relation = {rel: (float(np.mean(v)) if v else None) for rel, v in by_rel.items()}
    undefined = {rel: f"{rel}: {SINGLE_TEMPLATE_REASON}" for rel, v in by_rel.items() if not v}
    values = [x for v in by_rel.values() for x in v]
    out: dict[str, Any] = {
        "consist": float(np.mean(values)) if values else None,
        "n_pairs": len(values),
        "n_single_template_pairs": singles,
        "per_relation": per_relation,
        "undefined": undefined,
    }
    if not values:
        out["reason"] = "undefined: " + SINGLE_TEMPLATE_REASON
    return out


# ------------------------------------------------------------------ overconfidence and calibration
def calibration_bins(
    confidence: Sequence[float] | np.ndarray, correct: Sequence[float] | np.ndarray, n_bins: int = N_BINS
) -> pd.DataFrame:
    """Equal-size confidence bins (module docstring): columns `bin` (1 = most confident), `n`,
    `confidence` (mean), `accuracy` (mean), `gap` (confidence - accuracy), `conf_min`, `conf_max`.
    The data of a calibration plot (confidence against accuracy)."""
    conf = np.asarray(confidence, dtype=float)
    ok = np.asarray(correct, dtype=float)
    if conf.shape != ok.shape:
        raise DataError(f"confidence and correctness differ in length ({conf.size} vs {ok.size})")
    if n_bins < 1:
        raise DataError(f"n_bins must be >= 1, got {n_bins}")
    if conf.size == 0:
        raise DataError("no prompts to bin")
    order = np.argsort(-conf, kind="stable")
    rows = []
    for i, idx in enumerate(np.array_split(order, min(n_bins, conf.size)), start=1):
        c, a = conf[idx], ok[idx]
        rows.append(
            {
                "bin": i,
                "n": int(idx.size),
                "confidence": float(c.mean()),
                "accuracy": float(a.mean()),
                "gap": float(c.mean() - a.mean()),
                "conf_min": float(c.min()),
                "conf_max": float(c.max()),
            }
        )
    return pd.DataFrame(rows)


def overconfidence(
    confidence: Sequence[float] | np.ndarray, correct: Sequence[float] | np.ndarray, n_bins: int = N_BINS
) -> float:
    """Overconf (formula 6): sum over equal-size bins of |P_i|/|P| * (mean confidence - accuracy)."""
    bins = calibration_bins(confidence, correct, n_bins)
    return float((bins["n"] / bins["n"].sum() * bins["gap"]).sum())


def overconf_at_k(df: pd.DataFrame, k: int = 1, n_bins: int = N_BINS) -> dict[str, Any]:
    """{"overconf": Overconf@K, "bins": calibration bins as records} from a predictions table:
    K = 1 uses `confidence` and `correct`; K > 1 uses `confidence@K` and rank <= K."""
    col = "confidence" if k == 1 else f"confidence@{k}"
    if col not in df.columns:
        raise DataError(f"predictions table lacks column {col!r} (needed for Overconf@{k})")
    ok = df["correct"].to_numpy(dtype=float) if k == 1 else hit_at_k(_ranks(df), k)
    conf = df[col].to_numpy(dtype=float)
    bins = calibration_bins(conf, ok, n_bins)
    return {"overconf": float((bins["n"] / bins["n"].sum() * bins["gap"]).sum()), "bins": bins.to_dict("records")}


# ------------------------------------------------------------------ coverage and tables
def template_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per (relation, template_id): `n` pairs, `acc@1`, and `acc@10`, `mrr` when ranks exist,
    `confidence` when present: which templates help."""
    g = df.assign(**{"acc@1": df["correct"].astype(float)})
    cols = {"acc@1": ("acc@1", "mean"), "n": ("acc@1", "size")}
    if "rank" in df.columns:
        g = g.assign(**{"acc@10": hit_at_k(_ranks(df), 10), "mrr": reciprocal_rank(_ranks(df))})
        cols.update({"acc@10": ("acc@10", "mean"), "mrr": ("mrr", "mean")})
    if "confidence" in df.columns:
        cols["confidence"] = ("confidence", "mean")
    out = g.groupby(["relation", "template_id"], sort=False).agg(**cols).reset_index()
    return out[["relation", "template_id", "n", *[c for c in cols if c != "n"]]]


def coverage(df: pd.DataFrame) -> dict[str, Any]:
    """Average, maximum and oracle coverage (module docstring), overall and per relation (with the
    relation's best template)."""
    per_t = df.groupby(["relation", "template_id"], sort=False)["correct"].mean()
    oracle = df.groupby(["relation", "fact_id"], sort=False)["correct"].any()
    per_relation: dict[str, dict[str, Any]] = {}
    weights, avg, mx, orc = [], [], [], []
    for rel, accs in per_t.groupby(level=0, sort=False):
        n = int(oracle.loc[rel].size)
        best = accs.idxmax()[1]
        per_relation[rel] = {
            "n_pairs": n,
            "n_templates": int(accs.size),
            "average": float(accs.mean()),
            "maximum": float(accs.max()),
            "oracle": float(oracle.loc[rel].mean()),
            "best_template": best,
        }
        weights.append(n)
        avg.append(accs.mean())
        mx.append(accs.max())
        orc.append(oracle.loc[rel].mean())
    w = np.asarray(weights, dtype=float)
    return {
        "average": float(np.dot(w, avg) / w.sum()),
        "maximum": float(np.dot(w, mx) / w.sum()),
        "oracle": float(np.dot(w, orc) / w.sum()),
        "per_relation": per_relation,
    }


# ------------------------------------------------------------------ one call for a probe
def summarize_belief(
    df: pd.DataFrame,
    *,
    accuracies: Mapping[str, str] | None = None,
    overconf: Mapping[str, int] | None = None,
    n_draws: int = DEFAULT_DRAWS,
    seed: int = DEFAULT_DRAW_SEED,
    n_bins: int = N_BINS,
    match: Callable[[str, str], bool] | None = None,
) -> dict[str, Any]:
    """metrics.json content of a BELIEF probe from its predictions table.

    `accuracies` {output name: metric} (default {"acc@1": "acc@1"}); each gives `<name>` (mean over
    draws), `<name>_range`, `<name>_stdev`. `overconf` {output name: K} (default {"overconf@1": 1})
    gives `<name>` and its bins under `calibration[<name>]` (an empty mapping: no Overconf, and no
    `confidence` column is needed). Also `consist` (+ `consist_undefined`,
    `consist_reason` when undefined), `coverage_avg`, `coverage_max`, `coverage_oracle`,
    `per_relation` {relation: {n_pairs, n_templates, <name> (its average over templates),
    <name>_max, <name>_oracle for acc@1 only, consist, best_template}}, `n_pairs`, `n_prompts`,
    `n_templates`, `n_draws`, `draw_seed`."""
    accuracies = {"acc@1": "acc@1"} if accuracies is None else dict(accuracies)
    overconf = {"overconf@1": 1} if overconf is None else dict(overconf)
    need = ["prediction"] + (["rank"] if any(m != "acc@1" for m in accuracies.values()) else [])
    df = check_predictions(df, need)
    out: dict[str, Any] = {}
    found = belief_accuracies(df, list(dict.fromkeys(accuracies.values())), n_draws, seed)
    for name, metric in accuracies.items():
        f = found[metric]
        out.update({name: f["mean"], f"{name}_range": f["range"], f"{name}_stdev": f["stdev"]})
    cons = consistency(df, "prediction", match)
    out["consist"] = cons["consist"]
    if cons["undefined"]:
        out["consist_undefined"] = cons["undefined"]
    if "reason" in cons:
        out["consist_reason"] = cons["reason"]
    out["calibration"] = {}
    for name, k in overconf.items():
        oc = overconf_at_k(df, k, n_bins)
        out[name] = oc["overconf"]
        out["calibration"][name] = oc["bins"]
    cov = coverage(df)
    out.update(coverage_avg=cov["average"], coverage_max=cov["maximum"], coverage_oracle=cov["oracle"])
    per_rel: dict[str, dict[str, Any]] = {}
    for rel, sub in df.groupby("relation", sort=False):
        c = cov["per_relation"][rel]
        row: dict[str, Any] = {"n_pairs": c["n_pairs"], "n_templates": c["n_templates"]}
        for name, metric in accuracies.items():
            per_t = pd.Series(metric_values(sub, metric)).groupby(sub["template_id"].to_numpy()).mean()
            row[name] = float(per_t.mean())
        row.update(
            coverage_max=c["maximum"],
            coverage_oracle=c["oracle"],
            best_template=c["best_template"],
            consist=cons["per_relation"].get(rel),
        )
        per_rel[rel] = row
    out["per_relation"] = per_rel
    out.update(
        n_pairs=int(df["fact_id"].nunique()),
        n_prompts=len(df),
        n_templates=int(df["template_id"].nunique()),
        n_draws=int(n_draws),
        draw_seed=int(seed),
    )
    return out


def belief_tables(
    df: pd.DataFrame, templates: dict[str, list[dict]], metrics: dict, per_template: pd.DataFrame | None = None
) -> dict[str, pd.DataFrame]:
    """The three files a BELIEF probe writes beside its results: `belief_templates.parquet`
    (`template_table` plus each template's text, source, style and provenance from `templates`
    {relation: [template records]}, plus the columns of `per_template`, indexed by template_id),
    `belief_relations.parquet` (metrics["per_relation"]) and `belief_calibration.parquet`
    (metrics["calibration"] bins, one row per metric and bin)."""
    table = template_table(df)
    if per_template is not None:
        table = table.merge(per_template.reset_index(), on="template_id", how="left")
    info = pd.DataFrame([t for ts in templates.values() for t in ts])
    table = table.merge(info[["template_id", "template", "source", "style", "provenance"]], on="template_id", how="left")
    rel = pd.DataFrame([{"relation": r, **v} for r, v in metrics.get("per_relation", {}).items()])
    cal = pd.DataFrame([{"metric": name, **b} for name, bins in metrics.get("calibration", {}).items() for b in bins])
    return {"belief_templates.parquet": table, "belief_relations.parquet": rel, "belief_calibration.parquet": cal}
