"""What the weights of a run are, beyond their revision: the quantisation they come from.

The built-in aliases are not the published float checkpoints: `smollm2-135m-instruct` is a 4-bit
GGUF Q4_1 file and `gemma-3-270m` a GGUF Q4_K_M file, both dequantised to float32 when converted
(`factprobe.models.gguf_cache`). Knowledge probing is sensitive to quantisation, so a result of
these weights says so wherever it names the model: `weights_of(revision)` gives
`{"format", "quantisation", "dtype", "gguf_file", "description"}`, e.g. description
`GGUF Q4_K_M, dequantised to float32`, which the run's identity records (`RunIdentity.weights`:
run_config.json, metrics.json, the MLflow param `identity.weights`, the screen's identity line).

Where it comes from: the conversion's manifest (`factprobe_complete.json`, `quantisation`, read by
`gguf_file_type` from the GGUF header's `general.file_type` when the folder was built) and, for a
folder converted before the manifest recorded it, the registry (`ModelSpec.quantisation`, which the
conversion checks against the header). Weights of any other kind (a local folder, a hub id, an
adapter) get `{}`: they are what their files say.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, BinaryIO

#: GGUF metadata value types: struct format of the fixed-size ones (8 = string, 9 = array)
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def _skip_value(fh: BinaryIO, kind: int) -> None:
    if kind in _SCALARS:
        fh.seek(struct.calcsize("<" + _SCALARS[kind]), 1)
    elif kind == 8:
        (n,) = struct.unpack("<Q", fh.read(8))
        fh.seek(n, 1)
    elif kind == 9:
        item, count = struct.unpack("<IQ", fh.read(12))
        if item in _SCALARS:
            fh.seek(count * struct.calcsize("<" + _SCALARS[item]), 1)
        else:
            for _ in range(count):
                _skip_value(fh, item)
    else:
        raise ValueError(f"unknown GGUF value type {kind}")


def _header_value(path: str | Path, key: str) -> Any:
    """The value of metadata `key` of a GGUF file (v2/v3 header, read up to that key), None without it."""
    with open(path, "rb") as fh:
        magic, version = struct.unpack("<4sI", fh.read(8))
        if magic != b"GGUF" or version < 2:
            raise ValueError(f"{path}: not a GGUF v2+ file")
        _tensors, n_kv = struct.unpack("<QQ", fh.read(16))
        for _ in range(n_kv):
            (n,) = struct.unpack("<Q", fh.read(8))
            name = fh.read(n).decode("utf-8")
            (kind,) = struct.unpack("<I", fh.read(4))
            if name == key and kind in _SCALARS:
                fmt = "<" + _SCALARS[kind]
                return struct.unpack(fmt, fh.read(struct.calcsize(fmt)))[0]
            _skip_value(fh, kind)
    return None


def gguf_file_type(path: str | Path) -> str | None:
    """The quantisation a GGUF file's header states (`general.file_type`), as llama.cpp names it
    without its `MOSTLY_` prefix (`Q4_1`, `Q4_K_M`, `F16`); None when the header has none. Reads
    the header only (gguf's `LlamaFileType` names the number)."""
    import gguf

    value = _header_value(path, "general.file_type")
    if value is None:
        return None
    try:
        name = gguf.LlamaFileType(int(value)).name
    except ValueError:
        return f"file_type {value}"
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")


def describe(quantisation: str, dtype: str) -> str:
    """`GGUF Q4_K_M, dequantised to float32`."""
    return f"GGUF {quantisation}, dequantised to {dtype}"


def weights_of(revision: str) -> dict[str, Any]:
    """What the weights of content revision `revision` are (module docstring); {} unless they are a
    built-in alias's conversion (`gguf-sha256:<hex>` of a registry entry)."""
    from .aliases import _REGISTRY, MARKER_NAME

    spec = next((s for s in _REGISTRY.values() if s.revision == revision), None) if revision else None
    if spec is None:
        return {}
    try:
        marker = json.loads((spec.cache_dir / MARKER_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        marker = {}
    if not isinstance(marker, dict) or marker.get("revision") != revision:
        marker = {}
    quant = str(marker.get("quantisation") or spec.quantisation)
    dtype = str(marker.get("dtype") or "float32")
    return {
        "format": "GGUF",
        "quantisation": quant,
        "dtype": dtype,
        "gguf_file": spec.gguf_name,
        "description": describe(quant, dtype),
        "recorded_by": "conversion manifest" if marker.get("quantisation") else "model registry",
    }
