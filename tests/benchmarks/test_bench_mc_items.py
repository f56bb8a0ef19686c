"""The mc-items benchmark's own logic: the 4-option items it builds from LAMA T-REx (a wrong item set
would make a wrong reported number) and how it judges its settings. No timing here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_mc_items import judge, lama_items

from factprobe.datasets.mc_items import load_items


def test_lama_items_are_valid_four_option_items_and_the_pool_excludes_test_subjects(real_data_root, tmp_path):
    items_path, train_path = lama_items(["P36", "P19"], 5, tmp_path)
    items, train = load_items(items_path), load_items(train_path)  # the probe's own loader: every record valid
    assert len(items) == 10 and {it.relation for it in items} == {"P36", "P19"}
    for it in items:
        assert len(it.options) == 4 and len(set(it.options)) == 4 and it.subject.count("[Y]") == 1
        assert it.subject.endswith("[Y].")  # LAMA's " ." written "."; text follows the slot
    test_prompts = {it.subject for it in items}
    assert train and not test_prompts & {t.subject for t in train}
    assert lama_items(["P36", "P19"], 5, tmp_path / "again")[0].read_text() == items_path.read_text()  # seeded


def _setting(label: str, examples: int, speedup: float, diff: float = 1e-5) -> dict:
    return {
        "set": label,
        "examples": examples,
        "speedup_vs_lm_eval": speedup,
        "max_abs_logprob_diff_vs_lm_eval": diff,
        "max_abs_logprob_diff_vs_naive": diff,
    }


def test_judge_takes_speed_from_the_last_setting_and_exactness_from_all():
    res = judge([_setting("cloze", 0, 1.4), _setting("lama", 50, 30.0, diff=2e-4)])
    assert res["target_setting"] == "lama, 50 examples" and res["speedup_vs_lm_eval"] == pytest.approx(30.0)
    assert res["passed"] == {
        "speedup_vs_lm_eval": True,
        "max_abs_logprob_diff_vs_lm_eval": False,
        "max_abs_logprob_diff_vs_naive": False,
    }
    assert res["speed_target_passed_by_setting"] == {"cloze, 0 examples": False, "lama, 50 examples": True}
