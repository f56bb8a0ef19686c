"""run_probe end to end on a tiny RANDOM model (numbers are not results; only the mechanics are
tested): output files and fields, resume without duplicates, torn checkpoints, refused config
mix-ups, context-window truncation, and the prompt baselines."""

import json

import pytest

from factprobe.datasets.prepared import Prepared
from factprobe.errors import ConfigError, ContextTooLongError
from factprobe.facts import FactSet
from factprobe.framework.base import Session
from factprobe.framework.checkpoint import CHECKPOINT, RESULTS
from factprobe.framework.config import RunConfig
from factprobe.framework.registry import get_probe
from factprobe.framework.runner import run_probe
from factprobe.models import load_model
from factprobe.probes.mc import relation_examples

FIELDS = {
    "relation",
    "subject",
    "gold",
    "correct_objects",
    "options",
    "logprobs",
    "prediction",
    "correct",
    "gold_prob",
    "context",
    "fact_id",
}


@pytest.fixture(scope="module")
def tiny(tiny_model_path):
    return load_model(str(tiny_model_path("llama")))


def cfg(tiny, **kw):
    """A flat run config; `examples` is an option of the in-context probes only (HGP/MMP refuse it)."""
    base = {"probe": "ic-lke", "model": str(tiny.path), "relations": ["P36", "P1376"], "max_facts_per_relation": 3, "choices": 8}
    if kw.get("probe", "ic-lke") in ("ic-lke", "eic-lke"):
        base["examples"] = 5
    base.update(kw)
    return RunConfig.from_dict(base)


def prepare(c):
    return get_probe(c.probe).prepare(c)


def rows(path):
    return [json.loads(line) for line in (path / RESULTS).read_text().splitlines()]


def test_outputs_have_every_field(tiny, tmp_path):
    out = run_probe(cfg(tiny), tmp_path, loaded=tiny, progress=False)
    rs = rows(tmp_path)
    assert len(rs) == 6 and FIELDS <= set(rs[0])
    for r in rs:
        assert len(r["options"]) == len(r["logprobs"]) == 8
        assert r["gold"] in r["options"] and r["gold"] in r["correct_objects"]
        assert r["context"].endswith(r["subject"])
        assert r["correct"] == (r["prediction"] == r["gold"])

    def no_nan(c):
        raise AssertionError(f"metrics.json holds a bare {c}")

    m = json.loads((tmp_path / "metrics.json").read_text(), parse_constant=no_nan)
    assert {"accuracy", "prob_mass", "n", "per_relation"} <= set(m)
    assert m["n"] == 6 and set(m["per_relation"]) == {"P36", "P1376"}
    assert m["per_relation"]["P36"]["n"] == 3
    assert out.n_scored_now == 6 and not (tmp_path / CHECKPOINT).exists()


def test_rerun_resumes_without_duplicates(tiny, tmp_path):
    c = cfg(tiny)
    run_probe(c, tmp_path, loaded=tiny, progress=False)
    full = rows(tmp_path)
    # simulate a crash: three rows made it to the checkpoint, the fourth was torn mid-write
    (tmp_path / RESULTS).unlink()
    lines = [json.dumps(r) for r in full[:3]]
    (tmp_path / CHECKPOINT).write_text("\n".join(lines) + "\n" + json.dumps(full[3])[:40])
    out = run_probe(c, tmp_path, loaded=tiny, progress=False)
    again = rows(tmp_path)
    assert out.n_resumed == 3 and out.n_scored_now == 3
    assert [r["key"] for r in again] == [r["key"] for r in full]
    assert len({r["key"] for r in again}) == len(again)
    for a, b in zip(full, again):
        assert a["logprobs"] == pytest.approx(b["logprobs"], abs=1e-5)
    # a complete rerun recomputes nothing
    out = run_probe(c, tmp_path, loaded=tiny, progress=False)
    assert out.n_scored_now == 0 and out.n_resumed == 6


def test_other_config_in_same_folder_is_refused(tiny, tmp_path):
    run_probe(cfg(tiny), tmp_path, loaded=tiny, progress=False)
    with pytest.raises(ConfigError, match="different configuration"):
        run_probe(cfg(tiny, seed=1), tmp_path, loaded=tiny, progress=False)


def test_long_context_is_truncated_from_the_left_or_refused(tiny, tmp_path):
    # the tiny model's window is 256 tokens: 60 examples do not fit
    out = run_probe(
        cfg(tiny, examples=60, relations=["P36"], max_facts_per_relation=1), tmp_path / "t", loaded=tiny, progress=False
    )
    assert any("kept the last" in n for n in out.notes)
    ctx = rows(tmp_path / "t")[0]["context"]
    assert len(tiny.tokenizer(ctx)["input_ids"]) <= tiny.max_length
    with pytest.raises(ContextTooLongError, match="context window"):
        run_probe(
            cfg(tiny, examples=60, relations=["P36"], max_facts_per_relation=1, on_too_long="refuse"),
            tmp_path / "r",
            loaded=tiny,
            progress=False,
        )


def test_examples_never_come_from_test_facts(tiny):
    p = prepare(cfg(tiny))
    test_subjects = {it.subject for its in p.items.values() for it in its}
    assert test_subjects and not test_subjects & {f.subject for f in p.train}


def test_relation_examples_exclude_every_test_subject_of_the_relation(tiny):
    # Issue 9: every test subject of the relation is excluded, not only the (sampled) ones still to
    # score. Put all test facts into the training facts too: none of them may become an example.
    c = cfg(tiny, relations=["P36"])
    p = prepare(c)
    test_p36 = [f for f in p.test if f.relation == "P36"]
    assert len(test_p36) > len(p.items["P36"])  # more test subjects than sampled items
    leaky = Prepared(p.kind, p.items, {"test": p.test, "train": FactSet(list(p.train) + list(p.test), dict(p.test.relations))})
    notes = []
    examples = relation_examples(Session(c, None, leaky, notes.append), "P36", 10_000)
    train_subjects = {f.subject for f in p.train if f.relation == "P36"}
    assert examples and {e.subject for e in examples} <= train_subjects
    assert not {e.subject for e in examples} & {f.subject for f in test_p36}
    assert len(examples) == len(train_subjects) and notes and "only" in notes[0]
    # which items are left to score never changes the examples
    fewer = Prepared(p.kind, {"P36": p.items["P36"][:1]}, leaky.facts)
    assert relation_examples(Session(c, None, fewer, notes.append), "P36", 5) == relation_examples(
        Session(c, None, leaky, notes.append), "P36", 5
    )


def test_distractor_pool_comes_from_test_and_training_facts(tiny):
    p = prepare(cfg(tiny))
    for rel in ("P36", "P1376"):
        objects = {f.object.casefold() for f in list(p.test) + list(p.train) if f.relation == rel}
        only_test = {f.object.casefold() for f in p.test if f.relation == rel}
        assert p.info["distractor_pool_size"][rel] == len(objects) > len(only_test)


def test_unknown_relation_and_too_few_objects(tiny, tmp_path):
    with pytest.raises(ConfigError, match="unknown relation"):
        prepare(cfg(tiny, relations=["P999"]))
    with pytest.raises(ConfigError) as e:
        prepare(cfg(tiny, relations=["P30"], choices=100))
    msg = str(e.value)
    assert "P30: distractor pool has 6 objects; --choices 100 needs 100, the largest supported is 6" in msg
    assert "P30: P30" not in msg  # the reason already names the relation
    # --skip-small-relations probes the rest and reports the skipped relation
    p = prepare(cfg(tiny, relations=["P36", "P30"], choices=100, skip_small_relations=True))
    assert set(p.items) == {"P36"} and p.dropped["P30"].startswith("P30: distractor pool has 6 objects")
    with pytest.raises(ConfigError, match=r"relations=' , ': empty relation id"):
        cfg(tiny, relations=" , ")


def test_prepared_roundtrip(tiny, tmp_path):
    p = prepare(cfg(tiny))
    p.save(tmp_path)
    q = Prepared.load(tmp_path)
    assert q.items == p.items and len(q.train) == len(p.train) and q.test.digest() == p.test.digest()
    assert list(q.train) == list(p.train) and q.kind == p.kind and q.dropped == p.dropped and q.info == p.info


@pytest.mark.parametrize("probe", ["eic-lke", "hgp", "mmp"])
def test_other_probes_run(tiny, tmp_path, probe, real_data_root):
    own = {"eic-lke": {"eic_tests_per_sequence": 2, "eic_interleave": 1}, "hgp": {"templates": "2"}, "mmp": {"templates": "2"}}
    c = cfg(tiny, probe=probe, relations=["P36"], max_facts_per_relation=3, **own[probe])
    out = run_probe(c, tmp_path, loaded=tiny, progress=False)
    n = 3 * (2 if probe in ("hgp", "mmp") else 1)
    assert out.metrics["n"] == n
    if probe in ("hgp", "mmp"):
        assert len({r["template"] for r in rows(tmp_path)}) == 2 and "per_template" in out.metrics
        assert len(out.metrics[f"{probe}_templates"]["P36"]) == 2


def test_model_revision_survives_a_full_resume_and_other_weights_are_refused(tiny, tmp_path):
    import dataclasses

    c = cfg(tiny)
    first = run_probe(c, tmp_path, loaded=tiny, progress=False)
    assert first.metrics["model_revision"] == tiny.revision and tiny.revision.startswith("local-sha256:")
    again = run_probe(c, tmp_path, loaded=None, progress=False)  # nothing left: the model is never loaded
    assert again.n_scored_now == 0 and again.metrics["model_revision"] == tiny.revision
    full = rows(tmp_path)
    (tmp_path / RESULTS).unlink()
    (tmp_path / CHECKPOINT).write_text("".join(json.dumps(r) + "\n" for r in full[:2]))
    retrained = dataclasses.replace(tiny, revision="local-sha256:" + "0" * 64)
    with pytest.raises(
        ConfigError,
        match=r"holds results of other weights \(model revision local-sha256:\w+ then, local-sha256:0+ now\); use another --out",
    ):
        run_probe(c, tmp_path, loaded=retrained, progress=False)
    assert len((tmp_path / CHECKPOINT).read_text().splitlines()) == 2  # nothing lost


def test_an_over_long_subject_names_the_fact_and_its_token_count(tiny, tmp_path):
    # Issue 9 item 14: the error names which fact and how many tokens against the window.
    c = cfg(tiny, relations=["P36"], max_facts_per_relation=3, examples=0)
    p = prepare(c)
    items = p.items["P36"]
    long_item = type(items[1])(**{**items[1].__dict__, "subject": "word " * 400})
    p.items["P36"] = [items[0], long_item, items[2]]
    with pytest.raises(ContextTooLongError) as e:
        run_probe(c, tmp_path / "long", loaded=tiny, progress=False, prepared=p)
    msg = str(e.value)
    assert f"fact {long_item.fact_id}" in msg and "word word" in msg
    assert "tokens exceed the model's context window of 256 tokens" in msg
