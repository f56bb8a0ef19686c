"""Issue 41 item 8: `--device-map auto --max-memory cpu=1KiB` put the whole model on disk, which accelerate
cannot run ("Cannot copy out of meta tensor" traceback at the first forward). A placement whose memory holds
none of the model's layers is refused in one line before any weight is read, naming the least that works.
Tiny RANDOM llama: the mechanics, never results."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from factprobe.errors import ConfigError
from factprobe.lm.device import size_bytes
from factprobe.models.loading import load_model

REPO = Path(__file__).resolve().parents[2]
REFUSED = r"^model tiny-random-llama: --max-memory (?P<shown>\S+) \(.*\) holds none of its layers: "


@pytest.fixture
def no_weights_read(monkeypatch):
    def no_load(*a, **k):
        raise AssertionError("weights were read")

    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_pretrained", no_load)


@pytest.mark.parametrize("strategy", ["auto", "balanced", "sequential"])
@pytest.mark.parametrize("memory", ["cpu=1KiB", "cpu=1", "cpu=36KiB,disk=1GiB"])
def test_memory_that_holds_no_layer_is_refused_before_loading(tiny_model_path, no_weights_read, strategy, memory):
    with pytest.raises(ConfigError, match=REFUSED) as caught:
        load_model(tiny_model_path("llama"), device="cpu", dtype="float32", device_map=strategy, max_memory=memory)
    assert "\n" not in str(caught.value) and "give cpu at least " in str(caught.value)


def test_the_least_memory_named_in_the_refusal_works(tiny_model_path, tmp_path):
    """The amount the line names is enough: the model loads with it, split across the CPU and disk, and scores."""
    from factprobe.lm.scorer import ChoiceRequest, Scorer

    path = tiny_model_path("llama")
    with pytest.raises(ConfigError) as caught:
        load_model(path, device="cpu", dtype="float32", device_map="auto", max_memory="cpu=1KiB")
    least = re.search(r"give cpu at least (\d+) bytes", str(caught.value))
    assert least, str(caught.value)
    loaded = load_model(
        path, device="cpu", dtype="float32", device_map="auto", max_memory=f"cpu={least.group(1)}", offload_folder=tmp_path
    )
    assert "cpu" in loaded.model.hf_device_map.values() and "disk" in loaded.model.hf_device_map.values()
    scores = Scorer(loaded.model, loaded.tokenizer, device=loaded.device).score_choices([ChoiceRequest("The capital", [" is"])])
    assert len(scores) == 1
    with pytest.raises(ConfigError, match=REFUSED):
        load_model(path, device="cpu", device_map="auto", max_memory=f"cpu={size_bytes(least.group(1)) - 1}")


def test_cli_tiny_max_memory_is_one_error_line(tiny_model_path, tmp_path, capsys, monkeypatch):
    from factprobe.cli import main

    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY"):  # the CLI sets them: undone after the test
        monkeypatch.setenv(name, os.environ.get(name, ""))
    rec = json.loads((REPO / "examples" / "mc_items" / "cloze.jsonl").read_text().splitlines()[0])
    data = tmp_path / "items.jsonl"
    data.write_text(json.dumps(rec) + "\n")
    model = tiny_model_path("llama")
    capsys.readouterr()
    code = main(
        ["probe", "mc-items", "--model", str(model), "--data", str(data), "--device", "cpu", "--device-map", "auto"]
        + ["--max-memory", "cpu=1KiB", "--out", str(tmp_path / "out"), "--no-progress", "--no-track"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert re.match("error: " + REFUSED[1:], err[0]), err
