"""Fixtures for language-model tests.

- `tiny_model_path(kind)`: session-wide factory; builds (once) the TINY RANDOM model `kind`
  ("gpt2" or "llama") in a temp folder and returns its path. Random weights: never a result.
- `real_model_path(alias)`: session-wide factory; returns the converted folder of a real alias
  in the *real* cache (`FACTPROBE_CACHE` as set when the session started, else
  `~/.cache/factprobe`), converting it once if needed. Use only in `@pytest.mark.real_model`
  tests. It works even while a test has pointed `FACTPROBE_CACHE` elsewhere.
- `tmp_cache`: points `FACTPROBE_CACHE` at an empty temp folder for one test; yields it.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from factprobe.paths import cache_root

REAL_CACHE_ROOT = cache_root()


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    from factprobe.lm.models import make_tiny_random_model

    root = tmp_path_factory.mktemp("tiny-models")
    built: dict[str, Path] = {}

    def get(kind: str) -> Path:
        if kind not in built:
            built[kind] = make_tiny_random_model(kind, root)  # type: ignore[arg-type]
        return built[kind]

    return get


@pytest.fixture(scope="session")
def real_model_path() -> Callable[[str], Path]:
    from factprobe.lm.models import prepare_alias

    done: dict[str, Path] = {}

    def get(alias: str) -> Path:
        if alias not in done:
            old = os.environ.get("FACTPROBE_CACHE")
            os.environ["FACTPROBE_CACHE"] = str(REAL_CACHE_ROOT)
            try:
                done[alias] = prepare_alias(alias)
            finally:
                if old is None:
                    os.environ.pop("FACTPROBE_CACHE", None)
                else:
                    os.environ["FACTPROBE_CACHE"] = old
        return done[alias]

    return get


@pytest.fixture
def tmp_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = tmp_path / "factprobe-cache"
    monkeypatch.setenv("FACTPROBE_CACHE", str(root))
    yield root
