"""Fine-tuning on known, unknown, mixed, counterfactual and regular facts (yuan2024 section 5).

Public API (stable; the pipeline components call it):

- `FinetuneConfig` (`factprobe.finetune.config`): one run, `to_dict()` / `from_dict()`.
- `build_train_set_for(cfg) -> TrainSet` (`factprobe.finetune.sets`): the training set `cfg`
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


def run_finetune(cfg: FinetuneConfig, *, if_finished: str = "refuse", **kwargs: Any) -> dict:
    """Train `cfg` and return its metrics dict (also written to `<out>/metrics.json`).

    One writer, and one kind of run, per output folder (`factprobe.run_folder.claim`, the mechanism
    the probes use too): its lock is an O_EXCL file with a heartbeat, safe on a PVC shared by pods
    (a dead holder's lock goes stale; rank 0 holds it under a multi-process launcher), so a second
    run into a folder another live run is writing fails at once, naming the holder; a folder that
    holds another kind of run (a probe's results) is refused naming it, and `--out` naming a file
    is refused. A folder that holds a finished run (`metrics.json`) is refused
    (`if_finished="refuse"`, the CLI), or its metrics are returned without training when it was
    made with the same configuration (`"reuse"`: a pipeline step retried after its training
    finished). A killed run leaves checkpoints, not metrics.json, and resumes. Keyword arguments go
    to `factprobe.finetune.trainer.run_finetune` (`progress`, `callbacks`, `train_set`)."""
    import json
    import os
    from contextlib import ExitStack
    from pathlib import Path

    from ..errors import ConfigError
    from ..redact import redact_values
    from ..run_folder import check_folder, claim, refuse_other_kind
    from .checkpoints import CONFIG_FILE
    from .trainer import default_out
    from .trainer import run_finetune as _run

    if if_finished not in ("refuse", "reuse"):
        raise ValueError(f"if_finished must be 'refuse' or 'reuse', not {if_finished!r}")
    out = check_folder(Path(cfg.out) if cfg.out else default_out(cfg))
    with ExitStack() as stack:
        if int(os.environ.get("RANK", "0") or 0) == 0:  # under a multi-process launcher, rank 0 holds it for all
            stack.enter_context(claim(out, "finetune", cfg.train_set))
        elif out.is_dir():
            refuse_other_kind(out, "finetune")
        done = out / "metrics.json"
        if done.is_file():
            saved = out / CONFIG_FILE
            # finetune_config.json stores credentials in URLs masked: compare both sides masked
            same = saved.is_file() and redact_values(
                json.loads(saved.read_text(encoding="utf-8")).get("fingerprint")
            ) == redact_values(cfg.fingerprint())
            if if_finished == "reuse" and same:
                return json.loads(done.read_text(encoding="utf-8"))
            raise ConfigError(
                f"{out} holds a finished fine-tuning run ({done.name}"
                f"{'' if same else ', made with another configuration'}); use another --out, or delete "
                "the folder to train again"
            )
        return _run(cfg, **kwargs)


def build_train_set_for(cfg: FinetuneConfig) -> Any:
    """The `factprobe.finetune.sets.TrainSet` that `run_finetune(cfg)` trains on."""
    from .trainer import train_set_for

    return train_set_for(cfg)
