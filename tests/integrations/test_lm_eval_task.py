"""The local lm-eval task of the tests and the benchmark (tests/integrations/lm_eval_task.py): one task per
few-shot sampler in one folder, over the same test questions (issue 40 item 5 measures both samplers)."""

from __future__ import annotations

import json

import pytest

from tests.integrations.lm_eval_task import POOL_FACTOR, TASK, build_task, task_name


def _rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_both_samplers_in_one_folder_share_the_questions_and_differ_in_examples(real_data_root, tmp_path):
    build_task(real_data_root, tmp_path, items=3, shots=2)
    first_test = (tmp_path / "test.json").read_text()
    build_task(real_data_root, tmp_path, items=3, shots=2, sampler="default")
    assert (tmp_path / "test.json").read_text() == first_test  # the same questions for both tasks
    shared, own = (tmp_path / f"{TASK}.yaml").read_text(), (tmp_path / f"{task_name('default')}.yaml").read_text()
    assert "sampler: first_n" in shared and f"train: {tmp_path / 'train.json'}" in shared and f"task: {TASK}\n" in shared
    assert "sampler: default" in own and f"train: {tmp_path / 'train_default.json'}" in own
    assert f"task: {TASK}_default\n" in own
    assert len(_rows(tmp_path / "train.json")) == 2 and len(_rows(tmp_path / "train_default.json")) == 2 * POOL_FACTOR
    test_questions = {r["question"] for r in _rows(tmp_path / "test.json")}
    assert not test_questions & {r["question"] for r in _rows(tmp_path / "train_default.json")}


def test_an_unknown_sampler_is_refused():
    with pytest.raises(ValueError, match="sampler 'balanced'"):
        task_name("balanced")
