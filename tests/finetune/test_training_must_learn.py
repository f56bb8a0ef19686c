"""Issue 28 item 6: training that does not train is a failure.

- The gradient norm is read under DeepSpeed (ZeRO-0 too, where the engine keeps none) and under
  the plain Trainer, and recorded per step in `loss_history.json`.
- A non-finite gradient norm stops training as a non-finite loss does (`--lora-alpha 1e30`).
- Trainable weights that did not move from their values at the start are refused as "did not
  learn" (a learning rate of 1e-50 rounds every update to 0 in float32): no adapter, no model, no
  metrics.json, and a FAILED MLflow run without a model artifact.

Tiny RANDOM llama on CPU (DeepSpeed over gloo, as tests/finetune/test_finetune.py): 1-2 optimizer
steps per run.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch

from factprobe.errors import TrainingDivergedError
from factprobe.finetune import run_finetune
from factprobe.finetune.guards import TrainingDidNotLearnError
from tests.finetune.test_finetune import tiny_cfg


@pytest.fixture(scope="module")
def tiny(tiny_model_path) -> Path:
    return tiny_model_path("llama")


def _history(out: Path) -> list[dict]:
    return json.loads((out / "loss_history.json").read_text())


def _nothing_kept(out: Path) -> None:
    for name in ("adapter", "model", "metrics.json", ".adapter.partial", ".model.partial"):
        assert not (out / name).exists(), name


# ------------------------------------------------------------------ the gradient norm is recorded
@pytest.mark.slow  # DeepSpeed training
@pytest.mark.parametrize("stage", [0, 2, 3])
def test_grad_norm_is_recorded_every_step_under_deepspeed(tiny, tmp_path, stage):
    """ZeRO-0 in float32 trains with a plain torch optimizer, whose engine reports no norm: it was
    null in every loss_history.json. Now every stage records the same pre-clip norm."""
    run_finetune(tiny_cfg(tiny, tmp_path, zero_stage=stage, max_steps=2), progress=False)
    norms = [h["grad_norm"] for h in _history(tmp_path)]
    assert len(norms) == 2 and all(isinstance(n, float) and math.isfinite(n) and n > 0 for n in norms), norms


@pytest.mark.slow  # DeepSpeed training, twice
def test_zero0_records_the_norm_zero2_reports(tiny, tmp_path):
    """The norm read under ZeRO-0 is the engine-independent pre-clip norm: ZeRO-2's own."""
    run_finetune(tiny_cfg(tiny, tmp_path / "z0", zero_stage=0, max_steps=2), progress=False)
    run_finetune(tiny_cfg(tiny, tmp_path / "z2", zero_stage=2, max_steps=2), progress=False)
    for a, b in zip(_history(tmp_path / "z0"), _history(tmp_path / "z2")):
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)


# ------------------------------------------------------------------ a non-finite gradient norm stops training
@pytest.mark.slow  # DeepSpeed training
def test_infinite_grad_norm_stops_training_under_zero0(tiny, tmp_path):
    """The issue's reproduction: LoRA alpha 1e30 has an infinite gradient norm at every step; under
    ZeRO-0 it trained on (clipping zeroed every update, every LoRA B weight stayed 0) and reported
    `loss 6.11 -> 6.11`. (The command line now refuses `--lora-alpha 1e30` as out of an integer's
    range; the Python API still takes it.)"""
    with pytest.raises(TrainingDivergedError, match=r"^training diverged at step 1 of 2: the gradient norm is inf"):
        run_finetune(tiny_cfg(tiny, tmp_path, zero_stage=0, max_steps=2, lora_alpha=10**30), progress=False)
    _nothing_kept(tmp_path)


@pytest.mark.slow  # DeepSpeed training
def test_cli_non_finite_grad_norm_is_one_line_under_zero0(tiny, tmp_path, capsys):
    """The largest alpha the command line takes: step 1's norm is finite (1.9e17), step 2's is not;
    training stops there, naming the gradient norm (before, ZeRO-0 logged no norm and only the
    non-finite weights after the last step were seen)."""
    from factprobe.cli import main

    out = tmp_path / "ft"
    rc = main(
        [
            "finetune",
            "--model",
            str(tiny),
            "--train-set",
            "regular",
            "--train-size",
            "16",
            "--batch-size",
            "8",
            "--grad-accum",
            "2",
            "--max-steps",
            "2",
            "--learning-rate",
            "3e-3",
            "--lr-scheduler",
            "constant",
            "--lora-r",
            "4",
            "--lora-alpha",
            "9000000000000000000",
            "--zero-stage",
            "0",
            "--device",
            "cpu",
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    captured = capsys.readouterr()
    lines = [ln for ln in captured.err.splitlines() if ln.startswith("error: ")]
    assert rc == 2 and "Traceback" not in captured.err and len(lines) == 1, captured.err
    assert re.search(r"training diverged at step 2 of 2: the gradient norm is (nan|inf)", lines[0]), lines[0]
    assert "loss " not in captured.out
    _nothing_kept(out)


# ------------------------------------------------------------------ weights that did not move
@pytest.mark.slow  # DeepSpeed training
@pytest.mark.parametrize(
    "stage,lora", [(0, True), (2, True), (3, True), (2, False)], ids=["zero0-lora", "zero2-lora", "zero3-lora", "zero2-full"]
)
def test_weights_that_did_not_move_are_refused(tiny, tmp_path, stage, lora):
    """A learning rate of 1e-50 is 0 in float32: every LoRA B matrix stays exactly 0 (the adapter
    is the base model), every full-training weight keeps its value. Refused: no result kept."""
    cfg = tiny_cfg(tiny, tmp_path, zero_stage=stage, max_steps=2, learning_rate=1e-50, save_steps=1, lora_r=4 if lora else 0)
    with pytest.raises(TrainingDidNotLearnError) as err:
        run_finetune(cfg, progress=False)
    text = str(err.value)
    assert "\n" not in text and text.startswith("training did not learn: after 2 optimizer step(s)"), text
    assert "moved from its value at step 0" in text and re.search(r"gradient norm \d", text)  # finite, logged
    assert ("--lora-alpha" in text) == lora and "--no-resume" in text
    assert isinstance(err.value, TrainingDivergedError)  # every handler of a failed run treats it alike
    _nothing_kept(tmp_path)


@pytest.mark.slow  # DeepSpeed training
def test_cli_says_did_not_learn_in_one_line(tiny, tmp_path, capsys):
    from factprobe.cli import main

    out = tmp_path / "ft"
    rc = main(
        [
            "finetune",
            "--model",
            str(tiny),
            "--train-set",
            "regular",
            "--train-size",
            "16",
            "--batch-size",
            "8",
            "--grad-accum",
            "2",
            "--max-steps",
            "1",
            "--learning-rate",
            "1e-50",
            "--lora-r",
            "4",
            "--zero-stage",
            "0",
            "--device",
            "cpu",
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    captured = capsys.readouterr()
    lines = [ln for ln in captured.err.splitlines() if ln.startswith("error: ")]
    assert rc == 2 and "Traceback" not in captured.err and len(lines) == 1, captured.err
    assert lines[0].startswith("error: training did not learn") and "loss " not in captured.out
    _nothing_kept(out)


def test_start_weights_exact_and_by_checksum(tiny):
    """`StartWeights` sees the smallest change of one weight, copied exactly or by checksums."""
    from transformers import AutoModelForCausalLM

    from factprobe.finetune.guards import StartWeights

    model = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32)
    for exact_bytes in (1 << 30, 0):
        start = StartWeights(model, exact_bytes=exact_bytes)
        assert start.exact == bool(exact_bytes) and start.count == sum(p.numel() for p in model.parameters())
        assert not start.moved(model)
        w = model.model.layers[1].mlp.down_proj.weight
        with torch.no_grad():
            old = w[3, 5].item()
            w[3, 5] = torch.nextafter(torch.tensor(old), torch.tensor(math.inf))
        assert start.moved(model)
        with torch.no_grad():
            w[3, 5] = old
        assert not start.moved(model)
        for p in model.parameters():  # frozen weights are not training's to move
            p.requires_grad_(False)
        w.requires_grad_(True)
        assert not StartWeights(model, exact_bytes=exact_bytes).moved(model)
        for p in model.parameters():
            p.requires_grad_(True)


# ------------------------------------------------------------------ the plain Trainer (no DeepSpeed)
def _plain_trainer(tiny, tmp_path, monkeypatch, **kw):
    """The guarded Trainer of `run_finetune`, without DeepSpeed, on a fresh LoRA of the tiny llama.
    (A DeepSpeed run earlier in the process leaves `ACCELERATE_USE_DEEPSPEED` and accelerate's
    global state behind, which would turn this Trainer into a DeepSpeed one: both are reset.)"""
    from accelerate.state import AcceleratorState
    from transformers import TrainingArguments, set_seed

    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED", raising=False)
    AcceleratorState._reset_state(reset_partial_state=True)

    from factprobe.finetune.data import Collator, RowDataset, tokenize_examples
    from factprobe.finetune.guards import guarded_trainer
    from factprobe.finetune.model_setup import load_base, wrap_lora
    from factprobe.finetune.sets import build_train_set

    cfg = tiny_cfg(tiny, tmp_path, max_steps=2, grad_accum=1, **kw)
    model, tok, _ = load_base(cfg)
    set_seed(0)
    model = wrap_lora(cfg, model)
    rows = tokenize_examples(tok, build_train_set("regular", model=str(tiny), size=16).examples, 256)
    args = TrainingArguments(
        output_dir=str(tmp_path / "ck"),
        per_device_train_batch_size=16,
        max_steps=cfg.max_steps,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type="constant",
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        logging_steps=1,
        max_grad_norm=1.0,
        logging_nan_inf_filter=False,
        disable_tqdm=True,
        remove_unused_columns=False,
        dataloader_num_workers=0,
    )
    trainer = guarded_trainer(cfg, True)(
        model=model, args=args, train_dataset=RowDataset(rows), data_collator=Collator(pad_id=tok.pad_token_id)
    )
    assert trainer.is_deepspeed_enabled is False
    return trainer


@pytest.mark.slow  # three short trainings
def test_plain_trainer_reads_the_norm_and_refuses_a_run_that_did_not_learn(tiny, tmp_path, monkeypatch):
    trainer = _plain_trainer(tiny, tmp_path / "ok", monkeypatch)
    trainer.train()
    norms = [e["grad_norm"] for e in trainer.state.log_history if "loss" in e]
    assert len(norms) == 2 and all(math.isfinite(n) and n > 0 for n in norms), norms
    with pytest.raises(TrainingDivergedError, match="at step 1 of 2: the gradient norm is inf"):
        _plain_trainer(tiny, tmp_path / "inf", monkeypatch, lora_alpha=10**30).train()
    with pytest.raises(TrainingDidNotLearnError, match="none of the 4,096 trainable parameters moved"):
        _plain_trainer(tiny, tmp_path / "still", monkeypatch, learning_rate=1e-50).train()


# ------------------------------------------------------------------ the pipeline's MLflow run
@pytest.mark.slow
def test_pipeline_training_step_that_did_not_learn_is_a_failed_mlflow_run(tmp_path, tiny):
    """components/steps/finetune_train.py: the child run of a training step that did not learn is FAILED
    (never FINISHED), carries the reason as `factprobe.error`, and has no model artifact; no adapter
    is left where the evaluation step would take it."""
    from mlflow.tracking import MlflowClient

    from factprobe_ops.components.steps.finetune_train import run_train_step
    from factprobe_ops.tracking.context import RunContext
    from factprobe_ops.tracking.run import TrackedRun

    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    ft = {
        "train_size": 16,
        "batch_size": 8,
        "grad_accum": 2,
        "max_steps": 2,
        "zero_stage": 0,
        "lora_r": 4,
        "max_seq_len": 256,
        "device": "cpu",
        "learning_rate": 1e-50,
        "save_steps": 1,
    }
    with TrackedRun(pipeline="finetune_known_unknown", tracking_uri=uri, required=True) as parent:
        pass
    adapter = tmp_path / "adapter"
    with pytest.raises(TrainingDidNotLearnError):
        run_train_step(
            "",
            str(adapter),
            str(tiny),
            "regular",
            ft,
            RunContext(tracking_uri=uri, pipeline="finetune_known_unknown", trigger="local", parent_run_id=parent.run_id),
            work_root=str(tmp_path / "work"),
        )
    client = MlflowClient(uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    children = [r for r in runs if r.info.run_id != parent.run_id]
    assert len(children) == 1 and children[0].info.status == "FAILED", [r.info.status for r in children]
    child = children[0]
    assert child.data.tags.get("factprobe.error", "").startswith("training did not learn"), child.data.tags
    assert not [a.path for a in client.list_artifacts(child.info.run_id) if a.path in ("model", "figures")]
    assert not adapter.exists() or not any(adapter.rglob("adapter_model*"))
    assert not list((tmp_path / "work").rglob("metrics.json"))
