"""The multi-prompt dataset (factprobe.datasets.multiprompt): template rules, sources, facts, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from factprobe.datasets import multiprompt as mpb
from factprobe.datasets.prepared import Prepared
from factprobe.errors import DataError


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def jsonl(recs) -> str:
    return "".join(json.dumps(r) + "\n" for r in recs)


def toy_root(tmp_path: Path) -> Path:
    """A data root with one relation P1 (capital) in every template source, and P2 with facts only."""
    root = tmp_path / "data"
    write(
        root / "lama" / "relations.jsonl",
        jsonl(
            [
                {"relation": "P1", "template": "The capital of [X] is [Y] .", "label": "capital", "type": "N-M"},
                {"relation": "P2", "template": "", "label": "no templates"},
            ]
        ),
    )
    write(
        root / "lama" / "trex" / "P1.jsonl",
        jsonl(
            [
                {"sub_uri": "Q1", "obj_uri": "Q10", "sub_label": "Xland", "obj_label": "Xcity"},
                {"sub_uri": "Q1", "obj_uri": "Q11", "sub_label": "Xland", "obj_label": "Xtown"},
                {"sub_uri": "Q2", "obj_uri": "Q20", "sub_label": "Yland", "obj_label": "Ycity"},
                {"sub_uri": "Q3", "obj_uri": "Q30", "sub_label": "Zland", "obj_label": "Zcity"},
            ]
        ),
    )
    write(root / "lama" / "trex" / "P2.jsonl", jsonl([{"sub_uri": "Q5", "obj_uri": "Q6", "sub_label": "A", "obj_label": "B"}]))
    write(
        root / "lpaqa" / "trex_train" / "P1.jsonl",
        jsonl(
            [
                {"sub_uri": "Q2", "obj_uri": "Q21", "sub_label": "Y-land", "obj_label": "Yburg"},  # second gold, alias
                {"sub_uri": "Q9", "obj_uri": "Q90", "sub_label": "Other", "obj_label": "Ocity"},  # adds no pair
            ]
        ),
    )
    write(
        root / "pararel" / "patterns" / "P1.jsonl",
        jsonl(
            [
                {"pattern": "The capital of [X] is [Y].", "lemma": "capital"},  # duplicate of LAMA after normalising
                {"pattern": "[X]'s capital is [Y] .", "lemma": "capital"},
                {"pattern": "[Y] is the capital of [X].", "lemma": "capital"},  # [Y] not last
            ]
        ),
    )
    write(
        root / "lpaqa" / "prompts" / "manual_paraphrase" / "P1.txt",
        "[X]'s capital is [Y]\n\n[X] has its capital in [Y] .\n[X] is the capital of [Y] .\n",
    )
    write(
        root / "lpaqa" / "prompts" / "paraphrase" / "P1.jsonl",
        jsonl(
            [
                {"template": "[X]  has its capital in [Y].", "weight": 0.5},
                {"template": "[X] , whose capital is [Y] .", "weight": 0.1},
            ]
        ),
    )
    return root


def qa_file(tmp_path: Path, lines: str = "P1\tWhich city is the capital of [X]? [Y]\n") -> Path:
    return write(tmp_path / "qa.tsv", "# comment\nrelation\ttemplate\n" + lines)


def test_normalize_template_rule() -> None:
    for t in ("[X] was born in [Y] .", "[X] was born in [Y].", "[X]  was born in [Y]", " [X] was born in [Y] . "):
        assert mpb.normalize_template(t) == "[X] was born in [Y]."
    assert mpb.normalize_template("Who developed [X]? [Y]") == "Who developed [X]? [Y]."
    assert mpb.normalize_template("[X] , who works as [Y] ?") == "[X], who works as [Y]?"
    assert mpb.is_y_last("[X] is in [Y] .") and not mpb.is_y_last("[Y] is the capital of [X].")
    assert not mpb.is_y_last("[X] plays [Y] music.")


def test_render() -> None:
    assert mpb.render_mlm("[X] was born in [Y].", "Dante", "[MASK]") == "Dante was born in [MASK]."
    assert mpb.render_mlm("[Y] is the capital of [X].", "France", "<mask>") == "<mask> is the capital of France."
    assert mpb.render_mlm("[X] is in [Y].", "A [Y] B", "[MASK]") == "A [Y] B is in [MASK]."  # subject text kept
    assert mpb.render_causal("Who developed [X]? [Y].", "Windows") == "Who developed Windows?"
    assert mpb.render_causal("[X] was born in [Y].", "Dante") == "Dante was born in"
    with pytest.raises(DataError, match=r"\[Y\] is not last"):
        mpb.render_causal("[Y] is the capital of [X].", "France")


def test_build_from_every_source(tmp_path) -> None:
    root = toy_root(tmp_path)
    mp = mpb.build_multiprompt(root, qa_templates=qa_file(tmp_path))
    t = mp.templates
    assert list(t.columns) == list(mpb.TEMPLATE_COLUMNS)
    assert t["template"].tolist() == [
        "The capital of [X] is [Y].",
        "[X]'s capital is [Y].",
        "[Y] is the capital of [X].",
        "[X] has its capital in [Y].",
        "[X], whose capital is [Y].",
        "Which city is the capital of [X]? [Y].",
    ]
    assert t["source"].tolist() == ["lama", "pararel", "pararel", "lpaqa-manual", "lpaqa-paraphrase", "belief-qa"]
    assert t["template_id"].tolist()[:2] == ["P1:lama:1", "P1:pararel:2"]
    assert t["provenance"].tolist()[:4] == [
        "lama/relations.jsonl:1",
        "pararel/patterns/P1.jsonl:2",
        "pararel/patterns/P1.jsonl:3",
        "lpaqa/prompts/manual_paraphrase/P1.txt:3",
    ]
    assert t["y_last"].tolist() == [True, True, False, True, True, True]
    assert t["style"].tolist() == ["cloze"] * 5 + ["question"]
    d = mp.dropped.set_index("provenance")["reason"]
    assert d["pararel/patterns/P1.jsonl:1"] == "duplicate of P1:lama:1"
    assert d["lpaqa/prompts/manual_paraphrase/P1.txt:1"] == "duplicate of P1:pararel:2"
    assert d["lpaqa/prompts/paraphrase/P1.jsonl:1"] == "duplicate of P1:lpaqa-manual:3"
    assert d["lpaqa/prompts/manual_paraphrase/P1.txt:4"].startswith("backwards")
    # P2 has facts but no template anywhere
    assert set(mp.dropped_relations) == {"P2"} and mp.relations == ["P1"]


def test_facts_gold_by_id_and_aliases(tmp_path) -> None:
    mp = mpb.build_multiprompt(toy_root(tmp_path), qa_templates=qa_file(tmp_path))
    f = mp.facts.set_index("subject")
    assert list(mp.facts.columns) == list(mpb.FACT_COLUMNS)
    assert f.loc["Xland", "gold"] == ["Xcity", "Xtown"] and f.loc["Xland", "fact_id"] == "P1|Q1|Q10"
    assert f.loc["Yland", "gold"] == ["Ycity", "Yburg"]  # the training facts add a correct object
    assert f.loc["Yland", "gold_ids"] == ["Q20", "Q21"]
    assert f.loc["Yland", "subject_aliases"] == ["Y-land"]  # another label of Q2 in a loaded file
    assert f.loc["Zland", "subject_aliases"] == []
    assert "Other" not in f.index  # training facts never make pairs
    extra = mpb.build_multiprompt(
        toy_root(tmp_path / "b"), qa_templates=qa_file(tmp_path), aliases={"Q3": ["Zed"]}
    ).facts.set_index("subject")
    assert extra.loc["Zland", "subject_aliases"] == ["Zed"]


def test_the_set_keeps_every_pair_and_the_framework_cap_draws_them_seeded(tmp_path) -> None:
    """The builder keeps every pair; `--max-facts-per-relation` is the framework's cap, drawn over the
    test facts (`CAP_DRAW` = `SOURCE_DRAW`), so a capped BELIEF run probes the facts
    `sample_facts_per_relation` keeps, those of the multiple-choice and QA probes."""
    from types import SimpleNamespace

    from factprobe.datasets.cap import SOURCE_DRAW, cap_prepared_items, sample_facts_per_relation
    from factprobe.sources import load_facts

    root = toy_root(tmp_path)
    items = mpb.build_multiprompt(root, qa_templates=qa_file(tmp_path)).items()
    test = load_facts("lama", str(tmp_path / "data" / "lama"), None)
    assert sum(len(v) for v in items.values()) == 3 and mpb.CAP_DRAW == SOURCE_DRAW

    def capped(n: int, seed: int) -> tuple[str, ...]:
        base = SimpleNamespace(max_facts_per_relation=n, seed=seed, train_data="given")  # no split: all test facts
        kept, _ = cap_prepared_items(items, test, base, mpb.CAP_DRAW)
        got = tuple(it.fact_id for its in kept.values() for it in its)
        assert set(got) <= {f.fact_id for f in sample_facts_per_relation(test, n, seed)}
        return got

    assert 1 <= len(capped(2, 1)) <= 2 and capped(2, 1) == capped(2, 1) and len(capped(100, 1)) == 3
    assert len({capped(1, s) for s in range(8)}) > 1


def test_for_causal_drops_y_inside(tmp_path) -> None:
    mp = mpb.build_multiprompt(toy_root(tmp_path), qa_templates=qa_file(tmp_path))
    causal = mp.for_causal()
    assert causal.templates["y_last"].all() and len(causal.templates) == len(mp.templates) - 1
    assert causal.dropped["reason"].tolist()[-1] == "[Y] not last (causal)"
    assert len(mp.templates) == 6  # the original is unchanged


def test_prepared_round_trip(tmp_path) -> None:
    mp = mpb.build_multiprompt(toy_root(tmp_path), qa_templates=qa_file(tmp_path))
    from factprobe.sources import load_facts

    test = load_facts("lama", str(tmp_path / "data" / "lama"), ["P1"])
    prepared = mp.to_prepared(test)
    prepared.save(tmp_path / "prep")
    back = mpb.MultiPromptSet.from_prepared(Prepared.load(tmp_path / "prep"))
    pd.testing.assert_frame_equal(back.templates, mp.templates)
    pd.testing.assert_frame_equal(back.facts, mp.facts)
    with pytest.raises(DataError, match="not a multi-prompt dataset"):
        mpb.MultiPromptSet.from_prepared(Prepared("qa", {}, {"test": test}))


@pytest.mark.parametrize(
    "where, text, message",
    [
        (
            "pararel",
            '{"pattern": "[X] is the capital."}\n',
            (
                r"pararel/patterns/P1.jsonl:1: template '\[X\] is the capital\.' "
                r"lacks the slot \[Y\]"
            ),
        ),
        ("pararel", '{"pattern": "[X] and [X] in [Y]"}\n', r"P1.jsonl:1: template .* has 2 of the slot \[X\]"),
        ("manual", "[X] is in [Y]\n[X] [Y] [Y]\n", r"manual_paraphrase/P1.txt:2: template '\[X\] \[Y\] \[Y\]' has 2 of"),
        ("paraphrase", '{"template": "capital [Y]", "weight": 1}\n', r"paraphrase/P1.jsonl:1: .* lacks the slot \[X\]"),
    ],
)
def test_bad_templates_name_file_and_line(tmp_path, where, text, message) -> None:
    root = toy_root(tmp_path)
    path = {
        "pararel": root / "pararel" / "patterns" / "P1.jsonl",
        "manual": root / "lpaqa" / "prompts" / "manual_paraphrase" / "P1.txt",
        "paraphrase": root / "lpaqa" / "prompts" / "paraphrase" / "P1.jsonl",
    }[where]
    write(path, text)
    with pytest.raises(DataError, match=message):
        mpb.build_multiprompt(root, qa_templates=qa_file(tmp_path))


def test_bad_qa_templates(tmp_path) -> None:
    root = toy_root(tmp_path)
    with pytest.raises(DataError, match=r"qa.tsv:4: template 'Who is \[X\]\?' lacks the slot \[Y\]"):
        mpb.build_multiprompt(root, qa_templates=qa_file(tmp_path, "P1\tWhich city? [X] [Y]\nP1\tWho is [X]?\n"))
    with pytest.raises(DataError, match="qa.tsv:3: expected 2 tab-separated columns"):
        mpb.build_multiprompt(root, qa_templates=qa_file(tmp_path, "P1\tA [X] [Y]\textra\n"))
    bad_header = write(tmp_path / "h.tsv", "rel\ttemplate\n")
    with pytest.raises(DataError, match="h.tsv:1: header must be"):
        mpb.load_belief_qa_templates(bad_header)
    with pytest.raises(DataError, match="not found"):
        mpb.load_belief_qa_templates(tmp_path / "missing.tsv")


def test_shipped_qa_templates() -> None:
    raw = mpb.load_belief_qa_templates()
    by_rel: dict[str, list[str]] = {}
    for t in raw:
        by_rel.setdefault(t.relation, []).append(t.text)
    assert len(by_rel) == 46 and all(len(v) >= 3 for v in by_rel.values())
    for t in raw:
        norm = mpb.normalize_template(t.text)
        assert mpb.is_y_last(norm) and mpb.template_style(norm, t.source) == "question", t
        assert norm.split("[Y]")[0].rstrip().endswith(("?", ".")), t  # a whole question (or request) before [Y]
        assert not norm.startswith("Where"), t  # names the kind of place (yuan2024 2.1, Specificity)


def test_real_data(real_data_root) -> None:
    rels = ["P17", "P19", "P36", "P103", "P530"]
    mp = mpb.build_multiprompt(real_data_root, rels)
    counts = mp.template_counts()
    assert set(counts) == set(rels) and min(counts.values()) >= 5
    t = mp.templates
    assert t["template_id"].is_unique
    assert not t.assign(k=t["template"].str.casefold()).duplicated(["relation", "k"]).any()
    for rec in t.to_dict("records"):
        assert rec["template"].count("[X]") == 1 and rec["template"].count("[Y]") == 1
        file, line = rec["provenance"].rsplit(":", 1)
        path = real_data_root / file if not file.startswith("factprobe") else Path(mpb.__file__).parents[2] / file
        assert path.is_file() and int(line) >= 1, rec
    assert set(t["source"]) == set(mpb.TEMPLATE_SOURCES)
    assert (mp.facts.groupby("relation").size() > 20).all()  # every pair: the cap is the framework's
    assert mp.facts["gold"].map(len).max() > 1  # N-M pairs keep every correct object (P530)
