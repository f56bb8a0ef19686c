"""File hashes kept on the volume, next to the files they describe: a folder on a shared volume (the
cluster's model-cache claim, a network volume mounted in many pods) is read once per volume, not once
per machine. `factprobe.identity.file_sha256` asks here after its per-machine cache and before it reads
a file.

**The store.** One hidden file per folder, `.factprobe-hashes.json` (hidden names are outside every
folder revision, `factprobe.identity.folder_files`): `{"format": "factprobe-file-hashes/1", "files":
{name: {"size", "mtime_ns", "ctime_ns", "sha256"}}}`. An entry says only "the file of this name in this
folder, with exactly this size, mtime and ctime, had this sha256"; it answers for a file only while all
three still equal the file's `stat`. Inode and device are not part of it: they differ between the
mounts of one volume (another node, another pod), while size, mtime and ctime are the volume's own.

**What is trusted, and why.** An in-place edit changes the ctime even when the editor sets size and
mtime back (no user can set a ctime), and a copy to another volume or folder has a new ctime, so
either is read again. The store is no claim about bytes it cannot see: whoever can write the store can
write the files beside it (the store lives in their folder), so an entry is inside the trust boundary
of the bytes themselves, as the per-machine cache is inside that of the machine. A store that others
may write but not the folder (a group or world write bit the folder lacks), a store that is a symlink,
not a file, or not this format, is ignored. Nothing else (a marker, a name) ever stands in for a hash.

**Racy files.** A file whose ctime is within `RACY_NS` (2 s) of the volume's clock when its hash would
be recorded is not recorded: within one timestamp tick (up to 1 s on some network file systems) a
second write leaves size, mtime and ctime as they were. Its next reader records it.

**Writers.** A write merges: under an exclusive `flock` on the folder (where the file system has one)
the store is read again, entries whose files are gone or changed are dropped, the new entry added, and
the result written to a temp file and renamed over the store (readers see the old or the new store,
never half of one). Where `flock` is missing (some NFS mounts) the writer reads back and merges again
when another pod's rename lost its entry; a lost entry only costs a later read.

**Where it is not written.** Files under `MIN_BYTES` (32 MiB: a config, a data file) are left to the
per-machine cache, so data folders and working trees are not written into. `FACTPROBE_VOLUME_HASHES=off`
turns the store off. A read-only volume is read, never written: the store there (if any) still answers
and everything else is hashed as before.

Imports nothing of factprobe.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

STORE_NAME = ".factprobe-hashes.json"
FORMAT = "factprobe-file-hashes/1"
ENV = "FACTPROBE_VOLUME_HASHES"
#: files smaller than this are not recorded on their volume (the per-machine cache keeps them)
MIN_BYTES = 32 * 1024**2
#: a file changed less than this long ago (by the volume's clock) is not recorded yet
RACY_NS = 2 * 10**9
_MAX_STORE_BYTES = 16 * 1024**2
_HEX = re.compile(r"[0-9a-f]{64}")
_TRIES = 3


def applies(st: os.stat_result) -> bool:
    """Whether a file of this `stat` is kept on its volume: the store is on (env `FACTPROBE_VOLUME_HASHES`
    is not `off`/`0`/`false`/`no`) and the file has at least `MIN_BYTES` bytes."""
    off = os.environ.get(ENV, "").strip().lower() in ("off", "0", "false", "no")
    return not off and st.st_size >= MIN_BYTES


def _entry(st: os.stat_result, sha256: str) -> dict:
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "sha256": sha256}


def _answers(entry: object, st: os.stat_result) -> bool:
    """Whether `entry` is well formed and names exactly the size, mtime and ctime of `st`."""
    return (
        isinstance(entry, dict)
        and _HEX.fullmatch(str(entry.get("sha256", ""))) is not None
        and (entry.get("size"), entry.get("mtime_ns"), entry.get("ctime_ns")) == (st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    )


def read_store(folder: Path) -> dict[str, dict]:
    """The entries of `folder`'s store, {} when there is none or it is not believed (see the module
    docstring: not a regular file, writable by others who cannot write the folder, not this format)."""
    try:
        fd = os.open(folder / STORE_NAME, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return {}
    try:
        with os.fdopen(fd, "rb") as fh:
            st, folder_st = os.fstat(fh.fileno()), os.stat(folder)
            if not stat.S_ISREG(st.st_mode) or st.st_mode & ~folder_st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                return {}
            raw = fh.read(_MAX_STORE_BYTES + 1)
            data = json.loads(raw) if len(raw) <= _MAX_STORE_BYTES else None
    except (OSError, ValueError):
        return {}
    files = data.get("files") if isinstance(data, dict) and data.get("format") == FORMAT else None
    return {k: v for k, v in files.items() if isinstance(v, dict)} if isinstance(files, dict) else {}


def lookup(real: Path, st: os.stat_result) -> str | None:
    """The sha256 (hex) recorded on the volume for the file at real path `real` (symlinks resolved)
    whose `stat` is `st`, or None when no entry answers for exactly this size, mtime and ctime."""
    if not applies(st):
        return None
    entry = read_store(real.parent).get(real.name)
    return str(entry["sha256"]) if entry is not None and _answers(entry, st) else None


@contextlib.contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """An exclusive `flock` on `folder` for the body; none where the file system has no flock."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _still_true(folder: Path, name: str, entry: dict) -> bool:
    try:
        return _answers(entry, os.stat(folder / name, follow_symlinks=False))
    except OSError:
        return False


def _write_once(real: Path, st: os.stat_result, sha256: str) -> bool:
    """One merge and rename of `real.parent`'s store with the entry for `real`; False when the file is
    racy (changed within `RACY_NS` of the volume's clock). OSError when the folder cannot be written."""
    folder = real.parent
    fd, tmp = tempfile.mkstemp(prefix=f"{STORE_NAME}.", suffix=".tmp", dir=folder)
    try:
        now_ns = os.fstat(fd).st_mtime_ns  # the volume's clock, not this machine's
        if st.st_ctime_ns > now_ns - RACY_NS:
            os.close(fd)
            os.unlink(tmp)
            return False
        files = {name: e for name, e in read_store(folder).items() if name != real.name and _still_true(folder, name, e)}
        files[real.name] = _entry(st, sha256)
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"format": FORMAT, "files": dict(sorted(files.items()))}, fh, indent=1)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, folder / STORE_NAME)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def record(real: Path, st: os.stat_result, sha256: str) -> bool:
    """Record on the volume that the file at real path `real` with `stat` `st` has sha256 `sha256`
    (hex), merged into its folder's store (see the module docstring). True when the store holds that
    entry afterwards; False when the file is not kept on its volume (`applies`), is racy, or the folder
    cannot be written (a read-only volume). Never raises for the file system."""
    if not applies(st) or not _HEX.fullmatch(sha256):
        return False
    want = _entry(st, sha256)
    try:
        for _ in range(_TRIES):
            if read_store(real.parent).get(real.name) == want:  # there already, or kept after our write
                return True
            with _folder_lock(real.parent):
                if not _write_once(real, st, sha256):
                    return False
            # where there is no flock, another pod's rename may have lost our entry: merge again
        return read_store(real.parent).get(real.name) == want
    except OSError:
        return False


__all__ = ["ENV", "FORMAT", "MIN_BYTES", "RACY_NS", "STORE_NAME", "applies", "lookup", "read_store", "record"]
