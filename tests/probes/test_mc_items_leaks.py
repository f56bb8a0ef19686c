"""Issue 28 item 4: mc-items in-context examples never leak a test item. A training item whose prompt,
or whose prompt filled with its answer, equals a test item's (prompt or answered prompt) once
whitespace and case are ignored is never an example; the number left out is noted on screen and
recorded in metrics.json. Tiny RANDOM model: only the contexts are checked, never the numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from factprobe.facts import Fact
from factprobe.framework.config import RunConfig
from factprobe.framework.runner import run_probe
from factprobe.probes.mc_items import fill

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "examples" / "mc_items" / "cloze.jsonl"
TRAIN = REPO / "examples" / "mc_items" / "cloze_train.jsonl"


def leak_key(text: str) -> str:
    """The test's own normalisation: all whitespace removed, case folded."""
    return "".join(text.split()).casefold()


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def answered(rec: dict) -> str:
    gold = rec["answer"] if isinstance(rec["answer"], str) else rec["options"][rec["answer"]]
    return fill(rec["prompt"], "[Y]", gold)


def leaking_train(test: list[dict]) -> list[dict]:
    """Training items that are test items in disguise, one per way of leaking."""
    a, b, c, d = test[0], test[1], test[2], test[3]
    return [
        # whitespace only: doubled spaces, a trailing newline (the hostile case)
        {**a, "id": "leak-ws", "prompt": a["prompt"].replace(" ", "  ") + "\n"},
        # case only
        {**b, "id": "leak-case", "prompt": b["prompt"].upper().replace("[Y]", "[Y]")},
        # another slot, but the same answered sentence: filled, it IS test item c answered
        {
            "id": "leak-filled",
            "relation": c["relation"],
            "prompt": answered(c).replace(answered(c).split()[0], "[Y]", 1),
            "options": [answered(c).split()[0], "Zzz"],
            "answer": 0,
        },
        # a training item of ANOTHER relation that is test item d (all training items are the pool of
        # a relation without any of its own, so leaks across relations count too)
        {**d, "id": "leak-other-relation", "relation": "unseen-relation", "prompt": " " + d["prompt"]},
    ]


def test_leak_key_ignores_whitespace_and_case():
    from factprobe.datasets.mc_items import leak_key

    assert leak_key("The capital of  France is [Y]\n") == leak_key("the capital of France is [y]")
    assert leak_key("The capital of France is Paris") != leak_key("The capital of France is Lyon")


def test_choose_examples_never_draws_a_test_item():
    from factprobe.datasets.mc_items import leak_keys, leaks
    from factprobe.probes.mc_items import choose_examples

    test = [Fact("capital", "The capital of France is [Y]", "Paris"), Fact("capital", "[Y] is the capital of Spain.", "Madrid")]
    train = [
        Fact("capital", "The capital of  France is [Y] ", "Paris"),  # whitespace variant of a test prompt
        Fact("capital", "[Y] IS THE CAPITAL OF SPAIN.", "Madrid"),  # case variant
        Fact("capital", "The capital of [Y] is Paris", "France"),  # filled, a test item's answered prompt
        Fact("capital", "The capital of Italy is [Y]", "Rome"),
    ]
    keys = leak_keys(test)
    assert [leaks(f, keys) for f in train] == [True, True, True, False]
    for seed in range(20):
        assert choose_examples(train, keys, "capital", 4, seed) == [train[3]]


@pytest.fixture
def leaky_train(tmp_path) -> Path:
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records(TRAIN) + leaking_train(records(DATA))))
    return path


@pytest.mark.slow
def test_no_test_item_sees_a_test_item_answered(tiny_model_path, leaky_train, tmp_path):
    """Every training item is an example (examples=50 > the pool), except the four leaks: no row's context
    holds any test item's answered prompt (whitespace and case ignored), the count is in metrics.json and
    each relation that lost some says so on screen."""
    notes: list[str] = []
    cfg = RunConfig.from_dict(
        {
            "probe": "mc-items",
            "model": str(tiny_model_path("gpt2")),
            "data": str(DATA),
            "train_data": str(leaky_train),
            "examples": 50,
            "device": "cpu",
            "dtype": "float32",
        }
    )
    outcome = run_probe(cfg, tmp_path / "run", progress=False, log=notes.append)
    test = records(DATA)
    secrets = {leak_key(answered(r)) for r in test}
    for row in outcome.results.itertuples():
        context = leak_key(row.context)
        assert not [s for s in secrets if s in context], row.fact_id
    # the non-leaking training items are still used: the guard removes only the leaks
    assert all(
        leak_key(answered(r)) in leak_key(outcome.results.iloc[0].context)
        for r in records(TRAIN)
        if r["relation"] == outcome.results.iloc[0].relation
    )
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["examples_excluded_as_test"] == 4
    # on screen, per relation: the capital pool lost its three leaks (the fourth is in no test relation's pool)
    shown = [n for n in notes if "left out of the examples" in n]
    assert len(shown) == 1 and shown[0].startswith("note: capital: 3 training item(s) left out of the examples")
    assert shown[0].removeprefix("note: ") in m["notes"]


def test_without_examples_nothing_is_excluded(tiny_model_path, leaky_train, tmp_path):
    cfg = RunConfig.from_dict(
        {
            "probe": "mc-items",
            "model": str(tiny_model_path("gpt2")),
            "data": str(DATA),
            "train_data": str(leaky_train),
            "examples": 0,
            "device": "cpu",
            "dtype": "float32",
            "max_facts_per_relation": 1,
        }
    )
    outcome = run_probe(cfg, tmp_path / "run", progress=False, log=lambda m: None)
    assert outcome.metrics["examples_excluded_as_test"] == 0
