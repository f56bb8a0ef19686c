"""The README's tour runs as written (issue 22): its commands are parsed from README.md itself, so
the tour cannot drift from the CLI.

- The tour is the first ```bash block under the README heading `## A 10-minute tour`; every
  `.venv/bin/factprobe ...` line of it (continuation lines joined, comments dropped) is one command.
- Every tour command parses with the real `factprobe` argument parser.
- The IC-LKE and HGP commands give the same values to every flag that decides the items (facts and
  distractors), and the tour's `compare` names the two folders they write.
- Run scaled down (`FACTPROBE_TOUR_FACTS` facts per relation, default 2; a TINY RANDOM model in
  place of the README's model, so no number here is a result), IC-LKE, HGP and their `compare`
  join on every fact. The `real_model` test does the same with the README's own model.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import pytest

from factprobe.cli import build_parser, main

README = Path(__file__).resolve().parents[1] / "README.md"
TOUR_HEADING = "## A 10-minute tour"
#: the README's commands name the data relative to the repository root, as `../shared/data/...`
README_DATA = "../shared/data"
#: flags that decide which facts and distractors a multiple-choice run scores (BaseConfig + MCConfig)
ITEM_FLAGS = ("--source", "--data", "--train-data", "--relations", "--max-facts-per-relation", "--seed", "--choices")
FACTS_ENV = "FACTPROBE_TOUR_FACTS"


def tour_block(text: str) -> str:
    """The first ```bash block after the tour heading (AssertionError when there is none)."""
    start = text.find(f"\n{TOUR_HEADING}")
    assert start >= 0, f"README.md has no {TOUR_HEADING!r} section"
    m = re.search(r"```bash\n(.*?)```", text[start:], re.S)
    assert m, f"README.md's {TOUR_HEADING!r} section has no ```bash block"
    return m.group(1)


def tour_commands(text: str) -> list[list[str]]:
    """Each `.venv/bin/factprobe` command of the tour as argv (without the program)."""
    joined = re.sub(r"\\\n\s*", " ", tour_block(text))
    commands = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words and words[0].endswith("bin/factprobe"):
            commands.append(words[1:])
    return commands


def flag(argv: list[str], name: str) -> str | None:
    """The value of `--name VALUE` or `--name=VALUE` in argv (None when absent)."""
    for i, word in enumerate(argv):
        if word == name:
            return argv[i + 1]
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return None


def with_flag(argv: list[str], name: str, value: str) -> list[str]:
    """argv with `name` set to `value` (replaced where present, appended otherwise)."""
    out, i, done = [], 0, False
    while i < len(argv):
        if argv[i] == name:
            out += [name, value]
            i, done = i + 2, True
            continue
        out.append(argv[i])
        i += 1
    return out if done else out + [name, value]


def probe_command(commands: list[list[str]], probe: str) -> list[str]:
    found = [c for c in commands if c[:2] == ["probe", probe]]
    assert len(found) == 1, f"the tour should have one `factprobe probe {probe}` command, has {len(found)}"
    return found[0]


def compare_command(commands: list[list[str]]) -> list[str]:
    found = [c for c in commands if c[:1] == ["compare"]]
    assert len(found) == 1, f"the tour should have one `factprobe compare` command, has {len(found)}"
    return found[0]


@pytest.fixture(scope="module")
def commands() -> list[list[str]]:
    return tour_commands(README.read_text())


def test_tour_has_the_four_goals(commands):
    probes = [c[1] for c in commands if c[:1] == ["probe"]]
    assert probes[:2] == ["ic-lke", "hgp"] and {"qa", "counterfactual"} <= set(probes), probes
    assert "mlflow ui" in tour_block(README.read_text())


def test_every_tour_command_parses(commands):
    parser = build_parser()
    for argv in commands:
        try:
            parser.parse_args(argv)
        except SystemExit as e:  # argparse printed why on stderr
            pytest.fail(f"README tour command does not parse ({e.code}): factprobe {' '.join(argv)}")


def test_ic_lke_and_hgp_build_the_same_items_and_compare_names_their_folders(commands):
    ic, hgp = probe_command(commands, "ic-lke"), probe_command(commands, "hgp")
    differ = {f: (flag(ic, f), flag(hgp, f)) for f in ITEM_FLAGS if flag(ic, f) != flag(hgp, f)}
    assert not differ, f"the tour's IC-LKE and HGP commands build different items: {differ}"
    assert flag(ic, "--train-data"), "without --train-data half of the test facts become examples (issue 22)"
    assert flag(ic, "--model") == flag(hgp, "--model")
    outs = [flag(ic, "--out"), flag(hgp, "--out")]
    assert None not in outs and compare_command(commands)[1:3] == outs, (outs, compare_command(commands))


def test_with_train_data_dropped_the_guard_fails(commands):
    """The check above can fail: the HGP command of the issue (no --train-data) is caught."""
    ic, hgp = probe_command(commands, "ic-lke"), probe_command(commands, "hgp")
    i = hgp.index("--train-data")
    broken = hgp[:i] + hgp[i + 2 :]
    assert [f for f in ITEM_FLAGS if flag(ic, f) != flag(broken, f)] == ["--train-data"]


def _local(argv: list[str], root: Path) -> list[str]:
    """The README's `../shared/data/...` paths under this machine's data root."""
    return [str(root / w[len(README_DATA) + 1 :]) if w.startswith(README_DATA + "/") else w for w in argv]


def _run_tour(commands, capsys, monkeypatch, tmp_path, real_data_root, model: str | None) -> dict:
    """IC-LKE, HGP and compare from the tour, scaled down; returns what they wrote and printed."""
    facts = os.environ.get(FACTS_ENV, "2")
    monkeypatch.chdir(tmp_path)  # the tour's runs/... folders land here
    out = {}
    for probe in ("ic-lke", "hgp"):
        argv = _local(probe_command(commands, probe), real_data_root)
        argv = with_flag(argv, "--max-facts-per-relation", facts)
        if model is not None:
            argv = with_flag(argv, "--model", model)
        rc = main(argv + ["--no-track", "--no-progress"])
        printed = capsys.readouterr().out
        assert rc == 0, printed
        folder = tmp_path / flag(argv, "--out")
        out[probe] = json.loads((folder / "metrics.json").read_text())
    rc = main(compare_command(commands))
    out["compare"] = capsys.readouterr().out
    assert rc == 0, out["compare"]
    return out


def _assert_joined(out: dict) -> None:
    """Every IC-LKE fact is joined, and HGP scored each of them once per template of its relation."""
    n_facts = out["ic-lke"]["n"]
    templates = out["hgp"]["hgp_templates"]
    rows = sum(out["ic-lke"]["per_relation"][rel]["n"] * len(templates[rel]) for rel in out["ic-lke"]["per_relation"])
    assert n_facts > 0 and out["hgp"]["n"] == rows > n_facts
    assert f"facts joined: {n_facts} (only in A: 0, only in B: 0)" in out["compare"], out["compare"]
    assert f"reduced to {n_facts} facts" in out["compare"], out["compare"]


@pytest.mark.slow
def test_tour_ic_lke_and_hgp_compare_join(commands, capsys, monkeypatch, tmp_path, real_data_root, tiny_model_path):
    out = _run_tour(commands, capsys, monkeypatch, tmp_path, real_data_root, str(tiny_model_path("llama")))
    _assert_joined(out)


@pytest.mark.real_model
@pytest.mark.slow
def test_tour_runs_with_the_readme_model(commands, capsys, monkeypatch, tmp_path, real_data_root, real_model_path):
    model = flag(probe_command(commands, "ic-lke"), "--model")
    real_model_path(model)  # converted once into the real cache
    out = _run_tour(commands, capsys, monkeypatch, tmp_path, real_data_root, None)
    _assert_joined(out)
