"""The map's numbers, from a facts x probes matrix of verdicts and each fact's relation.

Robust shares (per model): with P probes and k the probes under which a fact is right, a fact is
known under `every` probe (k = P), under a `majority` (2k > P; it includes `every`), under `none`
(k = 0), or `disputed` (0 < k < P). every + disputed + none = 1.

Probe pairs (per model): the 2x2 table of two probes' verdicts over the same facts; Cohen's kappa
(po - pe) / (1 - pe), NaN where pe = 1 (both probes constant and alike); the subsumption rate both
ways, wu2024 section 4.2.2's eta(theta1 | theta2) = |phi1 ∩ phi2| / |phi1| with a probe in place of a
model (`eta_a_given_b`: the share of the facts probe a finds known that probe b also finds known), NaN
where the first knows nothing (the formula of `factprobe.metrics.comparison.subsumption_rate`, here
from counts). The same formula over two models' robust sets is zhao2024 section 6.4's knowledge
sharing rate (`sharing`), cell [a, b] = the share of a's robust facts b knows robustly.

Intervals: relations are the clusters. Every number is given pooled over facts and as the mean of its
per-relation values with a Student-t 95% interval over those relation means (`intervals`: the
interval of `factprobe.metrics.findings_rule.t_interval`, for many series at once; a percentile
bootstrap under-covers at 11-12 clusters, issue 37), over the relations where the value is defined,
cut to the range the number can take ([0, 1], kappa [-1, 1]).

Cost: the 2x2 tables of every pair and relation come from one matrix product per relation
(`cooccurrence`: X_r' X_r), so a model of P probes costs a few passes over its facts x probes
matrix, whatever P; nothing loops over facts.
"""

from __future__ import annotations

import math

import numpy as np

CATEGORIES = ("every", "majority", "none", "disputed")


def categories(n_right: np.ndarray, n_probes: int) -> dict[str, np.ndarray]:
    """{category: boolean mask over facts} (module docstring) from each fact's count of right probes."""
    return {
        "every": n_right == n_probes,
        "majority": 2 * n_right > n_probes,
        "none": n_right == 0,
        "disputed": (n_right > 0) & (n_right < n_probes),
    }


def ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den elementwise, NaN where den is 0."""
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    out = np.full(np.broadcast(num, den).shape, np.nan)
    np.divide(num, den, out=out, where=den > 0)
    return out


def intervals(values: np.ndarray, bounds: tuple[float, float] = (0.0, 1.0), alpha: float = 0.05) -> dict[str, np.ndarray]:
    """Per column of `values` (relations x series; NaN = undefined for that relation): {"value": the mean
    of its defined values, "ci_low", "ci_high": the Student-t interval of that mean cut to `bounds` (NaN
    for fewer than two values; the mean twice when they are all equal), "n_relations"}: `t_interval` of
    `factprobe.metrics.findings_rule` for every column at once."""
    from scipy.special import stdtrit

    v = np.asarray(values, dtype=float)
    if v.ndim == 1:
        v = v[:, None]
    ok = np.isfinite(v)
    n = ok.sum(axis=0)
    filled = np.where(ok, v, 0.0)
    mean = ratio(filled.sum(axis=0), n)
    dev = np.where(ok, v - mean, 0.0)
    sd = np.sqrt(ratio((dev**2).sum(axis=0), n - 1))
    with np.errstate(invalid="ignore", divide="ignore"):
        half = stdtrit(np.maximum(n - 1, 1), 1 - alpha / 2) * sd / np.sqrt(np.maximum(n, 1))
    half = np.where(n >= 2, np.where(sd == 0, 0.0, half), np.nan)
    lo, hi = np.clip(mean - half, *bounds), np.clip(mean + half, *bounds)
    return {"value": mean, "ci_low": np.where(n >= 2, lo, np.nan), "ci_high": np.where(n >= 2, hi, np.nan), "n_relations": n}


def interval(per_relation: np.ndarray, bounds: tuple[float, float] = (0.0, 1.0)) -> dict:
    """`intervals` of one series as plain numbers: {"value", "ci_low", "ci_high", "n_relations"}."""
    out = intervals(np.asarray(per_relation, dtype=float)[:, None], bounds)
    return {k: (int(v[0]) if k == "n_relations" else float(v[0])) for k, v in out.items()}


def share_stats(mask: np.ndarray, rel: np.ndarray, n_rel: int) -> tuple[dict, np.ndarray]:
    """The share of facts in `mask`: ({"value", "ci_low", "ci_high", "n_relations", "pooled"}, per-relation
    shares (NaN for a relation without facts)). `rel`: each fact's relation code in [0, n_rel)."""
    per_rel = ratio(np.bincount(rel, weights=mask, minlength=n_rel), np.bincount(rel, minlength=n_rel))
    out = interval(per_rel)
    out["pooled"] = float(mask.mean()) if mask.size else math.nan
    return out, per_rel


def cooccurrence(right: np.ndarray, rel: np.ndarray, n_rel: int) -> tuple[np.ndarray, np.ndarray]:
    """(both [n_rel, P, P]: per relation, the facts right under both column i and column j of `right`
    (facts x P, bool); n [n_rel]: the facts of each relation). Column i's own count is both[:, i, i]."""
    order = np.argsort(rel, kind="stable")
    x = right[order].astype(np.float32)
    bounds = np.searchsorted(rel[order], np.arange(n_rel + 1))
    both = np.stack([x[s:e].T @ x[s:e] for s, e in zip(bounds[:-1], bounds[1:])]) if n_rel else np.zeros((0,) * 3)
    return np.rint(both).astype(np.int64), np.diff(bounds)


def tables(both: np.ndarray, n: np.ndarray) -> np.ndarray:
    """The 2x2 tables of every pair from `cooccurrence`: [..., P, P, 4] of (both right, row only,
    column only, neither)."""
    own = np.diagonal(both, axis1=-2, axis2=-1)
    a_only = own[..., :, None] - both
    b_only = own[..., None, :] - both
    neither = np.asarray(n)[..., None, None] - both - a_only - b_only
    return np.stack([both, a_only, b_only, neither], axis=-1)


def kappa(counts: np.ndarray) -> np.ndarray:
    """Cohen's kappa of 2x2 tables `counts[..., (n11, n10, n01, n00)]`; NaN without facts or where the
    expected agreement is 1."""
    c = np.asarray(counts, dtype=float)
    n11, n10, n01, n00 = c[..., 0], c[..., 1], c[..., 2], c[..., 3]
    n = n11 + n10 + n01 + n00
    po = ratio(n11 + n00, n)
    pa, pb = ratio(n11 + n10, n), ratio(n11 + n01, n)
    pe = pa * pb + (1 - pa) * (1 - pb)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(np.isclose(pe, 1.0) | ~np.isfinite(pe), np.nan, (po - pe) / (1 - pe))


def eta(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(eta(a | b), eta(b | a)) of 2x2 tables `counts[..., (n11, n10, n01, n00)]` (module docstring)."""
    c = np.asarray(counts, dtype=float)
    return ratio(c[..., 0], c[..., 0] + c[..., 1]), ratio(c[..., 0], c[..., 0] + c[..., 2])


def pair_stats(right: np.ndarray, rel: np.ndarray, n_rel: int) -> dict[str, np.ndarray]:
    """Every probe pair of one model (`right`: facts x P): P x P arrays, row a and column b, of
    "kappa", "eta" (eta(a | b)), each with "<name>_ci_low", "<name>_ci_high", "<name>_pooled",
    "<name>_relations"; "tables" [P, P, 4] pooled 2x2 counts; "agreement" (pooled share alike);
    "per_relation": [n_rel, P, P, 4] counts."""
    both, n = cooccurrence(right, rel, n_rel)
    per_rel = tables(both, n)
    pooled = per_rel.sum(axis=0)
    p = right.shape[1]
    out: dict[str, np.ndarray] = {"tables": pooled, "per_relation": per_rel}
    out["agreement"] = ratio(pooled[..., 0] + pooled[..., 3], pooled.sum(axis=-1))
    for name, values, whole, bounds in (
        ("kappa", kappa(per_rel), kappa(pooled), (-1.0, 1.0)),
        ("eta", eta(per_rel)[0], eta(pooled)[0], (0.0, 1.0)),
    ):
        iv = intervals(values.reshape(n_rel, p * p), bounds)
        out[name] = iv["value"].reshape(p, p)
        out[f"{name}_ci_low"], out[f"{name}_ci_high"] = iv["ci_low"].reshape(p, p), iv["ci_high"].reshape(p, p)
        out[f"{name}_relations"] = iv["n_relations"].reshape(p, p)
        out[f"{name}_pooled"] = whole
    return out


def sharing(robust: np.ndarray, rel: np.ndarray, n_rel: int) -> dict[str, np.ndarray]:
    """zhao2024's knowledge sharing rate over robust sets: `robust` is facts x models (bool). Returns
    M x M arrays, row a and column b: "rate" (pooled |R_a ∩ R_b| / |R_a|), "value", "ci_low", "ci_high"
    (relation mean and t-interval), "shared" (counts; the diagonal is |R_a|)."""
    both, _ = cooccurrence(robust, rel, n_rel)
    shared = both.sum(axis=0)
    m = robust.shape[1]
    per_rel = ratio(both, np.diagonal(both, axis1=1, axis2=2)[:, :, None])
    iv = intervals(per_rel.reshape(n_rel, m * m))
    return {
        "rate": ratio(shared, np.diag(shared)[:, None]),
        "value": iv["value"].reshape(m, m),
        "ci_low": iv["ci_low"].reshape(m, m),
        "ci_high": iv["ci_high"].reshape(m, m),
        "shared": shared,
    }


def disagreement(n_right: np.ndarray, n_probes: int) -> np.ndarray:
    """How evenly the probes split on each fact: 2 min(k, P - k) / P, 0 when all agree, 1 when they
    split in half (P even)."""
    k = np.asarray(n_right, dtype=float)
    return 2 * np.minimum(k, n_probes - k) / max(n_probes, 1)


__all__ = [
    "CATEGORIES",
    "categories",
    "cooccurrence",
    "disagreement",
    "eta",
    "interval",
    "intervals",
    "kappa",
    "pair_stats",
    "ratio",
    "share_stats",
    "sharing",
    "tables",
]
