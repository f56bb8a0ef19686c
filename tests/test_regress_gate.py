"""The CI regression gate on a REAL model: it passes the model against itself and catches a
deliberately damaged copy (output-embedding rows of the gold objects' first tokens permuted)."""

import json

import pytest
import torch

from factprobe.cli import main

pytestmark = pytest.mark.real_model

PROBE = [
    "--relations",
    "P36,P1376",
    "--max-facts-per-relation",
    "20",
    "--choices",
    "10",
    "--examples",
    "20",
    "--no-progress",
    "--no-track",
]


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

    rc = main(
        [
            "regress",
            "--candidate",
            "smollm2-135m-instruct",
            "--baseline",
            str(base),
            "--out",
            str(tmp_path / "same"),
            "--no-track",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0 and "PASS" in out
    # the candidate was probed with the baseline folder's configuration (run_config.json), its data at the
    # absolute location the baseline's identity records and its resolved dtype and device (never `auto`)
    saved = json.loads((base / "run_config.json").read_text())
    cand = json.loads((tmp_path / "same" / "candidate" / "run_config.json").read_text())
    assert cand["config"]["dtype"] == saved["identity"]["numerics"]["dtype"] == "float32"
    assert cand["config"]["device"] == "cpu" and saved["config"]["dtype"] == "auto"
    assert {k: v for k, v in cand["config"].items() if k not in ("dtype", "device", "out")} == {
        k: v for k, v in saved["config"].items() if k not in ("dtype", "device", "out")
    }
    assert cand["identity"]["data_digest"] == saved["identity"]["data_digest"]
    assert json.loads((tmp_path / "same" / "gate.json").read_text())["decision"] == "PASS"
    assert "regression gate: PASS" in (tmp_path / "same" / "gate_report.txt").read_text()

    broken = damage(src, tmp_path / "broken-smollm2", {r["gold"] for r in rows})
    rc = main(
        [
            "regress",
            "--candidate",
            str(broken),
            "--baseline",
            str(base),
            "--out",
            str(tmp_path / "broken"),
            "--no-track",
            "--report",
            str(tmp_path / "report.txt"),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 1 and "FAIL" in out
    assert "FAIL" in (tmp_path / "report.txt").read_text()


LAMA = [
    "--source",
    "lama",
    "--relations",
    "P36,P19",
    "--max-facts-per-relation",
    "25",
    "--choices",
    "10",
    "--examples",
    "10",
    "--no-progress",
    "--no-track",
]


def noop_lora_adapter(base, path, base_name):
    """A LoRA adapter folder whose B matrices are zero (PEFT's default init): the model is unchanged."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    peft_model.save_pretrained(path)
    cfg = json.loads((path / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = base_name
    (path / "adapter_config.json").write_text(json.dumps(cfg))
    return path


@pytest.mark.slow
def test_gate_on_lama_relations_with_adapter_candidates(tmp_path, capsys, real_model_path, real_data_root):
    """The gate is source-agnostic: on a LAMA T-REx baseline (P36, P19 from the shared data) a no-op
    LoRA adapter folder of the same model passes with identical answers (the model against itself),
    and a LoRA adapter with random weights fails. The adapters name their base by alias (adapter_config.json), as a
    fine-tuning job's output does; the candidate is the adapter folder itself, as in the CI workflow."""
    from factprobe.models.testing import make_tiny_lora_adapter

    src = real_model_path("smollm2-135m-instruct")
    base = tmp_path / "baseline"
    assert main(["probe", "ic-lke", "--model", "smollm2-135m-instruct", "--out", str(base), *LAMA]) == 0
    rows = [json.loads(line) for line in (base / "results.jsonl").read_text().splitlines()]
    assert {r["relation"] for r in rows} == {"P36", "P19"} and len(rows) == 50
    config = json.loads((base / "run_config.json").read_text())["config"]
    assert config["source"] == "lama"
    capsys.readouterr()

    noop = noop_lora_adapter(src, tmp_path / "noop-adapter", "smollm2-135m-instruct")
    assert (
        main(["regress", "--candidate", str(noop), "--baseline", str(base), "--no-track", "--out", str(tmp_path / "noop")]) == 0
    )
    assert "PASS" in capsys.readouterr().out
    same = [json.loads(line) for line in (tmp_path / "noop" / "candidate" / "results.jsonl").read_text().splitlines()]
    assert [r["correct"] for r in same] == [r["correct"] for r in rows]

    damaged = make_tiny_lora_adapter(src, tmp_path / "random-adapter", base_name="smollm2-135m-instruct", rank=32)
    rc = main(
        [
            "regress",
            "--candidate",
            str(damaged),
            "--baseline",
            str(base),
            "--no-track",
            "--out",
            str(tmp_path / "random"),
            "--report",
            str(tmp_path / "report.txt"),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 1 and "FAIL" in out, out
    assert "candidate: " + str(damaged) in (tmp_path / "report.txt").read_text()
