"""Issue 30 item 1: a model split by accelerate (`load_model(device_map=...)`) scores and generates as the
whole model does. On the CPU the split is CPU + disk offload: `max_memory` holds the embedding and the head,
the decoder layers go to disk. Tiny RANDOM llama: the mechanics, never results."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from factprobe.errors import ConfigError
from factprobe.framework.config import BaseConfig
from factprobe.models.loading import load_model
from factprobe.models.placement import check_placement, parse_max_memory
from tests.probes.test_belief_icl import toy_root  # noqa: F401 - a fixture (the BELIEF toy data)

REPO = Path(__file__).resolve().parents[2]
PREFIX = "Paris is the capital of France. Rome is the capital of Italy."
CONTEXTS = [" Berlin is the capital of", " Madrid is the capital of", " Lisbon is the capital of"]
OPTIONS = [" Germany", " Spain", " Portugal", " the United Kingdom"]


def cpu_budget(path: Path) -> int:
    """Bytes of CPU memory that hold the embedding (and its tied head) but not the decoder layers (accelerate
    keeps room for the largest layer beside what it places, to stream offloaded layers in)."""
    from accelerate.utils import compute_module_sizes

    whole = load_model(path, device="cpu", dtype="float32")
    sizes = compute_module_sizes(whole.model)
    return sizes["model.embed_tokens"] + sizes["model.layers.0"] + sizes["model.layers.0"] // 4


@pytest.fixture(scope="module")
def pair(tiny_model_path, tmp_path_factory):
    """(whole model, the same model split CPU + disk)."""
    path = tiny_model_path("llama")
    whole = load_model(path, device="cpu", dtype="float32")
    split = load_model(
        path,
        device="cpu",
        dtype="float32",
        device_map="auto",
        max_memory=f"cpu={cpu_budget(path)}",
        offload_folder=tmp_path_factory.mktemp("offload"),
    )
    return whole, split


def test_the_split_puts_layers_on_disk_and_records_the_strategy(pair):
    from factprobe.lm.numerics import loaded_numerics

    whole, split = pair
    placed = set(split.model.hf_device_map.values())
    assert "disk" in placed and "cpu" in placed, split.model.hf_device_map
    assert split.device == torch.device("cpu") and split.device_map == "auto"
    assert loaded_numerics(split)["device_map"] == "auto"
    assert "device_map" not in loaded_numerics(whole)  # a field only when a split is used


def test_split_logprobs_match_the_whole_model(pair):
    """The scorer's packed tree forward over a cached prefix (4D masks, position ids, prefix KV, head-only
    scoring) on the split model: the same log-probs within 1e-4 in float32."""
    from factprobe.lm.scorer import ChoiceRequest, Scorer

    got = []
    for loaded in pair:
        scorer = Scorer(loaded.model, loaded.tokenizer, device=loaded.device, token_budget=16)  # several packs
        prefix = scorer.prefix(PREFIX)
        got.append(scorer.score_choices([ChoiceRequest(c, OPTIONS) for c in CONTEXTS], shared_prefix=prefix))
        got.append(scorer.score_choices([ChoiceRequest(PREFIX + CONTEXTS[0], OPTIONS)]))  # no shared prefix
    whole_shared, whole_alone, split_shared, split_alone = got
    for a, b in ((whole_shared, split_shared), (whole_alone, split_alone)):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_allclose(x, y, atol=1e-4, rtol=0)


def test_split_greedy_tokens_and_samples_match_the_whole_model(pair):
    """The generator (shared-prefix greedy batches, shared-KV sampling) on the split model: the same tokens."""
    from factprobe.lm.generate import Generator

    out = []
    for loaded in pair:
        gen = Generator(loaded.model, loaded.tokenizer, device=loaded.device)
        greedy = gen.greedy([PREFIX + c for c in CONTEXTS], max_new_tokens=6, shared_prefix=PREFIX)
        samples = gen.sample(PREFIX, n=3, max_new_tokens=4, seed=7)
        out.append(([g.token_ids for g in greedy], [s.token_ids for s in samples]))
    assert out[0] == out[1]


def test_a_probe_runs_on_a_split_model(tiny_model_path, tmp_path):
    from factprobe.framework.config import RunConfig
    from factprobe.framework.runner import run_probe

    recs = [json.loads(line) for line in (REPO / "examples" / "mc_items" / "cloze.jsonl").read_text().splitlines()][:3]
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in recs))
    model = tiny_model_path("llama")
    base = {"probe": "mc-items", "model": str(model), "data": str(data), "device": "cpu", "dtype": "float32"}
    whole = run_probe(RunConfig.from_dict(base), tmp_path / "whole", progress=False, log=lambda m: None)
    split = run_probe(
        RunConfig.from_dict({**base, "device_map": "sequential", "max_memory": f"cpu={cpu_budget(model)}"}),
        tmp_path / "split",
        progress=False,
        log=lambda m: None,
    )
    assert split.metrics["identity"]["numerics"]["device_map"] == "sequential"
    assert "device_map" not in whole.metrics["identity"]["numerics"]
    for a, b in zip(whole.results.to_dict("records"), split.results.to_dict("records")):
        assert a["prediction"] == b["prediction"]
        np.testing.assert_allclose(a["logprobs"], b["logprobs"], atol=1e-4, rtol=0)


def test_a_model_too_large_for_max_memory_and_disk_is_one_line_before_loading(tiny_model_path, monkeypatch):
    from factprobe.models import loading

    def no_load(*a, **k):
        raise AssertionError("weights were read")

    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_pretrained", no_load)
    too_large = r"needs \d+\.\d+ KiB in float32, more than --max-memory cpu=1000 \(1000 B\) plus disk=1000"
    with pytest.raises(ConfigError, match=too_large):
        loading.load_model(
            tiny_model_path("llama"), device="cpu", dtype="float32", device_map="auto", max_memory="cpu=1000,disk=1000"
        )


@pytest.mark.parametrize(
    "device_map, max_memory, message",
    [
        ("fastest", None, "device_map='fastest': unknown strategy"),
        (None, "cpu=1GiB", "applies only to a split model"),
        ("auto", "cpu=lots", "'lots' is not a size"),
        ("auto", "gpu0=1GiB", "unknown device 'gpu0'"),
        ("auto", '{"0": "2GiB"', "not JSON"),
        ("auto", "cpu", "'cpu' is not DEVICE=SIZE"),
    ],
)
def test_bad_placement_is_one_line(device_map, max_memory, message):
    with pytest.raises(ConfigError, match=message):
        BaseConfig(device_map=device_map, max_memory=max_memory)


def test_max_memory_forms():
    assert parse_max_memory("0=20GiB, cpu=60GiB") == {0: "20GiB", "cpu": "60GiB"}
    assert parse_max_memory('{"1": "10GB", "cpu": 1000}') == {1: "10GB", "cpu": 1000}
    assert parse_max_memory("") is None
    assert check_placement("Auto", '{"cpu": "2GiB", "0": "1GiB"}') == ("auto", "0=1GiB,cpu=2GiB")
    assert check_placement("", "") == (None, None)
    cfg = BaseConfig(device_map="balanced", max_memory="cpu=2GiB")
    assert (cfg.device_map, cfg.max_memory) == ("balanced", "cpu=2GiB")


def test_max_memory_naming_a_gpu_on_a_cpu_device_is_one_line(tiny_model_path):
    with pytest.raises(ConfigError, match="names GPU 0 but the device is cpu"):
        load_model(tiny_model_path("llama"), device="cpu", device_map="auto", max_memory="0=1GiB,cpu=1GiB")


def same_rows(whole: list[dict], split: list[dict]) -> None:
    """Rows equal field by field: numbers (and lists of numbers) within 1e-4, everything else exactly."""
    assert [r["key"] for r in whole] == [r["key"] for r in split]
    for a, b in zip(whole, split):
        assert a.keys() == b.keys()
        for k in a:
            x, y = a[k], b[k]
            numeric = isinstance(x, float) or (isinstance(x, list) and x and all(isinstance(v, float) for v in x))
            if numeric:
                np.testing.assert_allclose(x, y, atol=1e-4, rtol=0, err_msg=f"{a['key']} {k}")
            else:
                assert x == y, (a["key"], k)


@pytest.mark.slow
def test_coherency_runs_on_a_split_model(tiny_model_path, tmp_path):
    """Coherency: generation and scoring of both directions on the split model, rows as on the whole one."""
    from types import SimpleNamespace

    from factprobe.framework.runner import run_probe
    from tests.probes.test_coherency import toy_cfg

    model = tiny_model_path("llama")
    whole_cfg = toy_cfg(SimpleNamespace(path=model), tmp_path)
    split_cfg = whole_cfg.replace(device_map="auto", max_memory=f"cpu={cpu_budget(model)}")
    outs = [
        run_probe(c, tmp_path / name, progress=False, log=lambda m: None).results.to_dict("records")
        for c, name in ((whole_cfg, "whole"), (split_cfg, "split"))
    ]
    assert outs[0]
    same_rows(*outs)


@pytest.mark.slow
def test_belief_icl_runs_on_a_split_model(tiny_model_path, tmp_path_factory, tmp_path, toy_root):  # noqa: F811
    """BELIEF-ICL (scoring over prompts, sampling for the fluctuation) on the split model: rows as on the whole one."""
    from factprobe.framework.runner import run_probe
    from tests.probes.test_belief_icl import config
    from tests.probes.test_qa import widened_tiny_llama

    model = widened_tiny_llama(tiny_model_path, tmp_path_factory.mktemp("wide"))
    whole_cfg = config(toy_root, tmp_path, model, setting="4-relation", samples=2)
    split_cfg = whole_cfg.replace(device_map="balanced", max_memory=f"cpu={cpu_budget(model)}")
    outs = [
        run_probe(c, tmp_path / name, progress=False, log=lambda m: None).results.to_dict("records")
        for c, name in ((whole_cfg, "whole"), (split_cfg, "split"))
    ]
    assert outs[0]
    same_rows(*outs)


def test_a_temporary_offload_folder_goes_with_the_model(tiny_model_path, tmp_path, monkeypatch):
    import gc
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    model = tiny_model_path("llama")
    loaded = load_model(model, device="cpu", dtype="float32", device_map="auto", max_memory=f"cpu={cpu_budget(model)}")
    folders = list(tmp_path.glob("factprobe-offload-*"))
    assert len(folders) == 1 and "disk" in loaded.model.hf_device_map.values()  # (safetensors layers are read in place)
    del loaded
    gc.collect()
    assert not folders[0].exists()


def test_cli_too_large_model_is_one_error_line(tiny_model_path, tmp_path, capsys, monkeypatch):
    from factprobe.cli import main

    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY"):  # the CLI sets them: undone after the test
        monkeypatch.setenv(name, os.environ.get(name, ""))

    model = tiny_model_path("llama")
    capsys.readouterr()  # the fixture's own output (building the tiny model)
    code = main(
        [
            "probe",
            "ic-lke",
            "--model",
            str(model),
            "--device",
            "cpu",
            "--device-map",
            "auto",
            "--max-memory",
            "cpu=1000,disk=1000",
            "--max-facts-per-relation",
            "1",
            "--relations",
            "P36",
            "--out",
            str(tmp_path / "out"),
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: model tiny-random-llama needs"), err
