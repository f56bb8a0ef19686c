"""The map's statistics against their reference implementations (issue 39 item 1): the vectorised
interval is `findings_rule.t_interval` column by column; the co-occurrence tables are the pairwise 2x2
counts; eta is `comparison.subsumption_by_relation`'s; the sharing rate is `belief_sharing`'s rate over
the robust sets."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from factprobe.knowledge_maps import stats
from factprobe.metrics.belief_sharing import knowledge_sharing_rate
from factprobe.metrics.comparison import subsumption_by_relation
from factprobe.metrics.findings_rule import t_interval


def test_intervals_are_t_interval_per_column_with_undefined_relations_left_out():
    rng = np.random.default_rng(1)
    values = rng.uniform(-0.5, 1.5, size=(12, 5))
    values[rng.random(values.shape) < 0.3] = np.nan
    values[:, 3] = np.nan
    values[:11, 4] = np.nan  # one relation only: no interval
    got = stats.intervals(values, bounds=(-math.inf, math.inf))
    for j in range(values.shape[1]):
        col = values[:, j][np.isfinite(values[:, j])]
        mean, lo, hi = t_interval(col)
        assert got["n_relations"][j] == col.size
        assert got["value"][j] == pytest.approx(mean, nan_ok=True)
        assert got["ci_low"][j] == pytest.approx(lo, nan_ok=True) and got["ci_high"][j] == pytest.approx(hi, nan_ok=True)
    cut = stats.interval(np.array([0.0, 0.0, 1.0]))
    assert (cut["ci_low"], cut["ci_high"]) == (0.0, 1.0)  # 1/3 -+ 1.43, cut to [0, 1]
    assert stats.interval(np.array([0.4, 0.4]))["ci_low"] == 0.4  # all equal: the mean twice


def test_pair_stats_match_the_reference_eta_and_a_hand_count():
    rng = np.random.default_rng(2)
    right = rng.random((500, 4)) < 0.4
    rel = rng.integers(0, 7, 500)
    ps = stats.pair_stats(right, rel, 7)
    for a in range(4):
        for b in range(4):
            if a == b:
                continue
            ref = subsumption_by_relation(right[:, a], right[:, b], rel)
            assert ps["eta_pooled"][a, b] == pytest.approx(ref["eta_pooled"])
            assert ps["eta"][a, b] == pytest.approx(ref["eta_relation_mean"])
            n11 = int((right[:, a] & right[:, b]).sum())
            assert tuple(ps["tables"][a, b]) == (
                n11,
                int((right[:, a] & ~right[:, b]).sum()),
                int((~right[:, a] & right[:, b]).sum()),
                int((~right[:, a] & ~right[:, b]).sum()),
            )


def test_sharing_is_the_knowledge_sharing_rate_over_robust_sets():
    rng = np.random.default_rng(3)
    robust = rng.random((300, 3)) < 0.3
    rel = rng.integers(0, 5, 300)
    sh = stats.sharing(robust, rel, 5)
    ids = [f"f{i}" for i in range(300)]
    for a in range(3):
        for b in range(3):
            ta = pd.DataFrame({"fact_id": ids, "correct": robust[:, a]})
            tb = pd.DataFrame({"fact_id": ids, "correct": robust[:, b]})
            assert sh["rate"][a, b] == pytest.approx(knowledge_sharing_rate(ta, tb, unit="fact"))
