"""LPAQA training facts and HGP/MMP prompt readers on the real files, plus error fixtures."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from factprobe.errors import ConfigError, DataError
from factprobe.sources import load_facts
from factprobe.sources.lama import load_lama
from factprobe.sources.lpaqa import (
    PAPER_TABLE,
    backwards_templates,
    canonical_template,
    hgp_templates,
    is_backwards,
    is_causal_prefix,
    load_lpaqa_train,
    load_prompts,
    mmp_templates,
    normalize_template,
    paper_relations,
    paper_templates,
    reference_patterns,
    sample_templates,
)


@pytest.fixture(scope="module")
def lpaqa_dir(real_data_root: Path) -> Path:
    path = real_data_root / "lpaqa"
    if not (path / "trex_train").is_dir():
        pytest.skip(f"LPAQA data not found at {path}")
    return path


@pytest.fixture(scope="module")
def prompts(lpaqa_dir) -> Path:
    return lpaqa_dir / "prompts"


def test_train_facts_real_counts(lpaqa_dir):
    fs = load_facts("lpaqa-train", str(lpaqa_dir / "trex_train"), relations=["P36", "P530"])
    assert len(fs.by_relation()["P36"]) == 1000
    assert fs.relations["P36"].label == "P36"  # no relations.jsonl here: default metadata
    assert fs.source.startswith("lpaqa-train:")


def test_train_pairs_disjoint_from_test_but_some_subjects_shared(lpaqa_dir, real_data_root):
    rels = ["P36", "P530", "P1412"]
    train = load_lpaqa_train(lpaqa_dir / "trex_train", relations=rels)
    test = load_lama(real_data_root / "lama", relations=rels)
    assert not {f.fact_id for f in train} & {f.fact_id for f in test}
    shared = {(f.relation, f.subject_key) for f in train} & {(f.relation, f.subject_key) for f in test}
    assert sum(1 for rel, _ in shared if rel == "P530") == 128  # why examples must exclude test subjects


def test_train_meta_passthrough(lpaqa_dir, real_data_root):
    from factprobe.sources import load_relations_meta

    meta = load_relations_meta(real_data_root / "lama" / "relations.jsonl")
    fs = load_lpaqa_train(lpaqa_dir / "trex_train", relations=["P36"], meta=meta)
    assert fs.relations["P36"].template == "The capital of [X] is [Y] ."


def test_unknown_relation(lpaqa_dir):
    with pytest.raises(ConfigError, match="unknown relation.*P0"):
        load_lpaqa_train(lpaqa_dir / "trex_train", relations=["P0"])


@pytest.mark.parametrize(
    "raw, norm",
    [
        ("The capital of [X] is [Y] .", "The capital of [X] is [Y]"),
        ("The capital of [X] is [Y].", "The capital of [X] is [Y]"),
        ("  [X]   city  [Y] .  ", "[X] city [Y]"),
        ("[X] is [Y] citizen .", "[X] is [Y]"),
        ("[Y] is the capital of [X] .", "[Y] is the capital of [X]."),
    ],
)
def test_normalize_template(raw, norm):
    assert normalize_template(raw) == norm


def test_normalize_rejects_missing_slot():
    with pytest.raises(ValueError):
        normalize_template("[X] is nice .")
    assert is_causal_prefix("[X] a [Y]") and not is_causal_prefix("[Y] a [X]")


def test_load_prompts_real(prompts):
    mine = load_prompts(prompts, "P36", "mine")
    weights = [w for _, w in mine]
    assert weights == sorted(weights, reverse=True)
    assert all(t.endswith("[Y]") and "[X]" in t for t, _ in mine)
    everything = load_prompts(prompts, "P36", "mine", causal=False)
    assert len(everything) == 29 and len(mine) == 29 - 13  # 13 mined P36 prompts start with [Y]
    manual = load_prompts(prompts, "P36", "manual_paraphrase")
    assert manual[0] == ("The capital of [X] is [Y]", None)
    assert manual[1] == ("The capital of [X] is [Y]", None)  # "[Y] ." and "[Y]." coincide
    para = load_prompts(prompts, "P36", "paraphrase")
    assert para[0][1] >= para[-1][1]


def test_hgp_and_mmp_templates_are_sampled_not_the_first(prompts):
    hgp = hgp_templates(prompts, "P36", k=3)
    assert hgp == sample_templates("hgp", prompts, "P36", 3, seed=0)
    assert hgp == ["The [X] capital is [Y]", "The capital city of [X] is [Y]", "[X] is [Y]"]
    assert hgp_templates(prompts, "P36", k=3, seed=1) != hgp
    mmp = mmp_templates(prompts, "P36", k=3)
    assert mmp == ["[X] cities of [Y]", "[X] near [Y]", "[X] comprises the [Y]"]
    top = list(dict.fromkeys(t for t, _ in load_prompts(prompts, "P36", "mine")))[:3]
    assert mmp != top and "[X] city of [Y]" not in mmp  # not the top-weighted ones
    # the lpaqa folder above prompts/ is accepted too
    assert mmp_templates(prompts.parent, "P36", k=3) == mmp
    # fewer than k when fewer exist: P364 has one causal mined prompt, P413 two (as in the paper)
    assert sample_templates("mmp", prompts, "P364", 3, seed=4) == ["[X] a. r. rahman [Y]"]
    assert sorted(sample_templates("mmp", prompts, "P413", 3)) == ["[X] substitutes : [Y]", "[X] substitutions : [Y]"]


def test_sample_templates_depends_on_the_set_not_the_file_order(tmp_path):
    (tmp_path / "mine").mkdir()
    lines = [json.dumps({"template": f"[X] t{i} [Y] .", "weight": i / 10}) for i in range(8)]
    (tmp_path / "mine" / "P1.jsonl").write_text("\n".join(lines) + "\n")
    first = sample_templates("mmp", tmp_path, "P1", 3, seed=2)
    (tmp_path / "mine" / "P1.jsonl").write_text("\n".join(reversed(lines)) + "\n")
    assert sample_templates("mmp", tmp_path, "P1", 3, seed=2) == first
    assert len(first) == 3 and len(set(first)) == 3
    assert {tuple(sample_templates("mmp", tmp_path, "P1", 3, seed=s)) for s in range(10)} != {tuple(first)}
    with pytest.raises(ConfigError, match="unknown template kind"):
        sample_templates("autoprompt", tmp_path, "P1")
    with pytest.raises(ConfigError, match="k must be >= 1"):
        sample_templates("mmp", tmp_path, "P1", 0)
    with pytest.raises(DataError, match="no MMP prompts for P2"):
        sample_templates("mmp", tmp_path, "P2")


def test_hgp_falls_back_to_paraphrase(tmp_path):
    (tmp_path / "manual_paraphrase").mkdir()
    (tmp_path / "manual_paraphrase" / "P1.txt").write_text("[X] is in [Y] .\n\n[X] is in [Y].\n")
    (tmp_path / "paraphrase").mkdir()
    (tmp_path / "paraphrase" / "P1.jsonl").write_text(
        json.dumps({"template": "[X] lies in [Y] .", "weight": 0.2})
        + "\n"
        + json.dumps({"template": "[X] sits in [Y] .", "weight": 0.7})
        + "\n"
    )
    got = hgp_templates(tmp_path, "P1", k=3)
    assert got[0] == "[X] is in [Y]" and sorted(got[1:]) == ["[X] lies in [Y]", "[X] sits in [Y]"]
    with pytest.raises(DataError, match="no HGP prompts for P2"):
        hgp_templates(tmp_path, "P2")


# --- backwards templates -------------------------------------------------------------------------

BACKWARDS = {  # every template dropped over the 41 LAMA relations (all HGP, from manual_paraphrase)
    "P36": ["[X] is the capital of [Y]", "[X] is the capital city of [Y]", "[X] is the Capital of [Y]", "[X] is capital of [Y]"],
    "P37": ["[X] is the official language of [Y]"],
    "P39": ["[X] is the position of [Y]", "[X] is the status of [Y]"],
    "P103": [
        "[X] is the native language of [Y]",
        "[X] is the mother language of [Y]",
        "[X] is a native language of [Y]",
        "[X] is the mother tongue of [Y]",
    ],
    "P364": ["[X] is the original language of [Y]", "[X] is the source language of [Y]"],
}


def test_backwards_templates_over_all_41_relations(prompts, real_data_root):
    relations = sorted(p.stem for p in (real_data_root / "lama" / "trex").glob("P*.jsonl"))
    assert len(relations) == 41
    found = {}
    for rel in relations:
        assert backwards_templates("mmp", prompts, rel) == [], rel
        hgp = backwards_templates("hgp", prompts, rel)
        if hgp:
            found[rel] = hgp
    assert found == BACKWARDS


def test_backwards_templates_are_never_sampled(prompts):
    for seed in range(30):
        for rel, bad in BACKWARDS.items():
            assert not set(sample_templates("hgp", prompts, rel, 3, seed)) & set(bad), (rel, seed)
    # without the rule, P36 HGP would use "[X] is the capital of [Y]" (the old first-three choice did)
    manual = [t for t, _ in load_prompts(prompts, "P36", "manual_paraphrase")]
    assert "[X] is the capital of [Y]" in manual[:4]


@pytest.mark.parametrize(
    "template, references, backwards",
    [
        ("[X] is the capital of [Y]", ["The capital of [X] is [Y] .", "[Y] is the capital of [X]."], True),  # rule 1
        ("[X] is the mother tongue of [Y]", ["The mother tongue of [X] is [Y]."], True),  # rule 2, "is N of"
        ("[X] is the official language spoken in [Y]", ["[Y] is the official language of [X]."], True),  # rule 2, "in"
        ("[X] is the position of [Y]", ["[X]'s position is [Y]."], True),  # rule 2, possessive
        ("The capital of [X] is [Y]", ["The capital of [X] is [Y] ."], False),  # a reference itself
        ("The Capital of the [X] was [Y]", ["The capital of [X] is [Y] ."], False),  # canonically equal
        ("[X] is the capital of [Y]", ["[X] is the capital of [Y] .", "The capital of [Y] is [X]."], False),  # P1376
        ("[X] capital of [Y]", ["[Y], the capital of [X]."], False),  # bare apposition: "the French capital of Paris"
        ("[X] shares border with [Y]", ["[X] shares border with [Y].", "[Y] shares border with [X]."], False),  # symmetric
        ("[X] is a twin city of [Y]", ["[X] is a twin city of [Y].", "[Y] is a twin city of [X]."], False),
        ("[X] developed [Y]", ["[X] is developed by [Y] ."], False),  # no reference says otherwise: kept
    ],
)
def test_is_backwards_rules(template, references, backwards):
    assert is_backwards(template, references) is backwards


def test_canonical_template():
    assert canonical_template('[X] "s capital is [Y] .') == "[X] 's capital is [Y]"
    assert canonical_template("[Y], the capital of [X].") == "[Y] , capital of [X]"
    assert canonical_template("The Capital of the [X] was [Y]") == "capital of [X] is [Y]"


def test_reference_patterns_real(real_data_root):
    refs = reference_patterns("P36", real_data_root)
    assert refs[0] == "The capital of [X] is [Y] ." and "[Y] is the capital of [X]." in refs
    assert reference_patterns("P39", real_data_root)[-1] == "[X]'s status is [Y]."
    assert reference_patterns("P36", real_data_root / "missing") == []


# --- Wu et al. 2024, Table 5 --------------------------------------------------------------------


def _table5_rows_from_paper(text: str) -> list[tuple[str, str, str | None]]:
    """(index, HGP text, MMP text or None) per row of Table 5 in the paper's plain text."""
    block = text.split("Table 5: Templates for Selected Relations", 1)[1].split("Appendix H", 1)[0]
    rows = []
    for line in block.splitlines():
        m = re.match(r"^(?:.*? )?(\d) (.*\{subject\}.*)$", line.strip())
        if not m:
            continue
        rest = m.group(2)
        second = rest.find("{subject}", rest.find("{subject}") + 1)
        rows.append(
            (m.group(1), rest[:second].strip() if second > 0 else rest.strip(), rest[second:].strip() if second > 0 else None)
        )
    return rows


def test_paper_table_is_an_exact_transcription(real_data_root):
    paper = real_data_root.parent / "papers" / "wu2024-ic-lke-latent-knowledge-estimation.txt"
    if not paper.is_file():
        pytest.skip(f"paper text not found at {paper}")
    printed = _table5_rows_from_paper(paper.read_text(encoding="utf-8"))
    assert len(printed) == 36
    lines = [
        line.split("\t") for line in PAPER_TABLE.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")
    ][1:]
    assert "Wu et al. 2024, appendix G, Table 5" in PAPER_TABLE.read_text(encoding="utf-8")
    hgp = [(r[3], r[4]) for r in lines if r[2] == "hgp"]
    mmp = [(r[3], r[4]) for r in lines if r[2] == "mmp"]
    assert hgp == [(i, h) for i, h, _ in printed]
    assert mmp == [(i, m) for i, _, m in printed if m is not None]
    assert all(r[5] == r[4].replace("{subject}", "[X]") + " [Y]" for r in lines)


def test_paper_table_backwards_column_follows_the_rule(real_data_root):
    lines = [
        line.split("\t") for line in PAPER_TABLE.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")
    ][1:]
    for rel, _, _kind, _, _, template, flag in lines:
        assert (flag == "yes") == is_backwards(template, reference_patterns(rel, real_data_root)), (rel, template)
    assert [(r[0], r[2], r[5]) for r in lines if r[6] == "yes"] == [
        ("P103", "hgp", "[X] is a native language of [Y]"),
        ("P37", "mmp", "[X] is the official language in [Y]"),
        ("P37", "mmp", "[X] is the official language spoken in [Y]"),
    ]


def test_paper_templates():
    assert paper_relations() == ["P31", "P136", "P413", "P364", "P36", "P103", "P138", "P37", "P178", "P449", "P264", "P176"]
    assert paper_templates("hgp", "P36") == [
        "The capital of [X] is [Y]",
        "The capital city of [X] is [Y]",
        "Its capital [X] is [Y]",
    ]
    assert paper_templates("mmp", "P36") == [
        "[X] united states embassy in [Y]",
        "[X] representative legislature [Y]",
        "[X] rock band from [Y]",
    ]
    assert paper_templates("hgp", "P103") == ["The mother tongue of [X] is [Y]", "[X] means [Y]"]
    assert paper_templates("hgp", "P103", keep_backwards=True)[0] == "[X] is a native language of [Y]"
    assert paper_templates("mmp", "P37") == ["[X] professor of [Y]"]
    assert paper_templates("mmp", "P364") == ["[X] a. r. rahman [Y]"]
    assert sum(len(paper_templates(k, r, keep_backwards=True)) for k in ("hgp", "mmp") for r in paper_relations()) == 69
    with pytest.raises(ConfigError, match=r"no templates for P19; it covers P31, P136, .*, P176$"):
        paper_templates("hgp", "P19")
    with pytest.raises(ConfigError, match="unknown template kind"):
        paper_templates("manual", "P36")


def test_prompt_errors(tmp_path):
    (tmp_path / "manual_paraphrase").mkdir()
    (tmp_path / "manual_paraphrase" / "P1.txt").write_text("[X] is in [Y] .\n\n[X] is nice .\n")
    with pytest.raises(DataError, match=r"P1\.txt:3: template '\[X\] is nice \.' lacks \[X\] or \[Y\]"):
        load_prompts(tmp_path, "P1", "manual_paraphrase")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "P1.jsonl").write_text('{"template": "[X] a [Y] .", "weight": "high"}\n')
    with pytest.raises(DataError, match=r"P1\.jsonl:1: weight must be a number"):
        load_prompts(tmp_path, "P1", "mine")
    (tmp_path / "mine" / "P1.jsonl").write_text('{"template": "[X] a [Y] ."}\n')
    with pytest.raises(DataError, match=r"P1\.jsonl:1: missing field\(s\) weight"):
        load_prompts(tmp_path, "P1", "mine")
    with pytest.raises(DataError, match="file not found"):
        load_prompts(tmp_path, "P9", "mine")
    with pytest.raises(ConfigError, match="unknown prompt kind"):
        load_prompts(tmp_path, "P1", "autoprompt")
