"""Fine-tuning on known, unknown, mixed, counterfactual and regular facts (yuan2024 section 5).

Public API (stable; the pipeline components call it):

- `FinetuneConfig` (`factprobe.finetune.config`): one run, `to_dict()` / `from_dict()`.
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

__all__ = ["NEEDS_TABLE", "TRAIN_SETS", "FinetuneConfig", "run_finetune"]


def run_finetune(cfg: FinetuneConfig, **kwargs: Any) -> dict:
    """Train `cfg` and return its metrics dict (also written to `<out>/metrics.json`).

    Keyword arguments go to `factprobe.finetune.trainer.run_finetune` (`progress`, `callbacks`)."""
    from .trainer import run_finetune as _run

    return _run(cfg, **kwargs)
