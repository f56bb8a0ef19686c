"""Percentile bootstrap confidence intervals: plain, stratified (for macro averages) and paired.

The resampling is `scipy.stats.bootstrap` (percentile method); this module adds the contracts the
metrics need on top: one number per fact in, `(lo, hi)` out, a stratified (per-relation) form for
macro averages, a paired form for two runs on the same facts, and no exception on degenerate data.
All functions are deterministic under `seed` (one `numpy.random.Generator` per call) and
vectorised in batches, so a 20,000-fact run with 2,000 replicates never holds more than a few
million resampled values at once, whatever the number of groups: the groups of a stratified
bootstrap are resampled one after the other (`scipy.stats.bootstrap` holds every group's resamples
of a batch together: 41 relations of 5,000 facts were 2.6 GB), with scipy's own draws, in its order,
so the intervals are those `scipy.stats.bootstrap` gives, to the last bit (issue 40 item 3).

Degenerate inputs never raise: no data gives `(nan, nan)`; a single value `v` gives `(v, v)`
(there is nothing to resample, and the percentile of a constant is that constant).

Usage::

    lo, hi = bootstrap_ci(correct, n_boot=1000, seed=0)                  # micro accuracy
    lo, hi = stratified_bootstrap_ci(correct, relations, n_boot=1000)     # macro accuracy
    diff, lo, hi = paired_bootstrap_diff(correct_a, correct_b, 2000, 0)   # mean(b) - mean(a)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

# Upper bound on resampled values materialised at once (scipy's `batch`: resamples per call).
_MAX_CHUNK_ELEMENTS = 4_000_000
# Resampled values gathered at once from a batch's indices (rows of one draw, taken a block at a time)
_VALUES_BLOCK = 1_000_000

Stat = Callable[..., float]


def _as_float_array(values: Sequence[float] | np.ndarray, name: str = "values") -> np.ndarray:
    arr = np.asarray(values, dtype=float).ravel()
    if np.isnan(arr).any():
        raise ValueError(f"{name} contains NaN; drop or impute missing results before bootstrapping")
    return arr


def _check_args(n_boot: int, alpha: float) -> None:
    if int(n_boot) < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")


def _apply_stat(stat: Stat, samples: np.ndarray) -> np.ndarray:
    """`stat` over each row of `samples` ([k, n] -> [k]); uses `axis=1` when `stat` supports it."""
    try:
        out = np.asarray(stat(samples, axis=1), dtype=float)
        if out.shape == (samples.shape[0],):
            return out
    except TypeError:
        pass
    return np.array([stat(row) for row in samples], dtype=float)


def _vectorized(stat: Stat) -> Callable[..., np.ndarray]:
    """`stat` as scipy's vectorized statistic: reduces the last axis of any-shaped input."""

    def apply(x: np.ndarray, axis: int = -1) -> np.ndarray:
        x = np.moveaxis(np.asarray(x, dtype=float), axis, -1)
        return _apply_stat(stat, x.reshape(-1, x.shape[-1])).reshape(x.shape[:-1])

    return apply


def _percentile_bootstrap(
    samples: tuple[np.ndarray, ...], statistic: Callable[..., np.ndarray], n_boot: int, alpha: float, seed: int
) -> tuple[float, float]:
    """The percentile interval `scipy.stats.bootstrap(samples, statistic, method="percentile",
    vectorized=True, paired=False, batch=<_MAX_CHUNK_ELEMENTS / the largest sample>, rng=default_rng(seed))`
    gives, computed as scipy does (batch by batch, each sample resampled with the same generator call,
    the quantiles by `scipy.stats.quantile`), for a `statistic` that is a sum over the samples:
    `statistic.parts` (one vectorized function per sample) and `statistic.combine` (the list of the
    parts' values -> the statistic) when it has them, else a one-sample `statistic`, which must reduce
    each resample (row) on its own. One sample's draw of a batch is in memory at a time, and at most
    `_VALUES_BLOCK` of its resampled values."""
    from scipy.stats import quantile

    parts = getattr(statistic, "parts", None) or [statistic]
    combine = getattr(statistic, "combine", None) or (lambda values: values[0])
    if len(parts) != len(samples):
        raise ValueError(f"{len(samples)} samples but {len(parts)} statistic parts")
    rng = np.random.default_rng(seed)
    n = max(s.shape[0] for s in samples)
    batch = max(1, _MAX_CHUNK_ELEMENTS // max(n, 1))
    theta = []
    for k in range(0, n_boot, batch):
        size = min(batch, n_boot - k)
        values = []
        for sample, part in zip(samples, parts):
            m = sample.shape[-1]
            idx = rng.integers(0, m, (size, m), dtype=np.int64)  # scipy's draw: one call per sample and batch
            step = max(1, _VALUES_BLOCK // m)  # each resample's statistic is its own row's: taken in blocks
            values.append(np.concatenate([part(sample[..., idx[r : r + step]], axis=-1) for r in range(0, size, step)]))
            del idx
        theta.append(combine(values))
    dist = np.concatenate(theta, axis=-1)
    confidence_level = 1.0 - alpha
    a = np.asarray((1 - confidence_level) / 2, dtype=dist.dtype)
    lo, hi = quantile(dist, np.stack((a, 1 - a), axis=-1), axis=-1)
    return float(lo), float(hi)


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    stat: Stat = np.mean,
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap `(1 - alpha)` interval of `stat(values)`.

    `values` is one number per fact (e.g. 0/1 correctness or gold probability). `stat` takes a
    1-D array, or a 2-D array with `axis=1` (numpy reductions do; others are applied row by row).
    Returns `(lo, hi)`; `(nan, nan)` for no values, `(v, v)` for one value.
    """
    _check_args(n_boot, alpha)
    arr = _as_float_array(values)
    if arr.size == 0:
        return (float("nan"), float("nan"))
    if arr.size == 1:
        v = float(stat(arr))
        return (v, v)
    if np.all(arr == arr[0]):  # every resample is the data itself
        v = float(stat(arr))
        return (v, v)
    return _percentile_bootstrap((arr,), _vectorized(stat), int(n_boot), alpha, seed)


def stratified_bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    groups: Sequence[object] | np.ndarray,
    stat: Stat = np.mean,
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> tuple[float, float]:
    """Interval for a macro average: the unweighted mean over groups of `stat` within each group.

    Each replicate resamples facts *within* each group (keeping every group's size), computes
    `stat` per group, then averages the per-group values with equal weight. This is the sampling
    model of a macro accuracy: the relations are fixed, the facts within a relation are a sample.
    Groups are visited in sorted order so the result does not depend on row order of the groups.
    """
    _check_args(n_boot, alpha)
    arr = _as_float_array(values)
    grp = np.asarray(groups, dtype=object).ravel()
    if grp.shape[0] != arr.shape[0]:
        raise ValueError(f"values and groups differ in length: {arr.shape[0]} vs {grp.shape[0]}")
    if arr.size == 0:
        return (float("nan"), float("nan"))
    members = [arr[grp == g] for g in sorted(set(grp.tolist()), key=str)]
    fixed = [float(stat(m)) for m in members if m.size == 1 or np.all(m == m[0])]  # nothing to resample
    varying = tuple(m for m in members if m.size > 1 and not np.all(m == m[0]))
    if not varying:
        v = float(np.mean(fixed))
        return (v, v)
    one = _vectorized(stat)

    def macro(*xs: np.ndarray, axis: int = -1) -> np.ndarray:
        return macro.combine([one(x, axis=axis) for x in xs])

    # the macro average is a sum over the groups: resampled one group at a time (module docstring)
    macro.parts = [one] * len(varying)  # type: ignore[attr-defined]
    macro.combine = lambda values: (sum(values) + sum(fixed)) / len(members)  # type: ignore[attr-defined]
    return _percentile_bootstrap(varying, macro, int(n_boot), alpha, seed)


def paired_bootstrap_diff(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    n_boot: int = 2000,
    seed: int = 0,
    alpha: float = 0.05,
) -> tuple[float, float, float]:
    """`(mean(b) - mean(a), lo, hi)` with a paired percentile bootstrap interval.

    `a` and `b` are aligned per fact (row i of both is the same fact, e.g. 0/1 correctness of two
    runs). Facts are resampled jointly, so the interval reflects only the disagreement between
    the runs, not the spread of fact difficulty: far tighter than two independent intervals.
    Returns `(nan, nan, nan)` for no facts.
    """
    a_arr = _as_float_array(a, "a")
    b_arr = _as_float_array(b, "b")
    if a_arr.shape != b_arr.shape:
        raise ValueError(f"a and b must be aligned per fact; lengths differ: {a_arr.size} vs {b_arr.size}")
    if a_arr.size == 0:
        _check_args(n_boot, alpha)
        return (float("nan"), float("nan"), float("nan"))
    d = b_arr - a_arr
    lo, hi = bootstrap_ci(d, np.mean, n_boot=n_boot, alpha=alpha, seed=seed)
    return (float(d.mean()), lo, hi)
