"""Issue 28 item 2: a folder is resumed only when weights, data, config and numerics all match; rows
are reused by their item's content. Tiny RANDOM models: the mechanics, never results."""

import json
import shutil
from pathlib import Path

import pytest
import torch

from factprobe.errors import ConfigError
from factprobe.framework.checkpoint import CHECKPOINT, RESULTS, RUN_CONFIG
from factprobe.framework.config import RunConfig
from factprobe.framework.runner import run_probe

REPO = Path(__file__).resolve().parents[2]
ITEMS = REPO / "examples" / "mc_items" / "cloze.jsonl"


@pytest.fixture
def model(tiny_model_path, tmp_path):
    """A private copy of the tiny llama, whose weights a test may redraw in place."""
    dst = tmp_path / "model"
    shutil.copytree(tiny_model_path("llama"), dst)
    return dst


def redraw(folder: Path, seed: int) -> None:
    from transformers import AutoModelForCausalLM

    from factprobe.models.testing import redraw_weights

    m = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    redraw_weights(m, seed=seed)
    m.save_pretrained(folder)


def items(tmp_path: Path, edit=None) -> Path:
    recs = [json.loads(line) for line in ITEMS.read_text().splitlines()][:4]
    if edit:
        edit(recs)
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def cfg(model: Path, data: Path, **kw) -> RunConfig:
    return RunConfig.from_dict(
        {"probe": "mc-items", "model": str(model), "data": str(data), "device": "cpu", "dtype": "auto", **kw}
    )


def run(c: RunConfig, out: Path, lines: list | None = None):
    return run_probe(c, out, progress=False, log=(lines.append if lines is not None else (lambda m: None)))


def test_identity_is_recorded_resolved_and_shown(model, tmp_path):
    lines: list[str] = []
    out = run(cfg(model, items(tmp_path)), tmp_path / "out", lines)
    ident = out.metrics["identity"]
    assert ident["model_revision"].startswith("local-sha256:") and ident["data_digest"].startswith("sha256:")
    num = ident["numerics"]
    assert num["dtype"] == "float32" and num["device"] == "cpu" and num["attn_implementation"]
    assert num["torch"] and num["transformers"] and num["factprobe"]
    assert json.loads((tmp_path / "out" / RUN_CONFIG).read_text())["identity"] == ident
    assert out.metrics["data_digest"] == ident["data_digest"] and out.metrics["model_revision"] == ident["model_revision"]
    (inp,) = ident["inputs"]
    assert inp["name"] == "data" and Path(inp["location"]).is_absolute()
    assert [line for line in lines if line.startswith("identity: model local-sha256:") and "float32 on cpu" in line]


def test_other_weights_in_the_same_folder_are_refused_naming_them(model, tmp_path):
    c = cfg(model, items(tmp_path))
    first = run(c, tmp_path / "out")
    redraw(model, seed=7)
    with pytest.raises(
        ConfigError,
        match=r"holds results of other weights \(model revision local-sha256:\w+ then, "
        r"local-sha256:\w+ now\); use another --out, or remove .* to start afresh",
    ):
        run(c, tmp_path / "out")
    assert json.loads((tmp_path / "out" / "metrics.json").read_text()) == first.metrics  # nothing lost


def test_other_data_in_the_same_folder_is_refused(model, tmp_path):
    c = cfg(model, items(tmp_path))
    run(c, tmp_path / "out")

    def new_distractor(recs):
        assert recs[0]["answer"] == "Paris" and recs[0]["options"][-1] == "Nice"
        recs[0]["options"][-1] = "Zanzibar"  # one distractor of one item changed, nothing else

    items(tmp_path, new_distractor)
    with pytest.raises(ConfigError, match=r"holds results of other data \(digest sha256:\w+ then, sha256:\w+ now\)"):
        run(c, tmp_path / "out")


def test_other_numerics_in_the_same_folder_are_refused(model, tmp_path):
    c = cfg(model, items(tmp_path))
    run(c, tmp_path / "out")
    rc = json.loads((tmp_path / "out" / RUN_CONFIG).read_text())
    rc["identity"]["numerics"]["transformers"] = "4.57.1"  # the folder was made with another library
    (tmp_path / "out" / RUN_CONFIG).write_text(json.dumps(rc))
    with pytest.raises(ConfigError, match=r"holds results of other numerics \(transformers 4\.57\.1 then, \S+ now\)"):
        run(c, tmp_path / "out")


def test_a_folder_of_an_older_version_without_identity_is_refused(model, tmp_path):
    c = cfg(model, items(tmp_path))
    run(c, tmp_path / "out")
    rc = json.loads((tmp_path / "out" / RUN_CONFIG).read_text())
    del rc["identity"]
    (tmp_path / "out" / RUN_CONFIG).write_text(json.dumps(rc))
    with pytest.raises(ConfigError, match="record no measurement identity"):
        run(c, tmp_path / "out")


def test_rows_are_reused_by_their_items_content(model, tmp_path):
    c = cfg(model, items(tmp_path))
    out = tmp_path / "out"
    run(c, out)
    rows = [json.loads(line) for line in (out / RESULTS).read_text().splitlines()]
    assert all(len(r["item_digest"]) == 16 for r in rows)
    # a stale row (scored for an item whose content has changed since) sits in the checkpoint
    (out / RESULTS).unlink()
    (out / "metrics.json").unlink()
    rows[1]["item_digest"] = "0" * 16
    (out / CHECKPOINT).write_text("".join(json.dumps(r) + "\n" for r in rows))
    again = run(c, out)
    assert again.n_resumed == len(rows) - 1 and again.n_scored_now == 1


def test_an_unchanged_rerun_reuses_everything(model, tmp_path):
    c = cfg(model, items(tmp_path))
    run(c, tmp_path / "out")
    first = json.loads((tmp_path / "out" / "metrics.json").read_text())["identity"]
    again = run(c, tmp_path / "out")
    assert again.n_scored_now == 0 and again.already_finished
    # the model was not loaded again, and the identity still names the attention implementation that scored
    assert again.metrics["identity"] == first and first["numerics"]["attn_implementation"] == "sdpa"
