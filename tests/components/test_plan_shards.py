"""Issue 41 item 7: `shards` has an upper bound that is known before planning, even with `relations` unset:
the facts of the run's data (each probe's: the source's facts, each relation capped at
max_facts_per_relation; an mc-items file's items) and a documented cap (`MAX_SHARDS`). A value above
either is one line, fast, before a unit is planned (`shards=100000000` planned for 82 s and died on memory)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from factprobe.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
ITEMS = REPO / "examples" / "mc_items" / "cloze.jsonl"  # 20 items


def _countryinfo_facts(max_per_relation: int | None = None) -> int:
    from factprobe.sources import load_facts

    by_rel = load_facts("countryinfo").by_relation()
    return sum(len(fs) if max_per_relation is None else min(len(fs), max_per_relation) for fs in by_rel.values())


def test_a_huge_shards_value_is_one_line_before_planning():
    from factprobe_ops.components.steps.plan import run_plan_units
    from factprobe_ops.components.steps.shards import MAX_SHARDS

    start = time.monotonic()
    with pytest.raises(ConfigError) as err:
        run_plan_units(["a"], ["ic-lke"], "", {}, shards=100_000_000)
    assert time.monotonic() - start < 5
    msg = str(err.value)
    assert "\n" not in msg and "shards=100000000" in msg and str(MAX_SHARDS) in msg, msg


def test_shards_above_the_cap_are_refused_whatever_the_data():
    from factprobe_ops.components.steps.plan import run_plan_units
    from factprobe_ops.components.steps.shards import MAX_SHARDS

    with pytest.raises(ConfigError, match=rf"shards={MAX_SHARDS + 1}: at most {MAX_SHARDS}"):
        run_plan_units(["a"], ["ic-lke"], shards=MAX_SHARDS + 1)  # no config: nothing else to bound it by


def test_shards_above_the_facts_are_refused_with_relations_unset():
    """The default source (countryinfo), every relation: the bound is its facts, capped per relation."""
    from factprobe_ops.components.steps.plan import run_plan_units

    n = _countryinfo_facts(3)
    with pytest.raises(ConfigError) as err:
        run_plan_units(["a"], ["ic-lke", "qa"], "", {"max_facts_per_relation": 3}, shards=n + 1)
    msg = str(err.value)
    assert "\n" not in msg and f"shards={n + 1} is more than the {n} facts" in msg and f"shards={n} or fewer" in msg, msg
    assert len(run_plan_units(["a"], ["ic-lke"], "", {"max_facts_per_relation": 3}, shards=n)) == n


def test_shards_above_an_item_files_items_are_refused():
    from factprobe_ops.components.steps.plan import run_plan_units

    config = {"data": str(ITEMS), "examples": 0}
    with pytest.raises(ConfigError, match=r"shards=21 is more than the 20 facts of probe mc-items"):
        run_plan_units(["a"], ["mc-items"], "", config, shards=21)
    with pytest.raises(ConfigError, match=r"shards=6 is more than the 5 facts of probe mc-items"):
        run_plan_units(["a"], ["mc-items"], "", {**config, "relations": "capital", "max_facts_per_relation": 5}, shards=6)
    assert len(run_plan_units(["a"], ["mc-items"], "", config, shards=20)) == 20


def test_the_smallest_probe_data_bounds_a_sweep_of_several_probes():
    """Every (model, probe) run is split into `shards` pods: the probe with the fewest facts decides."""
    from factprobe_ops.components.steps.plan import run_plan_units

    with pytest.raises(ConfigError, match=r"shards=21 is more than the 20 facts of probe mc-items"):
        run_plan_units(["a"], ["ic-lke", "mc-items"], "", {"data": str(ITEMS), "source": "countryinfo", "examples": 0}, shards=21)


def test_data_this_machine_cannot_read_leaves_only_the_cap(tmp_path):
    """A file only the cluster's volume holds: the bound is unknown here (the probe step checks it there)."""
    from factprobe_ops.components.steps.plan import run_plan_units

    config = {"data": str(tmp_path / "on-the-volume.jsonl"), "examples": 0}
    assert len(run_plan_units(["a"], ["mc-items"], "", config, shards=50)) == 50
    config = {"source": "triples", "data": "s3://bucket/facts"}
    assert len(run_plan_units(["a"], ["ic-lke"], "", config, shards=50)) == 50


def test_too_many_units_in_all_are_refused_before_planning():
    from factprobe_ops.components.steps.plan import run_plan_units
    from factprobe_ops.components.steps.shards import MAX_UNITS

    models = [f"m{i}" for i in range(MAX_UNITS // 100 + 1)]
    with pytest.raises(ConfigError, match=rf"{len(models)} model\(s\) x 1 probe run\(s\) x 100 shards"):
        run_plan_units(models, ["ic-lke"], shards=100)


def test_check_run_values_bounds_shards_by_the_facts_with_relations_unset():
    """`pipeline run/submit/schedule` refuse it before anything runs or is sent."""
    from factprobe_ops.pipelines.checks import check_run_values

    n = _countryinfo_facts(3)
    unset = {"models": ["a"], "relations": "", "examples": 0}
    with pytest.raises(ConfigError) as err:
        check_run_values("probe", {**unset, "shards": n + 1, "max_facts_per_relation": "3"})
    assert str(err.value).startswith(f"pipeline probe: shards={n + 1} is more than the {n} facts"), err.value
    with pytest.raises(ConfigError, match="pipeline probe: shards=100000000: at most"):
        check_run_values("probe", {**unset, "shards": 100_000_000})
    check_run_values("probe", {**unset, "shards": n, "max_facts_per_relation": "3"})


def test_the_item_file_count_is_the_files_items(tmp_path):
    """A sanity check of the bound the planner takes for mc-items: the data step's item count."""
    from factprobe_ops.components.steps.shards import fact_bound

    path = tmp_path / "items.jsonl"
    recs = [json.loads(line) for line in ITEMS.read_text().splitlines() if line.strip()][:7]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert fact_bound({"data": str(path), "examples": 0}, ["mc-items"])[0] == 7
