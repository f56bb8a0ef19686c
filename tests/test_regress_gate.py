"""The CI regression gate on a REAL model: it passes the model against itself and catches a
deliberately damaged copy (output-embedding rows of the gold objects' first tokens permuted)."""
import json

import pytest
import torch

from factprobe.cli import main

pytestmark = pytest.mark.real_model

PROBE = ["--relations", "P36,P1376", "--max-facts-per-relation", "20", "--choices", "10", "--examples", "20",
         "--no-progress", "--no-track"]


def damage(src, dst, golds, seed=0):
    """Copy the model and permute the output-embedding rows of the golds' first tokens."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(src)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    ids = sorted({tok(" " + g, add_special_tokens=False)["input_ids"][0] for g in golds})
    head = model.get_output_embeddings().weight
    perm = torch.randperm(len(ids), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        head[ids] = head[[ids[i] for i in perm]].clone()
    model.save_pretrained(dst)
    tok.save_pretrained(dst)
    return dst


def test_gate_catches_damage_and_passes_self(tmp_path, capsys, real_model_path):
    src = real_model_path("smollm2-135m-instruct")
    base = tmp_path / "baseline"
    assert main(["probe", "ic-lke", "--model", "smollm2-135m-instruct", "--out", str(base), *PROBE]) == 0
    rows = [json.loads(line) for line in (base / "results.jsonl").read_text().splitlines()]
    acc = sum(r["correct"] for r in rows) / len(rows)
    assert acc > 0.3, f"baseline accuracy {acc} too low for a meaningful gate test"
    capsys.readouterr()

    rc = main(["regress", "--candidate", "smollm2-135m-instruct", "--baseline", str(base), "--out", str(tmp_path / "same"),
               "--no-track"])
    out = capsys.readouterr().out
    assert rc == 0 and "PASS" in out
    # the candidate was probed with the baseline folder's configuration (run_config.json)
    key = json.loads((base / "run_config.json").read_text())["results_key"]
    assert json.loads((tmp_path / "same" / "run_config.json").read_text())["results_key"] == key

    broken = damage(src, tmp_path / "broken-smollm2", {r["gold"] for r in rows})
    rc = main(["regress", "--candidate", str(broken), "--baseline", str(base), "--out", str(tmp_path / "broken"),
               "--no-track", "--report", str(tmp_path / "report.txt")])
    out = capsys.readouterr().out
    assert rc == 1 and "FAIL" in out
    assert "FAIL" in (tmp_path / "report.txt").read_text()
