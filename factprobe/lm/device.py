"""Device and dtype selection for loading language models.

Contract:
- `resolve_device("auto")` is `cuda` when CUDA is available, else `cpu`. Explicit values
  (`"cpu"`, `"cuda"`, `"cuda:1"`, a `torch.device`) are honoured; asking for CUDA on a machine
  without it raises `ConfigError` (one line), it never silently falls back to the CPU.
- `resolve_dtype("auto", device)` is bfloat16 on a CUDA device that supports it (float32 on an
  old GPU without bf16), and float32 on the CPU. Strings `float32|fp32`, `bfloat16|bf16`,
  `float16|fp16|half` and `torch.dtype` values are accepted; anything else raises `ConfigError`.
- A model split by accelerate (`load_model(device_map=...)`) takes its inputs on `input_device(model)`;
  `check_fits` refuses, before loading, a model larger than `--max-memory` plus the offload disk.
"""

from __future__ import annotations

import os
import shutil

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
            raise ConfigError(f"unknown device {device!r}: use 'auto', 'cpu', 'cuda' or 'cuda:N'") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device {str(dev)!r} requested but CUDA is not available on this machine")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ConfigError(f"device {str(dev)!r} requested but only {torch.cuda.device_count()} CUDA device(s) exist")
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
        raise ConfigError(f"unknown dtype {dtype!r}: use 'auto', 'float32', 'bfloat16' or 'float16'")
    return _DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    """`torch.bfloat16` -> `"bfloat16"` (for logs and tracking params)."""
    return str(dtype).removeprefix("torch.")


# ------------------------------------------------------------------ split models (accelerate big-model inference)
def input_device(model: torch.nn.Module, fallback: torch.device | None = None) -> torch.device:
    """Where a (possibly split) model takes its inputs: its input embedding's device, or, when that
    weight is offloaded (on the meta device, streamed in by accelerate's hooks), accelerate's main device
    (the first GPU of `hf_device_map`, else the CPU). `fallback` (default CPU) when there is no embedding."""
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    weight = getattr(emb, "weight", None)
    if weight is not None and weight.device.type != "meta":
        return weight.device
    placed = [d for d in (getattr(model, "hf_device_map", None) or {}).values() if d not in ("cpu", "disk", "meta")]
    if placed:
        first = placed[0]
        return torch.device(f"cuda:{first}") if isinstance(first, int) else torch.device(first)
    return fallback if fallback is not None else torch.device("cpu")


def describe_device_map(hf_map: dict[str, object]) -> str:
    """`hf_device_map` in one short line: runs of consecutive modules on one device,
    e.g. `model.embed_tokens..model.layers.3=0; model.layers.4..lm_head=disk`."""
    runs: list[list] = []
    for name, dev in hf_map.items():
        if runs and runs[-1][2] == dev:
            runs[-1][1] = name
        else:
            runs.append([name, name, dev])
    return "; ".join(f"{a}={d}" if a == b else f"{a}..{b}={d}" for a, b, d in runs)


_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def size_bytes(size: int | str) -> int:
    """`20GiB`, `500MB`, `123` -> bytes (the forms `factprobe.lm.placement.parse_max_memory` accepts)."""
    if isinstance(size, int):
        return size
    text = size.strip().lower().replace(" ", "")
    unit = text.lstrip("0123456789.")
    return int(float(text[: len(text) - len(unit)]) * _UNITS[unit or "b"])


def human_size(n: float) -> str:
    """Bytes as `1.50 GiB`, `12.3 KiB` or `900 B`."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def check_fits(
    name: str, auto_cls: type, config: object, dtype: torch.dtype, max_memory: dict | None, offload_folder: str
) -> None:
    """Raise `ConfigError` (one line, before any weight is read) when the model that `config` describes does not
    fit `max_memory` (accelerate's own estimate of this machine's memory when None) plus the free disk at
    `offload_folder` (or `max_memory["disk"]` when it names one). Sizes come from accelerate's
    `compute_module_sizes` on an empty (meta-device) model of `config` in `dtype`."""
    from accelerate import init_empty_weights
    from accelerate.utils import compute_module_sizes, get_max_memory

    with init_empty_weights():
        empty = auto_cls.from_config(config, dtype=dtype)
    need = compute_module_sizes(empty, dtype=dtype)[""]
    limits = dict(
        get_max_memory(None if max_memory is None else {k: size_bytes(v) for k, v in max_memory.items() if k != "disk"})
    )
    memory = sum(v for k, v in limits.items() if k != "disk")
    if max_memory is not None and "disk" in max_memory:
        disk, where = size_bytes(max_memory["disk"]), "disk=" + str(max_memory["disk"])
    else:
        existing = offload_folder
        while existing and not os.path.isdir(existing):
            existing = os.path.dirname(existing)
        disk, where = shutil.disk_usage(existing or ".").free, f"free disk at {offload_folder}"
    if need > memory + disk:
        shown = ",".join(f"{k}={v}" for k, v in (max_memory or {}).items() if k != "disk") or "this machine's memory"
        raise ConfigError(
            f"model {name} needs {human_size(need)} in {dtype_name(dtype)}, more than --max-memory {shown} "
            f"({human_size(memory)}) plus {where} ({human_size(disk)}); raise --max-memory, free disk space, "
            "or use a smaller dtype"
        )
