"""factprobe.lm.engine: the scorer and the generator set the model up one way (tiny RANDOM models,
shapes and settings only, never a result)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from factprobe.errors import ConfigError
from factprobe.lm.engine import DEFAULT_TOKEN_BUDGET, FALLBACK_MAX_LENGTH, ModelEngine
from factprobe.lm.generate import Generator
from factprobe.lm.scorer import Scorer

SETTINGS = ("device", "token_budget", "max_length", "dtype", "sliding_window", "layer_types")


@pytest.fixture
def tiny(tiny_model_path):
    path = tiny_model_path("llama")
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), AutoTokenizer.from_pretrained(path)


@pytest.mark.parametrize("engine", [Scorer, Generator])
def test_both_engines_share_the_setup(tiny, engine):
    model, tok = tiny
    model.train()
    model.config.layer_types = ["sliding_attention", "full_attention"] * (model.config.num_hidden_layers // 2 or 1)
    model.config.sliding_window = 4
    e = engine(model, tok)
    assert isinstance(e, ModelEngine) and not model.training  # eval mode
    assert e.model is model and e.tokenizer is tok
    assert (e.device, e.token_budget, e.dtype) == (torch.device("cpu"), DEFAULT_TOKEN_BUDGET["cpu"], torch.float32)
    assert e.max_length == model.config.max_position_embeddings
    assert (e.sliding_window, e.layer_types) == (4, ["full_attention", "sliding_attention"])
    assert {k: getattr(e, k) for k in SETTINGS} == {k: getattr(ModelEngine(model, tok), k) for k in SETTINGS}
    explicit = engine(model, tok, device="cpu", token_budget=7, max_length=33)
    assert (explicit.token_budget, explicit.max_length) == (7, 33)


@pytest.mark.parametrize("engine", [Scorer, Generator])
def test_a_negative_token_budget_is_refused_by_both(tiny, engine):
    model, tok = tiny
    with pytest.raises(ConfigError, match="token_budget must be >= 1, got -5"):
        engine(model, tok, token_budget=-5)


def test_window_falls_back_without_max_position_embeddings(tiny):
    model, tok = tiny
    del model.config.max_position_embeddings
    assert ModelEngine(model, tok).max_length == FALLBACK_MAX_LENGTH
