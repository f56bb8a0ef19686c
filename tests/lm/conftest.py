"""Fixtures the served-model tests share: a fake OpenAI-compatible server of the tiny random llama and its
tokenizer (tests/lm/served_fake.py)."""

from __future__ import annotations

import pytest

from tests.lm.served_fake import serve, tiny_tokenizer


@pytest.fixture
def fake(tiny_model_path):
    yield from serve(tiny_model_path)


@pytest.fixture
def tok(tiny_model_path):
    return tiny_tokenizer(tiny_model_path)
