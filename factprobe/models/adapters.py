"""PEFT adapter folders: which base model they need, how they attach, how they are identified.

An adapter folder holds `adapter_config.json` (and `adapter_model.safetensors`), as written by
`PeftModel.save_pretrained`. Its base model is named by `base_model_name_or_path` in that file
and is resolved like any model name (alias, local folder, hub id: `factprobe.models.hub`); the
caller's `base_model=` (CLI `--base-model`) overrides it. The adapter is attached unmerged, as a
`peft.PeftModel`, so the adapter and the base stay separately identifiable.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from factprobe.errors import ModelError
from factprobe.lm._util import first_line
from factprobe.models.hub import ADAPTER_CONFIG

if TYPE_CHECKING:
    import torch

#: Files whose presence means the adapter folder ships its own tokenizer (used instead of the
#: base model's, e.g. after a trainer added tokens).
_TOKENIZER_FILES = ("tokenizer_config.json",)


def read_adapter_config(folder: Path) -> dict[str, Any]:
    """The parsed `adapter_config.json` of `folder`; `ModelError` (one line) when unreadable."""
    try:
        data = json.loads((folder / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ModelError(f"cannot read adapter {folder}: {ADAPTER_CONFIG} is unreadable ({first_line(err)})") from err
    if not isinstance(data, dict):
        raise ModelError(f"cannot read adapter {folder}: {ADAPTER_CONFIG} is not a JSON object")
    return data


def adapter_base_name(folder: Path) -> str:
    """`base_model_name_or_path` of the adapter in `folder`; `ModelError` when it names none."""
    base = read_adapter_config(folder).get("base_model_name_or_path")
    if not isinstance(base, str) or not base.strip():
        raise ModelError(
            f"adapter {folder} names no base model (base_model_name_or_path is "
            "empty in adapter_config.json); pass --base-model (base_model=)"
        )
    return base


def missing_base_error(folder: Path, base: str, err: Exception, overridden: bool) -> ModelError:
    """The one-line error for an adapter whose base model cannot be resolved.

    Names the adapter folder, the base it looked for and where that name came from, and says
    that `--base-model` overrides it.
    """
    origin = "given as base_model" if overridden else "base_model_name_or_path in its adapter_config.json"
    return ModelError(
        f"adapter {folder} needs base model {base!r} ({origin}), which cannot be "
        f"found: {err}; pass --base-model (base_model=) to use another base"
    )


def adapter_tokenizer_folder(folder: Path) -> Path | None:
    """`folder` when the adapter ships its own tokenizer, else None (use the base's)."""
    return folder if any((folder / f).is_file() for f in _TOKENIZER_FILES) else None


def attach_adapter(base: Any, folder: Path, device: torch.device, dtype: torch.dtype) -> Any:
    """Wrap `base` in a `peft.PeftModel` with the adapter in `folder` (not merged), in eval mode.

    The adapter's parameters are cast to `dtype` and moved to `device`, so the whole model has
    one dtype; the base's buffers are left as transformers loaded them. Raises `ModelError`
    (one line) when peft is missing or the adapter does not fit the base.
    """
    try:
        from peft import PeftModel
    except ImportError as err:
        raise ModelError(f"adapter {folder} needs the 'peft' package (pip install 'factprobe[adapters]')") from err
    try:
        model = PeftModel.from_pretrained(base, str(folder), is_trainable=False, autocast_adapter_dtype=False)
    except Exception as err:  # shape mismatch, unknown target modules, ...
        raise ModelError(f"cannot attach adapter {folder} to its base model: {first_line(err)}") from err
    for p in model.parameters():
        if p.is_floating_point() and p.dtype != dtype:
            p.data = p.data.to(dtype)
    model.to(device)
    model.eval()
    return model
