"""Resolve, prepare and load the language models that factprobe probes: the model store, apart from the engines.

What is not an engine left `factprobe.lm` (issue 42 item 7): names, the GGUF cache, the hub, adapter
folders, device placement at load time, models held in memory and the tiny random test models live here;
`factprobe.lm` keeps the engines (the local scorer and generator, served models) and their one interface
(`factprobe.lm.interface`). This package re-exports the public names of its modules, loaded when first
asked for (so `factprobe models list` does not import torch):

- `factprobe.models.aliases`: the alias registry (`ModelSpec`, `get_spec`, paths).
- `factprobe.models.gguf_cache`: PyPI download, sha256 checks, GGUF -> float32 safetensors
  conversion, build lock and completion marker (`prepare_alias`, `check_cache`, `list_models`,
  `MARKER_NAME`).
- `factprobe.models.hub`: name resolution (alias, local folder or adapter, hub id with timeout and
  offline mode): `resolve_model_path`.
- `factprobe.models.adapters`: PEFT adapter folders and their base models.
- `factprobe.models.loading`: `load_model`, `LoadedModel`, `context_window`.
- `factprobe.lm.causality`: `check_causal` (a causal model must behave so); `require_kind` here
  adds it to `factprobe.models.loading.require_kind`.
- `factprobe.lm.body`: the transformer body and output head of plain, PEFT and merged models.

Tests that replace private attributes (`_REGISTRY`, `_download_gguf`, `_convert_gguf_into`, ...)
patch the module that defines them, not this facade.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from factprobe.models.loading import LoadedModel

#: public name -> the module that defines it (loaded on first use: PEP 562)
_WHERE = {
    "ADAPTER_CONFIG": "factprobe.models.hub",
    "CACHE_FORMAT": "factprobe.models.gguf_cache",
    "DEFAULT_MAX_LENGTH": "factprobe.models.loading",
    "DecoderParts": "factprobe.lm.body",
    "LOGIT_CHECK_TEXT": "factprobe.models.gguf_cache",
    "LOGIT_CHECK_TOL": "factprobe.models.gguf_cache",
    "LoadedModel": "factprobe.models.loading",
    "MARKER_NAME": "factprobe.models.gguf_cache",
    "MAX_LENGTH_CAP": "factprobe.models.loading",
    "ModelKind": "factprobe.models.loading",
    "ModelSpec": "factprobe.models.aliases",
    "check_cache": "factprobe.models.gguf_cache",
    "check_causal": "factprobe.lm.causality",
    "context_window": "factprobe.models.loading",
    "decoder_parts": "factprobe.lm.body",
    "detect_kind": "factprobe.models.loading",
    "ensure_gguf": "factprobe.models.gguf_cache",
    "get_spec": "factprobe.models.aliases",
    "gguf_cache_path": "factprobe.models.aliases",
    "is_adapter_folder": "factprobe.models.hub",
    "is_cached": "factprobe.models.gguf_cache",
    "list_models": "factprobe.models.gguf_cache",
    "load_model": "factprobe.models.loading",
    "model_cache_dir": "factprobe.models.aliases",
    "model_revision": "factprobe.models.loading",
    "models_root": "factprobe.models.aliases",
    "prepare_alias": "factprobe.models.gguf_cache",
    "resolve_model_path": "factprobe.models.hub",
    "unwrap_peft": "factprobe.lm.body",
}
__all__ = [
    "ADAPTER_CONFIG",
    "CACHE_FORMAT",
    "DEFAULT_MAX_LENGTH",
    "DecoderParts",
    "LOGIT_CHECK_TEXT",
    "LOGIT_CHECK_TOL",
    "LoadedModel",
    "MARKER_NAME",
    "MAX_LENGTH_CAP",
    "ModelKind",
    "ModelSpec",
    "check_cache",
    "check_causal",
    "context_window",
    "decoder_parts",
    "detect_kind",
    "ensure_gguf",
    "get_spec",
    "gguf_cache_path",
    "is_adapter_folder",
    "is_cached",
    "list_models",
    "load_model",
    "model_cache_dir",
    "model_revision",
    "models_root",
    "prepare_alias",
    "require_kind",
    "resolve_model_path",
    "unwrap_peft",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def require_kind(loaded: LoadedModel, accepted: Sequence[str], probe: str) -> None:
    """Raise `ConfigError` (one line) unless `loaded.kind` is one of `accepted` (the kinds the
    probe runs on) and, for a causal model, unless it behaves causally: its logits at a position
    must not change when a later token changes (`factprobe.lm.causality.check_causal`, one forward
    pass of two short rows), whatever its class name says."""
    from factprobe.lm.causality import check_causal
    from factprobe.models.loading import require_kind as require_declared_kind

    require_declared_kind(loaded, accepted, probe)
    if loaded.kind == "causal":
        check_causal(loaded.model, loaded.name, loaded.tokenizer)
