"""A model already loaded in memory (a `transformers` model and its tokenizer) as a `LoadedModel`.

The Python API (`factprobe.probe(..., model=model, tokenizer=tokenizer)`) probes a model that a library
user loaded, fine-tuned or edited in the same process, without a folder. Nothing names its weights on
disk, so its identity is its content:

- `content_revision(model, tokenizer)` is `memory-sha256:<hex>`: SHA-256 over, in this order, a format
  tag, every tensor of `model.state_dict()` sorted by name (its name, dtype, shape and raw bytes; tied
  weights under each of their names), the model's config as sorted JSON without the keys that name where
  it came from (`_name_or_path`, `transformers_version`, `_commit_hash`, ...), and the tokenizer's
  content: its class, its full definition (a fast tokenizer's `backend_tokenizer.to_str()` without the
  per-call `truncation` and `padding` settings; else its vocabulary and added tokens), its special
  tokens, chat template and padding/truncation sides. The same weights, config and tokenizer give the
  same revision in any process (a model loaded from a folder twice; a run resumed); one changed weight,
  config field or token gives another. Offloaded (meta-device) weights have no bytes to hash and are
  refused in one line.
- `loaded_from_memory(model, tokenizer)` builds the `LoadedModel` the probes take, from outside
  (`factprobe.models.loading` is not changed): named `memory:<folder or class name>`, `source` "memory",
  on the device of its input embedding, in its parameters' dtype, its kind read from its class
  (`device_map` "memory" when the caller split it across devices: `hf_device_map`). The
  caller's objects are not changed: the tokenizer is a copy (given a pad token and the context window
  there), the model is used as it is (`factprobe.api` puts it in eval mode for the call and restores
  its train/eval flags afterwards).
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

from factprobe.errors import ConfigError

#: the prefix of an in-memory model's revision
REVISION_PREFIX = "memory-sha256:"
#: the prefix of its name (the `model` a run records)
NAME_PREFIX = "memory:"
#: config keys that say where a model came from, not what it computes
_PROVENANCE_KEYS = ("_name_or_path", "name_or_path", "transformers_version", "_commit_hash", "_attn_implementation_autoset")
#: tokenizer settings a call changes on the fast backend (transformers sets them per call)
_PER_CALL_KEYS = ("truncation", "padding")


def _tensor_bytes(name: str, tensor: Any) -> Any:
    """The raw bytes of `tensor` as a flat uint8 numpy array (a copy on the CPU only where needed)."""
    import torch

    if tensor.device.type == "meta":
        raise ConfigError(
            f"the model in memory has weights that are not in memory ({name} is on the meta device: offloaded); "
            "give its folder by name instead"
        )
    flat = tensor.detach().reshape(-1).contiguous().cpu()
    return flat.view(torch.uint8).numpy() if flat.numel() else b""


def _config_text(model: Any) -> str:
    config = getattr(model, "config", None)
    data = config.to_dict() if hasattr(config, "to_dict") else {}
    for key in _PROVENANCE_KEYS:
        data.pop(key, None)
    return json.dumps(data, sort_keys=True, default=str)


def _tokenizer_text(tokenizer: Any) -> str:
    parts: dict[str, Any] = {
        "class": type(tokenizer).__name__,
        "special": getattr(tokenizer, "special_tokens_map", None),
        "chat_template": getattr(tokenizer, "chat_template", None),
        "padding_side": getattr(tokenizer, "padding_side", None),
        "truncation_side": getattr(tokenizer, "truncation_side", None),
    }
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        definition = json.loads(backend.to_str())
        for key in _PER_CALL_KEYS:
            definition.pop(key, None)
        parts["backend"] = definition
    else:
        parts["vocab"] = sorted(tokenizer.get_vocab().items())
        parts["added"] = sorted((getattr(tokenizer, "get_added_vocab", dict)() or {}).items())
    return json.dumps(parts, sort_keys=True, default=str)


def content_revision(model: Any, tokenizer: Any) -> str:
    """`memory-sha256:<hex>` of the model's tensors, config and tokenizer (module docstring)."""
    h = hashlib.sha256(b"factprobe-memory-model-v1\0")
    state = model.state_dict()
    for name in sorted(state):
        tensor = state[name]
        h.update(f"tensor\0{name}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode())
        h.update(_tensor_bytes(name, tensor))
    h.update(b"\0config\0" + _config_text(model).encode())
    h.update(b"\0tokenizer\0" + _tokenizer_text(tokenizer).encode())
    return REVISION_PREFIX + h.hexdigest()


def _kind(model: Any) -> str:
    """ "causal" or "masked" from the model's class (a PEFT wrapper's inner model), else its config."""
    from factprobe.lm.body import unwrap_peft
    from factprobe.models.loading import detect_kind

    cls = type(unwrap_peft(model)).__name__
    if cls.endswith("ForMaskedLM"):
        return "masked"
    if cls.endswith(("ForCausalLM", "LMHeadModel")):
        return "causal"
    return detect_kind(model.config)


def is_model_object(value: Any) -> bool:
    """Whether `value` is a model object (a torch module with a config), not a name or path."""
    return hasattr(value, "state_dict") and hasattr(value, "config") and callable(getattr(value, "forward", None))


def loaded_from_memory(model: Any, tokenizer: Any) -> Any:
    """The `LoadedModel` of a `transformers` model and tokenizer in memory (module docstring). ConfigError
    (one line) for something that is not a model, a missing tokenizer, or offloaded weights."""
    import torch

    from factprobe.lm.device import input_device
    from factprobe.models.loading import LoadedModel, context_window

    if not is_model_object(model):
        raise ConfigError(
            f"model={type(model).__name__}: give a name (alias, folder, hub id) or a transformers model object with its tokenizer"
        )
    if tokenizer is None or not callable(getattr(tokenizer, "encode", None)):
        raise ConfigError("a model given in memory needs its tokenizer: factprobe.probe(name, model=model, tokenizer=tokenizer)")
    revision = content_revision(model, tokenizer)
    source = str(getattr(model.config, "_name_or_path", "") or "")
    label = Path(source).name if source else type(model).__name__
    tok = copy.deepcopy(tokenizer)
    max_length = context_window(model.config, tok)
    if tok.pad_token is None and tok.eos_token is not None:
        tok.pad_token = tok.eos_token
    tok.model_max_length = max_length
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    return LoadedModel(
        model=model,
        tokenizer=tok,
        name=NAME_PREFIX + label,
        path=Path(source) if source and Path(source).is_dir() else Path("."),
        device=input_device(model, torch.device("cpu")),
        dtype=dtype,
        revision=revision,
        max_length=max_length,
        source="memory",
        is_random=bool(getattr(model.config, "factprobe_random_weights", False)),
        has_chat_template=getattr(tok, "chat_template", None) is not None,
        kind=_kind(model),
        device_map="memory" if getattr(model, "hf_device_map", None) else None,
    )
