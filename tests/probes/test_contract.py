"""Issue 42 item 1: the framework owns each probe's data contract (factprobe/framework/contract.py).

A probe's `prepare` output is checked right after `prepare` (one line naming the probe and the rule)
and the framework, not the probe, applies `--relations` and `--max-facts-per-relation`: a plug-in
written as docs/extending.md shows (tests/probes/plugin_probe.py, which applies no cap) is capped on
the CLI, and one with plain tuple items (tests/probes/tuple_items_probe.py) is refused on the CLI.
The pipeline's data-build step: tests/components/test_data_build.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from factprobe.datasets.cap import cap_items
from factprobe.datasets.prepared import Prepared
from factprobe.facts import Fact, FactSet
from factprobe.framework.config import BaseConfig, RunConfig
from factprobe.framework.contract import ContractError, apply_contract

REPO = Path(__file__).resolve().parents[2]
FX = REPO / "tests" / "fixtures" / "mc_snapshot"


@dataclass(frozen=True)
class Item:
    """A record as the contract asks: fact_id, relation, to_dict, from_dict."""

    relation: str
    subject: str
    template: int = 0

    @property
    def fact_id(self) -> str:
        return f"{self.relation}|{self.subject}"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Item:
        return cls(d["relation"], d["subject"], d.get("template", 0))


class Other(Item):
    pass


class NoFromDict:
    relation = "P1"
    fact_id = "P1|a"

    def to_dict(self) -> dict:
        return {"relation": "P1"}


class LossyItem(Item):
    @classmethod
    def from_dict(cls, d: dict) -> LossyItem:
        return cls(d["relation"], "someone else")


class FakeProbe:
    name = "fake"


def cfg(**base) -> Any:
    """What `apply_contract` reads of a run config: its base (no probe module imported)."""
    return SimpleNamespace(base=BaseConfig(**base))


def prepared(items: dict) -> Prepared:
    return Prepared(kind="k", items=items, facts={"test": FactSet([Fact("P1", "a", "b")])})


def refusal(value, **base) -> str:
    with pytest.raises(ContractError) as e:
        apply_contract(FakeProbe(), cfg(**base), value)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("probe fake: ") and "factprobe/framework/base.py" in msg, msg
    return msg


# ------------------------------------------------------------------ refused in one line, naming the rule
def test_tuple_items_are_refused_naming_the_probe_and_the_rule():
    msg = refusal(prepared({"P1": [("P1", "a", "b")]}))
    assert "items must be records with fact_id, relation, to_dict() and a from_dict" in msg
    assert "item 0 of relation 'P1' is a tuple without fact_id, relation, to_dict, from_dict" in msg


@pytest.mark.parametrize(
    "value, words",
    [
        ({"P1": (Item("P1", "a"),)}, "relation 'P1' holds a tuple"),
        ([Item("P1", "a")], "Prepared.items must be {relation: list of items}"),
        ({"P1": [NoFromDict()]}, "without from_dict"),
        (
            {"P1": [Item("P2", "a")]},
            "an item's relation must be the key of its group, but item 0 of relation 'P1' has relation 'P2'",
        ),
        ({"P1": [Item("P1", "a"), Other("P1", "b")]}, "every item of a dataset must be of one class"),
        ({"P1": [LossyItem("P1", "a")]}, "from_dict reads back to the same item, but the first item of relation 'P1' reads back"),
        ({"P1": [{"relation": "P1", "fact_id": "x"}]}, "is a dict without fact_id, relation, to_dict, from_dict"),
    ],
)
def test_each_broken_rule_is_one_line(value, words):
    assert words in refusal(prepared(value))


def test_prepare_must_return_a_prepared_with_test_facts():
    assert "prepare must return a factprobe.datasets.prepared.Prepared, but it returned a dict" in refusal({"P1": []})
    no_test = Prepared(kind="k", items={}, facts={"train": FactSet([])})
    assert "Prepared.facts['test'] must be the run's test facts (a FactSet), but it is None" in refusal(no_test)


# ------------------------------------------------------------------ the cap: facts, whole, drawn, stable
def test_the_cap_counts_facts_and_keeps_each_fact_whole():
    items = {"P1": [Item("P1", f"s{i}", t) for i in range(10) for t in range(3)], "P2": [Item("P2", "x")]}
    got = apply_contract(FakeProbe(), cfg(max_facts_per_relation=4, seed=7), prepared(dict(items))).items
    kept = [it.subject for it in got["P1"]]
    assert len(set(kept)) == 4 and len(kept) == 12  # 4 facts, each with its 3 templates
    assert got["P1"] == [it for it in items["P1"] if it.subject in set(kept)]  # item order kept
    assert got["P2"] == items["P2"]
    again = apply_contract(FakeProbe(), cfg(max_facts_per_relation=4, seed=7), prepared(dict(got))).items
    assert again == got  # capping twice changes nothing
    other_seed = apply_contract(FakeProbe(), cfg(max_facts_per_relation=4, seed=8), prepared(dict(items))).items
    assert [it.subject for it in other_seed["P1"]] != kept  # drawn from the seed, not the first four


def test_the_cap_draws_as_the_multiple_choice_builds_do():
    """For items that are the test facts in file order (the guide's plug-in), the framework keeps the
    facts `sample_facts_per_relation` keeps, so a plug-in's rows join the built-in probes' by fact id."""
    from factprobe.datasets.cap import sample_facts_per_relation

    facts = FactSet([Fact(rel, f"s{i}", f"o{i}") for i in range(12) for rel in ("P1", "P2", "P3")])
    items: dict = {}
    for f in facts:
        items.setdefault(f.relation, []).append(f)
    got = cap_items(items, 3, seed=5)
    assert [f.fact_id for its in got.values() for f in its] == [
        f.fact_id for f in sorted(sample_facts_per_relation(facts, 3, seed=5), key=lambda f: list(items).index(f.relation))
    ]


@dataclass(frozen=True)
class FactItem(Item):
    """An item about the test fact (relation, s<i>, o<i>): its fact_id is that fact's."""

    @property
    def fact_id(self) -> str:
        return Fact(self.relation, self.subject, "o" + self.subject[1:]).fact_id


def test_a_source_draw_caps_over_the_test_facts_so_probes_with_other_items_share_facts():
    """`SOURCE_DRAW` (coherency, BELIEF): the cap keeps the items of the facts `sample_facts_per_relation`
    draws from the multiple-choice probes' test facts (`cap_facts`), whatever the dataset's own candidates are. Hand case: two datasets over the
    same 12 facts per relation, one with an item for every fact, one with items only for the even
    subjects and two items per fact; both keep the drawn facts they have items for, so they share them
    all; a relation none of whose drawn facts has an item is left out with why; capping twice keeps."""
    from factprobe.datasets.cap import SOURCE_DRAW, cap_facts, sample_facts_per_relation

    facts = FactSet([Fact(rel, f"s{i}", f"o{i}") for rel in ("P1", "P2") for i in range(12)])
    # no --train-data: the multiple-choice probes draw from the test side of their split (6 of 12 per relation)
    universe = cap_facts(facts, None, 3)
    assert all(n == 6 for n in {r: len(v) for r, v in universe.by_relation().items()}.values())
    drawn = {f.fact_id for f in sample_facts_per_relation(universe, 4, seed=3)}
    every = {rel: [FactItem(rel, f"s{i}") for i in range(12)] for rel in ("P1", "P2")}
    evens = {FactItem(rel, f"s{i}").fact_id for rel in ("P1", "P2") for i in range(0, 12, 2)}
    even = {
        "P1": [FactItem("P1", f"s{i}", t) for i in range(0, 12, 2) for t in (0, 1)],
        "P2": [FactItem("P2", f"s{i}") for i in range(12) if FactItem("P2", f"s{i}").fact_id not in drawn],
    }

    def capped(items: dict) -> Prepared:
        p = Prepared(kind="k", items=items, facts={"test": facts}, cap_draw=SOURCE_DRAW)
        return apply_contract(FakeProbe(), cfg(max_facts_per_relation=4, seed=3), p)

    a, b = capped(dict(every)), capped(dict(even))
    a_ids = {it.fact_id for its in a.items.values() for it in its}
    b_ids = {it.fact_id for its in b.items.values() for it in its}
    assert len(drawn) == 8 and a_ids == drawn
    assert b_ids == {f for f in drawn if f.startswith("P1|")} & evens and b_ids <= a_ids
    assert all(len([it for it in b.items["P1"] if it.fact_id == f]) == 2 for f in b_ids)  # every item of a kept fact
    assert "P2" not in b.items and "none of the 4 test facts the cap drew (seed 3) has an item" in b.dropped["P2"]
    assert capped(dict(a.items)).items == a.items  # capping twice changes nothing
    # the default draw over the items' own candidates gives the even dataset other facts
    own = {it.fact_id for its in cap_items(even, 4, seed=3).values() for it in its}
    assert not own <= a_ids


def test_the_framework_keeps_only_the_requested_relations():
    items = {"P1": [Item("P1", "a")], "P2": [Item("P2", "b")]}
    assert list(apply_contract(FakeProbe(), cfg(relations="P2"), prepared(items)).items) == ["P2"]


# ------------------------------------------------------------------ the guide's plug-in, in-process and on the CLI
@pytest.fixture
def plugins():
    """The guide's plug-in (applies no cap) and the tuple plug-in, registered in this process too."""
    from factprobe.framework import registry

    from . import plugin_probe, tuple_items_probe

    registry.load_probes()
    registry.register(plugin_probe.ObjectLogprob())
    registry.register(tuple_items_probe.PROBE)
    yield registry
    for name in ("object-logprob", "tuple-items"):
        registry._REGISTRY.pop(name, None)


def test_a_plugin_that_ignores_the_cap_is_capped_by_prepare(plugins):
    flat = {"probe": "object-logprob", "source": "triples", "data": str(FX / "test.jsonl")}
    whole = plugins.get_probe("object-logprob").prepare(RunConfig.from_dict(flat))
    assert {r: len(v) for r, v in whole.items.items()} == {"P36": 9, "P103": 7}
    capped = plugins.get_probe("object-logprob").prepare(RunConfig.from_dict({**flat, "max_facts_per_relation": 2}))
    assert {r: len(v) for r, v in capped.items.items()} == {"P36": 2, "P103": 2}


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "FACTPROBE_PROBE_MODULES": "tests.probes.plugin_probe,tests.probes.tuple_items_probe",
        "FACTPROBE_WORK": str(tmp_path / "work"),
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(
        [sys.executable, "-m", "factprobe.cli", "probe", *args, "--source", "triples", "--data", str(FX / "test.jsonl")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_the_cli_caps_a_plugin_and_records_n_next_to_the_cap(tmp_path, tiny_model_path):
    """The issue's case: MLflow recorded max_facts_per_relation = 10 next to n = 973."""
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    model = str(tiny_model_path("gpt2"))
    p = _cli(tmp_path, "object-logprob", "--model", model, "--max-facts-per-relation", "2", "--tracking-uri", uri)
    assert p.returncode == 0, p.stderr[-2000:]
    metrics = json.loads(next((tmp_path / "runs").glob("object-logprob-*/metrics.json")).read_text())
    assert metrics["n"] == 4  # 2 facts of each of the 2 relations
    from mlflow.tracking import MlflowClient

    c = MlflowClient(uri)
    (run,) = c.search_runs([c.get_experiment_by_name("factprobe/probe").experiment_id])
    assert run.data.params["max_facts_per_relation"] == "2" and run.data.metrics["n"] == 4


@pytest.mark.slow
def test_the_cli_refuses_tuple_items_in_one_line(tmp_path, tiny_model_path):
    p = _cli(tmp_path, "tuple-items", "--model", str(tiny_model_path("gpt2")), "--no-track")
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: probe tuple-items: items must be records"), p.stderr
    assert "Traceback" not in p.stderr and not list(tmp_path.glob("runs/*/results.jsonl"))
