"""The map's numbers, from a facts x probes matrix of verdicts and each fact's relation.

Robust shares (per model): with P probes and k the probes under which a fact is right, a fact is
known under `every` probe (k = P), under a `majority` (2k > P; it includes `every`), under `none`
(k = 0), or `disputed` (0 < k < P). every + disputed + none = 1.

Probe pairs (per model): the 2x2 table of two probes' verdicts over the same facts; Cohen's kappa
(po - pe) / (1 - pe), NaN where pe = 1 (both probes constant and alike); the subsumption rate both
ways, wu2024 section 4.2.2's eta(theta1 | theta2) = |phi1 ∩ phi2| / |phi1| with a probe in place of a
model (`eta_a_given_b`: the share of the facts probe a finds known that probe b also finds known), NaN
where the first knows nothing. The same formula over two models' robust sets is zhao2024 section
6.4's knowledge sharing rate (`sharing`), cell [a, b] = the share of a's robust facts b knows robustly.

Intervals: relations are the clusters. Every number is given pooled over facts and as the mean of its
per-relation values with a Student-t 95% interval over those relation means
(`factprobe.metrics.findings_rule.t_interval`; a percentile bootstrap under-covers at 11-12
clusters, issue 37), over the relations where the value is defined, cut to the range the number can
take ([0, 1], kappa [-1, 1]). All counts are computed with
`np.bincount` over relation codes: no loop over facts.
"""

from __future__ import annotations

import math

import numpy as np

from ..metrics.findings_rule import t_interval

CATEGORIES = ("every", "majority", "none", "disputed")


def categories(n_right: np.ndarray, n_probes: int) -> dict[str, np.ndarray]:
    """{category: boolean mask over facts} (module docstring) from each fact's count of right probes."""
    return {
        "every": n_right == n_probes,
        "majority": 2 * n_right > n_probes,
        "none": n_right == 0,
        "disputed": (n_right > 0) & (n_right < n_probes),
    }


def interval(per_relation: np.ndarray, bounds: tuple[float, float] = (0.0, 1.0)) -> dict:
    """{"value": the mean of the defined (finite) relation values, "ci_low", "ci_high" (t-interval, cut
    to `bounds`, the range the value can take; NaN for fewer than two relations), "n_relations"}."""
    v = np.asarray(per_relation, dtype=float)
    v = v[np.isfinite(v)]
    mean, lo, hi = t_interval(v) if v.size else (math.nan, math.nan, math.nan)
    if not math.isnan(lo):
        lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
    return {"value": mean, "ci_low": lo, "ci_high": hi, "n_relations": int(v.size)}


def ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den elementwise, NaN where den is 0."""
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    out = np.full(np.broadcast(num, den).shape, np.nan)
    np.divide(num, den, out=out, where=den > 0)
    return out


def share_stats(mask: np.ndarray, rel: np.ndarray, n_rel: int) -> tuple[dict, np.ndarray]:
    """The share of facts in `mask`: ({"value", "ci_low", "ci_high", "n_relations", "pooled"}, per-relation
    shares (NaN for a relation without facts)). `rel`: each fact's relation code in [0, n_rel)."""
    per_rel = ratio(np.bincount(rel, weights=mask, minlength=n_rel), np.bincount(rel, minlength=n_rel))
    out = interval(per_rel)
    out["pooled"] = float(mask.mean()) if mask.size else math.nan
    return out, per_rel


def pair_counts(a: np.ndarray, b: np.ndarray, rel: np.ndarray, n_rel: int) -> np.ndarray:
    """Per relation, the 2x2 table of boolean verdicts `a` and `b`: array [n_rel, 4] of (both right,
    a only, b only, neither)."""
    both = a & b
    return np.stack(
        [
            np.bincount(rel, weights=both, minlength=n_rel),
            np.bincount(rel, weights=a & ~b, minlength=n_rel),
            np.bincount(rel, weights=~a & b, minlength=n_rel),
            np.bincount(rel, weights=~a & ~b, minlength=n_rel),
        ],
        axis=1,
    )


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
        out = np.where(np.isclose(pe, 1.0) | ~np.isfinite(pe), np.nan, (po - pe) / (1 - pe))
    return out


def eta(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(eta(a | b), eta(b | a)) of 2x2 tables `counts[..., (n11, n10, n01, n00)]` (module docstring)."""
    c = np.asarray(counts, dtype=float)
    return ratio(c[..., 0], c[..., 0] + c[..., 1]), ratio(c[..., 0], c[..., 0] + c[..., 2])


def pair_stats(a: np.ndarray, b: np.ndarray, rel: np.ndarray, n_rel: int) -> tuple[dict, np.ndarray]:
    """Two probes' agreement on one model: ({"n_facts", "n_both", "n_a_only", "n_b_only", "n_neither",
    "agreement" (pooled share of facts alike), "kappa", "eta_a_given_b", "eta_b_given_a" (each a relation
    mean with "<name>_ci_low", "<name>_ci_high", "<name>_pooled", "<name>_relations")}, the per-relation
    counts [n_rel, 4])."""
    per_rel = pair_counts(a, b, rel, n_rel)
    tot = per_rel.sum(axis=0)
    out: dict = {
        "n_facts": int(tot.sum()),
        "n_both": int(tot[0]),
        "n_a_only": int(tot[1]),
        "n_b_only": int(tot[2]),
        "n_neither": int(tot[3]),
        "agreement": float((tot[0] + tot[3]) / tot.sum()) if tot.sum() else math.nan,
    }
    e_ab, e_ba = eta(per_rel)
    pooled_ab, pooled_ba = eta(tot)
    for name, values, pooled, bounds in (
        ("kappa", kappa(per_rel), kappa(tot), (-1.0, 1.0)),
        ("eta_a_given_b", e_ab, pooled_ab, (0.0, 1.0)),
        ("eta_b_given_a", e_ba, pooled_ba, (0.0, 1.0)),
    ):
        iv = interval(values, bounds)
        out[name] = iv["value"]
        out[f"{name}_ci_low"], out[f"{name}_ci_high"] = iv["ci_low"], iv["ci_high"]
        out[f"{name}_pooled"] = float(pooled)
        out[f"{name}_relations"] = iv["n_relations"]
    return out, per_rel


def sharing(robust: np.ndarray, rel: np.ndarray, n_rel: int) -> dict[str, np.ndarray]:
    """zhao2024's knowledge sharing rate over robust sets: `robust` is facts x models (bool). Returns
    {"rate": pooled [M, M] (row a, column b: |R_a ∩ R_b| / |R_a|), "value", "ci_low", "ci_high":
    relation mean and t-interval [M, M], "shared": [M, M] counts}."""
    r = robust.astype(np.float32)
    shared = (r.T @ r).astype(np.int64)
    rate = ratio(shared, np.diag(shared)[:, None])
    m = robust.shape[1]
    value, lo, hi = (np.full((m, m), np.nan) for _ in range(3))
    per_model = [np.bincount(rel, weights=robust[:, i], minlength=n_rel) for i in range(m)]
    for i in range(m):
        for j in range(m):
            both = np.bincount(rel, weights=robust[:, i] & robust[:, j], minlength=n_rel)
            iv = interval(ratio(both, per_model[i]))
            value[i, j], lo[i, j], hi[i, j] = iv["value"], iv["ci_low"], iv["ci_high"]
    return {"rate": rate, "value": value, "ci_low": lo, "ci_high": hi, "shared": shared}


def disagreement(n_right: np.ndarray, n_probes: int) -> np.ndarray:
    """How evenly the probes split on each fact: 2 min(k, P - k) / P, 0 when all agree, 1 when they
    split in half (P even)."""
    k = np.asarray(n_right, dtype=float)
    return 2 * np.minimum(k, n_probes - k) / max(n_probes, 1)


__all__ = [
    "CATEGORIES",
    "categories",
    "disagreement",
    "eta",
    "interval",
    "kappa",
    "pair_counts",
    "pair_stats",
    "ratio",
    "share_stats",
    "sharing",
]
