"""Issue 39 item 2: the fine-tuning report includes each setting's knowledge-map diff against the base
(hand-made evaluation folders: a qa and an ic-lke run per variant, as the evaluation step leaves them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from factprobe_ops.components.steps.finetune_report import run_finetune_report
from factprobe_ops.components.steps.knowledge_map import finetune_knowledge_diffs
from factprobe_ops.tracking.context import RunContext

from .runs import write_run


def _variant(root: Path, setting: str, qa: dict, mc: dict, revision: str) -> tuple[str, str]:
    qa_rows = [
        {
            "fact_id": f,
            "relation": "P36",
            "split": "eval",
            "shots_asked": 0,
            "em": float(ok),
            "f1": float(ok),
            "contains": float(ok),
            "correct": ok,
        }
        for f, ok in qa.items()
    ]
    mc_rows = [{"fact_id": f, "relation": "P36", "correct": ok, "gold_prob": 0.5} for f, ok in mc.items()]
    out = []
    for probe, rows in (("qa", qa_rows), ("ic-lke", mc_rows)):
        folder = write_run(root / setting / probe, probe, f"model-{setting}", rows, revision=revision)
        (folder / "finetune_setting.json").write_text(json.dumps({"setting": setting, "model": f"model-{setting}"}))
        out.append(str(folder))
    return out[0], out[1]


@pytest.mark.slow  # the whole report step with its figures: ~5 s on the loaded 2-core machine
def test_the_report_says_which_facts_each_setting_gained_and_lost_under_every_probe(tmp_path):
    base = _variant(
        tmp_path, "base", {"a": True, "b": False, "c": False, "d": True}, {"a": True, "b": False, "c": True, "d": True}, "r:base"
    )
    # known: b gained under both probes (a robust gain), c gained under qa only, d lost under both (a robust loss)
    known = _variant(
        tmp_path, "known", {"a": True, "b": True, "c": True, "d": False}, {"a": True, "b": True, "c": True, "d": False}, "r:known"
    )
    table, note = finetune_knowledge_diffs([base[0], known[0]], [base[1], known[1]])
    assert note == ""
    row = table.set_index("setting").loc["known"]
    assert (row["n_facts"], row["robust gain"], row["gain"], row["robust loss"], row["unchanged"]) == (4, 1, 1, 1, 1)
    assert (row["became_robust"], row["no_longer_robust"]) == (2, 1)  # b, c became known under both; d no longer
    run_finetune_report(
        [base[0], known[0]],
        [base[1], known[1]],
        str(tmp_path / "r.html"),
        str(tmp_path / "r.md"),
        {"max_steps": 2},
        RunContext(tracking_uri="none"),
    )
    md = (tmp_path / "r.md").read_text()
    assert "## Knowledge map: facts gained and lost against the base" in md and "| known | 4 | 1 | 1 | 1 |" in md


def test_without_finished_runs_the_report_says_why_there_is_no_diff(tmp_path):
    base = _variant(tmp_path, "base", {"a": True}, {"a": True}, "r:base")
    known = _variant(tmp_path, "known", {"a": False}, {"a": False}, "r:known")
    Path(known[0], "metrics.json").unlink()
    table, note = finetune_knowledge_diffs([base[0], known[0]], [base[1], known[1]])
    assert table.empty and note.startswith("no knowledge-map diff: run ") and "no readable metrics.json" in note
