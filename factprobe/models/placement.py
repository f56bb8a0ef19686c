"""Where a model's layers go when it is split across devices (accelerate big-model inference).

Contract (no torch import here: configs validate with it):
- `DEVICE_MAPS` are the strategies `--device-map` takes, passed to `from_pretrained(device_map=...)`:
  "auto" and "balanced" spread the layers evenly over the GPUs, "sequential" fills GPU 0 first;
  on every one what does not fit the GPUs goes to the CPU, then to disk (an offload folder).
- `parse_max_memory(text)` reads `--max-memory`: `0=20GiB,cpu=60GiB` or a JSON object
  `{"0": "20GiB", "cpu": "60GiB"}`; keys are GPU indices, `cpu`, `mps` or `disk`, values a size
  (`20GiB`, `500MB`, a number of bytes). Returns accelerate's form: {0: "20GiB", "cpu": "60GiB"}.
- `check_placement(device_map, max_memory)` normalises both ("" is unset) and raises `ConfigError`
  in one line for an unknown strategy, a malformed size, or `max_memory` without `device_map`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..errors import ConfigError

DEVICE_MAPS = ("auto", "balanced", "sequential")
_SIZE = re.compile(r"^\s*\d+(\.\d+)?\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_NAMED = ("cpu", "mps", "disk")
_EXAMPLE = 'e.g. 0=20GiB,cpu=60GiB or {"0": "20GiB", "cpu": "60GiB"}'


def _key(raw: Any, text: str) -> int | str:
    key = str(raw).strip().lower()
    if key.isdigit():
        return int(key)
    if key in _NAMED:
        return key
    raise ConfigError(f"max_memory={text!r}: unknown device {raw!r}; name GPU indices (0, 1, ...), cpu or disk ({_EXAMPLE})")


def _size(raw: Any, text: str) -> int | str:
    if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
        return raw
    if isinstance(raw, str) and _SIZE.match(raw):
        value = raw.strip().replace(" ", "")
        return int(value) if value.isdigit() else value
    raise ConfigError(f"max_memory={text!r}: {raw!r} is not a size; write it like 20GiB, 500MB or a number of bytes")


def parse_max_memory(text: str | dict | None) -> dict[int | str, int | str] | None:
    """`--max-memory` as accelerate's `max_memory` dict (module docstring); None for None or ""."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    shown = text if isinstance(text, str) else json.dumps(text)
    if isinstance(text, dict):
        pairs = list(text.items())
    elif text.strip().startswith("{"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"max_memory={shown!r}: not JSON ({e.msg} at column {e.colno}); {_EXAMPLE}") from None
        if not isinstance(obj, dict):
            raise ConfigError(f"max_memory={shown!r}: expected a JSON object, {_EXAMPLE}")
        pairs = list(obj.items())
    else:
        pairs = []
        for part in text.split(","):
            if "=" not in part:
                raise ConfigError(f"max_memory={shown!r}: {part.strip()!r} is not DEVICE=SIZE; {_EXAMPLE}")
            k, v = part.split("=", 1)
            pairs.append((k, v))
    if not pairs:
        raise ConfigError(f"max_memory={shown!r}: names no device; {_EXAMPLE}")
    out: dict[int | str, int | str] = {}
    for k, v in pairs:
        key = _key(k, shown)
        if key in out:
            raise ConfigError(f"max_memory={shown!r}: device {key!r} is named twice")
        out[key] = _size(v, shown)
    return out


def max_memory_text(parsed: dict[int | str, int | str]) -> str:
    """The canonical text of a parsed `max_memory`: `0=20GiB,cpu=60GiB` (GPUs first, in order)."""
    keys = sorted(parsed, key=lambda k: (isinstance(k, str), k if isinstance(k, int) else _NAMED.index(k)))
    return ",".join(f"{k}={parsed[k]}" for k in keys)


def check_placement(device_map: str | None, max_memory: str | None) -> tuple[str | None, str | None]:
    """(device_map, max_memory) normalised ("" -> None, max_memory canonical text); ConfigError in one line
    for an unknown strategy, a malformed max_memory, or max_memory without device_map."""
    dm = device_map.strip().lower() if isinstance(device_map, str) and device_map.strip() else None
    if dm is not None and dm not in DEVICE_MAPS:
        raise ConfigError(f"device_map={device_map!r}: unknown strategy; choose one of {', '.join(DEVICE_MAPS)}")
    parsed = parse_max_memory(max_memory)
    if parsed is not None and dm is None:
        raise ConfigError(
            f"max_memory={max_memory!r} applies only to a split model: add --device-map auto (or balanced, sequential)"
        )
    return dm, (max_memory_text(parsed) if parsed is not None else None)
