"""Issue 28 items 1-2 for studies: a study's result records its identity (the weights of every model it
names, the bytes of its inputs, its config, the numerics) and a finished study folder is reused only
for the same identity."""

import json
import shutil
from dataclasses import dataclass

import pytest

from factprobe.config import ConfigBase, option
from factprobe.errors import ConfigError
from factprobe.studies.base import Study
from factprobe.studies.cli import run_study, study_config


@dataclass
class NoOptions(ConfigBase):
    n: int = option(1, "a number")


class CountStudy(Study):
    """Counts the lines of its data file (no model is loaded: the identity is the subject here)."""

    name = "count"
    description = "count lines"
    config_class = NoOptions
    uses_base = True
    runs = 0

    def run(self, ctx):
        CountStudy.runs += 1
        return {"lines": len(open(ctx.base.data, encoding="utf-8").read().splitlines())}


@pytest.fixture
def setup(tmp_path, tiny_model_path):
    model = tmp_path / "model"
    shutil.copytree(tiny_model_path("llama"), model)
    data = tmp_path / "facts.tsv"
    data.write_text("France\tP36\tParis\n")
    study = CountStudy()
    config = study_config(study, {"model": str(model), "source": "triples", "data": str(data), "device": "cpu"})
    return study, config, model, data, tmp_path / "out"


def test_a_study_records_its_identity_and_reuses_only_the_same(setup, capsys):
    study, config, model, data, out = setup
    metrics, _, finished = run_study(study, config, out, progress=False)
    ident = metrics["identity"]
    assert not finished and ident["model_revisions"][str(model)].startswith("local-sha256:")
    assert ident["numerics"]["dtype"] == "float32" and ident["numerics"]["device"] == "cpu"
    (inp,) = ident["inputs"]
    assert inp["location"] == str(data.resolve()) and inp["digest"].startswith("sha256:")
    assert json.loads((out / "metrics.json").read_text())["identity"] == ident
    assert "identity: " in capsys.readouterr().out
    again, _, finished = run_study(study, config, out, progress=False)
    assert finished and again == metrics  # unchanged: reused, nothing computed

    data.write_text("France\tP36\tLyon\n")  # same name, same size, other bytes
    with pytest.raises(ConfigError, match=rf"holds a finished study of other data in {data.resolve()} \(digest "):
        run_study(study, config, out, progress=False)


def test_a_finished_study_of_other_weights_is_refused(setup):
    study, config, model, data, out = setup
    run_study(study, config, out, progress=False)
    with (model / "model.safetensors").open("r+b") as f:
        f.seek(-4, 2)
        f.write(b"\x00\x00\x80\x7f")  # one weight changed in place
    with pytest.raises(ConfigError, match=r"holds a finished study of other weights of .* \(revision local-sha256:"):
        run_study(study, config, out, progress=False)
