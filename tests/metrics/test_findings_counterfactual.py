"""yuan2024's counterfactual claim (factprobe/metrics/findings_counterfactual.py, issue 37 item 1): the
paper's comparison (unknown-shuffle - known-shuffle) with the premise check (known-unshuffle -
unknown-unshuffle) beside it, and an interval over questions AND exemplar draws; hand-computed tables and
a coverage simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from factprobe.metrics import findings as fm
from factprobe.metrics.findings_counterfactual import crossed_t_interval, em_tables

Q = 40  # questions of the hand-made tables


def _cf(em: dict[str, list[list[float]]], k: int = 10) -> list[dict]:
    """Rows of the counterfactual probe: `em[setting][draw][question]`."""
    return [
        {"split": "eval", "setting": s, "shots_asked": k, "fact_id": f"q{q}", "em": v, "draw": d}
        for s, draws in em.items()
        for d, vs in enumerate(draws)
        for q, v in enumerate(vs)
    ]


def _ones(n: int) -> list[float]:
    """The first `n` of the Q questions right."""
    return [1.0] * n + [0.0] * (Q - n)


def _premise_fails_table(k: int = 10) -> list[dict]:
    """3 draws x 40 questions. Known-unshuffle gets all 40, unknown-unshuffle the first 20 in every draw (the
    premise fails by 0.5); unknown-shuffle the first 20; known-shuffle the first 24, 16 and 20 in draws 0-2."""
    return _cf(
        {
            "known-unshuffle": [_ones(Q)] * 3,
            "known-shuffle": [_ones(24), _ones(16), _ones(20)],
            "unknown-unshuffle": [_ones(20)] * 3,
            "unknown-shuffle": [_ones(20)] * 3,
        },
        k,
    )


def test_the_claim_is_unknown_shuffle_minus_known_shuffle_and_the_premise_is_checked_beside_it():
    f = fm.counterfactual_known_vs_unknown("m", _premise_fails_table(), 10)
    # the claim: EM(US) - EM(KS) = 20/40 - (24 + 16 + 20)/120 = 0
    assert f.value == pytest.approx(0.5 - 0.5) and f.n == Q and f.detail["draws"] == 3
    assert f.detail["per_draw"] == pytest.approx([-0.1, 0.1, 0.0])
    # its interval: draw means -0.1, 0.1, 0 (variance 0.01); question means +1/3 on q16-19, -1/3 on q20-23, else 0
    v = 0.01 / 3 + (8 * (1 / 3) ** 2 / (Q - 1)) / Q
    h = stats.t.ppf(0.975, 2) * math.sqrt(v)
    assert f.ci == pytest.approx((-h, h)) and f.verdict == fm.INCONCLUSIVE
    # the premise: EM(KU) - EM(UU) = 1 - 0.5, the same in every draw: question means 1 (20) and 0 (20)
    p = f.detail["premise"]
    hp = stats.t.ppf(0.975, 2) * math.sqrt((20 * 0.25 * 2 / (Q - 1)) / Q)
    assert p["value"] == pytest.approx(0.5) and p["ci"] == pytest.approx([0.5 - hp, 0.5 + hp]) and p["ci"][0] > 0
    # the verdict says the premise fails, in the verdict text and in the table
    text = fm.verdict_text(f.to_dict())
    assert text.startswith(fm.INCONCLUSIVE) and "premise fails" in text and "+0.500" in text
    assert "premise fails" in fm.markdown_table([f.to_dict()])
    # the statistic before issue 37, (KU - KS) - (UU - US) = (1 - 0.5) - (0.5 - 0.5) = +0.5, "held" on the premise gap
    assert (1 - f.detail["em_known-shuffle"]) - (0.5 - f.detail["em_unknown-shuffle"]) == pytest.approx(0.5)


def test_the_regular_baseline_gives_the_papers_drops():
    rows = _premise_fails_table() + [
        {"split": "eval", "setting": "regular", "shots_asked": 10, "fact_id": f"q{q}", "em": v, "draw": 0}
        for q, v in enumerate(_ones(30))
    ]
    f = fm.counterfactual_known_vs_unknown("m", rows, 10)
    assert f.detail["em_regular"] == pytest.approx(0.75)
    assert f.detail["drop_known_shuffle"] - f.detail["drop_unknown_shuffle"] == pytest.approx(f.value)  # (R-KS)-(R-US)


def test_a_known_shuffle_drop_in_every_draw_holds_and_a_comparable_premise_adds_no_note():
    rows = _cf(
        {
            "known-unshuffle": [_ones(30), _ones(31), _ones(29)],
            "known-shuffle": [_ones(8), _ones(10), _ones(9)],
            "unknown-unshuffle": [_ones(30), _ones(29), _ones(31)],
            "unknown-shuffle": [_ones(28), _ones(29), _ones(30)],
        }
    )
    f = fm.counterfactual_known_vs_unknown("m", rows, 10)
    assert f.value == pytest.approx((87 - 27) / 120) and f.verdict == fm.HOLDS
    assert "verdict_note" not in f.detail and f.detail["premise"]["ci"][0] < 0 < f.detail["premise"]["ci"][1]
    reverse = fm.counterfactual_known_vs_unknown("m", _cf({s: v for s, v in zip(fm.FIGURE7, _swap(rows))}), 10)
    assert reverse.verdict == fm.NOT_HOLDS


def _swap(rows: list[dict]) -> list[list[list[float]]]:
    """The four settings' tables with known-shuffle and unknown-shuffle exchanged."""
    em = em_tables(rows, 10)
    table = {s: [[em[s][(d, f"q{q}")] for q in range(Q)] for d in range(3)] for s in fm.FIGURE7}
    return [table["known-unshuffle"], table["unknown-shuffle"], table["unknown-unshuffle"], table["known-shuffle"]]


def test_one_exemplar_draw_cannot_cover_the_draw_and_is_inconclusive():
    rows = [r for r in _cf({s: [_ones(35 if s != "known-shuffle" else 5)] for s in fm.FIGURE7})]
    for r in rows:
        del r["draw"]  # rows from a probe run before issue 37: draw 0
    f = fm.counterfactual_known_vs_unknown("m", rows, 10)
    assert f.value == pytest.approx(0.75) and f.detail["draws"] == 1 and f.ci[0] > 0
    assert f.verdict == fm.INCONCLUSIVE and "exemplar_draws >= 2" in f.detail["caveat_draws"]


def test_missing_settings_and_empty_exemplar_sets_are_not_measured():
    rows = _premise_fails_table()
    assert fm.counterfactual_known_vs_unknown("m", rows, 15).value is None  # no k = 15
    f = fm.counterfactual_known_vs_unknown(
        "m", rows, 10, shots_used={"known-unshuffle": 0, "known-shuffle": 0, "unknown-unshuffle": 10, "unknown-shuffle": 10}
    )
    assert f.verdict == fm.INCONCLUSIVE and "no exemplar" in f.detail["not_measured"]


def test_over_k_judges_the_largest_k_and_joins_the_premise_and_scale_notes():
    flat = _cf({s: [_ones(20)] * 3 for s in fm.FIGURE7}, k=10)
    f = fm.counterfactual_over_k("m", flat + _premise_fails_table(32), [10, 32], n_params=135e6)
    assert f.detail["k"] == 32 and [e["k"] for e in f.detail["per_k"]] == [10, 32]
    assert f.detail["per_k"][1]["premise"] == pytest.approx(0.5) and f.detail["per_k"][0]["draws"] == 3
    note = f.detail["verdict_note"]
    assert "premise fails" in note and "no effect at this scale" in note
    assert f.detail["paper_k_not_run"] == [15, 20]


def test_crossed_interval_by_hand():
    # 2 draws x 3 questions: draw means 0 and 2/3 (variance 2/9), question means 0.5, 0, 0.5 (variance 1/12)
    m, lo, hi, df = crossed_t_interval([[0.0, 0.0, 0.0], [1.0, 0.0, 1.0]])
    h = stats.t.ppf(0.975, 1) * math.sqrt((2 / 9) / 2 + (1 / 12) / 3)
    assert (m, df) == (pytest.approx(1 / 3), 1.0) and (lo, hi) == pytest.approx((1 / 3 - h, 1 / 3 + h))
    m, lo, hi, df = crossed_t_interval([[1.0, 0.0, 1.0, 0.0]])  # one draw: a t-interval over the questions
    assert df == 3 and (lo, hi) == pytest.approx(fm.t_interval([1.0, 0.0, 1.0, 0.0])[1:])
    assert crossed_t_interval([[0.5, 0.5], [0.5, 0.5]])[1:3] == (0.5, 0.5)


def _simulated(rng: np.random.Generator, draws: int, questions: int, sd_draw: float, sd_q: float) -> np.ndarray:
    """EM(US) - EM(KS) per draw and question with no effect: 0/1 answers, a draw effect on each setting's
    logit (`sd_draw`), a question effect that splits the settings (`sd_q`, symmetric), question ease."""
    ease, split = rng.normal(0, 1.2, questions), rng.normal(0, sd_q, questions)
    out = []
    for _ in range(draws):
        p_us = 1 / (1 + np.exp(-(ease + rng.normal(0, sd_draw) + split / 2)))
        p_ks = 1 / (1 + np.exp(-(ease + rng.normal(0, sd_draw) - split / 2)))
        out.append((rng.random(questions) < p_us).astype(float) - (rng.random(questions) < p_ks))
    return np.array(out)


def _coverage(interval, draws: int, sd_draw: float, sd_q: float, runs: int = 400) -> float:
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(runs):
        _, lo, hi = interval(_simulated(rng, draws, 240, sd_draw, sd_q))[:3]
        hits += lo < 0.0 < hi
    return hits / runs


@pytest.mark.parametrize("draws", [2, 3, 5])
@pytest.mark.parametrize("sd_draw,sd_q", [(0.6, 0.5), (0.0, 2.0)])
def test_the_crossed_interval_covers_a_known_zero_at_the_runs_sizes(draws, sd_draw, sd_q):
    # the findings budgets' 2, 3, 5 draws x 240 questions; 400 runs: coverage at least 0.93 (0.95 less ~2 s.e.)
    assert _coverage(crossed_t_interval, draws, sd_draw, sd_q) >= 0.93


def test_the_coverage_check_catches_an_interval_that_leaves_the_questions_out():
    def over_draw_means(table: np.ndarray) -> tuple[float, float, float]:
        return fm.t_interval(table.mean(axis=1))

    # the same questions in every draw: their spread is not in the draw means (5 draws: about 0.82)
    assert _coverage(over_draw_means, 5, 0.0, 2.0) < 0.9
