"""IC-LKE >= HGP / MMP and "incorrect examples hurt more than unknown ones" over relations (issue 37 item 2):
the value is the mean of the per-relation differences, the interval a t-interval over those relation means,
n the number of relations, and every verdict carries the per-relation sign count."""

from __future__ import annotations

import pytest

from factprobe.metrics import findings as fm
from factprobe.metrics.bootstrap import paired_bootstrap_diff
from factprobe.metrics.cluster_interval import METHOD

#: 9 relations at +0.2, 3 at -0.3: mean 0.075, t(11) half-width 0.143678 (tests/metrics/test_cluster_interval.py)
MIXED = [0.2] * 9 + [-0.3] * 3


def _facts(rel: str, n: int, correct: int, templates: int = 1) -> list[dict]:
    return [
        {"fact_id": f"{rel}-f{i}", "relation": rel, "correct": i < correct, "template": f"t{t}"}
        for i in range(n)
        for t in range(templates)
    ]


def test_ic_lke_against_a_baseline_is_judged_over_relation_means_by_hand():
    # 40 facts per relation; IC-LKE 24/40 vs the baseline 16/40 (d = +0.2) in 9 relations, 12/40 vs 24/40 (-0.3) in 3
    icl, base = [], []
    for i, d in enumerate(MIXED):
        rel = f"P{i}"
        icl += _facts(rel, 40, 24 if d > 0 else 12)
        base += _facts(rel, 40, 16 if d > 0 else 24)
    f = fm.mc_vs_baseline("m", "mmp", icl, base, n_boot=500)
    assert f.value == pytest.approx(0.075) and f.n == 12 and f.n_units == 12 and f.unit == "relations"
    assert f.ci == (pytest.approx(0.075 - 0.143678, abs=1e-6), pytest.approx(0.075 + 0.143678, abs=1e-6))
    assert f.verdict == fm.INCONCLUSIVE and f.method == METHOD and f.signs == "9 of 12 relations the claimed way"
    assert f.detail["facts"] == 480 and f.detail["per_relation"]["P11"] == pytest.approx(-0.3)
    assert "9 of 12 relations the claimed way" in fm.verdict_text(f.to_dict())
    # over the 480 facts as if independent, a paired bootstrap would have said "holds"
    per_icl, per_base = fm.per_fact_correct(icl), fm.per_fact_correct(base)
    ids = sorted(per_icl)
    _, lo, _ = paired_bootstrap_diff([per_base[x] for x in ids], [per_icl[x] for x in ids], n_boot=1000, seed=0)
    assert lo > 0


def test_ic_lke_above_the_baseline_in_every_relation_holds_with_the_baseline_share_of_templates():
    icl, base = [], []
    for i in range(12):
        rel = f"P{i}"
        icl += _facts(rel, 20, 14 + i % 3)  # 0.70, 0.75, 0.80
        # 4 templates, the first right for every fact, the others for none: the baseline's per-fact value 0.25
        base += [{**r, "correct": r["template"] == "t0"} for r in _facts(rel, 20, 20, templates=4)]
    f = fm.mc_vs_baseline("m", "hgp", icl, base, n_boot=200)
    assert f.value == pytest.approx(0.75 - 0.25) and f.verdict == fm.HOLDS and f.signs == "12 of 12 relations the claimed way"
    assert f.detail["acc_hgp"] == pytest.approx(0.25) and f.detail["acc_ic_lke"] == pytest.approx(0.75)
    worse = fm.mc_vs_baseline("m", "hgp", base, icl, n_boot=200)
    assert worse.verdict == fm.NOT_HOLDS and worse.signs == "0 of 12 relations the claimed way"


def _seq(rel: str, replaced: set[int], probs: dict[int, float], length: int = 40) -> list[dict]:
    return [
        {"relation": rel, "position": i, "replaced": i in replaced, "prob": probs.get(i, 0.5), "prob_clean": 0.6}
        for i in range(length)
    ]


def _sequences(effects: list[float], n_after: list[int] | None = None) -> tuple[list[dict], list[dict]]:
    """One unknown and one incorrect sequence per relation; the incorrect one's surrounding positions are
    lower by the relation's effect. `n_after`: how many positions follow the replaced one (default 36)."""
    unk, inc = [], []
    for i, e in enumerate(effects):
        length = 4 + (n_after[i] if n_after else 36)
        rep = {0, 1, 2, 3}
        unk += _seq(f"R{i}", rep, {}, length)
        inc += _seq(f"R{i}", rep, {p: 0.5 - e for p in range(4, length)}, length)
    return unk, inc


def test_incorrect_against_unknown_is_judged_over_relation_means_by_hand():
    # 9 relations where the incorrect sequence is lower by 0.1, 3 where it is higher by 0.2: mean 0.025,
    # deviations +0.075 (x9), -0.225 (x3): SS = 0.2025, sd = sqrt(0.2025 / 11) = 0.135680, se = 0.039167,
    # half-width 2.200985 x se = 0.086207. The relations have 36 or 4 surrounding positions: the pooled
    # difference weighs the long ones, the relation mean does not.
    effects = [0.1] * 9 + [-0.2] * 3
    unk, inc = _sequences(effects, n_after=[4] * 6 + [36] * 3 + [36] * 3)
    f = fm.incorrect_vs_unknown("m", unk, inc, n_boot=500)
    assert f.value == pytest.approx(0.025) and f.n == 12 and f.unit == "relations" and f.method == METHOD
    assert f.ci == (pytest.approx(0.025 - 0.086207, abs=1e-6), pytest.approx(0.025 + 0.086207, abs=1e-6))
    assert f.verdict == fm.INCONCLUSIVE and f.signs == "9 of 12 relations the claimed way"
    pooled = (6 * 4 * 0.1 + 3 * 36 * 0.1 - 3 * 36 * 0.2) / (6 * 4 + 6 * 36)
    assert f.detail["pooled_over_positions"] == pytest.approx(pooled)
    assert f.detail["right_after_replaced"]["signs"] == "9 of 12 relations the claimed way"
    assert f.detail["right_after_replaced"]["value"] == pytest.approx(0.025)


def test_incorrect_hurting_more_in_11_relations_holds_and_the_block_reverse_does_not():
    f = fm.incorrect_vs_unknown("m", *_sequences([0.1, 0.12, 0.08, 0.11, 0.09, 0.1, 0.13, 0.07, 0.1, 0.1, 0.12]), n_boot=300)
    assert f.verdict == fm.HOLDS and f.n == 11 and f.signs == "11 of 11 relations the claimed way"
    worse = fm.incorrect_vs_unknown("m", *_sequences([-0.1, -0.05] * 6), placement="block", n_boot=300)
    assert worse.claim == "incorrect>unknown-block" and worse.verdict == fm.NOT_HOLDS
    assert worse.signs == "0 of 12 relations the claimed way"
    few = fm.incorrect_vs_unknown("m", *_sequences([0.1, 0.2, 0.3]), n_boot=300)
    assert few.verdict == fm.INCONCLUSIVE and few.n == 3  # 3 sequences are too few units
