"""The numerics of a run (`factprobe.identity.numerics`) resolved for a config or a loaded model.

- `resolved_numerics(device, dtype)`: what `load_model(device=, dtype=)` would use on this machine
  ("auto" resolved), without loading anything: the identity known before a model loads.
- `loaded_numerics(loaded)`: a `LoadedModel`'s device, dtype and attention implementation.
"""

from __future__ import annotations

from typing import Any

from factprobe.identity import attn_implementation, numerics
from factprobe.lm.device import resolve_device, resolve_dtype


def resolved_numerics(device: str, dtype: str, device_map: str | None = None) -> dict[str, Any]:
    """`numerics` of what `load_model(device=device, dtype=dtype, device_map=device_map)` resolves to here,
    without loading (the split strategy is recorded only when one is used)."""
    dev = resolve_device(device)
    return numerics(dev, resolve_dtype(dtype, dev), device_map=device_map)


def loaded_numerics(loaded: Any) -> dict[str, Any]:
    """`numerics` of a `LoadedModel` (its device, dtype and attention implementation)."""
    return numerics(loaded.device, loaded.dtype, attn_implementation(loaded.model), getattr(loaded, "device_map", None))
