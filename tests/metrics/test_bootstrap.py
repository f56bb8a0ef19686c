"""Percentile bootstrap intervals: hand-computable resampling distributions and basic properties."""

import math

import numpy as np
import pytest

from factprobe.metrics import bootstrap_ci, paired_bootstrap_diff, stratified_bootstrap_ci

# A 0/1 vector with accuracy 0.7 and n = 100.
SEVENTY = np.array([1.0] * 70 + [0.0] * 30)


def test_ci_contains_mean():
    lo, hi = bootstrap_ci(SEVENTY, n_boot=1000, seed=0)
    assert lo < 0.7 < hi
    # Normal approximation for a hand check: se = sqrt(0.7 * 0.3 / 100) = 0.0458; 1.96 se = 0.0898.
    assert hi - lo == pytest.approx(2 * 1.96 * math.sqrt(0.21 / 100), abs=0.03)


def test_two_value_hand_case():
    # values [0, 1]: a resample of size 2 has mean 0 (p = 1/4), 0.5 (p = 1/2) or 1 (p = 1/4).
    # 95% interval: 2.5th percentile is 0 (25% of replicates are 0), 97.5th is 1 -> (0, 1).
    assert bootstrap_ci([0.0, 1.0], n_boot=4000, seed=0) == (0.0, 1.0)
    # 40% interval (alpha = 0.6): 30th and 70th percentiles; P(mean <= 0) = .25 < .30 and
    # P(mean <= 0.5) = .75 > .70, so both fall on 0.5 -> (0.5, 0.5).
    assert bootstrap_ci([0.0, 1.0], n_boot=4000, alpha=0.6, seed=0) == (0.5, 0.5)


def test_deterministic_under_seed():
    assert bootstrap_ci(SEVENTY, seed=3) == bootstrap_ci(SEVENTY, seed=3)
    # A 0/1 vector has few distinct resample means, so two seeds can agree; use continuous values.
    probs = np.random.default_rng(0).uniform(size=100)
    assert bootstrap_ci(probs, seed=3) == bootstrap_ci(probs, seed=3)
    assert bootstrap_ci(probs, seed=3) != bootstrap_ci(probs, seed=4)


def test_shrinks_with_n():
    small = bootstrap_ci(SEVENTY, n_boot=1000, seed=0)
    large = bootstrap_ci(np.tile(SEVENTY, 25), n_boot=1000, seed=0)  # n = 2500, same accuracy
    # Width scales like 1 / sqrt(n): 25x the facts -> about 1/5 the width.
    assert (large[1] - large[0]) < 0.3 * (small[1] - small[0])
    assert large[0] < 0.7 < large[1]


def test_constant_vector_is_degenerate():
    assert bootstrap_ci([1.0] * 50) == (1.0, 1.0)
    assert bootstrap_ci([0.0] * 50) == (0.0, 0.0)
    lo, hi = bootstrap_ci([0.3] * 50)
    assert lo == pytest.approx(0.3) and hi == pytest.approx(0.3)


def test_degenerate_sizes():
    lo, hi = bootstrap_ci([])
    assert math.isnan(lo) and math.isnan(hi)
    assert bootstrap_ci([0.42]) == (0.42, 0.42)


def test_other_statistics():
    # np.median supports axis=1; a statistic without `axis` falls back to row by row.
    lo, hi = bootstrap_ci(np.arange(11.0), stat=np.median, n_boot=500)
    assert lo <= 5.0 <= hi
    assert bootstrap_ci([2.0, 2.0, 2.0], stat=lambda x: float(max(x)), n_boot=50) == (2.0, 2.0)


def test_bad_arguments():
    with pytest.raises(ValueError):
        bootstrap_ci([1.0, float("nan")])
    with pytest.raises(ValueError):
        bootstrap_ci([1.0, 0.0], n_boot=0)
    with pytest.raises(ValueError):
        bootstrap_ci([1.0, 0.0], alpha=1.5)


def test_large_input_is_chunked_and_fast():
    # 20,000 facts x 2,000 replicates = 40M indices, drawn in chunks; must stay well under a second.
    values = np.tile(SEVENTY, 200)
    lo, hi = bootstrap_ci(values, n_boot=2000, seed=0)
    assert lo < 0.7 < hi


def test_stratified_hand_case():
    # Group A = [1, 1, 1, 1] (every resample has mean 1); group B = [0, 1] (mean 0, .5, 1 with
    # probabilities 1/4, 1/2, 1/4). Macro = (1 + B) / 2 in {0.5, 0.75, 1} with the same probabilities.
    # 95% interval: 2.5th percentile 0.5, 97.5th percentile 1.0.
    values = [1, 1, 1, 1, 0, 1]
    groups = ["A", "A", "A", "A", "B", "B"]
    assert stratified_bootstrap_ci(values, groups, n_boot=4000, seed=0) == (0.5, 1.0)


def test_stratified_singletons_and_degenerate():
    # One fact per group: nothing to resample, the macro mean (1 + 0 + 1) / 3 is fixed.
    lo, hi = stratified_bootstrap_ci([1, 0, 1], ["a", "b", "c"])
    assert lo == pytest.approx(2 / 3) and hi == pytest.approx(2 / 3)
    lo, hi = stratified_bootstrap_ci([], [])
    assert math.isnan(lo) and math.isnan(hi)
    with pytest.raises(ValueError):
        stratified_bootstrap_ci([1, 0], ["a"])


def test_stratified_is_deterministic_and_order_free():
    rng = np.random.default_rng(0)
    values = rng.integers(0, 2, 300)
    groups = rng.choice(["P17", "P36", "P19"], 300)
    a = stratified_bootstrap_ci(values, groups, seed=5)
    assert a == stratified_bootstrap_ci(values, groups, seed=5)
    macro = np.mean([values[groups == g].mean() for g in ("P17", "P36", "P19")])
    assert a[0] <= macro <= a[1]


def test_paired_hand_case():
    # a = [1, 0, 1, 1], b = [1, 1, 1, 1]: d = b - a = [0, 1, 0, 0], mean diff = 0.25.
    # A resample of 4 draws k ones, k ~ Bin(4, 1/4): P(k<=0) = 81/256 = .316,
    # P(k<=2) = 243/256 = .949, P(k<=3) = 255/256 = .996.
    # 2.5th percentile: k = 0 -> 0.0; 97.5th percentile: k = 3 -> 0.75.
    diff, lo, hi = paired_bootstrap_diff([1, 0, 1, 1], [1, 1, 1, 1], n_boot=4000, seed=0)
    assert (diff, lo, hi) == (0.25, 0.0, 0.75)


def test_paired_identical_runs_and_sizes():
    a = SEVENTY
    assert paired_bootstrap_diff(a, a) == (0.0, 0.0, 0.0)
    diff, lo, hi = paired_bootstrap_diff([], [])
    assert math.isnan(diff) and math.isnan(lo) and math.isnan(hi)
    with pytest.raises(ValueError):
        paired_bootstrap_diff([1, 0], [1])


def test_paired_is_tighter_than_unpaired():
    # b agrees with a except 5 facts flipped from wrong to right: diff = +0.05.
    a = SEVENTY.copy()
    b = a.copy()
    b[70:75] = 1.0
    diff, lo, hi = paired_bootstrap_diff(a, b, n_boot=2000, seed=0)
    assert diff == pytest.approx(0.05)
    assert lo > 0.0  # all discordant facts go one way: the paired interval excludes 0
    a_lo, a_hi = bootstrap_ci(a, n_boot=2000, seed=0)
    assert hi - lo < 0.5 * (a_hi - a_lo)
    assert paired_bootstrap_diff(a, b, seed=1) == paired_bootstrap_diff(a, b, seed=1)
