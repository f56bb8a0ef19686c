"""Issue 41 item 2: an mc-items training item is a test item (never an in-context example) when its prompt
or answered prompt equals a test item's once Unicode form (NFKC), case, punctuation (every Unicode P*
character) and whitespace are ignored, or when it has a test item's (subject, answer) pair: its id (the
item's subject; its prompt without one) and its answer, normalised the same way, however it is worded.
Each variant below is one that the whitespace-and-case rule of issue 28 let through (`old_key`), except
the two the brief names that case folding and `str.split` already caught (the "ﬁ" ligature, a
non-breaking space), kept so that they stay caught."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from factprobe.facts import Fact
from factprobe.framework.config import RunConfig
from factprobe.framework.runner import run_probe

TEST = [
    Fact("capital", "The capital of France is [Y]", "Paris", "cap-fr"),
    Fact("element", "The first element of the table is [Y]", "hydrogen", "el-1"),
    Fact("river", "[Y] is the longest river of Egypt.", "Nile"),
]
#: training items that are no test item: they must stay examples
OTHERS = [
    Fact("capital", "The capital of Italy is [Y]", "Rome", "cap-it"),
    Fact("capital", "Paris is in [Y].", "France", "cap-fr-2"),  # another id, another answer
    Fact("capital", "France's capital city: [Y]", "Lyon", "cap-fr"),  # a test id with another answer
]


def old_key(text: str) -> str:
    """Issue 28's rule, whitespace removed and case folded: what the variants below get past."""
    return "".join(text.split()).casefold()


def answered(f: Fact) -> str:
    return f.subject.replace("[Y]", f.object, 1)


def fullwidth(text: str) -> str:
    """ASCII letters and digits as their fullwidth forms (U+FF21...), the slot `[Y]` kept."""
    return "[Y]".join(
        "".join(chr(ord(c) + 0xFEE0) if c.isascii() and c.isalnum() else c for c in part) for part in text.split("[Y]")
    )


PUNCTUATION = [
    Fact("capital", "The capital of France is [Y].", "Paris", "t1"),
    Fact("capital", "The capital of France, is [Y]!", "Paris", "t2"),
    Fact("capital", "\u201cThe capital of France is [Y]\u201d", "Paris", "t3"),  # curly quotes (Pi/Pf)
    Fact("capital", "The capital of France is [Y]\u3002", "Paris", "t4"),  # ideographic full stop
    Fact("capital", "The capital-of France is \u00bf[Y]?", "Paris", "t5"),  # dash, inverted question mark
    Fact("river", "[Y] is the longest river of Egypt", "Nile", "t6"),  # the test item's "." dropped
    Fact("element", "The first element of the table is: [Y]", "hydrogen", "t7"),
]

NFKC = [
    Fact("capital", fullwidth("The capital of France is [Y]"), "Paris", "n1"),
    Fact("capital", "The capital of [Y] is " + fullwidth("Paris"), "France", "n2"),  # answered, it is one
    Fact("capital", "T\u210ce capital of France is [Y]", "Paris", "n3"),  # a script capital H
    Fact("element", "The \ufb01rst element of the table is [Y].", "hydrogen", "n4"),  # the "fi" ligature and a "."
    Fact("element", "The\u00a0first element of the\u00a0table is [Y]\u2024", "hydrogen", "n5"),  # NBSP, one dot leader
    Fact("river", "[Y] is the longest river of Egypt\uff0e", "Nile", "n6"),  # fullwidth full stop
    Fact("capital", "The capital of [Y] is \u2119aris", "France", "n7"),  # double-struck P in the answered prompt
]
#: the two variants the brief names that case folding and `str.split` already caught: kept caught
ALREADY_CAUGHT = [
    Fact("element", "The \ufb01rst element of the table is [Y]", "hydrogen", "a1"),  # the "fi" ligature
    Fact("capital", "The capital of\u00a0France is [Y]", "Paris", "a2"),  # a non-breaking space
]

CASE_AND_SPACE = [
    Fact("capital", fullwidth("THE CAPITAL OF FRANCE IS [Y]"), "Paris", "c1"),  # fullwidth capitals
    Fact("capital", "The\u200bcapital of\u2060France is [Y]", "Paris", "c2"),  # zero-width space, word joiner
    Fact("capital", "\ufeffThe capital of France is [Y]", "Paris", "c3"),  # a byte order mark
]

PAIRS = [
    Fact("capital", "France's capital city: [Y]", "Paris", "cap-fr"),  # same id and answer, another wording
    Fact("capital", "Which city is the seat of the French government? [Y]", "PARIS.", " CAP-FR "),
    Fact("other", "Element number one: [Y]", "Hydrogen", "el-1"),  # another relation: still that test item
]


@pytest.mark.parametrize("train", PUNCTUATION + NFKC + CASE_AND_SPACE + PAIRS + ALREADY_CAUGHT, ids=lambda f: f.subject_id)
def test_a_variant_of_a_test_item_is_a_test_item(train):
    from factprobe.datasets.mc_items import leak_keys, leaks

    assert leaks(train, leak_keys(TEST))


@pytest.mark.parametrize("train", PUNCTUATION + NFKC + CASE_AND_SPACE, ids=lambda f: f.subject_id)
def test_the_variants_are_ones_the_old_rule_let_through(train):
    """The cases are real: the whitespace-and-case rule did not catch them."""
    olds = {old_key(t) for f in TEST for t in (f.subject, answered(f))}
    assert old_key(train.subject) not in olds and old_key(answered(train)) not in olds, train


@pytest.mark.parametrize("train", OTHERS, ids=lambda f: f.subject_id)
def test_other_items_stay_examples(train):
    from factprobe.datasets.mc_items import leak_keys, leaks

    assert not leaks(train, leak_keys(TEST))


def test_the_normal_form():
    from factprobe.datasets.mc_items import leak_key

    assert leak_key("\u201cThe  capital of FRANCE\u00a0is \ufb01ne.\u201d\n") == leak_key("the capital of france is fine")
    assert leak_key(fullwidth("Paris")) == leak_key("paris") == leak_key("P.a.r.i.s!")
    assert leak_key("The capital of France is Paris") != leak_key("The capital of France is Lyon")


def test_leak_reasons_are_counted_by_kind():
    from factprobe.datasets.mc_items import leak_keys

    keys = leak_keys(TEST)
    assert [keys.why(f) for f in (PUNCTUATION[0], PAIRS[0], OTHERS[0])] == ["text", "subject and answer", None]


def test_without_ids_the_pair_is_the_prompt_and_answer():
    """An item without an id has its prompt as its subject: the pair adds nothing beyond the text rule,
    and another wording of an id-less test item is no test item (nothing says it is the same fact)."""
    from factprobe.datasets.mc_items import leak_keys, leaks

    keys = leak_keys([Fact("river", "[Y] is the longest river of Egypt.", "Nile")])
    assert leaks(Fact("river", "[Y] is the longest river of Egypt!", "Nile"), keys)
    assert not leaks(Fact("river", "Egypt's longest river is the [Y].", "Nile"), keys)


# --- on a real (tiny random) run: the contexts, metrics.json and the screen ------------------------------

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "examples" / "mc_items" / "cloze.jsonl"


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_a_run_never_shows_a_test_item_its_own_punctuated_or_nfkc_sentence(tiny_model_path, tmp_path):
    """Training items = every test item with a "." added, half of them also in fullwidth letters, under
    other ids (the issue's case), plus one that has a test item's id and answer in other words: none is an
    example, metrics.json counts all 21 and the screen says so."""
    from factprobe.datasets.mc_items import leak_key

    test = _records(DATA)
    gold = {r["id"]: r["answer"] if isinstance(r["answer"], str) else r["options"][r["answer"]] for r in test}
    train = [
        {**r, "id": f"t-{r['id']}", "prompt": (fullwidth(r["prompt"]) if i % 2 else r["prompt"]) + "."}
        for i, r in enumerate(test)
    ]
    train.append({**test[0], "prompt": "Say it again, the seat of government: [Y]"})
    keep = {
        "id": "t-keep",
        "relation": "capital",
        "prompt": "The capital of Peru is [Y]",
        "options": ["Lima", "Cusco"],
        "answer": 0,
    }
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [*train, keep]))
    notes: list[str] = []
    cfg = RunConfig.from_dict(
        {
            "probe": "mc-items",
            "model": str(tiny_model_path("gpt2")),
            "data": str(DATA),
            "train_data": str(path),
            "examples": 5,
            "device": "cpu",
            "dtype": "float32",
        }
    )
    outcome = run_probe(cfg, tmp_path / "run", progress=False, log=notes.append)
    by_id = {r["id"]: r for r in test}
    for row in outcome.results.itertuples():
        item = by_id[row.fact_id.split("|")[1]]
        assert leak_key(item["prompt"].replace("[Y]", gold[item["id"]])) not in leak_key(row.context), row.fact_id
    capital = outcome.results[outcome.results.relation == "capital"].iloc[0]
    assert "The capital of Peru is Lima" in capital.context  # what is no test item is still an example
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["examples_excluded_as_test"] == len(train) == 21
    shown = [n for n in notes if "left out of the examples" in n]
    assert shown and all(n.startswith("note: ") and "\n" not in n for n in shown)
    assert sum(int(n.split(": ")[2].split()[0]) for n in shown) == 21  # per relation: its pool's count
