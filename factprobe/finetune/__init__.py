"""Fine-tuning on known, unknown, mixed, counterfactual and regular facts (yuan2024 section 5).

Public API (stable; the pipeline components call it):

- `FinetuneConfig` (`factprobe.finetune.config`): one run, `to_dict()` / `from_dict()`.
- `build_train_set_for(cfg) -> TrainSet` (`factprobe.build.finetune_sets`): the training set `cfg`
  trains on (`.save(folder)` writes `train_set.jsonl` + `train_set.json` with its digest; a
  training step can take that folder as `cfg.train_set_dir`).
- `run_finetune(cfg) -> dict`: trains and writes `<out>/` (see `factprobe.finetune.trainer`):
  `adapter/` (PEFT folder that `--model` of the probes accepts; `model/` for full-parameter
  training), `trainer_state.json`, `metrics.json` (the returned dict: `train_loss`,
  `tokens_per_second`, `peak_memory_bytes`, `non_padding_fraction`, ...), `loss_history.json`,
  `loss.png`, `train_set.jsonl` + `train_set.json` (its digest), `finetune_config.json`,
  `checkpoints/`.
"""
from __future__ import annotations

from typing import Any

from .config import NEEDS_TABLE, TRAIN_SETS, FinetuneConfig

__all__ = ["NEEDS_TABLE", "TRAIN_SETS", "FinetuneConfig", "build_train_set_for", "run_finetune"]


def run_finetune(cfg: FinetuneConfig, **kwargs: Any) -> dict:
    """Train `cfg` and return its metrics dict (also written to `<out>/metrics.json`).

    Keyword arguments go to `factprobe.finetune.trainer.run_finetune` (`progress`, `callbacks`)."""
    from .trainer import run_finetune as _run

    return _run(cfg, **kwargs)


def build_train_set_for(cfg: FinetuneConfig) -> Any:
    """The `factprobe.build.finetune_sets.TrainSet` that `run_finetune(cfg)` trains on."""
    from .trainer import train_set_for

    return train_set_for(cfg)
