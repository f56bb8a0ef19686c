"""Small helpers shared by the model modules: progress lines, one-line errors, file hashes."""

from __future__ import annotations

import importlib.metadata
import sys

from factprobe.io import sha256_file  # noqa: F401 - re-exported: the model modules hash files through it


def say(msg: str) -> None:
    """One-line progress message on stderr (long operations only)."""
    print(f"factprobe: {msg}", file=sys.stderr, flush=True)


def first_line(err: BaseException) -> str:
    """`TypeName: first line of the message`, for one-line `ModelError`s that wrap another."""
    text = str(err).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(err).__name__}: {line}" if line else type(err).__name__


def versions() -> dict[str, str]:
    """Versions of Python and the packages that shape converted weights (for markers)."""
    out = {"python": sys.version.split()[0]}
    for dist in ("factprobe", "transformers", "torch", "tokenizers", "safetensors", "gguf", "huggingface_hub"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out
