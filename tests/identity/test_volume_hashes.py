"""Issue 40 item 4: a model folder on a shared volume is hashed once per volume, never trusted on a claim.

A "pod" here is what a new pod on the cluster's model-cache claim is: a new process (the in-process
memo cleared) with a new per-machine cache (`FACTPROBE_CACHE`). What a pod reads is counted by a
patch of the hash function's file read (`identity.sha256_file`). Files are small; the store's size
floor and its racy-write window are set to 0 here (each has its own test at its real value)."""

from __future__ import annotations

import builtins
import errno
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from factprobe import identity, volume_hashes
from factprobe.volume_hashes import STORE_NAME

SHARDS = ("model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors")


@pytest.fixture(autouse=True)
def small_files_count(monkeypatch):
    monkeypatch.setattr(volume_hashes, "MIN_BYTES", 0)
    monkeypatch.setattr(volume_hashes, "RACY_NS", 0)
    monkeypatch.delenv(volume_hashes.ENV, raising=False)


@pytest.fixture
def new_pod(tmp_path, monkeypatch):
    """Call to become a new pod: a fresh per-machine cache and no hash remembered in this process."""
    count = iter(range(1000))

    def start() -> Path:
        cache = tmp_path / f"machine-{next(count)}"
        monkeypatch.setenv("FACTPROBE_CACHE", str(cache))
        identity._memo.clear()
        return cache

    start()
    return start


@pytest.fixture
def hashed(monkeypatch) -> dict[str, int]:
    """{file name: bytes read to hash it} of every read of a file's content by `file_sha256`."""
    counts: dict[str, int] = {}
    real = identity.sha256_file

    def counting(path, desc=None):
        p = Path(path)
        counts[p.name] = counts.get(p.name, 0) + p.stat().st_size
        return real(p, desc)

    monkeypatch.setattr(identity, "sha256_file", counting)
    return counts


def model_folder(folder: Path, size: int = 1 << 20) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "llama"}')
    for name in SHARDS:
        (folder / name).write_bytes(os.urandom(size))
    return folder


def store(folder: Path) -> dict:
    return json.loads((folder / STORE_NAME).read_text())


def test_a_new_pod_on_the_same_volume_reads_no_file_again(tmp_path, new_pod, hashed):
    folder = model_folder(tmp_path / "volume" / "m")
    first = identity.folder_revision(folder)
    assert set(hashed) == {"config.json", *SHARDS}
    hashed.clear()
    new_pod()
    assert identity.folder_revision(folder) == first
    assert hashed == {}  # not one byte of the folder read again
    assert (folder / STORE_NAME).is_file()  # hidden: outside every revision (the second one is equal)


def test_the_volume_mounted_at_another_path_is_not_read_again(tmp_path, new_pod, hashed):
    # another mount point of one volume: other real paths (and devices), the same files (size, mtime, ctime)
    folder = model_folder(tmp_path / "mnt-a" / "m")
    first = identity.folder_revision(folder)
    (tmp_path / "mnt-a").rename(tmp_path / "mnt-b")
    hashed.clear()
    new_pod()
    assert identity.folder_revision(tmp_path / "mnt-b" / "m") == first and hashed == {}


def test_hashes_this_machine_had_before_the_store_are_copied_onto_the_volume(tmp_path, monkeypatch, new_pod, hashed):
    folder = model_folder(tmp_path / "m")
    monkeypatch.setenv(volume_hashes.ENV, "off")  # hashed as before the store existed: per machine only
    first = identity.folder_revision(folder)
    assert not (folder / STORE_NAME).exists()
    monkeypatch.delenv(volume_hashes.ENV)
    hashed.clear()
    identity._memo.clear()  # a later process on this machine: its cache answers, and the volume learns
    assert identity.folder_revision(folder) == first and hashed == {}
    new_pod()
    assert identity.folder_revision(folder) == first and hashed == {}


def test_an_edit_that_changes_the_size_is_hashed_again_alone(tmp_path, new_pod, hashed):
    folder = model_folder(tmp_path / "m")
    first = identity.folder_revision(folder)
    with (folder / SHARDS[1]).open("ab") as f:
        f.write(b"\0")
    hashed.clear()
    new_pod()
    assert identity.folder_revision(folder) != first
    assert hashed == {SHARDS[1]: (1 << 20) + 1}


def test_an_in_place_edit_with_size_and_mtime_restored_is_hashed_again(tmp_path, new_pod, hashed):
    folder = model_folder(tmp_path / "m")
    first = identity.folder_revision(folder)
    shard = folder / SHARDS[0]
    st = shard.stat()
    time.sleep(0.05)  # past the file system's timestamp tick
    with shard.open("r+b") as f:  # same size, same inode
        f.write(b"edited")
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime set back; ctime cannot be
    now = shard.stat()
    assert (now.st_size, now.st_mtime_ns, now.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)
    assert now.st_ctime_ns != st.st_ctime_ns
    hashed.clear()
    new_pod()
    second = identity.folder_revision(folder)
    assert second != first and hashed == {SHARDS[0]: 1 << 20}
    hashed.clear()
    new_pod()  # the edited file's new hash is on the volume too
    assert identity.folder_revision(folder) == second and hashed == {}


def test_an_entry_answers_only_for_its_exact_stat(tmp_path, new_pod, hashed):
    folder = model_folder(tmp_path / "m")
    first = identity.folder_revision(folder)
    data = store(folder)
    entry = data["files"][SHARDS[2]]
    entry["sha256"], entry["mtime_ns"] = "0" * 64, entry["mtime_ns"] + 1  # a hash for other bytes
    (folder / STORE_NAME).write_text(json.dumps(data))
    hashed.clear()
    new_pod()
    assert identity.folder_revision(folder) == first and set(hashed) == {SHARDS[2]}


def test_a_store_others_can_write_but_not_the_folder_is_not_believed(tmp_path, new_pod, hashed):
    folder = model_folder(tmp_path / "m")
    first = identity.folder_revision(folder)
    data = store(folder)
    data["files"][SHARDS[2]]["sha256"] = "0" * 64  # the exact stat, other bytes' hash
    (folder / STORE_NAME).write_text(json.dumps(data))
    folder.chmod(0o755)
    (folder / STORE_NAME).chmod(0o666)  # anyone may write the store, only the owner the weights
    hashed.clear()
    new_pod()
    assert identity.folder_revision(folder) == first and set(hashed) == {"config.json", *SHARDS}  # no entry believed


def test_a_store_that_is_not_json_is_rewritten(tmp_path, new_pod, hashed):
    folder = model_folder(tmp_path / "m")
    (folder / STORE_NAME).write_text("{not json")
    first = identity.folder_revision(folder)
    assert set(store(folder)["files"]) == {"config.json", *SHARDS}
    hashed.clear()
    new_pod()
    assert identity.folder_revision(folder) == first and hashed == {}


def read_only(monkeypatch, folder: Path) -> None:
    """Make `folder` behave as on a read-only volume: creating, opening for writing or renaming into
    it fails with EROFS (the tests run as root, for whom a mode bit is no barrier)."""
    inside = str(folder.resolve())
    real_open, real_replace, real_builtin_open = os.open, os.replace, builtins.open

    def is_inside(path) -> bool:
        return os.path.abspath(os.fsdecode(path)).startswith(inside + os.sep)

    def guarded_open(path, flags, *args, **kwargs):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and is_inside(path):
            raise OSError(errno.EROFS, "Read-only file system", os.fsdecode(path))
        return real_open(path, flags, *args, **kwargs)

    def guarded_replace(src, dst, *args, **kwargs):
        if is_inside(dst):
            raise OSError(errno.EROFS, "Read-only file system", os.fsdecode(dst))
        return real_replace(src, dst, *args, **kwargs)

    def guarded_builtin_open(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, bytes, os.PathLike)) and set(mode) & set("wax+") and is_inside(file):
            raise OSError(errno.EROFS, "Read-only file system", os.fsdecode(file))
        return real_builtin_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(os, "open", guarded_open)
    monkeypatch.setattr(os, "replace", guarded_replace)
    monkeypatch.setattr(os, "rename", guarded_replace)
    monkeypatch.setattr(builtins, "open", guarded_builtin_open)


def test_a_read_only_volume_falls_back_to_hashing_and_the_machine_cache(tmp_path, monkeypatch, new_pod, hashed):
    folder = model_folder(tmp_path / "m")
    expected = identity.hashes_revision({p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()})
    read_only(monkeypatch, folder)
    assert identity.folder_revision(folder) == expected
    assert not (folder / STORE_NAME).exists() and set(hashed) == {"config.json", *SHARDS}
    hashed.clear()
    identity._memo.clear()  # a new process on this machine: the per-machine cache answers
    assert identity.folder_revision(folder) == expected and hashed == {}


def test_a_store_on_a_read_only_volume_is_still_read(tmp_path, monkeypatch, new_pod, hashed):
    folder = model_folder(tmp_path / "m")
    first = identity.folder_revision(folder)  # written while the volume was writable
    read_only(monkeypatch, folder)
    hashed.clear()
    new_pod()
    assert identity.folder_revision(folder) == first and hashed == {}


def test_a_file_written_within_the_racy_window_is_not_recorded(tmp_path, monkeypatch, new_pod, hashed):
    # a file whose ctime is within RACY_NS of the volume's clock may still change within its timestamp tick
    monkeypatch.setattr(volume_hashes, "RACY_NS", 3600 * 10**9)
    folder = model_folder(tmp_path / "m")
    first = identity.folder_revision(folder)
    assert not (folder / STORE_NAME).exists()
    hashed.clear()
    new_pod()
    assert identity.folder_revision(folder) == first and set(hashed) == {"config.json", *SHARDS}


def test_small_files_and_the_off_switch_leave_the_folder_alone(tmp_path, monkeypatch, new_pod):
    monkeypatch.setattr(volume_hashes, "MIN_BYTES", 32 * 1024**2)
    small = model_folder(tmp_path / "data")  # a data folder of small files is not written into
    identity.folder_revision(small)
    assert not (small / STORE_NAME).exists()
    monkeypatch.setattr(volume_hashes, "MIN_BYTES", 0)
    monkeypatch.setenv(volume_hashes.ENV, "off")
    identity.folder_revision(model_folder(tmp_path / "m"))
    assert not (tmp_path / "m" / STORE_NAME).exists()


WORKER = """
import sys, time
from pathlib import Path
from factprobe import identity, volume_hashes
volume_hashes.MIN_BYTES = 0
volume_hashes.RACY_NS = 0
folder, start, turn, lock = Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if lock == "none":  # as on an NFS mount without flock
    def no_flock(fd, op):
        raise OSError(38, "Function not implemented")
    volume_hashes.fcntl.flock = no_flock
files = identity.folder_files(folder)
files = files[turn:] + files[:turn]
while time.time() < start:
    time.sleep(0.001)
for p in files:
    identity.file_sha256(p)
print(identity.reads)
"""


@pytest.mark.slow
@pytest.mark.parametrize("lock", ["flock", "none"])
def test_pods_writing_the_store_at_once_leave_a_valid_store(tmp_path, new_pod, hashed, lock):
    folder = tmp_path / "m"
    folder.mkdir()
    names = [f"model-{i:05d}.safetensors" for i in range(12)]
    for name in names:
        (folder / name).write_bytes(os.urandom(64 * 1024))
    start = time.time() + 3.0
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(folder), str(start), str(turn), lock],
            env={**os.environ, "FACTPROBE_CACHE": str(tmp_path / f"pod-{turn}")},
            stdout=subprocess.PIPE,
            text=True,
        )
        for turn in range(0, 12, 3)
    ]
    reads = [int(p.communicate(timeout=120)[0]) for p in procs]  # files each pod read (others' entries spare it some)
    assert all(p.returncode == 0 for p in procs) and sum(reads) >= 12
    files = store(folder)["files"]  # valid JSON
    truth = {n: hashlib.sha256((folder / n).read_bytes()).hexdigest() for n in names}
    assert files and all(e["sha256"] == truth[n] for n, e in files.items())  # every entry true
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == [STORE_NAME]  # no temp file left
    new_pod()
    identity.folder_revision(folder)
    if lock == "flock":  # writers took turns: no entry lost
        assert set(files) == set(names) and hashed == {}
    else:  # a rename may have lost another pod's entry: that file is read once more, and only that one
        assert set(hashed) == set(names) - set(files)
