"""Issue 18 items 4-9 and 18e: fine-tuning never reports a broken model as a success.

Tiny RANDOM llama on CPU under DeepSpeed (the fixtures and `tiny_cfg` of tests/finetune): every
run is 1-3 optimizer steps."""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

import pytest

from factprobe.errors import ConfigError, FactprobeError
from factprobe.finetune import FinetuneConfig, run_finetune
from tests.finetune.test_finetune import tiny_cfg


@pytest.fixture(scope="module")
def tiny(tiny_model_path) -> Path:
    return tiny_model_path("llama")


def _stop_at(step: int):
    from transformers import TrainerCallback

    class StopAt(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            if state.global_step == step:
                control.should_training_stop = True

    return StopAt()


def _finite_checkpoint_weights(ckpt: Path) -> bool:
    from safetensors.torch import load_file

    files = list(ckpt.glob("*.safetensors"))
    assert files, ckpt
    return all(t.isfinite().all() for f in files for t in load_file(str(f)).values())


# ------------------------------------------------------------------ item 4
@pytest.mark.slow
def test_diverged_training_fails_and_leaves_no_result(tiny, tmp_path, capsys):
    """issue 18 item 4: `--learning-rate 1e30` stops at the first non-finite loss or gradient norm,
    exits non-zero with one line naming the step, and leaves no adapter, model or metrics.json;
    no checkpoint with non-finite weights is kept."""
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
            "3",
            "--learning-rate",
            "1e30",
            "--lr-scheduler",
            "constant",
            "--lora-r",
            "4",
            "--save-steps",
            "1",
            "--device",
            "cpu",
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert rc != 0 and "Traceback" not in err
    assert len(lines) == 1 and "diverged at step" in lines[0], err
    for name in ("adapter", "model", "metrics.json"):
        assert not (out / name).exists(), name
    for ckpt in (out / "checkpoints").glob("checkpoint-*"):
        assert _finite_checkpoint_weights(ckpt), ckpt


def test_loss_history_never_shows_nan_as_a_number():
    """issue 18 item 4: a non-finite logged value is null in loss_history/metrics, never 0 or NaN."""
    from factprobe.finetune.loss_history import loss_history

    h = loss_history(
        [
            {"step": 1, "loss": 2.0, "learning_rate": 1e-3, "grad_norm": 1.0},
            {"step": 2, "loss": float("nan"), "learning_rate": 1e-3, "grad_norm": float("inf")},
        ]
    )
    assert h[1]["loss"] is None and h[1]["grad_norm"] is None
    json.dumps(h, allow_nan=False)


# ------------------------------------------------------------------ item 5
def test_masked_lm_is_refused(tiny_model_path, tmp_path):
    """issue 18 item 5: a masked LM is refused as the probes refuse it, before any training."""
    bert = tiny_model_path("bert")
    with pytest.raises(ConfigError, match=r"is a masked LM; finetune accepts causal LMs only"):
        run_finetune(tiny_cfg(bert, tmp_path / "b", max_steps=1, lora_target_modules="query,value"), progress=False)
    assert not (tmp_path / "b" / "adapter").exists()


# ------------------------------------------------------------------ item 6
def test_resume_after_the_base_weights_changed_is_refused(tiny, tmp_path):
    """issue 18 item 6: a checkpoint records the base weights' revision; resuming after the weights
    at the model path changed is refused, naming both revisions."""
    import torch
    from transformers import AutoModelForCausalLM

    base = tmp_path / "tiny-random-llama"
    shutil.copytree(tiny, base)
    cfg = tiny_cfg(base, tmp_path / "ft", max_steps=2, save_steps=1)
    run_finetune(cfg, progress=False, callbacks=[_stop_at(1)])
    (tmp_path / "ft" / "metrics.json").unlink()  # a killed run never writes it
    saved = json.loads((tmp_path / "ft" / "checkpoints" / "checkpoint-1" / "finetune_config.json").read_text())
    old = saved["model_revision"]
    assert old.startswith("local-sha256:")
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    with torch.no_grad():
        next(model.parameters()).add_(0.5)
    model.save_pretrained(base)
    with pytest.raises(ConfigError, match=rf"base weights .*changed.*checkpoint {old}.*this run local-sha256:"):
        run_finetune(cfg, progress=False)


# ------------------------------------------------------------------ items 7, 8, 18e
@pytest.mark.slow
def test_full_disk_mid_checkpoint_then_resume_from_last_complete(tiny, tmp_path, monkeypatch, capsys):
    """issue 18 items 7, 8, 18e: a full disk while checkpoint-2 is written gives one line naming the
    path; the torn checkpoint-2 is skipped with a note and training resumes from checkpoint-1;
    the resumed run reports tokens_trained and non_padding_fraction over the whole run."""
    from transformers.trainer_callback import TrainerState

    whole = run_finetune(tiny_cfg(tiny, tmp_path / "whole", max_steps=3, save_steps=1), progress=False)

    real_save = TrainerState.save_to_json

    def full_disk(self, path):
        if "checkpoint-2" in str(path):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_save(self, path)

    monkeypatch.setattr(TrainerState, "save_to_json", full_disk)
    out = tmp_path / "ft"
    cfg = tiny_cfg(tiny, out, max_steps=3, save_steps=1)
    with pytest.raises(FactprobeError) as err:
        run_finetune(cfg, progress=False)
    text = str(err.value)
    assert "\n" not in text and "no space left" in text.lower() and "checkpoint-2" in text, text
    assert not (out / "metrics.json").exists() and not (out / "adapter").exists()
    monkeypatch.setattr(TrainerState, "save_to_json", real_save)
    capsys.readouterr()
    resumed = run_finetune(cfg, progress=False)
    assert resumed["resumed_from"].endswith("checkpoint-1") and resumed["steps"] == 3
    assert "checkpoint-2" in capsys.readouterr().err  # the note about the skipped torn checkpoint
    assert resumed["tokens_trained"] == whole["tokens_trained"]
    assert resumed["non_padding_fraction"] == pytest.approx(whole["non_padding_fraction"])
    assert resumed["final_loss"] == pytest.approx(whole["final_loss"], abs=1e-5)


def test_full_disk_while_saving_the_adapter_is_one_line(tiny, tmp_path, monkeypatch):
    """issue 18 item 18e: ENOSPC while the adapter is written: one line naming the path, no
    adapter left behind, no metrics.json."""
    from transformers import Trainer

    real = Trainer.save_model

    def full_disk(self, output_dir=None, _internal_call=False):
        if output_dir and "adapter" in Path(output_dir).name:  # adapter/ or where it is written first
            Path(output_dir).mkdir(parents=True, exist_ok=True)
            (Path(output_dir) / "adapter_model.safetensors").write_bytes(b"torn")
            raise RuntimeError(
                'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'
            )
        return real(self, output_dir, _internal_call)

    monkeypatch.setattr(Trainer, "save_model", full_disk)
    out = tmp_path / "ft"
    with pytest.raises(FactprobeError) as err:
        run_finetune(tiny_cfg(tiny, out, max_steps=1), progress=False)
    text = str(err.value)
    assert "\n" not in text and "no space left" in text.lower() and str(out / "adapter") in text, text
    assert not (out / "adapter").exists() and not (out / "metrics.json").exists()


# ------------------------------------------------------------------ item 9
@pytest.mark.parametrize(
    "kw,match",
    [
        ({"full": True, "lora_r": 8}, r"^full=True: .*--lora-r"),
        ({"lora_r": 0, "lora_alpha": 8}, r"^lora_alpha=8: .*LoRA"),
        ({"full": True, "lora_target_modules": "q_proj"}, r"^lora_target_modules=.*LoRA"),
        ({"device": "gpu"}, r"^device: unknown value 'gpu'"),
        ({"device": "cuda:1"}, r"^device: unknown value 'cuda:1'"),
        ({"known_unknown": "ku.parquet"}, r"^known_unknown='ku.parquet': .*regular"),
        ({"train_set": "counterfactual", "known_unknown": "ku.parquet"}, r"^known_unknown=.*counterfactual"),
    ],
)
def test_conflicting_or_unused_options_are_refused(kw, match):
    """issue 18 item 9: conflicting or unused options are refused, naming the field."""
    with pytest.raises(ConfigError, match=match):
        FinetuneConfig.from_dict(kw)


@pytest.mark.parametrize(
    "flags,words",
    [
        (["--full", "--lora-r", "16"], ("--full", "--lora-r")),
        (["--lora-r", "0", "--lora-dropout", "0.1"], ("lora_dropout", "--lora-r 0")),
    ],
)
def test_cli_full_with_lora_options_is_refused(flags, words, capsys):
    """issue 18 item 9: `--full --lora-r 16` (the default rank, given explicitly) and a LoRA option
    without LoRA are refused too."""
    from factprobe.cli import main

    assert main(["finetune", *flags, "--device", "cpu", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: ") and all(w in err for w in words), err


@pytest.mark.slow
def test_item4_diverged_pipeline_training_step_marks_its_mlflow_run_failed(tmp_path, tiny_model_path):
    """issue 18 item 4, pipeline path (components/steps/finetune_train.py): a training step whose loss
    turns non-finite (learning rate 1e30) raises TrainingDivergedError, its child MLflow run is
    FAILED (never FINISHED), and no adapter is left where the evaluation step would take it."""
    import json as _json

    from mlflow.tracking import MlflowClient

    from factprobe.errors import TrainingDivergedError
    from factprobe_ops.components.steps.finetune_train import run_train_step
    from factprobe_ops.tracking.context import RunContext
    from factprobe_ops.tracking.run import TrackedRun

    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    model = str(tiny_model_path("llama"))
    ft = {
        "train_size": 16,
        "batch_size": 8,
        "grad_accum": 2,
        "max_steps": 2,
        "zero_stage": 0,
        "lora_r": 4,
        "max_seq_len": 256,
        "device": "cpu",
        "learning_rate": 1e30,
        "save_steps": 1,
    }
    with TrackedRun(pipeline="finetune_known_unknown", tracking_uri=uri, required=True) as parent:
        pass
    adapter = tmp_path / "adapter"
    with pytest.raises(TrainingDivergedError, match="step"):
        run_train_step(
            "",
            str(adapter),
            model,
            "regular",
            ft,
            RunContext(tracking_uri=uri, pipeline="finetune_known_unknown", trigger="local", parent_run_id=parent.run_id),
            work_root=str(tmp_path / "work"),
        )
    client = MlflowClient(uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    children = [r for r in runs if r.info.run_id != parent.run_id]
    assert children and all(r.info.status == "FAILED" for r in children), [r.info.status for r in children]
    assert not any(adapter.rglob("adapter_model*")), list(adapter.rglob("*"))
    assert not list((tmp_path / "work").rglob("metrics.json")) or all(
        "train_loss" not in _json.loads(p.read_text()) for p in (tmp_path / "work").rglob("metrics.json")
    )
