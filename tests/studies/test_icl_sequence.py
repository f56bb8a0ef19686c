"""The position study (`factprobe study icl-sequence`, wu2024 Figure 2): one forward per sequence
equals a plain forward of every position's prefix + object; the replaced positions are exactly the
requested ones; bad input gives one line. Tiny RANDOM models (numbers are never results), plus one
small real-model run."""

from __future__ import annotations

import json
import math

import pytest

from factprobe.errors import ConfigError, DataError
from factprobe.facts import Fact
from factprobe.lm.naive import naive_logprob
from factprobe.lm.scorer import Scorer
from factprobe.models import load_model
from factprobe.models.testing import widen_tiny_llama
from factprobe.studies.cli import run_study, study_config
from factprobe.studies.icl_sequence import STUDY, ICLSequenceConfig, score_sequence
from factprobe.studies.sequence_data import build_sequence, replaced_positions, sequence_texts

COUNTRIES = [
    ("France", "Paris"),
    ("Germany", "Berlin"),
    ("Italy", "Rome"),
    ("Spain", "Madrid"),
    ("Japan", "Tokyo"),
    ("Canada", "Ottawa"),
    ("Peru", "Lima"),
    ("Chile", "Santiago"),
    ("Kenya", "Nairobi"),
    ("Egypt", "Cairo"),
    ("Norway", "Oslo"),
    ("Sweden", "Stockholm"),
    ("Poland", "Warsaw"),
    ("Greece", "Athens"),
    ("Austria", "Vienna"),
    ("Cuba", "Havana"),
    ("Iran", "Tehran"),
    ("Iraq", "Baghdad"),
    ("Mali", "Bamako"),
    ("Nepal", "Kathmandu"),
    ("Qatar", "Doha"),
    ("Laos", "Vientiane"),
    ("Fiji", "Suva"),
    ("Chad", "N'Djamena"),
]
PEOPLE = [
    ("Albert Einstein", "1879"),
    ("Marie Curie", "1867"),
    ("Niels Bohr", "1885"),
    ("Max Planck", "1858"),
    ("Enrico Fermi", "1901"),
    ("Paul Dirac", "1902"),
    ("Lise Meitner", "1878"),
    ("Otto Hahn", "1879"),
    ("Werner Heisenberg", "1901"),
    ("Erwin Schrodinger", "1887"),
    ("Richard Feynman", "1918"),
    ("Linus Pauling", "1901"),
]


def _facts() -> list[Fact]:
    facts = [Fact("capital", s, o) for s, o in COUNTRIES] + [Fact("born", s, o) for s, o in PEOPLE]
    facts.append(Fact("capital", "France", "Lutetia"))  # a second correct object (N-M): never an "incorrect" one
    return facts


@pytest.fixture(scope="module")
def triples(tmp_path_factory):
    path = tmp_path_factory.mktemp("seq-data") / "facts.jsonl"
    path.write_text(
        "".join(json.dumps({"subject": f.subject, "relation": f.relation, "object": f.object}) + "\n" for f in _facts())
    )
    return path


@pytest.fixture(scope="module")
def wide_llama(tiny_model_path, tmp_path_factory):
    """The tiny RANDOM llama with a 2048-token window (the stock one holds 256 tokens)."""
    return widen_tiny_llama(tiny_model_path("llama"), tmp_path_factory.mktemp("wide"))


def _run(tmp_path, model, triples, **params):
    given = {"model": str(model), "source": "triples", "data": str(triples), "device": "cpu", "dtype": "float32", **params}
    metrics, _, _ = run_study(STUDY, study_config(STUDY, given), tmp_path / "out", progress=False)
    rows = [json.loads(line) for line in (tmp_path / "out" / "positions.jsonl").read_text().splitlines()]
    return metrics, rows


# ------------------------------------------------------------------ one forward == per-position prefix forwards
@pytest.mark.parametrize("kind,placement,relations", [("none", "random", "capital"), ("incorrect", "block", "capital,born")])
def test_every_position_equals_a_plain_forward_of_its_prefix(kind, placement, relations, tmp_path, wide_llama, triples):
    """(The unknown kind builds other texts, scored by the same code: tests below.)"""
    metrics, rows = _run(tmp_path, wide_llama, triples, relations=relations, length=8, replace=3, kind=kind, placement=placement)
    loaded = load_model(str(wide_llama), device="cpu", dtype="float32")
    n_rel = len(relations.split(","))
    assert len(rows) == 8 * n_rel and metrics["forwards"] == n_rel * (1 if kind == "none" else 2)  # one per sequence
    for r in rows:
        ref = naive_logprob(loaded.model, loaded.tokenizer, r["prefix"], r["object"])
        assert r["logprob"] == pytest.approx(ref, abs=1e-4), r
        assert r["prob"] == pytest.approx(math.exp(ref), rel=1e-4, abs=1e-12)
    # the prefix is the exact text before the object: the next row's prefix continues it
    for a, b in zip(rows, rows[1:]):
        if a["relation"] == b["relation"]:
            assert b["prefix"] == f"{a['prefix']}{a['object']} {b['subject']} "
    if kind != "none":
        clean = [r for r in rows if not r["replaced"]]
        assert all("prob_clean" in r for r in rows) and metrics["n_not_replaced"] == len(clean)


def test_a_token_merged_across_the_object_end_is_scored_on_its_own(wide_llama):
    """Separator "e" after an object "Th" gives "The", one token of the tiny BPE: the whole
    sequence's tokens no longer hold that object's own tokens, and that position is scored exactly
    on its own; the others still come from the one forward."""
    from factprobe.studies.sequence_data import SequenceExample

    loaded = load_model(str(wide_llama), device="cpu", dtype="float32")
    scorer = Scorer(loaded.model, loaded.tokenizer, device="cpu")
    seq = [SequenceExample(i, s, o) for i, (s, o) in enumerate([("a", "Th"), ("b", "Th"), ("c", "Th")])]
    prefixes = sequence_texts(seq, "e")
    assert prefixes[-1] == "aeThebeThece"
    scores = score_sequence(scorer, prefixes, [e.object for e in seq])
    for p, e, lp in zip(prefixes, seq, scores.logprobs):
        assert lp == pytest.approx(naive_logprob(loaded.model, loaded.tokenizer, p, e.object), abs=1e-4)
    assert scores.fallbacks == 2


# ------------------------------------------------------------------ the replaced positions
def test_random_positions_are_the_requested_count_and_seeded():
    a = replaced_positions(200, 40, "random", 0, "P36")
    assert len(a) == len(set(a)) == 40 and all(0 <= p < 200 for p in a)
    assert a == replaced_positions(200, 40, "random", 0, "P36")
    assert a != replaced_positions(200, 40, "random", 1, "P36")


def test_a_block_is_contiguous_and_seeded():
    starts = set()
    for seed in range(5):
        b = replaced_positions(200, 40, "block", seed, "P36")
        assert b == list(range(b[0], b[0] + 40)) and b[-1] < 200
        assert b == replaced_positions(200, 40, "block", seed, "P36")
        starts.add(b[0])
    assert len(starts) > 1


@pytest.mark.parametrize("placement", ["random", "block"])
def test_incorrect_examples_keep_the_subject_and_never_use_a_true_object(placement):
    facts = _facts()
    for seed in range(5):
        seq = build_sequence(facts, "capital", 20, 8, "incorrect", placement, seed)
        clean = build_sequence(facts, "capital", 20, 0, "none", placement, seed)
        assert [e.position for e in seq if e.replaced] == replaced_positions(20, 8, placement, seed, "capital")
        for e, c in zip(seq, clean):
            if e.replaced:
                true = {f.object for f in facts if f.relation == "capital" and f.subject == e.subject}
                assert e.kind == "incorrect" and e.subject == c.subject and e.object not in true
                assert e.object in {f.object for f in facts if f.relation == "capital"}
                assert (e.original_subject, e.original_object) == (c.subject, c.object)
            else:
                assert (e.subject, e.object, e.kind) == (c.subject, c.object, None)
    assert build_sequence(facts, "capital", 20, 8, "incorrect", placement, 3) == build_sequence(
        facts, "capital", 20, 8, "incorrect", placement, 3
    )


@pytest.mark.parametrize("relation", ["capital", "born"])
def test_unknown_subjects_are_fictitious_and_marked(relation):
    facts = _facts()
    real = {f.subject.casefold() for f in facts}
    seq = build_sequence(facts, relation, 10, 4, "unknown", "random", 7)
    fake = [e for e in seq if e.replaced]
    assert len(fake) == 4 and all(e.fictitious_subject and e.kind == "unknown" for e in fake)
    assert all(e.subject.casefold() not in real for e in fake) and len({e.subject for e in fake}) == 4
    assert all(e.object in {f.object for f in facts if f.relation == relation} for e in fake)
    if relation == "born":  # names of two words stay names of two words
        assert all(len(e.subject.split()) == 2 for e in fake)
    assert seq == build_sequence(facts, relation, 10, 4, "unknown", "random", 7)
    # unknown and incorrect runs of one seed replace the same positions (paired comparison)
    inc = build_sequence(facts, relation, 10, 4, "incorrect", "random", 7)
    assert [e.position for e in fake] == [e.position for e in inc if e.replaced]


def test_kind_none_ignores_replace():
    facts = _facts()
    assert build_sequence(facts, "capital", 12, 5, "none", "block", 0) == build_sequence(
        facts, "capital", 12, 0, "none", "block", 0
    )
    assert ICLSequenceConfig(kind="none", replace=500, length=10).replaced == 0


# ------------------------------------------------------------------ metrics and groups
def test_groups_and_metrics_follow_the_rows(tmp_path, wide_llama, triples):
    metrics, rows = _run(
        tmp_path, wide_llama, triples, relations="capital", length=12, replace=4, kind="incorrect", placement="block"
    )
    rep = [r["position"] for r in rows if r["replaced"]]
    assert rep == list(range(rep[0], rep[0] + 4))
    after = [r["position"] for r in rows if r["group"] == "after_replaced"]
    assert after == ([rep[-1] + 1] if rep[-1] < 11 else [])
    mean = lambda g: sum(r["prob"] for r in rows if r["group"] == g) / sum(r["group"] == g for r in rows)
    assert metrics["mean_prob_replaced"] == pytest.approx(mean("replaced"))
    assert metrics["mean_prob_correct"] == pytest.approx(mean("correct"))
    assert metrics["n_replaced"] == 4 and len(metrics["curve"]) == 12
    assert [c["replaced_share"] for c in metrics["curve"]] == [1.0 if p in rep else 0.0 for p in range(12)]
    assert (tmp_path / "out" / "positions.png").stat().st_size > 0 and (tmp_path / "out" / "groups.png").exists()


@pytest.mark.slow
def test_each_position_records_how_many_replaced_examples_its_context_holds(tmp_path, wide_llama, triples):
    """issue 37 item 3: block vs random compares positions with the same count (wu2024 Figures 2d/2e)."""
    from factprobe.metrics.findings import replaced_before

    _, rows = _run(tmp_path, wide_llama, triples, relations="capital", length=12, replace=4, kind="incorrect")
    rep = {r["position"] for r in rows if r["replaced"]}
    assert [r["replaced_before"] for r in rows] == [sum(p < r["position"] for p in rep) for r in rows]
    assert [e for _, e in next(iter(replaced_before(rows).values()))] == [r["replaced_before"] for r in rows]


# ------------------------------------------------------------------ bad input: one line each
def test_fewer_facts_than_length_names_relation_available_and_requested(tmp_path, wide_llama, triples):
    with pytest.raises(
        DataError,
        match=r"^relation born: 12 facts with distinct subjects available, 20 requested "
        r"\(--length 12 or fewer\)$",
    ):
        _run(tmp_path, wide_llama, triples, relations="born", length=20, replace=5, kind="unknown")


def test_more_replacements_than_length_is_refused():
    with pytest.raises(ConfigError, match=r"^replace=30: must be <= length \(20\)$"):
        ICLSequenceConfig(length=20, replace=30, kind="incorrect")


def test_a_sequence_longer_than_the_context_window_names_the_lengths(wide_llama):
    """A 40-token window: the line names both lengths and the longest --length that fits."""
    loaded = load_model(str(wide_llama), device="cpu", dtype="float32")
    scorer = Scorer(loaded.model, loaded.tokenizer, device="cpu", max_length=40)
    seq = build_sequence(_facts(), "capital", 10, 0, "none", "random", 0)
    texts = sequence_texts(seq, " ")
    ends = [len(loaded.tokenizer(t + e.object)["input_ids"]) for t, e in zip(texts, seq)]
    fits = sum(n <= 40 for n in ends)
    assert 0 < fits < 10
    with pytest.raises(ConfigError) as err:
        score_sequence(scorer, texts, [e.object for e in seq], "capital")
    assert str(err.value) == (
        f"relation capital: the sequence of 10 examples is {ends[-1]} tokens, over the model's "
        f"context window of 40 tokens; use --length {fits} or fewer"
    )
    assert scorer.stats.forwards == 0


def test_options_that_do_not_apply_are_refused(tmp_path, wide_llama, triples):
    with pytest.raises(ConfigError, match="--max-facts-per-relation does not apply"):
        _run(tmp_path, wide_llama, triples, relations="capital", length=5, max_facts_per_relation=3)


# ------------------------------------------------------------------ the real model, from the command line
@pytest.mark.real_model
def test_command_line_on_smollm2(tmp_path, real_data_root, real_model_path, capsys):
    from factprobe.cli import main

    model = real_model_path("smollm2-135m-instruct")
    out = tmp_path / "seq"
    assert (
        main(
            [
                "study",
                "icl-sequence",
                "--model",
                str(model),
                "--source",
                "lama",
                "--relations",
                "P36",
                "--device",
                "cpu",
                "--dtype",
                "float32",
                "--length",
                "30",
                "--replace",
                "6",
                "--kind",
                "incorrect",
                "--placement",
                "block",
                "--out",
                str(out),
                "--no-progress",
                "--no-track",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "icl-sequence incorrect/block: 1 relation(s) x 30 positions, 6 replaced" in text
    rows = [json.loads(line) for line in (out / "positions.jsonl").read_text().splitlines()]
    metrics = json.loads((out / "metrics.json").read_text())
    assert len(rows) == 30 and sum(r["replaced"] for r in rows) == 6 and metrics["forwards"] == 2
    loaded = load_model(str(model), device="cpu", dtype="float32")
    for r in (rows[0], rows[17], rows[-1]):  # anyone can recompute a position with a plain forward
        assert r["logprob"] == pytest.approx(naive_logprob(loaded.model, loaded.tokenizer, r["prefix"], r["object"]), abs=1e-4)
    # on a real model, the correct examples late in the clean part are far likelier than the replaced ones
    assert metrics["mean_prob_correct"] > metrics["mean_prob_replaced"]


def test_flat_metrics_are_mlflow_names():
    flat = STUDY.flat_metrics(
        {
            "mean_prob_correct": 0.5,
            "length": 200,
            "kind": "none",
            "per_relation": {"P36": {"mean_prob_correct": 0.1}, "Birth Year": {"drop_not_replaced": 0.2}},
        }
    )
    assert flat == {
        "mean_prob_correct": 0.5,
        "per_relation/p36/mean_prob_correct": 0.1,
        "per_relation/birth_year/drop_not_replaced": 0.2,
    }
