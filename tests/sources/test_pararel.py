"""ParaRel pattern reader (factprobe.sources.pararel) on the real files, plus error fixtures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from factprobe.errors import ConfigError, DataError
from factprobe.sources.pararel import check_template_slots, load_pararel_patterns


def write(path: Path, recs) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in recs), encoding="utf-8")
    return path


def test_real_patterns(real_data_root) -> None:
    root = real_data_root / "pararel"
    if not root.is_dir():
        pytest.skip(f"ParaRel data not found at {root}")
    pats = load_pararel_patterns(root)  # the folder above patterns/ is accepted
    assert len(pats) == 39 and sum(len(v) for v in pats.values()) == 329
    assert list(pats)[:3] == ["P17", "P19", "P20"]  # natural relation order
    p17 = pats["P17"][0]
    assert (p17.pattern, p17.line, p17.lemma, p17.tense) == ("[X] is located in [Y] .", 1, "is-located", "present")
    assert p17.file.endswith("pararel/patterns/P17.jsonl")
    only = load_pararel_patterns(root / "patterns", ["P36"])
    assert list(only) == ["P36"] and [p.line for p in only["P36"]] == list(range(1, len(only["P36"]) + 1))
    with pytest.raises(ConfigError, match="unknown relation.*P99999"):
        load_pararel_patterns(root, ["P99999"])


def test_check_template_slots() -> None:
    check_template_slots("[X] is in [Y].", "f:1")
    with pytest.raises(DataError, match=r"f:2: template '\[X\] is in' lacks the slot \[Y\]"):
        check_template_slots("[X] is in", "f:2")
    with pytest.raises(DataError, match=r"f:3: template .* has 2 of the slot \[Y\]"):
        check_template_slots("[X] [Y] [Y]", "f:3")


@pytest.mark.parametrize(
    "recs, message",
    [
        ([{"pattern": "[X] is in [Y]."}, {"pattern": "[X] is [X] in [Y]."}], r"P1.jsonl:2: template .* has 2 of the slot \[X\]"),
        ([{"pattern": "[Y] only"}], r"P1.jsonl:1: template '\[Y\] only' lacks the slot \[X\]"),
        ([{"pattern": 3}], "P1.jsonl:1: pattern must be text"),
        ([{"lemma": "x"}], "P1.jsonl:1: missing field"),
        (["{not json"], "P1.jsonl:1: malformed JSON"),
    ],
)
def test_bad_patterns_name_file_and_line(tmp_path, recs, message) -> None:
    write(tmp_path / "patterns" / "P1.jsonl", recs)
    with pytest.raises(DataError, match=message):
        load_pararel_patterns(tmp_path)


def test_missing_or_empty_folder(tmp_path) -> None:
    with pytest.raises(DataError, match="ParaRel patterns folder not found"):
        load_pararel_patterns(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no P\\*.jsonl ParaRel pattern files"):
        load_pararel_patterns(tmp_path / "empty")
