"""Device and dtype selection for loading language models.

Contract:
- `resolve_device("auto")` is `cuda` when CUDA is available, else `cpu`. Explicit values
  (`"cpu"`, `"cuda"`, `"cuda:1"`, a `torch.device`) are honoured; asking for CUDA on a machine
  without it raises `ConfigError` (one line), it never silently falls back to the CPU.
- `resolve_dtype("auto", device)` is bfloat16 on a CUDA device that supports it (float32 on an
  old GPU without bf16), and float32 on the CPU. Strings `float32|fp32`, `bfloat16|bf16`,
  `float16|fp16|half` and `torch.dtype` values are accepted; anything else raises `ConfigError`.
- A model split by accelerate (`load_model(device_map=...)`) takes its inputs on `input_device(model)`;
  `check_fits` refuses, before loading, a model larger than `--max-memory` plus the offload disk, and a
  `--max-memory` that holds none of its layers (`cpu=1KiB`: accelerate would put the whole model on disk,
  which it cannot run), naming the least memory that holds one.
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
    """`20GiB`, `500MB`, `123` -> bytes (the forms `factprobe.models.placement.parse_max_memory` accepts)."""
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
    name: str,
    auto_cls: type,
    config: object,
    dtype: torch.dtype,
    max_memory: dict | None,
    offload_folder: str,
    device_map: str = "auto",
) -> None:
    """Raise `ConfigError` (one line, before any weight is read) when the model that `config` describes does not
    fit `max_memory` (accelerate's own estimate of this machine's memory when None) plus the free disk at
    `offload_folder` (or `max_memory["disk"]` when it names one), or when `max_memory` holds none of its
    layers (`in_memory_or_refuse`). Sizes come from accelerate's `compute_module_sizes` on an empty
    (meta-device) model of `config` in `dtype`; `device_map` is the strategy that will place it."""
    from accelerate import init_empty_weights
    from accelerate.utils import compute_module_sizes, get_max_memory

    with init_empty_weights():
        empty = auto_cls.from_config(config, dtype=dtype)
    need = compute_module_sizes(empty, dtype=dtype)[""]
    limits = dict(
        get_max_memory(None if max_memory is None else {k: size_bytes(v) for k, v in max_memory.items() if k != "disk"})
    )
    memory = sum(v for k, v in limits.items() if k != "disk")
    shown = ",".join(f"{k}={v}" for k, v in (max_memory or {}).items() if k != "disk") or "this machine's memory"
    if max_memory is not None and "disk" in max_memory:
        disk, where = size_bytes(max_memory["disk"]), "disk=" + str(max_memory["disk"])
    else:
        existing = offload_folder
        while existing and not os.path.isdir(existing):
            existing = os.path.dirname(existing)
        disk, where = shutil.disk_usage(existing or ".").free, f"free disk at {offload_folder}"
    if need > memory + disk:
        raise ConfigError(
            f"model {name} needs {human_size(need)} in {dtype_name(dtype)}, more than --max-memory {shown} "
            f"({human_size(memory)}) plus {where} ({human_size(disk)}); raise --max-memory, free disk space, "
            "or use a smaller dtype"
        )
    in_memory_or_refuse(name, empty, limits, need, device_map, shown)


def _places_in_memory(empty: torch.nn.Module, strategy: str, limits: dict) -> bool | None:
    """Whether transformers' own placement (`from_pretrained(device_map=strategy, max_memory=limits)`) puts
    any module of `empty` off disk; None where this transformers has no such function to ask."""
    try:
        from transformers.integrations.accelerate import _get_device_map
    except ImportError:  # pragma: no cover - another transformers: the load itself decides
        return None
    placed = _get_device_map(empty, strategy, dict(limits), None)
    return any(d != "disk" for d in placed.values())


def in_memory_or_refuse(name: str, empty: torch.nn.Module, limits: dict, need: int, strategy: str, shown: str) -> None:
    """Raise `ConfigError` (one line) when the memory `limits` (accelerate's form, bytes) holds none of the
    modules of the empty model `empty` (`need` bytes in all) under `strategy`: the whole model would go to
    disk, and accelerate runs an offloaded layer only from memory (it failed at the first forward with
    "Cannot copy out of meta tensor"). The line names the least memory of the main device (the first GPU
    named, else the CPU) that holds one, found by bisection on the placement itself."""
    if _places_in_memory(empty, strategy, limits) is not False:
        return
    main = min((k for k in limits if isinstance(k, int)), default="cpu")
    low, high = int(limits.get(main, 0)), max(need, 1) * 2
    if _places_in_memory(empty, strategy, {**limits, main: high}) is not True:
        high = 0  # not even the whole model's size does: no amount to name
    while high and high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if _places_in_memory(empty, strategy, {**limits, main: mid}) else (mid, high)
    least = f"; give {main} at least {high} bytes ({human_size(high)})" if high else ""
    raise ConfigError(
        f"model {name}: --max-memory {shown} ({human_size(sum(v for k, v in limits.items() if k != 'disk'))}) holds "
        f"none of its layers: accelerate would put the whole model on disk, and it runs an offloaded layer only "
        f"from memory{least}"
    )
