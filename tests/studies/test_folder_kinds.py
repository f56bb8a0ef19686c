"""Issue 28 item 5 (first bullet): every command that writes a folder claims it with its kind
(probe, finetune, study, `compare --out`, `regress --out`); a folder of another kind is refused in
one line naming its real kind. A finished study folder is recognised (by its marker, and without
one by `study_config.json`), so a probe into it no longer overwrites its metrics.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from factprobe.cli import main
from factprobe.errors import ConfigError
from factprobe.run_folder import HOLDS, KINDS, MARKER, WRITER, FolderKindError, claim, holds
from factprobe.studies.cli import run_study, study_config

from .test_study_cli import echo  # noqa: F401 (the fixture: a tiny registered study, no model)

#: the files a finished run of each kind leaves (what each command writes), without the marker
FILES = {
    "probe": {"run_config.json": json.dumps({"config": {"probe": "qa"}}), "results.jsonl": "", "metrics.json": "{}"},
    "finetune": {"finetune_config.json": "{}", "trainer_state.json": "{}", "metrics.json": "{}"},
    "study": {"study_config.json": json.dumps({"study": "echo", "params": {"times": 2}}), "metrics.json": '{"total": 3}'},
    "compare": {"cross_model.json": "{}", "heatmap.png": "png"},
    "regress": {"gate_report.txt": "PASS"},
    "map": {"map_inputs.json": "{}", "knowledge_map.json": "{}"},
    "map-diff": {"diff.json": "{}"},
}
WHAT = {
    "probe": "qa",
    "finetune": "finetune_config.json",
    "study": "echo",
    "compare": "cross_model.json",
    "regress": "gate_report.txt",
    "map": "map_inputs.json",
    "map-diff": "diff.json",
}


def finished(out: Path, kind: str, marker: bool = True) -> Path:
    """A folder as a finished run of `kind` leaves it (claimed through `claim`, so with its marker,
    unless `marker` is False: a folder of a version that wrote none)."""
    if marker:
        with claim(out, kind, WHAT[kind] if kind in ("probe", "study") else ""):
            pass
    out.mkdir(parents=True, exist_ok=True)
    for name, text in FILES[kind].items():
        (out / name).write_text(text)
    return out


@pytest.mark.parametrize("marker", [True, False], ids=["marker", "no-marker"])
@pytest.mark.parametrize("holder,writer", [(h, w) for h in KINDS for w in KINDS if h != w])
def test_a_folder_of_another_kind_is_refused_naming_its_kind(tmp_path, holder, writer, marker):
    """Every pair of kinds: the writer is refused in one line naming what the folder holds; nothing is
    written (the marker still names the holder). Study, compare and regress folders were not
    recognised before (a probe or a fine-tuning run wrote into them)."""
    out = finished(tmp_path / "f", holder, marker)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(FolderKindError) as e, claim(out, writer, "x"):
        raise AssertionError("the block ran")
    line = str(e.value)
    assert "\n" not in line
    assert line.startswith(f"{out} holds {HOLDS[holder]} ({WHAT[holder]}") and f"{WRITER[writer]} cannot write into it" in line
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert holds(out)[0] == holder


@pytest.mark.parametrize("kind", KINDS)
def test_the_same_kind_may_write_again_and_a_new_folder_is_created(tmp_path, kind):
    out = finished(tmp_path / "f", kind)
    with claim(out, kind, WHAT[kind] if kind in ("probe", "study") else "") as got:
        assert got == out
    assert json.loads((out / MARKER).read_text())["kind"] == kind
    with claim(tmp_path / "new" / "deep", kind) as got:
        assert got.is_dir()


def test_an_unknown_kind_is_a_programming_error(tmp_path):
    with pytest.raises(ValueError, match="unknown folder kind 'report'"), claim(tmp_path, "report"):
        pass


@pytest.mark.slow  # the probe command in this Python, a tiny RANDOM model: ~20 s CPU
def test_a_probe_into_a_finished_study_folder_is_refused_and_leaves_it_as_it_was(
    echo,  # noqa: F811 (the fixture, imported above for pytest)
    tmp_path,
    tiny_model_path,
    capsys,
):
    """The hostile case of issue 28: `factprobe probe` into a finished study's folder used to
    overwrite the study's metrics.json (exit 0). Now: one line, exit 2, the folder untouched."""
    out = tmp_path / "study"
    run_study(echo, study_config(echo, {"times": 2}), out, progress=False)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
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
    assert rc == 2, err
    lines = [x for x in err.splitlines() if x.startswith("error: ")]
    assert lines == [f"error: {out} holds a study (echo); a probe run cannot write into it; use another --out"], err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_finetune_into_a_finished_study_folder_is_refused(echo, tmp_path, tiny_model_path, capsys):  # noqa: F811
    out = tmp_path / "study"
    run_study(echo, study_config(echo, {"times": 2}), out, progress=False)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    rc = main(
        [
            "finetune",
            "--model",
            str(tiny_model_path("llama")),
            "--out",
            str(out),
            "--train-set",
            "regular",
            "--train-size",
            "16",
            "--max-steps",
            "1",
            "--device",
            "cpu",
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"{out} holds a study (echo); finetune cannot write into it" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@pytest.mark.parametrize("holder", ["finetune", "compare", "regress"])
def test_a_study_into_a_folder_of_another_kind_is_refused(echo, tmp_path, holder):  # noqa: F811
    out = finished(tmp_path / "f", holder)
    with pytest.raises(ConfigError, match=rf"holds {HOLDS[holder].replace('(', '.').replace(')', '.')} .*a study cannot write"):
        run_study(echo, study_config(echo, {}), out, progress=False)
    assert not (out / "study_config.json").exists()


def test_a_study_refused_on_its_options_leaves_a_folder_any_kind_may_use(echo, tmp_path):  # noqa: F811
    """A marker alone (a run refused before it wrote anything) does not hold the folder."""
    out = tmp_path / "f"
    with claim(out, "study", "echo"):
        pass
    assert holds(out) is None
    with claim(out, "compare"):
        pass
