"""The bootstrap resamples one group at a time (issue 40 item 3) and still gives scipy's intervals exactly.

`scipy.stats.bootstrap` (what `factprobe.metrics.bootstrap` called before) holds every group's
resamples of a batch at once: a macro-accuracy interval over many relations took memory in
proportion to the whole run. The intervals must stay bit-for-bit those scipy gives."""

from __future__ import annotations

import tracemalloc
import warnings

import numpy as np
import pytest
from scipy.stats import bootstrap

from factprobe.metrics import bootstrap as boot


def scipy_interval(samples, statistic, n_boot: int, alpha: float, seed: int) -> tuple[float, float]:
    """The interval as the module computed it before: one `scipy.stats.bootstrap` call."""
    n = max(s.shape[0] for s in samples)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = bootstrap(
            samples,
            statistic,
            n_resamples=n_boot,
            confidence_level=1.0 - alpha,
            method="percentile",
            vectorized=True,
            paired=False,
            batch=max(1, boot._MAX_CHUNK_ELEMENTS // max(n, 1)),
            rng=np.random.default_rng(seed),
        )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def scipy_macro(values: np.ndarray, groups: np.ndarray, n_boot: int, seed: int) -> tuple[float, float]:
    members = [values[groups == g] for g in sorted(set(groups.tolist()), key=str)]
    fixed = [float(np.mean(m)) for m in members if m.size == 1 or np.all(m == m[0])]
    varying = tuple(m for m in members if m.size > 1 and not np.all(m == m[0]))
    if not varying:
        return (float(np.mean(fixed)),) * 2
    one = boot._vectorized(np.mean)

    def macro(*xs, axis=-1):
        return (sum(one(x, axis=axis) for x in xs) + sum(fixed)) / len(members)

    return scipy_interval(varying, macro, n_boot, 0.05, seed)


@pytest.mark.parametrize("chunk", [4_000_000, 1001, 777])
def test_intervals_are_scipys_to_the_bit(monkeypatch, chunk):
    monkeypatch.setattr(boot, "_MAX_CHUNK_ELEMENTS", chunk)  # several batches, odd sizes
    monkeypatch.setattr(boot, "_VALUES_BLOCK", chunk // 3)  # and several blocks of values per draw
    rng = np.random.default_rng(7)
    for trial in range(12):
        sizes = rng.integers(2, 300, int(rng.integers(1, 6)))
        values = np.concatenate([rng.random(s) < rng.random() for s in sizes]).astype(float)
        groups = np.concatenate([[f"r{i}"] * s for i, s in enumerate(sizes)])
        values[groups == "r0"] = 1.0  # a constant group: fixed, not resampled
        if len(sizes) > 1:
            assert boot.stratified_bootstrap_ci(values, groups, n_boot=1000, seed=trial) == scipy_macro(
                values, groups, 1000, trial
            )
        x = rng.random(int(rng.integers(2, 500)))
        assert boot.bootstrap_ci(x, n_boot=999, seed=trial) == scipy_interval((x,), boot._vectorized(np.mean), 999, 0.05, trial)


def test_a_macro_interval_over_many_groups_holds_one_groups_resamples_at_a_time(monkeypatch):
    chunk = 100_000
    monkeypatch.setattr(boot, "_MAX_CHUNK_ELEMENTS", chunk)
    rng = np.random.default_rng(0)
    values = (rng.random(20 * 500) < 0.6).astype(float)
    groups = np.repeat([f"P{i}" for i in range(20)], 500)
    tracemalloc.start()
    try:
        boot.stratified_bootstrap_ci(values, groups, n_boot=1000, seed=0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # one group's batch: <= chunk indices (int64) and chunk values (float64); all 20 groups at once is 20x that
    assert peak < 4 * chunk * 8, f"peak {peak / 2**20:.1f} MiB"
