"""The measurement identity of a result: which weights, which data, which numerics, which config.

A number is reused (a resumed folder, a pipeline work folder), compared or gated only against a
number of the same identity. `RunIdentity` has four parts, each computed before anything is scored:

- **model** (`model_revision`): a content revision of the weights that are loaded, never of names and
  sizes, and never of what a file in the folder says about it. Local folders: `local-sha256:<hex>`
  over the bytes of every file in the folder (`folder_revision`); aliases: the sha256 of the GGUF
  file they are converted from (`gguf-sha256:<hex>`), given to a folder only while its files are
  exactly, byte for byte, the files that conversion wrote (`factprobe.models.gguf_cache.converted_revision`);
  hub ids: the resolved commit (`hub:<id>@<commit>`, pinned with `--model org/name@REV`); an
  adapter: `adapter-sha256:<hex>+<base revision>`. A `factprobe_complete.json` (or any other file)
  claiming a revision claims nothing: it is one more file whose bytes are hashed.
  Every file is hashed once per volume (`file_sha256`): its sha256 is remembered per machine under
  its real path, size, mtime, ctime, inode and device, and, for a file of 32 MiB or more, on its
  volume, in a hidden `.factprobe-hashes.json` of its folder under its name, size, mtime and ctime
  (`factprobe.volume_hashes`), so a 140 GB checkpoint on the cluster's model-cache claim is read by
  the first pod and by no later one, whatever node or mount point it has. An in-place edit is seen
  even when the editor restores size and mtime (the ctime cannot be set back), and a copy elsewhere
  has a new ctime: either is read again. Trust: an entry only says "the file with exactly this
  size, mtime and ctime at this name had sha256 X"; whoever can write it can write the file beside
  it, so it is within the trust boundary of the bytes themselves (a store others can write but not
  the folder is ignored). A read-only volume is read, not written: its other files are hashed, with
  the per-machine cache as before. Only a file's hash is remembered, never a folder's: a folder's
  revision is recomputed from its files' hashes each time, so an added, removed or edited file
  always gives another revision.
- **data** (`data_digest`): `sha256:<hex>` over the content of every prepared item (prompt or
  context, options and answer included, `item.to_dict()`), every fact set (test, train, ...) and
  the relations' metadata (templates). Whatever input decides a result reaches one of these.
- **numerics**: the resolved dtype, device type and name (`cuda` / `NVIDIA H100 80GB HBM3`; the
  CPU's model name on a CPU), the attention implementation and the versions of torch,
  transformers, peft and factprobe (`numerics`).
- **config** (`config_key`): `RunConfig.results_key()`, as before.

`inputs` records every config value that names an existing local path as an absolute location, with
the digest of that input's own content (`path_digest`; `data` and `train_data` differ when their
files do), so a run can be repeated from another working folder (`regress` replays it) and its data
digest checked against the original.

The attention implementation is known only once a model is loaded; it is a function of the
transformers version, the weights' config and the device, which the identity holds, so a folder
whose rows are all done is reused without loading the model (`numerics(..., attn=None)` before,
the loaded model's value after; `factprobe.lm.numerics` resolves them for a config or a loaded model).

This module imports torch lazily, no model code, and neither kfp nor mlflow.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import re
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import volume_hashes
from .io import atomic_write_text, sha256_file
from .paths import cache_root

#: numerics fields compared for "like with like" gates: dtype, device type, transformers major version
GATE_NUMERICS = ("dtype", "device", "transformers_major")
_LIBS = ("torch", "transformers", "peft", "factprobe")
_HASH_DIR = "file-hashes"
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_memo: dict[tuple, str] = {}
_memo_lock = threading.Lock()
#: how many files were actually read by `file_sha256` in this process (tests: "hashed once")
reads = 0


# ------------------------------------------------------------------ file and folder hashes
def _stat_key(path: Path) -> tuple:
    real = path.resolve()
    st = real.stat()
    return (str(real), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


def _read_machine_cache(cached: Path) -> str:
    try:
        value = cached.read_text(encoding="utf-8").strip()
    except OSError:
        return ""
    return value if len(value) == 64 else ""


def _write_machine_cache(cached: Path, value: str) -> None:
    try:
        atomic_write_text(cached, value + "\n")
    except OSError:
        pass  # a read-only cache only costs a second read later


def file_sha256(path: str | Path) -> str:
    """sha256 (hex) of a file's bytes. Asked in order: this process's memo and the per-machine cache
    under `<cache root>/file-hashes/` (both keyed by real path, size, mtime, ctime, inode and device),
    then the store on the file's volume (`factprobe.volume_hashes`: its folder's name, size, mtime and
    ctime), and only then the bytes are read (a bar shows a large file's progress). A hash read from the
    bytes is remembered at every level; one from the per-machine cache is copied onto the volume."""
    global reads
    path = Path(path)
    real = path.resolve()
    st = real.stat()
    key = (str(real), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)
    with _memo_lock:
        if key in _memo:
            return _memo[key]
    token = hashlib.sha256(json.dumps(key).encode()).hexdigest()
    cached = cache_root() / _HASH_DIR / token[:2] / token
    value = _read_machine_cache(cached)
    if value:
        volume_hashes.record(real, st, value)  # no write when the volume has it already
    elif value := volume_hashes.lookup(real, st) or "":
        _write_machine_cache(cached, value)
    else:
        value = sha256_file(real, desc=f"hashing {path.name}")
        reads += 1
        if _stat_key(path) == key:  # the file did not change while it was read
            _write_machine_cache(cached, value)
            volume_hashes.record(real, st, value)
    with _memo_lock:
        _memo[key] = value
    return value


def folder_files(folder: str | Path, recursive: bool = False) -> list[Path]:
    """The files a folder's revision covers: its top-level files (every file below it when
    `recursive`), hidden names (a leading ".") left out, sorted by relative name."""
    folder = Path(folder)
    if recursive:
        found = [
            p for p in folder.rglob("*") if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)
        ]
    else:
        found = [p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")]
    return sorted(found, key=lambda p: p.relative_to(folder).as_posix())


def file_hashes(folder: str | Path, recursive: bool = False) -> dict[str, str]:
    """{relative name: sha256 hex} of `folder_files(folder, recursive)`, each file's from `file_sha256`
    (read once per machine)."""
    folder = Path(folder)
    return {p.relative_to(folder).as_posix(): file_sha256(p) for p in folder_files(folder, recursive)}


def hashes_revision(hashes: Mapping[str, str], prefix: str = "local") -> str:
    """`<prefix>-sha256:<hex>` over the (relative name, sha256) pairs of `hashes`, by name."""
    h = hashlib.sha256()
    for name in sorted(hashes):
        h.update(f"{name}\0{hashes[name]}\n".encode())
    return f"{prefix}-sha256:{h.hexdigest()}"


def folder_revision(folder: str | Path, prefix: str = "local", recursive: bool = False) -> str:
    """`<prefix>-sha256:<hex>` over (relative name, sha256 of the bytes) of every file of `folder`
    (top-level files by default, as `from_pretrained` reads them; hidden files left out). A function
    of the bytes only: two folders whose files have equal names and sizes but other bytes get other
    revisions, and no file in the folder (a `factprobe_complete.json` naming a revision) can set it."""
    return hashes_revision(file_hashes(folder, recursive), prefix)


def path_digest(path: str | Path) -> str:
    """`sha256:<hex>` of a file's bytes, or of a folder's files (recursive, by relative name)."""
    p = Path(path)
    if p.is_dir():
        return "sha256:" + folder_revision(p, "x", recursive=True).split(":", 1)[1]
    return "sha256:" + file_sha256(p)


# ------------------------------------------------------------------ data
def _canon(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str, separators=(",", ":"))


def item_digest(item: Any) -> str:
    """sha256 (first 16 hex) of one prepared item's content (`item.to_dict()`: prompt or context,
    options and answer included): the key under which its result rows are reused."""
    content = item.to_dict() if hasattr(item, "to_dict") else item
    return hashlib.sha256(_canon(content).encode("utf-8")).hexdigest()[:16]


def data_digest(prepared: Any) -> str:
    """`sha256:<hex>` over a `Prepared` dataset: every item in order, every fact set (sorted facts)
    and every relation's metadata (its templates). Equal content gives an equal digest."""
    h = hashlib.sha256()
    h.update(f"kind\0{prepared.kind}\n".encode())
    for rel, items in prepared.items.items():
        h.update(f"group\0{rel}\n".encode())
        for it in items:
            h.update((_canon(it.to_dict() if hasattr(it, "to_dict") else it) + "\n").encode("utf-8"))
    for name in sorted(prepared.facts):
        fs = prepared.facts[name]
        h.update(f"facts\0{name}\n".encode())
        for line in sorted(_canon(f.to_dict()) for f in fs):
            h.update((line + "\n").encode("utf-8"))
        for rid in sorted(fs.relations):
            h.update((_canon(asdict(fs.relations[rid])) + "\n").encode("utf-8"))
    return "sha256:" + h.hexdigest()


def input_locations(config: Mapping[str, Any], base: str | Path | None = None) -> list[dict]:
    """Every config value that names an existing local path (or an `s3://` location), made absolute:
    [{"name": field, "location": "/abs/path"}], in field order. `base` is the working folder the
    relative paths were given in (default: the current one)."""
    out = []
    root = Path(base) if base is not None else Path.cwd()
    for name, value in config.items():
        if name in ("out", "model", "base_model") or not isinstance(value, str) or not value.strip():
            continue
        if _URL.match(value):  # s3://, http(s)://: a location as given (credentials are masked where stored)
            out.append({"name": name, "location": value})
            continue
        text = os.path.expanduser(value)
        # joined as text, not normalised: a location is recorded as written (credentials in it stay maskable)
        location = text if os.path.isabs(text) else os.path.join(str(root), text)
        if ("/" in value or Path(value).suffix) and Path(location).exists():
            out.append({"name": name, "location": location})
    return out


# ------------------------------------------------------------------ numerics
def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def device_name(device: Any) -> str:
    """The device's name: the GPU's (`torch.cuda.get_device_name`), else the CPU's model name."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    if dev.type == "mps":
        return "Apple MPS"
    return _cpu_name()


def numerics(device: Any, dtype: Any, attn: str | None = None, device_map: str | None = None) -> dict[str, Any]:
    """The resolved numerics: {"dtype": "float32", "device": "cpu", "device_name", "attn_implementation",
    "torch", "transformers", "peft", "factprobe"} for a resolved torch device and dtype. `attn` is the
    loaded model's attention implementation (None before a model is loaded). `device_map`, the accelerate
    strategy that splits the model across devices ("auto", "balanced", "sequential"; the device is then
    where the inputs go), is a field only when one is used."""
    import torch

    dev = torch.device(device)
    out = {
        "dtype": str(dtype).removeprefix("torch."),
        "device": dev.type,
        "device_name": device_name(dev),
        "attn_implementation": attn,
        **{lib: _version(lib) for lib in _LIBS},
    }
    if device_map:
        out["device_map"] = str(device_map)
    return out


def attn_implementation(model: Any) -> str | None:
    """The attention implementation a loaded model runs ("sdpa", "eager", ...), None when unknown."""
    cfg = getattr(model, "config", None)
    value = getattr(cfg, "_attn_implementation", None) or getattr(cfg, "attn_implementation", None)
    return str(value) if value else None


def _major(version: str | None) -> str | None:
    return version.split(".")[0] if version else None


def numerics_changes(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """What differs between two numerics that a gate cares about, as phrases "dtype bfloat16 vs float32",
    "device cuda vs cpu", "transformers 5.x vs 4.x" (a's value first); [] when alike."""
    out = []
    if a.get("dtype") != b.get("dtype"):
        out.append(f"dtype {a.get('dtype')} vs {b.get('dtype')}")
    if a.get("device") != b.get("device"):
        out.append(f"device {a.get('device')} vs {b.get('device')}")
    ma, mb = _major(a.get("transformers")), _major(b.get("transformers"))
    if ma != mb:
        out.append(f"transformers {ma}.x vs {mb}.x")
    return out


# ------------------------------------------------------------------ the identity
@dataclass
class RunIdentity:
    """What one result measured; see the module docstring. `to_dict()` is what run_config.json,
    metrics.json and MLflow hold."""

    model_revision: str
    data_digest: str
    config_key: str
    numerics: dict[str, Any] = field(default_factory=dict)
    inputs: list[dict] = field(default_factory=list)
    #: what the weights are beyond their revision (`factprobe.models.quantisation.weights_of`: a built-in
    #: alias's GGUF quantisation, "GGUF Q4_K_M, dequantised to float32"); {} for other weights. Told by the
    #: revision, so not part of `key()` or `changes_from`
    weights: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunIdentity:
        return cls(
            str(d.get("model_revision") or ""),
            str(d.get("data_digest") or ""),
            str(d.get("config_key") or ""),
            dict(d.get("numerics") or {}),
            list(d.get("inputs") or []),
            dict(d.get("weights") or {}),
        )

    def key(self) -> str:
        """sha256 (first 16 hex) over model revision, data digest, config key and the numerics known
        before a model loads (every field but the attention implementation): the name of a
        pipeline work folder, so a folder is reused only by a run of the same identity."""
        num = {k: v for k, v in self.numerics.items() if k != "attn_implementation"}
        text = _canon([self.model_revision, self.data_digest, self.config_key, num])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def changes_from(self, old: RunIdentity) -> list[str]:
        """What differs from `old` (an earlier run's identity), as phrases for a one-line refusal:
        "weights (model revision X then, Y now)", "data (...)", "config (...)", "numerics (dtype ...)".
        An unknown attention implementation on either side is not a difference."""
        out = []
        if old.model_revision != self.model_revision:
            out.append(f"weights (model revision {short(old.model_revision)} then, {short(self.model_revision)} now)")
        if old.data_digest != self.data_digest:
            out.append(f"data (digest {short(old.data_digest)} then, {short(self.data_digest)} now)")
        if old.config_key != self.config_key:
            out.append(f"config (results key {old.config_key} then, {self.config_key} now)")
        diffs = [
            f"{k} {old.numerics.get(k)} then, {self.numerics.get(k)} now"
            for k in sorted(set(old.numerics) | set(self.numerics))
            if old.numerics.get(k) != self.numerics.get(k)
            and not (k == "attn_implementation" and None in (old.numerics.get(k), self.numerics.get(k)))
        ]
        if diffs:
            out.append(f"numerics ({'; '.join(diffs)})")
        return out

    def line(self) -> str:
        """One line for the screen: `identity: model local-sha256:1a2b3c4d5e6f, data sha256:..., float32 on cpu (...)`."""
        n = self.numerics
        where = n.get("device_name") or n.get("device")
        attn = f", attn {n['attn_implementation']}" if n.get("attn_implementation") else ""
        weights = f" ({self.weights['description']})" if self.weights.get("description") else ""
        return (
            f"identity: model {short(self.model_revision)}{weights}, data {short(self.data_digest)}, config {self.config_key}, "
            f"{n.get('dtype')} on {n.get('device')} ({where}{attn}), torch {n.get('torch')}, "
            f"transformers {n.get('transformers')}, factprobe {n.get('factprobe')}"
        )

    def tags(self) -> dict[str, str]:
        """MLflow tags (without the `factprobe.` prefix): model_revision, data_digest, config_key, numerics
        (compact JSON), dtype, device, device_name, identity_key."""
        n = self.numerics
        return {
            "model_revision": self.model_revision,
            "data_digest": self.data_digest,
            "config_key": self.config_key,
            "numerics": _canon(n),
            "dtype": str(n.get("dtype")),
            "device": str(n.get("device")),
            "device_name": str(n.get("device_name")),
            "identity_key": self.key(),
        }

    def params(self) -> dict[str, str]:
        """MLflow params `identity.<name>`: the model revision, data digest, each numerics field, the inputs
        and `identity.weights` (what the weights are, e.g. "GGUF Q4_1, dequantised to float32") when known."""
        out = {"identity.model_revision": self.model_revision, "identity.data_digest": self.data_digest}
        if self.weights.get("description"):
            out["identity.weights"] = str(self.weights["description"])
        out.update({f"identity.{k}": str(v) for k, v in self.numerics.items()})
        for inp in self.inputs:
            out[f"identity.input.{inp.get('name')}"] = str(inp.get("location"))
        return out


def short(text: str, n: int = 12) -> str:
    """`local-sha256:1a2b3c4d5e6f` (the kind and the first `n` hex digits) for messages; an adapter's
    `adapter-sha256:<hex>+<base revision>` is shortened part by part."""
    text = str(text)
    if "+" in text:
        return "+".join(short(part, n) for part in text.split("+"))
    kind, sep, rest = text.rpartition(":")
    return f"{kind}:{rest[:n]}" if sep else text[:n]


def identity_of(d: Mapping[str, Any] | None) -> dict | None:
    """The `identity` object of a metrics.json or run_config.json dict (or the dict itself when it is
    one), None when there is none (a run made before identities were recorded)."""
    if not isinstance(d, Mapping):
        return None
    ident = d.get("identity")
    if isinstance(ident, Mapping) and ident.get("model_revision") is not None:
        return dict(ident)
    if "model_revision" in d and "numerics" in d:
        return dict(d)
    return None


def with_inputs(ident: RunIdentity, config: Mapping[str, Any]) -> RunIdentity:
    """`ident` with `inputs` set from `config` (`input_locations`): each local input carries the
    digest of its own content (`path_digest`: a file's bytes, or a folder's files), so two inputs
    (`data`, `train_data`) have the same digest only when they hold the same bytes; an `s3://` or
    other URL input, whose content is not read here, carries no digest (the prepared items'
    `data_digest` covers what was read from it)."""
    ident.inputs = [
        i if _URL.match(i["location"]) else {**i, "digest": path_digest(i["location"])} for i in input_locations(config)
    ]
    return ident


__all__ = [
    "GATE_NUMERICS",
    "RunIdentity",
    "attn_implementation",
    "data_digest",
    "device_name",
    "file_hashes",
    "file_sha256",
    "folder_files",
    "folder_revision",
    "hashes_revision",
    "identity_of",
    "input_locations",
    "item_digest",
    "numerics",
    "numerics_changes",
    "path_digest",
    "short",
    "with_inputs",
]
