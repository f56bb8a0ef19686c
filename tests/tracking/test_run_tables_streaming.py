"""A results file read as a per-fact table (compare, regress, the gates) streams its rows and keeps its
probe's per-fact columns and the join keys, never the option lists or prompts (issue 40 item 3); the
MLflow per-fact table is built from results.jsonl the same way and equals the one from whole rows."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from factprobe.errors import DataError
from factprobe.framework.registry import get_probe
from factprobe_ops.tracking.probe_logging import per_fact_table
from factprobe_ops.tracking.run_tables import _from_results_file


def row(i: int, probe: str = "ic-lke", **extra) -> dict:
    return {
        "key": f"P1|s{i}|o{i}",
        "fact_id": f"P1|s{i}|o{i}",
        "probe": probe,
        "relation": "P1",
        "subject": f"S{i}\u2028line",  # a line separator inside a string: not a line break
        "gold": f"o{i}",
        "options": [f"o{j}" for j in range(100)],
        "logprobs": [-float(j) for j in range(100)],
        "prediction": f"o{i}",
        "correct": i % 2 == 0,
        "gold_prob": 0.5,
        "confidence": 0.5,
        "context": "x" * 500,
        "item_digest": f"d{i}",
        **extra,
    }


def write(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def test_a_results_file_keeps_the_per_fact_columns_and_join_keys(tmp_path):
    write(tmp_path / "results.jsonl", [row(i) for i in range(4)])
    df = _from_results_file(tmp_path)
    want = [*[c for c in get_probe("ic-lke").per_fact_columns if c != "template"], "key", "probe", "item_digest"]
    assert sorted(df.columns) == sorted(want)
    assert df["correct"].tolist() == [True, False, True, False] and df["subject"][0] == "S0\u2028line"


def test_a_probe_not_registered_here_keeps_every_field(tmp_path):
    write(tmp_path / "results.jsonl", [row(i, probe="someone-elses") for i in range(2)])
    assert "options" in _from_results_file(tmp_path).columns


def test_damaged_lines_are_named(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_bytes(json.dumps(row(0)).encode() + b"\n" + b'{"key": "cut' + b"\n" + json.dumps(row(1)).encode() + b"\n")
    with pytest.raises(DataError, match=r"results\.jsonl line 2: not a whole JSON record"):
        _from_results_file(tmp_path)
    path.write_bytes(json.dumps(row(0)).encode() + b"\n\xff\xfe\n")
    with pytest.raises(DataError, match="not UTF-8 text"):
        _from_results_file(tmp_path)


@pytest.mark.parametrize("probe", ["ic-lke", "coherency", "qa"])
def test_the_mlflow_per_fact_table_from_the_file_equals_the_one_from_whole_rows(tmp_path, probe):
    rows = [row(i, probe=probe, round=1 + i % 2, coherent=i % 3 == 0, split="eval", em=1.0) for i in range(5)]
    rows[2].pop("gold_prob")  # a field some rows lack
    path = write(tmp_path / "results.jsonl", rows)
    p = get_probe(probe)
    pd.testing.assert_frame_equal(per_fact_table(path, p), per_fact_table(pd.DataFrame(rows), p))
    empty = write(tmp_path / "empty.jsonl", [])
    pd.testing.assert_frame_equal(per_fact_table(empty, p), per_fact_table(pd.DataFrame(), p))
