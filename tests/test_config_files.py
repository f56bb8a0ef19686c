"""`--config FILE` for `probe`, `study` and `finetune` (issue 31 item 7).

- A YAML (or JSON) file of options; the flags given override it.
- A run's own record is a config file: a probe's run_config.json repeats the run into another folder
  (same results key, same verdicts); a fine-tune's finetune_config.json and a study's study_config.json
  give back the options they recorded.
- Refused in one line: unknown options (named, with the file), YAML or JSON that does not parse (its
  line), a file that is not a mapping or does not exist, a file of another probe.

Probe runs use a TINY RANDOM model (no number here is a result); fine-tuning is not run (the options
that would reach it are caught).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from factprobe.cli import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def _error(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ------------------------------------------------------------------ probe
@pytest.mark.slow  # three probe runs on a tiny model
def test_probe_from_yaml_flags_override_and_repeat_from_run_config(
    tiny_model_path, real_data_root, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    f = tmp_path / "ic.yaml"
    f.write_text(
        f"# the tour's IC-LKE, smaller\nmodel: {tiny_model_path('llama')}\nsource: lama\n"
        f"data: {real_data_root / 'lama'}\nrelations: [P36]\nmax-facts-per-relation: 2\nseed: 3\n"
        "examples: 5\nout: runs/from-yaml\n"
    )
    rc, _, err = run(capsys, "probe", "ic-lke", "--config", str(f), "--seed", "4", "--no-track", "--no-progress")
    assert rc == 0, err
    first = json.loads((tmp_path / "runs/from-yaml/run_config.json").read_text())
    cfg = first["config"]
    assert (cfg["seed"], cfg["relations"], cfg["examples"], cfg["max_facts_per_relation"]) == (4, ["P36"], 5, 2)
    # the run again from its own record, into another folder: the same run
    rc, _, err = run(
        capsys,
        "probe",
        "ic-lke",
        "--config",
        "runs/from-yaml/run_config.json",
        "--out",
        "runs/again",
        "--no-track",
        "--no-progress",
    )
    assert rc == 0, err
    again = json.loads((tmp_path / "runs/again/run_config.json").read_text())
    assert again["results_key"] == first["results_key"]
    assert {k: v for k, v in again["config"].items() if k != "out"} == {k: v for k, v in cfg.items() if k != "out"}
    rows = [
        [(r["fact_id"], r["correct"], r["prediction"]) for r in map(json.loads, (tmp_path / d / "results.jsonl").open())]
        for d in ("runs/from-yaml", "runs/again")
    ]
    assert rows[0] == rows[1] and len(rows[0]) == 2
    # a flag changes one option of the repeated run
    rc, _, err = run(
        capsys,
        "probe",
        "ic-lke",
        "--config",
        "runs/from-yaml/run_config.json",
        "--out",
        "runs/seed5",
        "--seed",
        "5",
        "--no-track",
        "--no-progress",
    )
    assert rc == 0, err
    assert json.loads((tmp_path / "runs/seed5/run_config.json").read_text())["config"]["seed"] == 5


@pytest.mark.parametrize(
    "text,needle",
    [
        ("model: m\nrelatons: P36\nfoo: 1\n", r"{f}: unknown option(s) foo, relatons for probe ic-lke; known: "),
        ("model: m\nrelations: [P36\nseed: 1\n", r"{f}:3: not valid YAML ("),
        ("model: m\n  seed: 1\n", r"{f}:2: not valid YAML ("),
        ("- model\n- m\n", r"{f}: a config file holds `option: value` pairs (a mapping), not a list"),
        ("probe: hgp\nmodel: m\n", r"{f}: a config of probe hgp, not ic-lke; run `factprobe probe hgp --config {f}`"),
        ("seed: -1\n", "seed=-1: must be in [0, 2**32)"),
    ],
)
def test_probe_config_refused_in_one_line(capsys, tmp_path, text, needle):
    f = tmp_path / "c.yaml"
    f.write_text(text)
    rc, out, err = run(capsys, "probe", "ic-lke", "--config", str(f), "--no-track", "--no-progress")
    assert rc == 2 and out == ""
    assert needle.format(f=f) in _error(err), err


def test_json_config_names_its_line_and_a_missing_file_is_one_line(capsys, tmp_path):
    f = tmp_path / "run_config.json"
    f.write_text('{\n  "config": {\n    "model": "m",\n    "seed": 1,,\n  }\n}\n')
    rc, _, err = run(capsys, "probe", "ic-lke", "--config", str(f), "--no-track")
    assert rc == 2 and f"{f}:4: not valid JSON (" in _error(err)
    rc, _, err = run(capsys, "probe", "ic-lke", "--config", str(tmp_path / "nope.yaml"), "--no-track")
    assert rc == 2 and _error(err) == f"error: --config {tmp_path / 'nope.yaml'}: no such file"


def test_a_run_record_of_another_probe_is_refused(capsys, tmp_path):
    f = tmp_path / "run_config.json"
    f.write_text(json.dumps({"results_key": "k", "config": {"probe": "hgp", "model": "m"}, "identity": {}}))
    rc, _, err = run(capsys, "probe", "ic-lke", "--config", str(f), "--no-track")
    assert rc == 2 and "a config of probe hgp, not ic-lke" in _error(err)


# ------------------------------------------------------------------ finetune (the config that would train is caught)
@pytest.fixture
def caught_finetune(monkeypatch):
    """Replaces the training by catching the FinetuneConfig `factprobe finetune` builds."""
    from factprobe import finetune

    seen: list = []

    def fake(cfg, **kw):
        seen.append(cfg)
        return {
            "train_set": "t",
            "n_examples": 1,
            "train_set_digest": "0" * 12,
            "steps": 0,
            "first_loss": None,
            "final_loss": None,
            "tokens_per_second": None,
            "non_padding_fraction": None,
        }

    monkeypatch.setattr(finetune, "run_finetune", fake)
    return seen


def test_finetune_from_yaml_with_flags_over_it(caught_finetune, capsys, tmp_path):
    f = tmp_path / "ft.yaml"
    f.write_text("model: smollm2-135m-instruct\ntrain_set: known\nmax_steps: 7\nlora-r: 8\nlearning_rate: 1e-4\n")
    rc, _, err = run(capsys, "finetune", "--config", str(f), "--max-steps", "3", "--out", str(tmp_path / "o"))
    assert rc == 0, err
    cfg = caught_finetune[0]
    assert (cfg.train_set, cfg.max_steps, cfg.lora_r, cfg.learning_rate) == ("known", 3, 8, 1e-4)


def test_finetune_repeats_from_its_own_record(caught_finetune, capsys, tmp_path):
    """A full fine-tune's finetune_config.json records LoRA options too (lora_dropout): they are not
    refused as conflicting with --full, as the same flags would be."""
    from factprobe.finetune.config import FinetuneConfig

    recorded = FinetuneConfig(model="m", train_set="unknown", full=True, max_steps=5, out=str(tmp_path / "first"))
    f = tmp_path / "finetune_config.json"
    f.write_text(json.dumps({"base_folder": "/x", "config": recorded.to_dict(), "fingerprint": {"a": 1}, "step": 5}))
    rc, _, err = run(capsys, "finetune", "--config", str(f), "--out", str(tmp_path / "second"))
    assert rc == 0, err
    cfg = caught_finetune[0]
    assert {k: v for k, v in cfg.to_dict().items() if k != "out"} == {k: v for k, v in recorded.to_dict().items() if k != "out"}
    assert cfg.out == str(tmp_path / "second")


def test_finetune_unknown_option_names_it_and_the_file(caught_finetune, capsys, tmp_path):
    f = tmp_path / "ft.yaml"
    f.write_text("model: m\nmax_stpes: 3\n")
    rc, _, err = run(capsys, "finetune", "--config", str(f))
    assert rc == 2 and _error(err).startswith(f"error: {f}: unknown option(s) max_stpes for finetune; known: ")
    assert caught_finetune == []


def test_the_documented_yaml_is_accepted(tmp_path):
    """docs/python-api.md's `ic.yaml` holds only options `probe ic-lke` has."""
    import re

    from factprobe.config_files import options_from_file
    from factprobe.framework.config import BaseConfig, RunConfig
    from factprobe.framework.registry import get_probe

    doc = (Path(__file__).resolve().parents[1] / "docs" / "python-api.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", doc, re.DOTALL)
    assert block, "docs/python-api.md has no ```yaml block"
    f = tmp_path / "ic.yaml"
    f.write_text(block.group(1))
    known = [*BaseConfig.field_names(), *get_probe("ic-lke").config_class.field_names()]
    options = options_from_file(f, "probe", "ic-lke", known)
    cfg = RunConfig.from_dict({**options, "probe": "ic-lke"}, strict=True)
    assert cfg.base.relations == ["P36", "P19", "P103"] and cfg.base.max_facts_per_relation == 10


# ------------------------------------------------------------------ study (the config that would run is caught)
class _Caught(Exception):
    pass


@pytest.fixture
def caught_study(monkeypatch):
    """Replaces the study's run by catching the config and folder `factprobe study` hands it."""
    import factprobe.studies.cli as study_cli

    seen: list = []

    def fake(study, config, out, **kw):
        seen.append((config, out))
        raise _Caught

    monkeypatch.setattr(study_cli, "run_study", fake)
    return seen


def test_study_from_yaml_with_flags_over_it(caught_study, tmp_path):
    f = tmp_path / "icl.yaml"
    f.write_text(
        f"model: smollm2-135m-instruct\nsource: lama\nrelations: P36,P19\nn: [0, 1, 5]\ndraws: 4\nout: {tmp_path / 'st'}\n"
    )
    with pytest.raises(_Caught):
        main(["study", "icl-examples", "--config", str(f), "--draws", "2", "--no-track"])
    config, out = caught_study[0]
    assert config["params"]["n"] == [0, 1, 5] and config["params"]["draws"] == 2
    assert config["base"]["relations"] == ["P36", "P19"] and out == tmp_path / "st"


def test_study_repeats_from_its_own_record_and_refuses_another(caught_study, capsys, tmp_path):
    record = {
        "study": "icl-sequence",
        "base": {"model": "m", "source": "lama", "seed": 3},
        "params": {"length": 40, "replace": 10, "kind": "incorrect", "placement": "block"},
    }
    f = tmp_path / "study_config.json"
    f.write_text(json.dumps(record))
    with pytest.raises(_Caught):
        main(["study", "icl-sequence", "--config", str(f), "--out", str(tmp_path / "again"), "--no-track"])
    config, out = caught_study[0]
    assert config["base"]["seed"] == 3 and config["params"]["length"] == 40 and config["params"]["placement"] == "block"
    assert out == tmp_path / "again"
    rc = main(["study", "icl-examples", "--config", str(f), "--no-track"])
    assert rc == 2 and "a config of study icl-sequence, not icl-examples" in _error(capsys.readouterr().err)
    y = tmp_path / "findings.yaml"
    y.write_text("models: [m]\nbudgte: 3\n")
    rc = main(["study", "findings", "--config", str(y), "--no-track"])
    assert rc == 2 and _error(capsys.readouterr().err).startswith(f"error: {y}: unknown option(s) budgte for study findings")


# ------------------------------------------------------------------ issue 41 item 8: YAML anchors and aliases
#: nine levels of nine aliases each: 9**9 (387 million) strings once expanded, a few hundred bytes of YAML
_LEVELS = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 9))
BOMBS = {
    "relations": 'l0: &l0 ["P36", "P19", "P20", "P27", "P30", "P31", "P36", "P37", "P39"]\n'
    + _LEVELS
    + "relations: [*l8, *l8]\n",
    "inside relations": "relations:\n  - &a [P36, P19, P20, P27, P30, P31, P36, P37, P39]\n"
    + "".join(f"  - &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefg", "bcdefgh"))
    + "  - [*h, *h, *h]\n",
    "a run record's config": "config:\n  model: m\n  seed: 1\n  relations: &r [P36, P19]\n  data: *r\n",
    "a merge key": "base: &base {model: m, seed: 1}\nother:\n  <<: *base\n",
    "an anchor alone": "model: &m smollm2-135m-instruct\nseed: 1\n",
}


@pytest.mark.parametrize("where", list(BOMBS))
def test_yaml_anchors_and_aliases_are_refused_in_one_line(tmp_path, where):
    """An alias bomb in `relations:` hung the command until killed (loading is lazy, the expansion came later):
    a config file may use neither anchors nor aliases, anywhere in it; refused naming the file and line."""
    from factprobe.config_files import read_config_file
    from factprobe.errors import ConfigError

    f = tmp_path / "c.yaml"
    f.write_text(BOMBS[where])
    with pytest.raises(ConfigError, match=rf"^{f}:\d+: YAML anchors \(&name\) and aliases \(\*name\) are not accepted"):
        read_config_file(f)


@pytest.mark.slow  # a fresh process: on a hang it is killed, not the suite
def test_cli_alias_bomb_is_one_line_not_a_hang(tmp_path):
    import os
    import subprocess
    import sys

    f = tmp_path / "bomb.yaml"
    f.write_text(BOMBS["inside relations"])
    cmd = [sys.executable, "-m", "factprobe.cli", "probe", "ic-lke", "--config", str(f), "--no-track", "--no-progress"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False, env=dict(os.environ))
    except subprocess.TimeoutExpired:
        pytest.fail("the command hung on a YAML alias bomb")
    assert done.returncode == 2 and done.stdout == "", done.stderr[-1000:]
    assert _error(done.stderr).startswith(f"error: {f}:2: YAML anchors (&name) and aliases (*name) are not accepted")
