"""Issue 28 item 5: `compare --out DIR` claims DIR as a "compare" folder (factprobe.run_folder.claim):
a probe's or a study's folder is refused in one line naming its real kind and left untouched, and a
probe into a comparison's folder is refused in turn. Fake result folders (no model)."""

from __future__ import annotations

import json

import pytest

from factprobe.cli import main
from factprobe.run_folder import MARKER, holds

from .test_compare_cross_model import three  # noqa: F401 (fixture: three finished probe folders)


def test_compare_out_into_a_probe_folder_is_refused_and_leaves_it_as_it_was(three, capsys):  # noqa: F811
    tmp, runs, meta = three
    probe_folder = tmp / "small"
    before = {p.name: p.read_bytes() for p in probe_folder.iterdir()}
    rc = main(["compare", *runs, "--out", str(probe_folder), "--model-meta", str(meta)])
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert rc == 2 and err == [
        (f"error: {probe_folder} holds a probe run (ic-lke); compare --out cannot write into it; use another --out")
    ], err
    assert {p.name: p.read_bytes() for p in probe_folder.iterdir()} == before


def test_compare_out_into_a_study_folder_is_refused(three, capsys):  # noqa: F811
    tmp, runs, meta = three
    study = tmp / "study"
    study.mkdir()
    (study / "study_config.json").write_text(json.dumps({"study": "icl-examples", "params": {}}))
    (study / "metrics.json").write_text('{"n95": 5}')
    assert main(["compare", *runs, "--out", str(study), "--model-meta", str(meta)]) == 2
    assert "holds a study (icl-examples); compare --out cannot write into it" in capsys.readouterr().err
    assert (study / "metrics.json").read_text() == '{"n95": 5}' and not (study / "cross_model.json").exists()


@pytest.mark.slow  # the probe command on a tiny RANDOM model: ~8 s
def test_a_comparison_folder_is_marked_and_refused_to_a_probe(three, tiny_model_path, capsys):  # noqa: F811
    tmp, runs, meta = three
    out = tmp / "maps"
    assert main(["compare", *runs, "--out", str(out), "--model-meta", str(meta)]) == 0
    assert json.loads((out / MARKER).read_text())["kind"] == "compare" and holds(out)[0] == "compare"
    assert main(["compare", *runs, "--out", str(out), "--model-meta", str(meta)]) == 0  # the same kind again
    capsys.readouterr()
    rc = main(
        [
            "probe",
            "qa",
            "--model",
            str(tiny_model_path("gpt2")),
            "--relations",
            "P36",
            "--max-facts-per-relation",
            "2",
            "--device",
            "cpu",
            "--no-progress",
            "--no-track",
            "--out",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and f"{out} holds a comparison (cross_model.json, heatmap.png" in err, err
    assert not (out / "results.jsonl").exists()
