"""Issue 28 item 7: BELIEF's template sources never give fewer templates silently. An empty
`pararel/patterns/` folder (or an LPAQA prompts folder without prompt files), and a
`lama/relations.jsonl` without a probed relation's line, used to leave those templates out without a
word; now each is a DataError naming the path (and the relations), unless `--template-sources` leaves
the source out."""

from __future__ import annotations

import json
import shutil

import pytest

from factprobe.datasets import multiprompt as mpb
from factprobe.errors import DataError
from factprobe.framework.config import BaseConfig

from .test_multiprompt import qa_file, toy_root, write


def build(root, tmp_path, sources=mpb.TEMPLATE_SOURCES):
    return mpb.build_multiprompt(root, template_sources=sources, qa_templates=qa_file(tmp_path))


def test_empty_pararel_folder_is_an_error_unless_left_out(tmp_path):
    root = toy_root(tmp_path)
    before = build(root, tmp_path).template_counts()
    for f in (root / "pararel" / "patterns").iterdir():
        f.unlink()
    with pytest.raises(DataError) as e:
        build(root, tmp_path)
    msg = str(e.value)
    assert msg.startswith(f"template source 'pararel': {root / 'pararel' / 'patterns'} holds no P*.jsonl template files")
    assert msg.endswith("leave it out on purpose with --template-sources lama,lpaqa-manual,lpaqa-paraphrase,belief-qa")
    after = build(root, tmp_path, ["lama", "lpaqa-manual", "lpaqa-paraphrase", "belief-qa"]).template_counts()
    assert after["P1"] < before["P1"]  # left out on purpose: fewer templates, and said so by the sources asked


@pytest.mark.parametrize("folder, source", [("manual_paraphrase", "lpaqa-manual"), ("paraphrase", "lpaqa-paraphrase")])
def test_empty_lpaqa_folder_is_an_error(tmp_path, folder, source):
    root = toy_root(tmp_path)
    shutil.rmtree(root / "lpaqa" / "prompts" / folder)
    (root / "lpaqa" / "prompts" / folder).mkdir()
    with pytest.raises(DataError, match=rf"^template source '{source}': .*{folder} holds no"):
        build(root, tmp_path)


def test_relations_jsonl_without_the_relations_line_is_an_error_unless_left_out(tmp_path):
    root = toy_root(tmp_path)
    path = root / "lama" / "relations.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(line for line in lines if '"P1"' not in line))  # P1's line gone, P2's kept
    with pytest.raises(DataError) as e:
        build(root, tmp_path)
    msg = str(e.value)
    assert msg.startswith(f"template source 'lama': {path} has no line for relation(s) P1; add a line")
    assert msg.endswith("leave it out on purpose with --template-sources pararel,lpaqa-manual,lpaqa-paraphrase,belief-qa")
    mp = build(root, tmp_path, ["pararel", "lpaqa-manual", "lpaqa-paraphrase", "belief-qa"])
    assert "lama" not in set(mp.templates["source"]) and mp.relations == ["P1"]


def test_a_line_with_an_empty_template_says_the_relation_has_none(tmp_path):
    """P2's line has an empty template on purpose: P2 is dropped as having no template, not an error."""
    mp = build(toy_root(tmp_path), tmp_path)
    assert set(mp.dropped_relations) == {"P2"}


def test_prepare_multiprompt_refuses_a_relation_missing_from_relations_jsonl(tmp_path, monkeypatch):
    """Through the BELIEF probes' own entry (`--source lama --data <root>/lama --relations P3`)."""
    root = toy_root(tmp_path)
    write(
        root / "lama" / "trex" / "P3.jsonl",
        json.dumps({"sub_uri": "Q7", "obj_uri": "Q8", "sub_label": "C", "obj_label": "D"}) + "\n",
    )
    monkeypatch.setenv("FACTPROBE_DATA", str(root))
    base = BaseConfig(source="lama", data=str(root / "lama"), relations=["P1", "P3"], model="unused")
    with pytest.raises(DataError, match=r"relations\.jsonl has no line for relation\(s\) P3;"):
        mpb.prepare_multiprompt(base, qa_templates=qa_file(tmp_path))
