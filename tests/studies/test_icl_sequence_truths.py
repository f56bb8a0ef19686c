"""`factprobe study icl-sequence --train-data`: the training facts are a loaded source, so what they
hold true is never an "incorrect" example and their subjects are never "fictitious" ones (issue 29
item 6). Tiny RANDOM model: only which examples are built is checked, never a probability."""

from __future__ import annotations

import json

import pytest

from factprobe.models.testing import widen_tiny_llama
from factprobe.studies.cli import run_study, study_config
from factprobe.studies.icl_sequence import STUDY
from factprobe.studies.sequence_data import _splice

pytestmark = pytest.mark.slow

CAPITALS = [
    ("France", "Paris"),
    ("Germany", "Berlin"),
    ("Italy", "Rome"),
    ("Spain", "Madrid"),
    ("Japan", "Tokyo"),
    ("Canada", "Ottawa"),
]


@pytest.fixture(scope="module")
def wide_llama(tiny_model_path, tmp_path_factory):
    return widen_tiny_llama(tiny_model_path("llama"), tmp_path_factory.mktemp("wide"))


def _write(tmp_path, train: list[tuple[str, str]]):
    test = tmp_path / "test.jsonl"
    test.write_text("".join(json.dumps({"subject": s, "relation": "P36", "object": o}) + "\n" for s, o in CAPITALS))
    folder = tmp_path / "train"
    folder.mkdir()
    (folder / "P36.jsonl").write_text(
        "".join(
            json.dumps({"sub_uri": f"Qs{i}", "obj_uri": f"Qo{o}", "sub_label": s, "obj_label": o}) + "\n"
            for i, (s, o) in enumerate(train)
        )
    )
    return test, folder


def _run(tmp_path, model, test, train, kind: str) -> list[dict]:
    given = {
        "model": str(model),
        "source": "triples",
        "data": str(test),
        "train_data": str(train),
        "device": "cpu",
        "dtype": "float32",
        "relations": "P36",
        "length": 6,
        "replace": 6,
        "kind": kind,
    }
    run_study(STUDY, study_config(STUDY, given), tmp_path / kind, progress=False)
    return [json.loads(line) for line in (tmp_path / kind / "positions.jsonl").read_text().splitlines()]


def test_training_facts_are_never_incorrect_and_their_subjects_never_fictitious(tmp_path, wide_llama):
    objects = [o for _, o in CAPITALS]
    # the training facts call every capital but the subject's own and the next country's one true for it:
    # the only object that is wrong in both sources is the next country's capital
    only_wrong = {s: objects[(i + 1) % len(objects)] for i, (s, _) in enumerate(CAPITALS)}
    train = [(s, o) for s, own in CAPITALS for o in objects if o not in (own, only_wrong[s])]
    # every name the splicer can make from the six countries is a training subject, but six
    names = sorted({_splice([a], [b], False) for a, _ in CAPITALS for b, _ in CAPITALS} - {s for s, _ in CAPITALS})
    free = set(names[:6])
    train += [(n, "Paris") for n in names[6:]]
    test, folder = _write(tmp_path, train)
    rows = _run(tmp_path, wide_llama, test, folder, "incorrect")
    assert len(rows) == 6 and all(r["replaced"] and r["object"] == only_wrong[r["subject"]] for r in rows)
    rows = _run(tmp_path, wide_llama, test, folder, "unknown")
    assert all(r["fictitious_subject"] for r in rows) and {r["subject"] for r in rows} == free
