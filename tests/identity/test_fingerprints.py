"""Issue 28 item 1: content revisions of weights (every byte, each file hashed once), hub pins,
numerics and data digests."""

import os
import shutil
from pathlib import Path

import pytest

from factprobe import identity
from factprobe.errors import ModelError


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FACTPROBE_CACHE", str(tmp_path / "cache"))
    identity._memo.clear()


def checkpoint(root: Path, payload: bytes) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text('{"model_type": "llama"}')
    (root / "model-00001-of-00002.safetensors").write_bytes(payload)
    (root / "model-00002-of-00002.safetensors").write_bytes(b"\0" * len(payload))
    return root


def test_equal_names_and_sizes_with_other_bytes_get_other_revisions(tmp_path):
    # the old rule for checkpoints over 4 GiB hashed names and sizes only: these two collided
    a = checkpoint(tmp_path / "a", b"A" * 4096)
    b = checkpoint(tmp_path / "b", b"B" * 4096)
    ra, rb = identity.folder_revision(a), identity.folder_revision(b)
    assert ra.startswith("local-sha256:") and rb.startswith("local-sha256:") and ra != rb


def test_a_large_file_is_hashed_once_per_machine(tmp_path):
    a = checkpoint(tmp_path / "a", os.urandom(1 << 20))
    before = identity.reads
    first = identity.folder_revision(a)
    assert identity.reads - before == 3  # config + two shards
    assert identity.folder_revision(a) == first and identity.reads - before == 3  # this process remembers
    identity._memo.clear()  # a new process: the cache under FACTPROBE_CACHE answers
    assert identity.folder_revision(a) == first and identity.reads - before == 3


def test_an_in_place_edit_with_its_mtime_restored_is_seen(tmp_path):
    a = checkpoint(tmp_path / "a", b"A" * 4096)
    first = identity.folder_revision(a)
    shard = a / "model-00001-of-00002.safetensors"
    st = shard.stat()
    with shard.open("r+b") as f:  # same size, same inode
        f.write(b"Z")
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert shard.stat().st_ino == st.st_ino and shard.stat().st_mtime_ns == st.st_mtime_ns
    identity._memo.clear()
    assert identity.folder_revision(a) != first


def test_a_symlinked_model_folder_has_its_targets_revision(tmp_path):
    a = checkpoint(tmp_path / "a", b"A" * 4096)
    link = tmp_path / "link"
    link.symlink_to(a, target_is_directory=True)
    assert identity.folder_revision(link) == identity.folder_revision(a)
    copy = tmp_path / "copy"
    shutil.copytree(a, copy)
    assert identity.folder_revision(copy) == identity.folder_revision(a)  # content, not location


def test_a_hub_id_can_be_pinned_to_a_revision(tmp_path, monkeypatch):
    from factprobe.models.hub import _resolve

    cache = tmp_path / "hub"
    commit = "0123456789abcdef0123456789abcdef01234567"
    snap = cache / "models--org--tiny" / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "config.json").write_text('{"model_type": "llama"}')
    (cache / "models--org--tiny" / "refs").mkdir()
    (cache / "models--org--tiny" / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    res = _resolve(f"org/tiny@{commit}")
    assert res.kind == "hub" and res.revision == f"hub:org/tiny@{commit}" and res.path == snap
    with pytest.raises(ModelError, match="at revision fedcba9876543210 in the local Hugging Face cache"):
        _resolve("org/tiny@fedcba9876543210")
    with pytest.raises(ModelError, match="names no revision after '@'"):
        _resolve("org/tiny@")


def test_numerics_are_resolved_not_auto():
    from factprobe.lm.numerics import resolved_numerics

    num = resolved_numerics("auto", "auto")
    assert num["dtype"] == "float32" and num["device"] == "cpu" and num["device_name"] not in ("", "auto")
    assert num["torch"] and num["transformers"] and num["factprobe"]
    assert identity.numerics_changes({**num, "dtype": "bfloat16", "device": "cuda"}, num) == [
        "dtype bfloat16 vs float32",
        "device cuda vs cpu",
    ]
    assert identity.numerics_changes({**num, "transformers": "4.57.1"}, {**num, "transformers": "5.24.0"}) == [
        "transformers 4.x vs 5.x"
    ]
    assert identity.numerics_changes(num, {**num, "transformers": "5.0.1", "device_name": "other"}) == []


def test_the_data_digest_covers_options_and_answers():
    from factprobe.datasets.prepared import Prepared
    from factprobe.facts import FactSet, MCItem

    def prepared(options, gold):
        item = MCItem(
            relation="P36",
            subject="France",
            gold=options[gold],
            options=tuple(options),
            gold_index=gold,
            correct_objects=(options[gold],),
        )
        return Prepared("mc", {"P36": [item]}, {"test": FactSet([], {}, "x")})

    base = identity.data_digest(prepared(["Paris", "Rome"], 0))
    assert base.startswith("sha256:")
    assert identity.data_digest(prepared(["Paris", "Rome"], 0)) == base
    assert identity.data_digest(prepared(["Paris", "Oslo"], 0)) != base  # a distractor changed
    assert identity.data_digest(prepared(["Paris", "Rome"], 1)) != base  # the answer changed
