"""Issue 42 item 1 in a pipeline's data-build step (components/steps/data_build.py):
the framework's data contract holds there as on the CLI. A plug-in that applies no cap (the guide's,
tests/probes/plugin_probe.py) is capped to the form's `max_facts_per_relation`, and one with tuple
items is refused in one line instead of failing with `'tuple' object has no attribute 'to_dict'`."""

from __future__ import annotations

from pathlib import Path

import pytest

from factprobe.datasets.prepared import Prepared
from factprobe.errors import FactprobeError

REPO = Path(__file__).resolve().parents[2]
FX = REPO / "tests" / "fixtures" / "mc_snapshot"
CONFIG = {"source": "triples", "data": str(FX / "test.jsonl"), "seed": 0, "options": ""}


@pytest.fixture
def plugins():
    from factprobe.framework import registry
    from tests.probes import plugin_probe, tuple_items_probe

    registry.load_probes()
    registry.register(plugin_probe.ObjectLogprob())
    registry.register(tuple_items_probe.PROBE)
    yield
    for name in ("object-logprob", "tuple-items"):
        registry._REGISTRY.pop(name, None)


def build(out: Path, probes: list, **config) -> dict:
    from factprobe_ops.components.steps.data_build import run_data_build
    from factprobe_ops.tracking.context import RunContext

    return run_data_build(str(out), {**CONFIG, **config}, probes, RunContext(tracking_uri="none").to_json())


def test_data_build_caps_a_plugin_that_ignores_the_cap(plugins, tmp_path):
    info = build(tmp_path, ["object-logprob"], max_facts_per_relation="2")
    saved = Prepared.load(tmp_path / "facts")
    assert {r: len(v) for r, v in saved.items.items()} == {"P36": 2, "P103": 2}
    assert info["n_items"] == saved.n_items == 4


def test_data_build_refuses_tuple_items_in_one_line(plugins, tmp_path):
    with pytest.raises(FactprobeError) as e:
        build(tmp_path, ["tuple-items"])
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("probe tuple-items: items must be records with fact_id, relation"), msg
    assert not (tmp_path / "tuple-items" / "items.jsonl").exists()
