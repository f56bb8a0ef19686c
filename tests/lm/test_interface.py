"""The engines share one interface (issue 42 item 7): `factprobe.lm.interface`."""

from __future__ import annotations

import inspect

import pytest

from factprobe.lm.generate import Generator
from factprobe.lm.interface import GenerationEngine, LanguageModel, ScoringEngine
from factprobe.lm.scorer import Scorer
from factprobe.lm.served import ServedGenerator, ServedModel, ServedScorer
from factprobe.models.loading import LoadedModel


def _methods(protocol: type) -> list[str]:
    return [n for n, v in vars(protocol).items() if callable(v) and not n.startswith("_")]


@pytest.mark.parametrize(
    ("protocol", "engines"),
    [(ScoringEngine, (Scorer, ServedScorer)), (GenerationEngine, (Generator, ServedGenerator))],
)
def test_local_and_served_engines_have_every_method_with_the_same_parameters(protocol, engines):
    for name in _methods(protocol):
        signatures = []
        for engine in engines:
            assert callable(getattr(engine, name, None)), f"{engine.__name__} lacks {name}"
            params = list(inspect.signature(getattr(engine, name)).parameters.values())[1:]
            signatures.append([(p.name, p.kind) for p in params])
        if name not in ("greedy", "sample"):  # their keyword options are each engine's own
            assert signatures[0] == signatures[1], (name, signatures)
        else:  # the prompts come first in both
            assert signatures[0][0] == signatures[1][0], (name, signatures)


@pytest.mark.parametrize("model_class", [LoadedModel, ServedModel])
def test_local_and_served_models_make_their_engines(model_class):
    for name in ("make_scorer", "make_generator"):
        params = list(inspect.signature(getattr(model_class, name)).parameters)
        assert params == ["self", "token_budget"], (model_class.__name__, name, params)
    assert "revision" in dir(model_class) or "revision" in model_class.__dataclass_fields__


def test_a_loaded_tiny_model_is_a_language_model_and_its_engines_fit(tiny_model_path):
    from factprobe.models import load_model

    loaded = load_model(str(tiny_model_path("llama")), device="cpu")
    assert isinstance(loaded, LanguageModel)
    assert isinstance(loaded.make_scorer(), ScoringEngine)
    assert isinstance(loaded.make_generator(), GenerationEngine)


def test_nothing_but_engines_is_left_in_the_engine_room():
    import factprobe.lm as lm

    root = inspect.getfile(lm).rsplit("/", 1)[0]
    import os

    modules = sorted(f[:-3] for f in os.listdir(root) if f.endswith(".py") and f != "__init__.py")
    store = {"aliases", "gguf_cache", "hub", "loading", "adapters", "placement", "in_memory", "testing", "file_lock"}
    assert not store & set(modules), sorted(store & set(modules))
