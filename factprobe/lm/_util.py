"""Small helpers shared by the model modules: progress lines, one-line errors, file hashes."""
from __future__ import annotations

import hashlib
import importlib.metadata
import sys
from pathlib import Path


def say(msg: str) -> None:
    """One-line progress message on stderr (long operations only)."""
    print(f"factprobe: {msg}", file=sys.stderr, flush=True)


def first_line(err: BaseException) -> str:
    """`TypeName: first line of the message`, for one-line `ModelError`s that wrap another."""
    text = str(err).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(err).__name__}: {line}" if line else type(err).__name__


def sha256_file(path: Path, desc: str | None = None) -> str:
    """sha256 of a file, with a tqdm bar when `desc` is given and the file is large."""
    h = hashlib.sha256()
    size = path.stat().st_size
    bar = None
    if desc and size > 50 * 1024**2:
        from tqdm.auto import tqdm

        bar = tqdm(total=size, unit="B", unit_scale=True, desc=desc, leave=False)
    with path.open("rb") as f:
        while chunk := f.read(4 * 1024**2):
            h.update(chunk)
            if bar is not None:
                bar.update(len(chunk))
    if bar is not None:
        bar.close()
    return h.hexdigest()


def versions() -> dict[str, str]:
    """Versions of Python and the packages that shape converted weights (for markers)."""
    out = {"python": sys.version.split()[0]}
    for dist in ("factprobe", "transformers", "torch", "tokenizers", "safetensors", "gguf",
                 "huggingface_hub"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out
