"""Issue 41 item 1: a folder's revision is a function of its bytes. A `factprobe_complete.json` that
claims a revision (even one that lists the folder's own files and hashes) names nothing: the folder is
identified by its bytes, on every way in (load, `model_revision`, adapters, fine-tuning, resume).
Tiny RANDOM models: the mechanics, never results."""

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from factprobe import identity
from factprobe.errors import ConfigError
from factprobe.models.gguf_cache import MARKER_NAME
from factprobe.models.loading import load_model, model_revision
from factprobe.models.testing import make_tiny_lora_adapter

#: the revision of the real SmolLM2 alias: what a copied alias folder's marker names
CLAIM = "gguf-sha256:b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


@pytest.fixture(autouse=True)
def own_cache(tmp_cache):
    identity._memo.clear()  # no hash remembered from another test's folder
    return tmp_cache


def claim(folder: Path, revision: str = CLAIM) -> Path:
    """Write a marker into `folder` that claims `revision` and lists the folder's own files with their
    sizes and sha256 (as a conversion writes it): the most a forger can do."""
    files = {
        p.name: {"size": p.stat().st_size, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
        for p in sorted(folder.iterdir())
        if p.is_file() and not p.name.startswith(".") and p.name != MARKER_NAME
    }
    marker = {"format": 1, "alias": "smollm2-135m-instruct", "revision": revision, "gguf_sha256": revision.split(":")[1]}
    (folder / MARKER_NAME).write_text(json.dumps({**marker, "files": files}, indent=2))
    return folder


@pytest.fixture
def claimed(tiny_model_path, tmp_path) -> Path:
    """A converted-alias-like folder: tiny llama weights and a marker claiming the SmolLM2 revision."""
    dst = tmp_path / "smollm2-copy"
    shutil.copytree(tiny_model_path("llama"), dst)
    (dst / MARKER_NAME).unlink(missing_ok=True)
    return claim(dst)


def redraw(folder: Path, seed: int) -> None:
    """Save other (random) weights into `folder`, as `save_pretrained` into a copy would."""
    from transformers import AutoModelForCausalLM

    from factprobe.models.testing import redraw_weights

    m = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    redraw_weights(m, seed=seed)
    m.save_pretrained(folder)


def fresh(folder: Path) -> str:
    """`model_revision(folder)` as a new process computes it (the per-machine file-hash cache answers)."""
    identity._memo.clear()
    return model_revision(folder)


def test_a_marker_claims_no_revision_the_bytes_do(claimed):
    rev = model_revision(claimed)
    assert rev != CLAIM and rev.startswith("local-sha256:")
    assert rev == identity.folder_revision(claimed)  # every file, the marker included


def test_a_copy_with_other_weights_saved_into_it_gets_another_revision(claimed, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(claimed, copy)
    before = model_revision(copy)
    redraw(copy, seed=7)  # the marker (and its file list) stays as it was
    after = fresh(copy)
    assert after != before and after != CLAIM and after.startswith("local-sha256:")
    assert load_model(copy, device="cpu", dtype="float32").revision == after


def test_a_marker_added_to_an_arbitrary_local_folder_changes_nothing_but_its_bytes(tiny_model_path, tmp_path):
    folder = tmp_path / "plain"
    shutil.copytree(tiny_model_path("llama"), folder)
    (folder / MARKER_NAME).unlink(missing_ok=True)
    plain = model_revision(folder)
    claim(folder)
    rev = fresh(folder)
    assert rev != CLAIM and rev.startswith("local-sha256:") and rev == identity.folder_revision(folder)
    (folder / MARKER_NAME).unlink()
    assert fresh(folder) == plain


def _edit_in_place_mtime_restored(folder: Path) -> None:
    target = folder / "model.safetensors"
    st = target.stat()
    with target.open("r+b") as f:  # same size, same inode: flip one byte of the last weight
        f.seek(-8, os.SEEK_END)
        b = f.read(1)
        f.seek(-8, os.SEEK_END)
        f.write(bytes([b[0] ^ 0x01]))
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert target.stat().st_mtime_ns == st.st_mtime_ns and target.stat().st_size == st.st_size


EDITS = {
    "file edited in place, mtime restored": _edit_in_place_mtime_restored,
    "extra file added": lambda f: (f / "notes.txt").write_text("not a weight, still a byte of the folder"),
    "file removed": lambda f: (f / "generation_config.json").unlink(),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_every_edit_of_a_claimed_folder_is_another_revision(claimed, edit):
    before = model_revision(claimed)
    EDITS[edit](claimed)
    after = fresh(claimed)
    assert after != before and after != CLAIM and after.startswith("local-sha256:")


def test_an_adapter_and_its_base_are_identified_by_their_bytes(claimed, tmp_path):
    adapter = make_tiny_lora_adapter(claimed, tmp_path / "adapter")
    claim(adapter, "adapter-sha256:" + "0" * 64)
    rev = model_revision(adapter)
    own, _, base = rev.partition("+")
    assert own.startswith("adapter-sha256:") and own != "adapter-sha256:" + "0" * 64
    assert own == identity.folder_revision(adapter, "adapter") and base == model_revision(claimed) != CLAIM
    redraw(claimed, seed=3)  # other base weights under the same base marker
    assert fresh(adapter).partition("+")[2] not in (base, CLAIM)
    _edit_in_place_mtime_restored_adapter(adapter)
    assert fresh(adapter).partition("+")[0] != own


def _edit_in_place_mtime_restored_adapter(adapter: Path) -> None:
    target = adapter / "adapter_model.safetensors"
    st = target.stat()
    with target.open("r+b") as f:
        f.seek(-4, os.SEEK_END)
        b = f.read(1)
        f.seek(-4, os.SEEK_END)
        f.write(bytes([b[0] ^ 0x01]))
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_finetune_names_the_bytes_of_a_claimed_base(claimed):
    from factprobe.finetune.config import FinetuneConfig
    from factprobe.finetune.model_setup import base_model

    cfg = FinetuneConfig(model=str(claimed))
    folder, rev = base_model(cfg)
    assert folder == claimed.resolve() and rev == model_revision(claimed) and rev != CLAIM
    redraw(claimed, seed=5)
    identity._memo.clear()
    assert base_model(cfg)[1] not in (rev, CLAIM)


@pytest.mark.slow  # two probe runs
def test_resume_refuses_rows_of_the_weights_a_marker_hid(claimed, tmp_path):
    from factprobe.framework.config import RunConfig
    from factprobe.framework.runner import run_probe

    recs = (Path(__file__).resolve().parents[2] / "examples" / "mc_items" / "cloze.jsonl").read_text().splitlines()[:4]
    data = tmp_path / "items.jsonl"
    data.write_text("".join(line + "\n" for line in recs))
    c = RunConfig.from_dict({"probe": "mc-items", "model": str(claimed), "data": str(data), "device": "cpu", "dtype": "auto"})

    def run(c, out):
        return run_probe(c, out, progress=False, log=lambda m: None)

    first = run(c, tmp_path / "out")
    assert first.metrics["identity"]["model_revision"] != CLAIM
    redraw(claimed, seed=11)
    identity._memo.clear()
    with pytest.raises(ConfigError, match=r"holds results of other weights \(model revision local-sha256:\w+ then"):
        run(c, tmp_path / "out")
