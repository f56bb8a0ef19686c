"""Rows on disk read back one at a time (factprobe.framework.row_stream, issue 40 item 3): the index of a
run folder's finished rows, the projection the metrics get, lines split at `\\n` only, a torn checkpoint
tail cut without rewriting the file, and the per-fact table streamed from results.jsonl."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from factprobe.errors import ConfigError
from factprobe.framework.checkpoint import CHECKPOINT, RESULTS, RunFolder, cut_torn_tail, read_rows
from factprobe.framework.registry import get_probe
from factprobe.framework.row_stream import ProjectionError, Projector, RowIndex, scan_rows

ROWS = [
    {"key": "a", "relation": "P1", "correct": True, "options": ["x", "y"], "item_digest": "1"},
    {"key": "b", "relation": "P1", "correct": False, "options": ["x", "y"], "item_digest": "2"},
]


def jsonl(path: Path, rows, tail: str = "") -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows) + tail, encoding="utf-8")
    return path


def test_a_line_separator_inside_a_string_is_not_a_line_break(tmp_path):
    rows = [{"key": "a", "subject": "Zeile\u2028zwei\u2029drei\x85vier"}, {"key": "b", "subject": "x"}]
    assert read_rows(jsonl(tmp_path / "r.jsonl", rows)) == rows


def test_a_torn_last_line_is_left_out_and_a_damaged_earlier_one_refused(tmp_path):
    path = jsonl(tmp_path / "r.jsonl", ROWS, tail='{"key": "c", "rel')
    assert [r["key"] for r in read_rows(path)] == ["a", "b"]
    assert [r["key"] for r in read_rows(jsonl(tmp_path / "s.jsonl", ROWS, tail="{torn\n\n"))] == ["a", "b"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(ROWS[0]) + "\n{oops\n" + json.dumps(ROWS[1]) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad\.jsonl:2: corrupt line"):
        read_rows(bad)


def test_offsets_point_at_each_row(tmp_path):
    path = jsonl(tmp_path / "r.jsonl", ROWS)
    data = path.read_bytes()
    for offset, row in scan_rows(path):
        assert json.loads(data[offset:].split(b"\n", 1)[0]) == row


def test_the_index_keeps_the_first_accepted_row_of_a_key_and_reads_rows_from_disk(tmp_path):
    old = jsonl(tmp_path / "results.jsonl", [ROWS[0], {**ROWS[1], "item_digest": "stale"}])
    ckpt = jsonl(tmp_path / "checkpoint.jsonl", [ROWS[1], {**ROWS[0], "correct": False}])
    index = RowIndex({0: old, 1: ckpt})
    for n in (0, 1):
        index.scan(n, lambda k, r: r["item_digest"] != "stale")
    assert list(index) == ["a", "b"] and len(index) == 2 and "c" not in index
    assert index["a"] == ROWS[0] and index["b"] == ROWS[1]  # "a" from the results; "b" from the checkpoint
    assert dict(index.items()) == {"a": ROWS[0], "b": ROWS[1]}
    assert not index.add("a", 1, 0)
    index.close()


def test_appended_rows_are_recorded_and_read_back(tmp_path):
    with RunFolder(tmp_path, "k", {"probe": "ic-lke"}) as folder:
        done = folder.done_index()
        assert len(done) == 0
        folder.append([ROWS[0]])
        folder.append([ROWS[1]])
        assert done["b"] == ROWS[1] and done["a"] == ROWS[0]
        projected = folder.write_results(["b", "a"], Projector(("key", "correct")))
        assert projected == [{"key": "b", "correct": False}, {"key": "a", "correct": True}]
        assert not (tmp_path / RESULTS).exists()  # not in place before finish
        folder.finish({"n": 2})
    assert read_rows(tmp_path / RESULTS) == [ROWS[1], ROWS[0]] and not (tmp_path / CHECKPOINT).exists()
    assert (tmp_path / RESULTS).stat().st_mode & 0o777 == 0o644


def test_results_written_but_not_finished_leave_no_file(tmp_path):
    with pytest.raises(RuntimeError, match="stopped"), RunFolder(tmp_path, "k", {"probe": "ic-lke"}) as folder:
        folder.done_index()
        folder.append(ROWS)
        folder.write_results(["a", "b"], Projector(None))
        raise RuntimeError("stopped")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(f".{RESULTS}")) == []
    assert [r["key"] for r in read_rows(tmp_path / CHECKPOINT)] == ["a", "b"]


@pytest.mark.parametrize(
    "tail, kept",
    [('{"key": "c", "rel', ["a", "b"]), ('{"key": "c"}', ["a", "b", "c"])],
)
def test_a_torn_tail_is_cut_in_place(tmp_path, tail, kept):
    path = jsonl(tmp_path / CHECKPOINT, ROWS, tail=tail)
    inode, head = path.stat().st_ino, path.read_bytes()[: -len(tail)]
    cut_torn_tail(path)
    assert path.stat().st_ino == inode  # cut in place: the rest of the file is not rewritten
    assert path.read_bytes().startswith(head) and path.read_bytes().endswith(b"\n")
    assert [r["key"] for r in read_rows(path)] == kept


def test_projection_shares_values_and_refuses_fields_it_does_not_hold():
    keep = Projector(("relation", "correct", "options", "template"), "toy")
    a, b = keep.project(dict(ROWS[0])), keep.project(json.loads(json.dumps(ROWS[1])))
    assert a == {"relation": "P1", "correct": True, "options": ["x", "y"]}
    assert a["options"] is b["options"] and a["relation"] is b["relation"]  # one object for equal values
    assert a.get("template", "none") == "none" and "template" not in a
    with pytest.raises(KeyError):
        a["template"]
    for read in (lambda r: r["key"], lambda r: r.get("key"), lambda r: "key" in r):
        with pytest.raises(ProjectionError, match="probe toy: its metrics read the row field 'key'"):
            read(a)
    assert pd.DataFrame([a, b]).columns.tolist() == ["relation", "correct", "options"]
    a["all_correct"] = True  # a field the metrics add themselves reads back
    assert a.get("all_correct") and "all_correct" in a and {**a}["all_correct"]
    whole = dict(ROWS[0])
    assert Projector(None).project(whole) is whole


def test_every_built_in_probe_declares_what_its_metrics_read():
    from factprobe.framework.registry import load_probes

    built_in = {n: p for n, p in load_probes().items() if type(p).__module__.startswith("factprobe.")}
    assert len(built_in) >= 10 and [n for n, p in built_in.items() if p.metric_columns is None] == []


@pytest.mark.slow
def test_a_run_whose_metrics_read_an_undeclared_field_names_it(tmp_path):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from bench_run_memory import NAME, child, register_probe

    register_probe()
    probe = get_probe(NAME)
    old = probe.metric_columns
    try:
        type(probe).metric_columns = ("relation", "correct", "gold_prob", "confidence")  # template missing
        with pytest.raises(ProjectionError, match="'template'"):
            child(20, 10, tmp_path / "out", 1)
    finally:
        type(probe).metric_columns = old
    assert len(read_rows(tmp_path / "out" / CHECKPOINT)) == 20  # every row kept for the rerun
    assert child(20, 10, tmp_path / "out", 1)["rows"] == 20
    assert not [p for p in os.listdir(tmp_path / "out") if p.endswith(".tmp")]
