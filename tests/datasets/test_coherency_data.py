"""The coherency dataset: templates file errors, items per (relation, subject), candidate tables by
entity id over test and training facts, evidence paragraphs, and the real templates file."""

import json
from pathlib import Path

import pytest

from factprobe.datasets.coherency import (
    CoherencyItem,
    load_coherency_templates,
    prepare_coherency,
    prepared_tables,
    read_fact_contexts,
    relation_tables,
)
from factprobe.datasets.prepared import Prepared
from factprobe.errors import ConfigError, DataError
from factprobe.facts import Fact
from factprobe.framework.config import BaseConfig

BORN = {
    "relation": "born_in",
    "template_obj": "[X] was born in [Y]",
    "template_sub": "[Y] is the birth place of [X]",
    "type": "N-1",
}


def write_jsonl(path: Path, recs) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    return path


def triple(s, o, sid=None, oid=None, rel="born_in", **kw):
    d = {"subject": s, "relation": rel, "object": o, **kw}
    if sid:
        d["subject_id"] = sid
    if oid:
        d["object_id"] = oid
    return d


# ------------------------------------------------------------------ templates file
def test_templates_load_and_a_missing_inverse_template_is_dropped_not_fatal(tmp_path):
    f = write_jsonl(
        tmp_path / "t.jsonl",
        [
            BORN,
            {"relation": "capital", "template_obj": "The capital of [X] is [Y]"},
            {"relation": "lives_in", "template_obj": "[X] lives in [Y]", "template_sub": " "},
        ],
    )
    templates, dropped = load_coherency_templates(f)
    assert list(templates) == ["born_in"] and templates["born_in"].template_sub == "[Y] is the birth place of [X]"
    assert dropped["capital"] == "capital: no inverse template (template_sub) in t.jsonl:2"
    assert dropped["lives_in"] == "lives_in: no inverse template (template_sub) in t.jsonl:3"


@pytest.mark.parametrize(
    "line, needle",
    [
        (
            '{"relation": "r", "template_obj": "[X] is in", "template_sub": "[Y] has [X]"}',
            ":1: template_obj '[X] is in' of r lacks the slot [Y]",
        ),
        (
            '{"relation": "r", "template_obj": "[X] is [Y]", "template_sub": "[Y] and [Y] have [X]"}',
            ":1: template_sub '[Y] and [Y] have [X]' of r has 2 of the slot [Y]",
        ),
        ('{"relation": "r", "template_obj": 7, "template_sub": "[Y] has [X]"}', ":1: template_obj of r must be text, got int 7"),
        (
            '{"relation": "r", "template_obj": "[X] is [Y]", "template_sub": "[Y] has [X]", "type": "many"}',
            ":1: relation r has type 'many'",
        ),
        ('{"relation": "r", "template_obj": "[X] is [Y]"', ":1: malformed JSON line"),
        ('{"template_obj": "[X] is [Y]", "template_sub": "[Y] has [X]"}', ":1: missing field(s) relation"),
        ('["r"]', ":1: expected a JSON object"),
    ],
)
def test_malformed_template_lines_name_file_and_line(tmp_path, line, needle):
    f = tmp_path / "t.jsonl"
    f.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(DataError) as e:
        load_coherency_templates(f)
    assert str(e.value).startswith(str(f)) and needle in str(e.value)


def test_repeated_relation_bad_bytes_missing_file_and_folder(tmp_path):
    f = write_jsonl(tmp_path / "t.jsonl", [BORN, BORN])
    with pytest.raises(DataError, match=r"t.jsonl:2: relation born_in repeated \(first at line 1\)"):
        load_coherency_templates(f)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(json.dumps(BORN).encode() + b"\n" + b'{"relation": "x\xff"}\n')
    with pytest.raises(DataError, match=r"bad.jsonl: not UTF-8 text: byte 0xff .*\(line 2\)"):
        load_coherency_templates(bad)
    with pytest.raises(DataError, match="nope.jsonl: file not found"):
        load_coherency_templates(tmp_path / "nope.jsonl")
    with pytest.raises(DataError, match="is a folder"):
        load_coherency_templates(tmp_path)


def test_the_real_templates_file(real_data_root):
    templates, dropped = load_coherency_templates(real_data_root / "coherency" / "relations_autoregressive.jsonl")
    # 46 relations (the 41 of LAMA T-REx plus P54, P69, P102, P166, P1923), none without a template
    assert len(templates) == 46 and not dropped
    trex = {p.stem for p in (real_data_root / "lama" / "trex").glob("P*.jsonl")}
    assert len(trex) == 41 and trex <= set(templates)
    assert templates["P36"].template_obj == "The capital of [X] is [Y]"
    assert templates["P36"].template_sub == "[Y] is the capital of [X]"
    # as in the paper, every template puts the predicted entity last
    assert all(t.template_obj.endswith("[Y]") and t.template_sub.endswith("[X]") for t in templates.values())


# ------------------------------------------------------------------ items and tables
FACTS = [
    Fact("born_in", "Alice", "Paris", "Q1", "Q90"),
    Fact("born_in", "Alice", "Lyon", "Q1", "Q456"),  # N-M: a second object of Alice
    Fact("born_in", "Carol", "Rome", "Q3", "Q60"),
]
TRAIN = [
    Fact("born_in", "Bob", "Paris, France", "Q2", "Q90"),  # the same Paris by id, another label
    Fact("born_in", "Dora", "Madrid"),  # no ids: keyed by label
]


def test_relation_tables_are_keyed_by_entity_id_over_test_and_training_facts():
    t = relation_tables(FACTS + TRAIN, "born_in")
    assert t.objects == {"Q90": "Paris", "Q456": "Lyon", "Q60": "Rome", "Madrid": "Madrid"}  # first label wins
    assert t.subjects == {"Q1": "Alice", "Q3": "Carol", "Q2": "Bob", "Dora": "Dora"}
    assert t.subjects_of["Q90"] == {"Q1", "Q2"}  # Bob is correct for Paris by id, though his label says "Paris, France"
    assert t.objects_of["Q1"] == {"Q90", "Q456"}


def test_a_fact_without_id_joins_the_one_id_of_its_label():
    t = relation_tables([Fact("r", "Alice", "Paris", "Q1", "Q90"), Fact("r", "Eve", "paris")], "r")
    assert t.subjects_of["Q90"] == {"Q1", "Eve"} and set(t.objects) == {"Q90"}


def toy_base(tmp_path, recs, **kw):
    data = write_jsonl(tmp_path / "facts.jsonl", recs)
    return BaseConfig(source="triples", data=str(data), **kw)


def test_items_collapse_n_m_pairs_and_know_every_gold_by_id(tmp_path):
    recs = [
        triple("Alice", "Paris", "Q1", "Q90", rel="P19"),
        triple("Alice", "Lyon", "Q1", "Q456", rel="P19"),
        triple("Carol", "Rome", "Q3", "Q60", rel="P19"),
    ]
    train = tmp_path / "train"
    train.mkdir()  # LPAQA layout: P*.jsonl
    write_jsonl(train / "P19.jsonl", [{"sub_label": "Carol", "obj_label": "Roma", "sub_uri": "Q3", "obj_uri": "Q61"}])
    templates = write_jsonl(tmp_path / "t.jsonl", [{**BORN, "relation": "P19"}])
    p = prepare_coherency(toy_base(tmp_path, recs, train_data=str(train)), templates)
    assert p.kind == "coherency" and list(p.items) == ["P19"]
    alice, carol = p.items["P19"]
    assert (alice.subject, alice.gold, alice.object_entity, alice.subject_entity) == ("Alice", "Paris", "Q90", "Q1")
    assert alice.gold_objects == (("Q90", "Paris"), ("Q456", "Lyon")) and alice.fact_id == "P19|Q1|Q90"
    assert carol.gold_objects == (("Q60", "Rome"), ("Q61", "Roma"))  # a training fact adds a correct object
    assert p.info["object_candidates"] == {"P19": 4} and p.info["subject_candidates"] == {"P19": 2}
    assert p.info["coherency_templates"]["P19"] == {"template_obj": BORN["template_obj"], "template_sub": BORN["template_sub"]}
    # without --train-data the test facts are NOT split: every subject is an item
    p2 = prepare_coherency(toy_base(tmp_path, recs), templates)
    assert [it.subject for it in p2.items["P19"]] == ["Alice", "Carol"] and len(p2.train) == 0


def test_max_facts_samples_subjects_deterministically(tmp_path):
    """The builder keeps every subject; the framework's cap draws over the test facts (`CAP_DRAW` =
    `SOURCE_DRAW`), through the probe's `prepare`: the kept subjects are the facts
    `sample_facts_per_relation` keeps, the multiple-choice and QA probes' facts."""
    from factprobe.datasets.cap import cap_facts, sample_facts_per_relation
    from factprobe.framework.config import RunConfig
    from factprobe.framework.registry import get_probe

    recs = [triple(f"S{i}", f"O{i % 3}", f"Q{i}", f"R{i % 3}") for i in range(12)]
    templates = write_jsonl(tmp_path / "t.jsonl", [BORN])
    assert len(prepare_coherency(toy_base(tmp_path, recs, max_facts_per_relation=4, seed=1), templates).items["born_in"]) == 12
    data = write_jsonl(tmp_path / "facts.jsonl", recs)
    flat = {"probe": "coherency", "source": "triples", "data": str(data), "coherency_templates": str(templates)}

    def prepare(**kw):
        return get_probe("coherency").prepare(RunConfig.from_dict({**flat, **kw}))

    a, b = prepare(max_facts_per_relation=4, seed=1), prepare(max_facts_per_relation=4, seed=1)
    subjects = [it.subject for it in a.items["born_in"]]
    assert len(subjects) == 4 and subjects == [it.subject for it in b.items["born_in"]]
    assert subjects == sorted(subjects, key=lambda s: int(s[1:]))  # original order kept
    # without --train-data the draw is over the test side of the multiple-choice probes' split
    universe = cap_facts(a.facts["test"], None, 1)
    assert len(universe.facts) == 6 and {f.fact_id for f in universe} < {f.fact_id for f in a.facts["test"]}
    drawn = sample_facts_per_relation(universe, 4, seed=1)
    assert {it.fact_id for it in a.items["born_in"]} == {f.fact_id for f in drawn}
    # candidates still come from all facts, not the sample
    assert a.info["subject_candidates"]["born_in"] == 12


def test_relations_without_templates_are_dropped_and_none_left_is_an_error(tmp_path):
    recs = [triple("Alice", "Paris", rel="born_in"), triple("France", "Paris", rel="capital")]
    templates = write_jsonl(tmp_path / "t.jsonl", [BORN, {"relation": "capital", "template_obj": "The capital of [X] is [Y]"}])
    p = prepare_coherency(toy_base(tmp_path, recs), templates)
    assert list(p.items) == ["born_in"]
    assert p.dropped == {"capital": "capital: no inverse template (template_sub) in t.jsonl:2"}
    with pytest.raises(ConfigError, match="no relation of .* can be probed for coherency .*capital: no inverse template"):
        prepare_coherency(toy_base(tmp_path, recs, relations=["capital"]), templates)
    other = write_jsonl(tmp_path / "o.jsonl", [BORN])
    p = prepare_coherency(toy_base(tmp_path, recs), other)
    assert p.dropped == {"capital": f"capital: no coherency templates in {other}"}


def test_authors_filter_drops_overlapping_labels(tmp_path):
    recs = [triple("Brody Raion", "Brody", "Q1", "Q2"), triple("Alice", "Paris", "Q3", "Q4")]
    templates = write_jsonl(tmp_path / "t.jsonl", [BORN])
    p = prepare_coherency(toy_base(tmp_path, recs), templates, drop_overlapping_labels=True)
    assert [it.subject for it in p.items["born_in"]] == ["Alice"]
    assert p.info["skipped_overlapping_labels"] == {"born_in": 1}
    assert len(prepare_coherency(toy_base(tmp_path, recs), templates).items["born_in"]) == 2


# ------------------------------------------------------------------ evidence paragraphs
def test_context_column_of_triples_files(tmp_path, caplog):
    recs = [
        triple("Alice", "Paris", "Q1", "Q90", context="Alice was born in Paris in 1900."),
        triple("Alice", "Lyon", "Q1", "Q456", context="Not the first fact of Alice."),
        triple("Carol", "Rome", "Q3", "Q60", context="  "),
    ]
    templates = write_jsonl(tmp_path / "t.jsonl", [BORN])
    with caplog.at_level("WARNING"):
        p = prepare_coherency(toy_base(tmp_path, recs), templates)
    alice, carol = p.items["born_in"]
    assert alice.context == "Alice was born in Paris in 1900." and carol.context is None
    assert sum(1 for it in p.items["born_in"] if it.context) == 1  # the probe counts them (items_with_context)
    assert "ignoring unknown field" not in caplog.text  # the column is read here, not ignored
    csv = tmp_path / "facts.csv"
    csv.write_text('subject,relation,object,context\nAlice,born_in,Paris,"She was born there, in Paris."\n', encoding="utf-8")
    assert read_fact_contexts(csv) == {"born_in|Alice|Paris": "She was born there, in Paris."}
    bad = write_jsonl(tmp_path / "bad.jsonl", [triple("Alice", "Paris", context=["a", "list"])])
    with pytest.raises(DataError, match="bad.jsonl:1: field 'context' must be text"):
        read_fact_contexts(bad)


def test_prepared_round_trip_keeps_items_templates_and_tables(tmp_path):
    recs = [triple("Alice", "Paris", "Q1", "Q90", context="ctx"), triple("Carol", "Rome", "Q3", "Q60")]
    templates = write_jsonl(tmp_path / "t.jsonl", [BORN])
    p = prepare_coherency(toy_base(tmp_path, recs), templates)
    p.save(tmp_path / "saved")
    q = Prepared.load(tmp_path / "saved")
    assert q.kind == "coherency" and q.items == p.items and isinstance(q.items["born_in"][0], CoherencyItem)
    assert q.info["coherency_templates"] == p.info["coherency_templates"]
    assert prepared_tables(q, "born_in") == prepared_tables(p, "born_in")


def test_authors_filter_is_their_case_sensitive_containment():
    """main_autoregressive.py lines 99 and 113 compare the labels as they are: equal or containing."""
    from factprobe.datasets.coherency import labels_overlap

    assert labels_overlap("Brody Raion", "Brody") and labels_overlap("Brody", "Brody Raion")
    assert labels_overlap("Paris", "Paris")
    assert not labels_overlap("Brody Raion", "brody") and not labels_overlap("Alice", "Paris")
