"""Issue 41 item 7: merging shards proves what it merges. A row whose `item_digest` is not its item's (a
forged row, a row of other data), a row of a fact that the data does not hold, and two rows of one fact
with different values (the later won) are refused, one line naming the shard(s) and the fact; two
identical rows of one fact are merged once. Two real shards of a tiny random model are run once; each
test forges a copy of them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from factprobe.errors import DataError

from .test_sweep_units import CONFIG, _run_units, _unit

pytestmark = pytest.mark.slow  # probes a tiny model once for the module


@pytest.fixture(scope="module")
def shards(tmp_path_factory, tiny_model_path):
    """(items folder, the two shard unit folders) of ic-lke, run once."""
    from factprobe.framework.registry import get_probe
    from factprobe_ops.components.steps._common import run_config

    root = tmp_path_factory.mktemp("merge-proofs")
    cfg = run_config(CONFIG, probe="ic-lke", model="-")
    get_probe("ic-lke").prepare(cfg).save(root / "items" / "mc")
    model = str(tiny_model_path("llama"))
    dirs = _run_units([_unit(model, ["ic-lke"], s, 2) for s in range(2)], root / "items", root / "units")
    return root / "items", [Path(d) for d in dirs]


@pytest.fixture
def copy(shards, tmp_path):
    """A fresh copy of the two shard folders: (items folder, [unit folder 1, unit folder 2])."""
    items, dirs = shards
    out = []
    for d in dirs:
        shutil.copytree(d, tmp_path / d.name)
        out.append(tmp_path / d.name)
    return items, out


def _rows(unit: Path) -> list[dict]:
    return [json.loads(x) for x in (unit / "ic-lke" / "results.jsonl").read_text().splitlines() if x.strip()]


def _write(unit: Path, rows: list[dict]) -> None:
    (unit / "ic-lke" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _merge(items: Path, dirs: list[Path], out: Path) -> list[str]:
    from factprobe_ops.components.steps.merge import run_merge

    return run_merge([str(d) for d in dirs], str(out), str(items))


def _one_line(err) -> str:
    msg = str(err.value)
    assert "\n" not in msg, msg
    return msg


def test_the_untouched_shards_merge(copy, tmp_path):
    items, dirs = copy
    (out,) = _merge(items, dirs, tmp_path / "m")
    merged = [json.loads(x) for x in (Path(out) / "results.jsonl").read_text().splitlines()]
    assert sorted(r["key"] for r in merged) == sorted(r["key"] for d in dirs for r in _rows(d))


def test_a_row_whose_item_digest_is_not_its_items_is_refused(copy, tmp_path):
    items, dirs = copy
    rows = _rows(dirs[1])
    rows[0] = {**rows[0], "item_digest": "0123456789abcdef", "correct": not rows[0]["correct"]}
    _write(dirs[1], rows)
    with pytest.raises(DataError) as err:
        _merge(items, dirs, tmp_path / "m")
    msg = _one_line(err)
    assert "shard 2/2" in msg and rows[0]["key"] in msg and "item_digest" in msg, msg
    assert not (tmp_path / "m" / "001" / "metrics.json").exists()


def test_a_row_without_an_item_digest_is_refused(copy, tmp_path):
    items, dirs = copy
    rows = _rows(dirs[0])
    del rows[-1]["item_digest"]
    _write(dirs[0], rows)
    with pytest.raises(DataError) as err:
        _merge(items, dirs, tmp_path / "m")
    msg = _one_line(err)
    assert "shard 1/2" in msg and rows[-1]["key"] in msg, msg


def test_two_rows_of_one_fact_with_different_verdicts_are_refused(copy, tmp_path):
    """Shard 2 also holds a row of a fact of shard 1, its verdict flipped: the later one won before."""
    items, dirs = copy
    first = _rows(dirs[0])[0]
    forged = {**first, "correct": not first["correct"], "prediction": "forged"}
    _write(dirs[1], _rows(dirs[1]) + [forged])
    with pytest.raises(DataError) as err:
        _merge(items, dirs, tmp_path / "m")
    msg = _one_line(err)
    assert "shard 1/2" in msg and "shard 2/2" in msg and first["key"] in msg and "differ" in msg, msg


def test_two_differing_rows_of_one_fact_in_one_shard_are_refused(copy, tmp_path):
    items, dirs = copy
    rows = _rows(dirs[0])
    _write(dirs[0], rows + [{**rows[0], "gold_prob": 0.999}])
    with pytest.raises(DataError) as err:
        _merge(items, dirs, tmp_path / "m")
    msg = _one_line(err)
    assert "shard 1/2" in msg and rows[0]["key"] in msg, msg


def test_identical_rows_of_one_fact_are_merged_once(copy, shards, tmp_path):
    items, dirs = copy
    (clean,) = _merge(*shards, tmp_path / "clean")
    _write(dirs[1], _rows(dirs[1]) + [_rows(dirs[0])[0]])
    (out,) = _merge(items, dirs, tmp_path / "m")
    assert (Path(out) / "results.jsonl").read_text() == (Path(clean) / "results.jsonl").read_text()
    assert (
        json.loads((Path(out) / "metrics.json").read_text())["accuracy"]
        == json.loads((Path(clean) / "metrics.json").read_text())["accuracy"]
    )


def test_a_row_of_a_fact_the_data_does_not_hold_is_refused(copy, tmp_path):
    items, dirs = copy
    rows = _rows(dirs[1])
    _write(dirs[1], rows + [{**rows[0], "key": "P36|Atlantis|Poseidonia", "fact_id": "P36|Atlantis|Poseidonia"}])
    with pytest.raises(DataError) as err:
        _merge(items, dirs, tmp_path / "m")
    msg = _one_line(err)
    assert "shard 2/2" in msg and "P36|Atlantis|Poseidonia" in msg, msg
