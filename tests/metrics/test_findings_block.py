"""`block_vs_random` (factprobe/metrics/findings.py) holds the number of incorrect examples in context
fixed, as wu2024 Figures 2d and 2e do (issue 37 item 3): hand-computed on tiny hand-made sequences."""

from __future__ import annotations

import pytest

from factprobe.metrics import findings as fm

BLOCK = {2, 3, 4, 5}  # one block of 4: positions 6-11 have all 4 in context
RANDOM = {1, 4, 7, 9}  # exposure: 0 at 0, 1 at 2-3, 2 at 5-6, 3 at 8, all 4 only at 10 and 11
LENGTH = 12


def _seq(replaced: set[int], drops: dict[int, float], relation: str) -> list[dict]:
    """One relation's positions.jsonl rows: clean probability 0.6, the variant's lower by `drops`."""
    return [
        {
            "relation": relation,
            "position": i,
            "replaced": i in replaced,
            "prob_clean": 0.6,
            "prob": 0.6 - drops.get(i, 0.0),
        }
        for i in range(LENGTH)
    ]


def _tables(full_exposure_drop: float, relations: int = 12) -> tuple[list[dict], list[dict]]:
    """Block: drop 0.2 after the block. Random: drop 0.05 where 1-3 incorrect examples are in context,
    `full_exposure_drop` (+-0.01, alternating by relation) where all 4 are."""
    block, rand = [], []
    for i in range(relations):
        e = 0.01 if i % 2 else -0.01
        block += _seq(BLOCK, {p: 0.2 for p in range(6, LENGTH)}, f"R{i}")
        drops = {p: 0.05 for p in (2, 3, 5, 6, 8)} | {10: full_exposure_drop + e, 11: full_exposure_drop + e}
        rand += _seq(RANDOM, drops, f"R{i}")
    return block, rand


def test_the_exposure_of_each_position_counts_the_replaced_examples_before_it():
    pairs = fm.replaced_before(_seq(RANDOM, {}, "R"))["R"]
    assert [(r["position"], e) for r, e in pairs] == [
        (0, 0), (1, 0), (2, 1), (3, 1), (4, 1), (5, 2), (6, 2), (7, 2), (8, 3), (9, 3), (10, 4), (11, 4)
    ]  # fmt: skip
    assert [r["position"] for r, _ in fm.exposed(_seq(RANDOM, {}, "R"), 3)["R"]] == [8, 10, 11]
    assert [r["position"] for r, _ in fm.exposed(_seq(BLOCK, {}, "R"), 4)["R"]] == list(range(6, LENGTH))


def test_block_and_random_are_compared_at_the_same_number_of_incorrect_examples():
    # At full exposure the random sequence drops as much as the block one (0.2 each): no block effect.
    # The statistic before issue 37 set the block's 4-in-context positions against every random position
    # after the first replacement (1-4 in context): 0.2 - (5 x 0.05 + 2 x 0.2) / 7 = +0.107, a "block effect"
    # made of the random side's lighter exposure.
    block, rand = _tables(0.2)
    f = fm.block_vs_random("m", block, rand)
    assert f.detail["replaced"] == 4 and f.detail["min_exposure"] == 4  # ceil(0.875 x 4)
    assert f.value == pytest.approx(0.0, abs=1e-12) and f.verdict == fm.INCONCLUSIVE and f.n == 12
    assert f.detail["exposure_block"] == 4 and f.detail["exposure_random"] == 4
    assert (f.detail["positions_block"], f.detail["positions_random"]) == (12 * 6, 12 * 2)
    assert f.detail["drop_block"] == pytest.approx(0.2) and f.detail["drop_random"] == pytest.approx(0.2)
    assert f.detail["unit"] == "relations" and f.to_dict()["unit"] == "relations"
    old = f.detail["unmatched"]
    assert old["value"] == pytest.approx(0.2 - (5 * 0.05 + 2 * 0.2) / 7) and old["ci"][0] > 0


def test_a_block_that_hurts_more_at_the_same_exposure_holds_with_its_sign_count():
    block, rand = _tables(0.1)
    f = fm.block_vs_random("m", block, rand)
    assert f.value == pytest.approx(0.1) and f.verdict == fm.HOLDS
    assert f.to_dict()["signs"] == "12 of 12 relations the claimed way"
    worse = fm.block_vs_random("m", *_tables(0.3))
    assert worse.value == pytest.approx(-0.1) and worse.verdict == fm.NOT_HOLDS


def test_a_lower_exposure_threshold_takes_more_random_positions():
    block, rand = _tables(0.2)
    f = fm.block_vs_random("m", block, rand, min_exposure=3)  # random positions 8, 10, 11
    assert f.detail["positions_random"] == 12 * 3
    assert f.value == pytest.approx(0.2 - (0.05 + 0.2 + 0.2) / 3)


def test_no_matched_positions_or_no_clean_probability_is_not_measured():
    block = _seq(BLOCK, {}, "R")
    rand = _seq({1, 4, 7, 11}, {}, "R")  # the last replacement is the last position: nothing has all 4 before it
    f = fm.block_vs_random("m", block, rand)
    assert f.verdict == fm.INCONCLUSIVE and f.value is None and "at least 4" in f.detail["not_measured"]
    bare = [{k: v for k, v in r.items() if k != "prob_clean"} for r in _seq(BLOCK, {}, "R")]
    g = fm.block_vs_random("m", bare, [{k: v for k, v in r.items() if k != "prob_clean"} for r in _seq(RANDOM, {}, "R")])
    assert g.verdict == fm.INCONCLUSIVE and "clean" in g.detail["not_measured"]
