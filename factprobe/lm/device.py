"""Device and dtype selection for loading language models.

Contract:
- `resolve_device("auto")` is `cuda` when CUDA is available, else `cpu`. Explicit values
  (`"cpu"`, `"cuda"`, `"cuda:1"`, a `torch.device`) are honoured; asking for CUDA on a machine
  without it raises `ConfigError` (one line), it never silently falls back to the CPU.
- `resolve_dtype("auto", device)` is bfloat16 on a CUDA device that supports it (float32 on an
  old GPU without bf16), and float32 on the CPU. Strings `float32|fp32`, `bfloat16|bf16`,
  `float16|fp16|half` and `torch.dtype` values are accepted; anything else raises `ConfigError`.
"""
from __future__ import annotations

import torch

from factprobe.errors import ConfigError

_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
}


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """Turn `"auto"`, `"cpu"`, `"cuda"`, `"cuda:N"` or a `torch.device` into a usable device."""
    if isinstance(device, torch.device):
        dev = device
    else:
        name = str(device).strip().lower()
        if name == "auto":
            return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
        try:
            dev = torch.device(name)
        except (RuntimeError, ValueError):
            raise ConfigError(
                f"unknown device {device!r}: use 'auto', 'cpu', 'cuda' or 'cuda:N'") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device {str(dev)!r} requested but CUDA is not available on this machine")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ConfigError(
                f"device {str(dev)!r} requested but only {torch.cuda.device_count()} CUDA device(s) exist")
    elif dev.type not in ("cpu", "mps"):
        raise ConfigError(f"unsupported device {str(dev)!r}: use 'auto', 'cpu', 'cuda' or 'cuda:N'")
    return dev


def resolve_dtype(dtype: str | torch.dtype = "auto", device: torch.device | None = None) -> torch.dtype:
    """Turn `"auto"`, a dtype name or a `torch.dtype` into a floating-point `torch.dtype`."""
    if isinstance(dtype, torch.dtype):
        if not dtype.is_floating_point:
            raise ConfigError(f"dtype {dtype} is not a floating-point type")
        return dtype
    name = str(dtype).strip().lower().removeprefix("torch.")
    if name == "auto":
        dev = device if device is not None else resolve_device("auto")
        if dev.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
        return torch.float32
    if name not in _DTYPES:
        raise ConfigError(
            f"unknown dtype {dtype!r}: use 'auto', 'float32', 'bfloat16' or 'float16'")
    return _DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    """`torch.bfloat16` -> `"bfloat16"` (for logs and tracking params)."""
    return str(dtype).removeprefix("torch.")
