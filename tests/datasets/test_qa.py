"""QA dataset builder (FACT-Bench style): the template file covers every relation, no question
gives its answer away on the real data, golds are every correct object by id over test and
training facts, splits do not leak, sampling is deterministic and per relation, bad template
files are refused with file:line, and the prepared dataset round-trips."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

import pytest

from factprobe.datasets.prepared import Prepared
from factprobe.datasets.qa import (
    DEFAULT_TEMPLATES,
    SKIP_EVAL_SUBJECT,
    SKIP_GOLD_IN_QUESTION,
    SKIP_OBJECT_IN_QUESTION,
    SKIP_SAME_SUBJECT,
    QAItem,
    build_qa,
    gives_away,
    load_question_templates,
    make_question,
    popularity_bucket,
    prepare_qa,
    qa_info_summary,
    qa_train_items,
    read_triples_popularity,
)
from factprobe.errors import ConfigError, DataError
from factprobe.facts import Fact, FactSet
from factprobe.framework.config import BaseConfig
from factprobe.sources.lama import GOOGLE_RE_RELATIONS, load_lama
from factprobe.sources.lpaqa import load_lpaqa_train
from factprobe.sources.nobel import BIRTH_YEAR, load_nobel

REL3 = ["P36", "P530", "P19"]
# Upper bound on real LAMA test facts (all 41 relations) dropped because every question would
# contain the object; mostly subjects that name their object ("BMW E23" -> BMW, "Reading railway
# station" -> Reading, "River Trent" -> river). Measured: 4,288 of 33,981 facts (31,453 subjects).
MAX_OBJECT_IN_QUESTION = 4400


@pytest.fixture(scope="module")
def lama_dir(real_data_root: Path) -> Path:
    path = real_data_root / "lama"
    if not (path / "trex").is_dir():
        pytest.skip(f"LAMA data not found at {path}")
    return path


@pytest.fixture(scope="module")
def train_dir(real_data_root: Path) -> Path:
    path = real_data_root / "lpaqa" / "trex_train"
    if not path.is_dir():
        pytest.skip(f"LPAQA training facts not found at {path}")
    return path


@pytest.fixture(scope="module")
def lama_all(lama_dir: Path) -> FactSet:
    return load_lama(lama_dir)


@pytest.fixture(scope="module")
def train_all(train_dir: Path) -> FactSet:
    return load_lpaqa_train(train_dir)


@pytest.fixture(scope="module")
def full_build(lama_all, train_all):
    return build_qa(lama_all, train_all, load_question_templates(), seed=0)


@pytest.fixture(scope="module")
def small(lama_all, train_all) -> tuple[FactSet, FactSet]:
    test = lama_all.select(REL3)
    train = FactSet([f for f in train_all if f.relation in REL3], dict(test.relations), train_all.source)
    return test, train


# ------------------------------------------------------------------ the template file
def test_template_file_covers_every_relation(lama_dir):
    templates = load_question_templates()
    trex = sorted(p.stem for p in (lama_dir / "trex").glob("P*.jsonl"))
    assert len(trex) == 41
    assert not set(trex) - set(templates), set(trex) - set(templates)
    google_re = sorted(p.stem for p in (lama_dir / "google_re").glob("*.jsonl"))
    assert google_re == sorted(GOOGLE_RE_RELATIONS) == ["place_of_birth", "place_of_death"]
    assert set(google_re) <= set(templates)
    assert templates[BIRTH_YEAR.id].answer_type == "number"
    for rel in trex + google_re:
        assert templates[rel].answer_type == "entity"
    for qt in templates.values():
        for t in qt.templates:
            assert t.count("[X]") == 1 and "[Y]" not in t and t.endswith(("?", ".")), t
    # one line per relation in the file itself
    rows = [
        line.split("\t")[0]
        for line in DEFAULT_TEMPLATES.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ][1:]
    assert len(rows) == len(set(rows)) == len(templates)


@pytest.mark.slow
def test_no_question_gives_its_answer_away_on_real_data(full_build, lama_all):
    build = full_build
    assert not build.dropped
    n_items = 0
    for split in (build.eval, build.train):
        for items in split.values():
            for it in items:
                n_items += 1
                assert gives_away(it.question, it.gold) is None, (it.question, it.gold)
                assert it.question == it.template.replace("[X]", it.subject)
    assert n_items == build.n_eval + build.n_train > 50_000
    object_hits = {rel: r.get(SKIP_OBJECT_IN_QUESTION, 0) for rel, r in build.skipped.items()}
    total = sum(object_hits.values())
    assert 0 < total <= MAX_OBJECT_IN_QUESTION, object_hits
    # relations whose subjects rarely name the object lose (almost) nothing
    for rel in ("P19", "P20", "P27", "P103", "P106", "P413", "P1412"):
        assert object_hits.get(rel, 0) <= 20, (rel, object_hits.get(rel))
    # every subject is accounted for: an item, a repeat of its subject, or a skip
    for rel, facts in lama_all.by_relation().items():
        skipped = build.skipped.get(rel, {})
        assert len(build.eval[rel]) + sum(skipped.values()) == len(facts), rel


def test_google_re_and_nobel_build(real_data_root):
    if not (real_data_root / "lama" / "google_re").is_dir() or not (real_data_root / "nobel").is_dir():
        pytest.skip(f"Google-RE or Nobel data not found under {real_data_root}")
    google = load_lama(real_data_root / "lama" / "google_re")
    build = build_qa(google, FactSet([], dict(google.relations)), seed=0, max_facts_per_relation=20)
    assert {rel: len(v) for rel, v in build.eval.items()} == {"place_of_birth": 20, "place_of_death": 20}
    assert build.eval["place_of_birth"][0].question.startswith(("In which city was", "Which city is the birthplace"))
    nobel = load_nobel(real_data_root / "nobel")
    build = build_qa(nobel, FactSet([], dict(nobel.relations)), seed=0)
    items = build.eval[BIRTH_YEAR.id]
    assert len(items) == len(nobel) and not build.skipped
    assert all(it.answer_type == "number" and it.gold == (it.object,) and it.object.isdigit() for it in items)


# ------------------------------------------------------------------ golds, splits, determinism
def test_golds_are_every_correct_object_by_id(small):
    test, train = small
    build = build_qa(test, train, load_question_templates(), seed=0)
    expected: dict[tuple[str, str], set[str]] = defaultdict(set)
    for f in [*test, *train]:
        assert f.subject_id and f.object_id  # LAMA / LPAQA facts all have Wikidata ids
        expected[(f.relation, f.subject_id)].add(f.object)
    train_only = 0
    for rel in REL3:
        for it in build.eval[rel]:
            assert it.gold[0] == it.object and len(set(it.gold)) == len(it.gold)
            assert set(it.gold) == expected[(rel, it.subject_id)], (it.subject, it.gold)
            test_objects = {f.object for f in test if f.relation == rel and f.subject_id == it.subject_id}
            train_only += bool(set(it.gold) - test_objects)
    assert train_only > 0  # P530 / P36: some golds are known only from the training file
    # N-M: one question per subject, several golds
    p530 = build.eval["P530"]
    assert len({it.subject_id for it in p530}) == len(p530)
    assert max(len(it.gold) for it in p530) > 20
    assert build.skipped["P530"][SKIP_SAME_SUBJECT] == len(test.by_relation()["P530"]) - len(p530)
    for it in p530:
        assert it.fact_id in {f.fact_id for f in test}


def test_train_and_eval_subjects_are_disjoint(small):
    test, train = small
    build = build_qa(test, train, load_question_templates(), seed=0)
    for rel in REL3:
        test_ids = {f.subject_id for f in test if f.relation == rel}
        test_labels = {f.subject.casefold() for f in test if f.relation == rel}
        assert build.train[rel], rel
        for it in build.train[rel]:
            assert it.split == "train"
            assert it.subject_id not in test_ids and it.subject.casefold() not in test_labels
        assert all(it.split == "eval" for it in build.eval[rel])
    # LPAQA's P530 shares most subjects (countries) with the LAMA test facts
    assert build.train_skipped["P530"][SKIP_EVAL_SUBJECT] > 900


def test_deterministic_in_seed_and_independent_of_other_relations(small):
    test, train = small
    templates = load_question_templates()
    a = build_qa(test, train, templates, seed=3, max_facts_per_relation=15, max_train_per_relation=7)
    b = build_qa(test, train, templates, seed=3, max_facts_per_relation=15, max_train_per_relation=7)

    def dump(build) -> str:
        return json.dumps(
            {s: {r: [it.to_dict() for it in its] for r, its in getattr(build, s).items()} for s in ("eval", "train")}
        )

    assert dump(a) == dump(b)
    assert all(len(v) == 15 for v in a.eval.values()) and all(len(v) == 7 for v in a.train.values())
    c = build_qa(test, train, templates, seed=4, max_facts_per_relation=15, max_train_per_relation=7)
    assert dump(a) != dump(c)
    # one relation alone (the others' facts and limits absent) gives the same P36 items
    only = test.select(["P36"])
    alone = build_qa(
        only,
        FactSet([f for f in train if f.relation == "P36"], dict(only.relations)),
        templates,
        seed=3,
        max_facts_per_relation=15,
        max_train_per_relation=7,
    )
    assert [it.to_dict() for it in alone.eval["P36"]] == [it.to_dict() for it in a.eval["P36"]]
    assert [it.to_dict() for it in alone.train["P36"]] == [it.to_dict() for it in a.train["P36"]]
    # the eval facts are those the multiple-choice probes sample for the same seed, where usable
    from factprobe.datasets.trex_mc import sample_facts_per_relation

    # (skipped ones are replaced by other facts drawn from the seed, up to the limit)
    usable = {it.fact_id for it in build_qa(test, train, templates, seed=3).eval["P19"]}
    mc_ids = {f.fact_id for f in sample_facts_per_relation(test, 15, seed=3) if f.relation == "P19"}
    qa_ids = {it.fact_id for it in a.eval["P19"]}
    assert mc_ids - usable  # this sample holds a give-away fact ...
    assert mc_ids & usable <= qa_ids and len(qa_ids - mc_ids) == len(mc_ids - usable)  # ... filled up


def test_relation_without_template_is_dropped_and_reported(small):
    test, train = small
    templates = {k: v for k, v in load_question_templates().items() if k != "P19"}
    build = build_qa(test, train, templates, seed=0, max_facts_per_relation=5)
    assert "P19" not in build.eval and "P19" not in build.train
    assert build.dropped["P19"].startswith("P19: no question template")
    assert str(DEFAULT_TEMPLATES) in build.dropped["P19"]
    assert set(build.eval) == {"P36", "P530"}


# ------------------------------------------------------------------ hand-made cases
def _fs(*facts: Fact) -> FactSet:
    return FactSet(list(facts))


def test_make_question_and_give_aways():
    f = Fact("P138", "Cambridge Airport", "Cambridge", "Q1", "Q2")
    with pytest.raises(DataError, match="contains the object 'Cambridge'"):
        make_question(f, "Who or what is [X] named after?")
    g = Fact("P361", "Lotus Tower", "Lot")
    assert make_question(g, "What is [X] a part of?") == "What is Lotus Tower a part of?"
    with pytest.raises(DataError, match="correct answer 'Swedish'"):
        make_question(Fact("P37", "Swedish Finland", "Finnish"), "What is the official language of [X]?", forbidden=["Swedish"])
    with pytest.raises(DataError, match=r"\[Y\]"):
        make_question(g, "Is [X] part of [Y]?")
    assert gives_away("Where is NEW YORK?", ["new york"]) == "new york"
    assert gives_away("Which kind is [X]?", ["in"]) is None


def test_collapse_fallback_template_and_skips():
    templates = load_question_templates()
    test = _fs(
        Fact("P47", "Austria", "Germany", "Q40", "Q183"),
        Fact("P47", "Austria", "Italy", "Q40", "Q38"),
        Fact("P279", "breed", "class", "Q1", "Q2"),  # the object is a word of the second template
        Fact("P138", "Cambridge Airport", "Cambridge", "Q3", "Q4"),
    )
    train = _fs(Fact("P47", "Austria", "Switzerland", "Q40", "Q39"), Fact("P47", "Chad", "Niger", "Q657", "Q1032"))
    build = build_qa(test, train, templates, seed=0)
    (austria,) = build.eval["P47"]
    assert austria.gold == ("Germany", "Italy", "Switzerland") and austria.object == "Germany"
    assert austria.fact_id == "P47|Q40|Q183"
    assert build.skipped["P47"] == {SKIP_SAME_SUBJECT: 1}
    assert [it.subject for it in build.train["P47"]] == ["Chad"]
    assert build.train_skipped["P47"] == {SKIP_EVAL_SUBJECT: 1}
    (breed,) = build.eval["P279"]
    assert breed.question == "What is breed a type of?"  # the other template contains "class"
    assert build.skipped["P138"] == {SKIP_OBJECT_IN_QUESTION: 1}
    assert build.dropped["P138"].startswith("P138: none of its 1 subjects")
    # an answer known for the subject only under another label is a gold too, and gives away
    test2 = _fs(
        Fact("P37", "Finland", "Finnish", "Q33", "Q1412"),
        Fact("P37", "Finnish Lapland", "Finnish", "Q5", "Q1412"),
        Fact("P37", "Finnish Lapland", "Sami", "Q5", "Q6"),
    )
    build2 = build_qa(test2, _fs(Fact("P37", "Finland", "Suomi", "Q33", "Q1412")), templates, seed=0)
    assert build2.eval["P37"][0].gold == ("Finnish", "Suomi")
    assert build2.skipped["P37"] == {SKIP_OBJECT_IN_QUESTION: 1, SKIP_SAME_SUBJECT: 1}
    # a subject naming only another correct answer is skipped for that reason
    test3 = _fs(Fact("P37", "Sami Lapland", "Finnish", "Q7", "Q1412"), Fact("P37", "Sami Lapland", "Sami", "Q7", "Q6"))
    build3 = build_qa(test3, _fs(), templates, seed=0)
    assert build3.skipped["P37"] == {SKIP_GOLD_IN_QUESTION: 1, SKIP_SAME_SUBJECT: 1}


def test_template_choice_is_deterministic_per_fact():
    templates = load_question_templates()
    facts = [Fact("P36", f"Country {i}", f"City {i}", f"Q{i}", f"Q{1000 + i}") for i in range(40)]
    a = build_qa(_fs(*facts), _fs(), templates, seed=0).eval["P36"]
    b = build_qa(_fs(*reversed(facts)), _fs(), templates, seed=0).eval["P36"]
    assert {it.fact_id: it.template for it in a} == {it.fact_id: it.template for it in b}
    assert {it.template for it in a} == set(templates["P36"].templates)  # both templates are used


def test_limits_must_be_positive():
    with pytest.raises(ConfigError, match="max_train_per_relation"):
        build_qa(_fs(Fact("P36", "France", "Paris")), _fs(), None, 0, None, 0)


def test_qa_item_round_trip_and_checks():
    it = QAItem(
        "P36",
        "France",
        "Paris",
        "What is the capital of France?",
        "entity",
        ("Paris", "Lutetia"),
        "Q142",
        "Q90",
        "train",
        12.5,
        "What is the capital of [X]?",
    )
    assert QAItem.from_dict(json.loads(json.dumps(it.to_dict()))) == it
    assert it.fact_id == Fact("P36", "France", "Paris", "Q142", "Q90").fact_id == it.to_fact().fact_id
    with pytest.raises(ValueError, match="must start with the object"):
        QAItem("P36", "France", "Paris", "q?", "entity", ("Lutetia",))
    with pytest.raises(ValueError, match="answer_type"):
        QAItem("P36", "France", "Paris", "q?", "text", ("Paris",))


# ------------------------------------------------------------------ bad template files
HEADER = "relation\tanswer_type\ttemplates\tlabel\n"


@pytest.mark.parametrize(
    "line, message",
    [
        ("P36\tentity\tWhat is the capital?\tcapital\n", "has no [X] slot"),
        ("P36\tentity\tIs [X] the capital of [X]?\tcapital\n", "has [X] 2 times"),
        ("P36\tentity\tIs [Y] the capital of [X]?\tcapital\n", "has a [Y] slot"),
        ("P36\tentity\tIs [Z] the capital of [X]?\tcapital\n", "unknown slot(s) [Z]"),
        ("P36\tstring\tWhat is the capital of [X]?\tcapital\n", "unknown answer_type 'string'"),
        ("P36\tentity\tWhat is the capital of [X]? || \tcapital\n", "empty template"),
        ("P36\tentity\tWhat is the capital of [X]? || What is the capital of [X]?\n", "repeated for P36"),
        ("P36 entity What is the capital of [X]?\n", "malformed line"),
        ("P36\tentity\tWhat is the capital of [X]?\tcapital\textra\n", "malformed line"),
        (
            "P36\tentity\tWhat is the capital of [X]?\n# comment\nP36\tentity\tWhich city is the capital of [X]?\n",
            "relation P36 repeated (first at line 2)",
        ),
    ],
)
def test_bad_template_files_name_file_and_line(tmp_path, line, message):
    path = tmp_path / "templates.tsv"
    path.write_text(HEADER + line, encoding="utf-8")
    with pytest.raises(DataError) as err:
        load_question_templates(path)
    text = str(err.value)
    assert message in text
    bad_line = 4 if "repeated (first" in message else 2
    assert text.startswith(f"{path}:{bad_line}:"), text


def test_bad_bytes_header_and_empty_file(tmp_path):
    path = tmp_path / "latin1.tsv"
    path.write_bytes(HEADER.encode() + "P36\tentity\tWhat is the capital of [X]?\tcapitale d\xe9partement\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"not UTF-8 text: byte 0xe9 .*\(line 2\)") as err:
        load_question_templates(path)
    assert str(path) in str(err.value)
    bad_header = tmp_path / "header.tsv"
    bad_header.write_text("# c\nrel\ttype\ttemplates\nP36\tentity\tWhat is [X]?\n", encoding="utf-8")
    with pytest.raises(DataError, match=rf"{bad_header}:2: header must be"):
        load_question_templates(bad_header)
    empty = tmp_path / "empty.tsv"
    empty.write_text("# only comments\n" + HEADER, encoding="utf-8")
    with pytest.raises(DataError, match="no question templates"):
        load_question_templates(empty)
    with pytest.raises(DataError, match="file not found"):
        load_question_templates(tmp_path / "missing.tsv")
    ok = tmp_path / "ok.tsv"
    ok.write_text("\ufeffrelation\tanswer_type\ttemplates\nP36\tentity\t What is the capital of [X]? \n", encoding="utf-8")
    qt = load_question_templates(ok)["P36"]
    assert qt.templates == ("What is the capital of [X]?",) and qt.label == "" and qt.where == f"{ok}:2"


# ------------------------------------------------------------------ prepared dataset
def test_prepare_qa_save_load_round_trip(tmp_path, lama_dir, train_dir):
    base = BaseConfig(
        source="lama", data=str(lama_dir), train_data=str(train_dir), relations=["P36", "P530"], max_facts_per_relation=6, seed=1
    )
    prepared = prepare_qa(base, max_train_per_relation=4)
    assert prepared.kind == "qa" and {r: len(v) for r, v in prepared.items.items()} == {"P36": 6, "P530": 6}
    assert prepared.info["answer_types"] == {"P36": "entity", "P530": "entity"}
    assert prepared.info["qa_templates"] == str(DEFAULT_TEMPLATES)
    train = qa_train_items(prepared)
    assert {r: len(v) for r, v in train.items()} == {"P36": 4, "P530": 4}
    summary = qa_info_summary(prepared)
    assert "qa_train_items" not in summary and summary["qa_train_n"] == {"P36": 4, "P530": 4}
    prepared.save(tmp_path / "ds")
    loaded = Prepared.load(tmp_path / "ds")
    assert loaded.kind == "qa"
    assert loaded.items == prepared.items
    assert all(isinstance(it, QAItem) for its in loaded.items.values() for it in its)
    assert qa_train_items(loaded) == train
    assert loaded.digest() == prepared.digest()
    with pytest.raises(DataError, match="not a QA dataset"):
        qa_train_items(Prepared(kind="mc", items={}, facts={"test": FactSet([])}))


def test_prepare_qa_refuses_when_nothing_can_be_asked(tmp_path, lama_dir, train_dir):
    path = tmp_path / "t.tsv"
    path.write_text(HEADER + "P19\tentity\tIn which city was [X] born?\tplace of birth\n", encoding="utf-8")
    base = BaseConfig(source="lama", data=str(lama_dir), train_data=str(train_dir), relations=["P36"])
    with pytest.raises(ConfigError, match="P36: no question template"):
        prepare_qa(base, templates_path=str(path))


def test_popularity_from_a_triples_file(tmp_path):
    path = tmp_path / "facts.csv"
    rows = [
        ("France", "capital", "Paris", "90"),
        ("Peru", "capital", "Lima", "10"),
        ("Chad", "capital", "N'Djamena", ""),
        ("Mali", "capital", "Bamako", "20"),
        ("Laos", "capital", "Vientiane", "1,000"),
    ]
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["subject", "relation", "object", "popularity"])
        w.writerows(rows)
    assert read_triples_popularity(path) == {
        "capital|France|Paris": 90.0,
        "capital|Peru|Lima": 10.0,
        "capital|Mali|Bamako": 20.0,
        "capital|Laos|Vientiane": 1000.0,
    }
    templates_path = tmp_path / "t.tsv"
    templates_path.write_text(HEADER + "capital\tentity\tWhat is the capital of [X]?\tcapital\n", encoding="utf-8")
    base = BaseConfig(source="triples", data=str(path), seed=0)
    prepared = prepare_qa(base, templates_path=str(templates_path))
    items = prepared.items["capital"] + qa_train_items(prepared)["capital"]
    pops = {it.subject: it.popularity for it in items}
    assert pops == {"France": 90.0, "Peru": 10.0, "Chad": None, "Mali": 20.0, "Laos": 1000.0}
    assert prepared.info["qa_popularity"] is True
    # facts themselves are unchanged: Fact.to_dict has no popularity
    assert all(set(f.to_dict()) == {"relation", "subject", "object", "subject_id", "object_id"} for f in prepared.test)
    buckets = dict(zip(pops, popularity_bucket(pops.values())))
    # known 10, 20, 90, 1000: q1 = 17.5, q3 = 317.5
    assert buckets == {"France": "middle", "Peru": "bottom-25%", "Chad": "unknown", "Mali": "middle", "Laos": "top-25%"}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"subject": "A", "relation": "r", "object": "B", "popularity": "many"}\n', encoding="utf-8")
    with pytest.raises(DataError, match=rf"{bad}:1: popularity must be a number, got 'many'"):
        read_triples_popularity(bad)
