"""LPAQA training facts and HGP/MMP prompt readers on the real files, plus error fixtures."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from factprobe.errors import ConfigError, DataError
from factprobe.sources import load_facts
from factprobe.sources.lama import load_lama
from factprobe.sources.lpaqa import (
    hgp_templates, is_causal_prefix, load_lpaqa_train, load_prompts, mmp_templates, normalize_template,
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


@pytest.mark.parametrize("raw, norm", [
    ("The capital of [X] is [Y] .", "The capital of [X] is [Y]"),
    ("The capital of [X] is [Y].", "The capital of [X] is [Y]"),
    ("  [X]   city  [Y] .  ", "[X] city [Y]"),
    ("[X] is [Y] citizen .", "[X] is [Y]"),
    ("[Y] is the capital of [X] .", "[Y] is the capital of [X]."),
])
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


def test_hgp_and_mmp_templates(prompts):
    hgp = hgp_templates(prompts, "P36", k=3)
    assert hgp == ["The capital of [X] is [Y]", "The capital city of [X] is [Y]", "[X] is the capital of [Y]"]
    mmp = mmp_templates(prompts, "P36", k=3)
    assert len(mmp) == 3 and len(set(mmp)) == 3
    assert mmp[0] == "[X] city of [Y]"
    # the lpaqa folder above prompts/ is accepted too
    assert mmp_templates(prompts.parent, "P36", k=3) == mmp


def test_hgp_falls_back_to_paraphrase(tmp_path):
    (tmp_path / "manual_paraphrase").mkdir()
    (tmp_path / "manual_paraphrase" / "P1.txt").write_text("[X] is in [Y] .\n\n[X] is in [Y].\n")
    (tmp_path / "paraphrase").mkdir()
    (tmp_path / "paraphrase" / "P1.jsonl").write_text(
        json.dumps({"template": "[X] lies in [Y] .", "weight": 0.2}) + "\n"
        + json.dumps({"template": "[X] sits in [Y] .", "weight": 0.7}) + "\n"
    )
    assert hgp_templates(tmp_path, "P1", k=3) == ["[X] is in [Y]", "[X] sits in [Y]", "[X] lies in [Y]"]
    with pytest.raises(DataError, match="no HGP prompts for P2"):
        hgp_templates(tmp_path, "P2")


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
