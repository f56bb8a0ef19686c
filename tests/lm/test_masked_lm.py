"""Masked LMs load through `load_model` and say so (`LoadedModel.kind`); probes refuse the wrong kind.

Uses the tiny RANDOM BERT (`make_tiny_random_model("bert")`): numbers are never results.
"""

from __future__ import annotations

import json

import pytest
import torch
from peft import PeftModel
from transformers import BertConfig, BertForMaskedLM, GPT2Config, LlamaConfig

from factprobe.errors import ConfigError, ModelError
from factprobe.lm.body import decoder_parts
from factprobe.models import LoadedModel, detect_kind, load_model, require_kind
from factprobe.models.testing import make_tiny_lora_adapter, make_tiny_random_model


def test_tiny_random_bert_folder(tiny_model_path, tmp_path) -> None:
    path = tiny_model_path("bert")
    assert path.name == "tiny-random-bert"
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["factprobe_random_weights"] is True and "RANDOM" in cfg["factprobe_name"]
    assert cfg["architectures"] == ["BertForMaskedLM"]
    assert cfg["num_hidden_layers"] == 2 and cfg["hidden_size"] == 32
    again = make_tiny_random_model("bert", tmp_path)  # deterministic: same weights, same revision
    assert load_model(str(again)).revision == load_model(str(path)).revision


def test_masked_lm_loads_with_kind_auto(tiny_model_path) -> None:
    lm = load_model(str(tiny_model_path("bert")), device="cpu", dtype="float32")
    assert isinstance(lm, LoadedModel) and isinstance(lm.model, BertForMaskedLM)
    assert lm.kind == "masked" and lm.is_random and not lm.model.training
    assert lm.revision.startswith("local-sha256:") and lm.max_length == 256
    assert lm.adapter_path is None and lm.base_name is None and lm.base_path is None
    tok = lm.tokenizer
    for name in ("mask", "cls", "sep", "pad", "unk"):
        assert getattr(tok, f"{name}_token") == f"[{name.upper()}]"
    ids = tok("The capital of France is [MASK].")["input_ids"]
    assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id and tok.mask_token_id in ids
    with torch.no_grad():
        logits = lm.model(input_ids=torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), lm.model.config.vocab_size) and torch.isfinite(logits).all()
    # body + head reproduce the model's own logits (the MLM head is more than the decoder matrix)
    parts = decoder_parts(lm.model)
    assert parts.head is lm.model.cls
    with torch.no_grad():
        again = parts.head(parts.body(input_ids=torch.tensor([ids])).last_hidden_state)
    assert torch.allclose(again, logits, atol=1e-6)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_causal_models_are_causal(tiny_model_path, kind) -> None:
    assert load_model(str(tiny_model_path(kind))).kind == "causal"


def test_detect_kind_from_config() -> None:
    assert detect_kind(BertConfig(architectures=["BertForMaskedLM"])) == "masked"
    assert detect_kind(BertConfig(architectures=["BertLMHeadModel"])) == "causal"
    assert detect_kind(BertConfig()) == "masked"  # both heads exist; not flagged as a decoder
    assert detect_kind(BertConfig(is_decoder=True)) == "causal"
    assert detect_kind(GPT2Config()) == detect_kind(LlamaConfig()) == "causal"
    custom = GPT2Config(auto_map={"AutoModelForMaskedLM": "x.Y"})
    assert detect_kind(custom) == "masked"


def test_explicit_kind(tiny_model_path) -> None:
    bert, gpt2 = str(tiny_model_path("bert")), str(tiny_model_path("gpt2"))
    assert load_model(bert, kind="masked").kind == "masked"
    with pytest.raises(ModelError) as exc:
        load_model(gpt2, kind="masked")  # GPT-2 has no masked-LM head
    assert "\n" not in str(exc.value) and gpt2 in str(exc.value)
    with pytest.raises(ConfigError, match="unknown model kind 'encoder'"):
        load_model(bert, kind="encoder")


def test_require_kind_message(tiny_model_path, monkeypatch) -> None:
    root = tiny_model_path("bert").parent
    assert tiny_model_path("gpt2").parent == root
    monkeypatch.chdir(root)
    lm = load_model("./tiny-random-bert")
    with pytest.raises(ConfigError) as exc:
        require_kind(lm, ["causal"], "ic-lke")
    assert str(exc.value) == "model ./tiny-random-bert is a masked LM; probe ic-lke accepts causal LMs only"
    require_kind(lm, ["masked"], "belief")
    require_kind(lm, ("causal", "masked"), "belief")
    causal = load_model("./tiny-random-gpt2")
    with pytest.raises(ConfigError, match="^model ./tiny-random-gpt2 is a causal LM; probe belief-mlm accepts masked LMs only$"):
        require_kind(causal, ["masked"], "belief-mlm")
    with pytest.raises(ValueError, match="accepted kinds"):
        require_kind(lm, ["encoder"], "x")
    with pytest.raises(ValueError, match="accepted kinds"):
        require_kind(lm, [], "x")


def test_lora_adapter_on_masked_lm(tiny_model_path, tmp_path) -> None:
    base = tiny_model_path("bert")
    adapter = make_tiny_lora_adapter(base, tmp_path / "lora-bert")
    lm = load_model(str(adapter), dtype="float32")
    assert isinstance(lm.model, PeftModel) and lm.kind == "masked" and lm.base_path == base.resolve()
    ids = torch.tensor([lm.tokenizer("Paris is the capital of [MASK].")["input_ids"]])
    plain = load_model(str(base)).model
    with torch.no_grad():
        assert (lm.model(input_ids=ids).logits - plain(input_ids=ids).logits).abs().max() > 1e-3
