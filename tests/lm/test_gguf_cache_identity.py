"""Issue 41 item 1: an alias revision (`gguf-sha256:<hex>`) names a folder only while its bytes are
proven to be what the conversion wrote: every file's sha256 equals the manifest the conversion left in
the cache (`factprobe_complete.json` under `<cache root>/models/<alias>/`), no file more, no file less.
A copy elsewhere with other bytes is `local-sha256:`; the cache folder itself is rebuilt. A fake GGUF
and a converter that copies the tiny RANDOM llama exercise the real marker and check code."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from factprobe import identity
from factprobe.models import aliases, gguf_cache
from factprobe.models.gguf_cache import MARKER_NAME, check_cache, prepare_alias
from factprobe.models.loading import load_model, model_revision

FAKE_GGUF = b"GGUF fake weights for the identity tests\n" * 500


@pytest.fixture
def alias(tmp_cache, tiny_model_path, monkeypatch) -> SimpleNamespace:
    """`smollm2-135m-instruct` backed by a fake GGUF and a converter that copies the tiny llama."""
    name = "smollm2-135m-instruct"
    tiny = tiny_model_path("llama")
    identity._memo.clear()
    sha = hashlib.sha256(FAKE_GGUF).hexdigest()
    spec = dataclasses.replace(aliases._REGISTRY[name], sha256=sha, size_bytes=len(FAKE_GGUF), revision=f"gguf-sha256:{sha}")
    monkeypatch.setitem(aliases._REGISTRY, name, spec)
    calls = {"convert": 0}

    def fake_download(spec_, dest: Path) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(FAKE_GGUF)

    def fake_convert(spec_, gguf: Path, out: Path) -> dict:
        calls["convert"] += 1
        for p in tiny.iterdir():
            if p.name != MARKER_NAME:
                shutil.copy2(p, out / p.name)
        return {"has_chat_template": True, "convert_seconds": 0.0, "logit_check": {"text": "x", "max_abs_diff": 0.0}}

    monkeypatch.setattr(gguf_cache, "_download_gguf", fake_download)
    monkeypatch.setattr(gguf_cache, "_convert_gguf_into", fake_convert)
    folder = prepare_alias(name)
    return SimpleNamespace(name=name, spec=spec, calls=calls, folder=folder)


def redraw(folder: Path, seed: int) -> None:
    from transformers import AutoModelForCausalLM

    from factprobe.models.testing import redraw_weights

    m = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    redraw_weights(m, seed=seed)
    m.save_pretrained(folder)


def fresh(folder) -> str:
    identity._memo.clear()
    return model_revision(folder)


def flip_in_place(path: Path) -> None:
    """Flip one byte near the end of `path`: same size, same inode, the mtime put back."""
    st = path.stat()
    with path.open("r+b") as f:
        f.seek(-8, os.SEEK_END)
        b = f.read(1)
        f.seek(-8, os.SEEK_END)
        f.write(bytes([b[0] ^ 0x01]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_the_alias_and_an_unchanged_copy_of_its_folder_keep_the_alias_revision(alias, tmp_path):
    assert model_revision(alias.name) == alias.spec.revision
    assert fresh(alias.folder) == alias.spec.revision  # the cache folder named by its path
    copy = tmp_path / "copy"
    shutil.copytree(alias.folder, copy)
    assert fresh(copy) == alias.spec.revision
    (copy / MARKER_NAME).unlink()  # the bytes the conversion wrote: the marker adds nothing
    assert fresh(copy) == alias.spec.revision


def test_a_copy_of_the_alias_with_other_weights_saved_into_it_is_identified_by_its_bytes(alias, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(alias.folder, copy)
    redraw(copy, seed=7)
    rev = fresh(copy)
    assert rev.startswith("local-sha256:") and rev == identity.folder_revision(copy)
    assert load_model(copy, device="cpu", dtype="float32").revision == rev


def test_a_copy_whose_marker_was_rewritten_to_list_its_new_files_is_still_its_bytes(alias, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(alias.folder, copy)
    redraw(copy, seed=7)
    marker = json.loads((copy / MARKER_NAME).read_text())
    for name, info in marker["files"].items():
        data = (copy / name).read_bytes()
        info.update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    (copy / MARKER_NAME).write_text(json.dumps(marker))
    assert fresh(copy).startswith("local-sha256:")


@pytest.mark.parametrize(
    "edit",
    ["weights flipped in place, mtime restored", "extra file", "other weights saved"],
)
def test_an_edited_alias_cache_is_rebuilt_not_named_by_its_marker(alias, edit):
    if edit == "extra file":
        (alias.folder / "notes.txt").write_text("dropped here by hand")
    elif edit == "other weights saved":
        redraw(alias.folder, seed=9)  # sizes unchanged: the cheap check cannot see it
    else:
        flip_in_place(alias.folder / "model.safetensors")
    assert check_cache(alias.name) is None  # names, sizes and headers are as listed
    assert fresh(alias.folder).startswith("local-sha256:")  # named by its path: its bytes
    identity._memo.clear()
    lm = load_model(alias.name, device="cpu", dtype="float32")
    assert alias.calls["convert"] == 2 and lm.revision == alias.spec.revision
    assert not (alias.folder / "notes.txt").exists() and check_cache(alias.name, full=True) is None
    assert fresh(alias.folder) == alias.spec.revision


def test_a_proven_alias_is_not_read_again(alias, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(alias.folder, copy)
    fresh(alias.name), fresh(copy)  # each file read once per machine
    before = identity.reads
    for _ in range(3):
        assert fresh(alias.name) == alias.spec.revision and fresh(copy) == alias.spec.revision
    assert identity.reads == before
