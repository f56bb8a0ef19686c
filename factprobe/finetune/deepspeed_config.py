"""DeepSpeed configs: found in `factprobe/finetune/deepspeed_configs/zero<N>.json`, checked, offload applied.

The files hold "auto" for everything the run decides (micro-batch, accumulation, train batch,
gradient clipping, precision, ZeRO-3 bucket sizes): the Hugging Face DeepSpeed integration
(`transformers.integrations.deepspeed.HfTrainerDeepSpeedConfig`) fills them from the
`TrainingArguments`, so no value is written twice. A file that sets one of them to a number that
disagrees with the run is refused by that integration, naming the key (the trainer turns its
error into a `ConfigError`).

Without an `optimizer` / `scheduler` section the trainer's AdamW and cosine schedule are used.
`--offload-optimizer` adds `zero_optimization.offload_optimizer = {device: cpu}` and, when the file
has no optimizer, DeepSpeed's AdamW with "auto" parameters (ZeRO-Offload needs DeepSpeed's CPU
Adam); `--offload-param` adds `offload_param = {device: cpu}` (stage 3).

Where the files are: `--deepspeed-config PATH`, else `$FACTPROBE_DEEPSPEED_CONFIGS/zero<N>.json`, else the
package's own `deepspeed_configs/` (package data: a wheel install has them, pyproject.toml).
"""

from __future__ import annotations

import copy
import difflib
import json
import os
from pathlib import Path
from typing import Any

from ..errors import ConfigError, DataError

ENV = "FACTPROBE_DEEPSPEED_CONFIGS"
#: the ZeRO configs shipped with the package (pyproject.toml, [tool.setuptools.package-data])
PACKAGED = Path(__file__).resolve().parent / "deepspeed_configs"
#: top-level keys DeepSpeed 0.19 reads (deepspeed.runtime.config); anything else is a typo
KNOWN_KEYS = frozenset(
    {
        "train_batch_size",
        "train_micro_batch_size_per_gpu",
        "gradient_accumulation_steps",
        "optimizer",
        "scheduler",
        "fp16",
        "bf16",
        "bfloat16",
        "amp",
        "torch_autocast",
        "zero_optimization",
        "gradient_clipping",
        "steps_per_print",
        "wall_clock_breakdown",
        "memory_breakdown",
        "dump_state",
        "prescale_gradients",
        "gradient_predivide_factor",
        "communication_data_type",
        "seq_parallel_communication_data_type",
        "sparse_gradients",
        "zero_allow_untested_optimizer",
        "zero_force_ds_cpu_optimizer",
        "activation_checkpointing",
        "flops_profiler",
        "tensorboard",
        "wandb",
        "csv_monitor",
        "comet",
        "aio",
        "data_types",
        "checkpoint",
        "elasticity",
        "autotuning",
        "compression_training",
        "data_efficiency",
        "nebula",
        "pipeline",
        "timers",
        "disable_allgather",
        "dataloader_drop_last",
        "sparse_attention",
        "curriculum_learning",
        "eigenvalue",
        "progressive_layer_drop",
        "quantize_training",
        "hybrid_engine",
        "weight_quantization",
        "graph_harvesting",
        "use_data_before_expert_parallel_",
        "compile",
        "zero_quantized_weights",
        "zero_quantized_nontrainable_weights",
        "zero_quantized_gradients",
        "mics_shard_size",
        "mics_hierarchical_params_gather",
        "gradient_accumulation_dtype",
        "load_universal_checkpoint",
        "use_node_local_storage",
        "checkpoint_tag_validation",
        "memory_efficient_linear",
        "tensor_parallel",
    }
)


def config_dir() -> Path:
    """The folder of zero<N>.json: `$FACTPROBE_DEEPSPEED_CONFIGS` when set, else the packaged one. ConfigError
    when it holds no zero0.json (a variable naming a wrong folder is not passed over silently)."""
    folder = Path(os.environ[ENV]).expanduser() if os.environ.get(ENV) else PACKAGED
    if not (folder / "zero0.json").is_file():
        how = f"set {ENV} to a folder of zero<N>.json or unset it" if os.environ.get(ENV) else "reinstall factprobe"
        raise ConfigError(f"no DeepSpeed configs (zero0.json ...) in {folder}; {how}, or pass --deepspeed-config")
    return folder


def config_path(stage: int, explicit: str | None = None) -> Path:
    """`explicit`, else `zero<stage>.json` of `config_dir()`."""
    return Path(explicit) if explicit else config_dir() / f"zero{stage}.json"


def _auto_free(d: Any) -> Any:
    """`d` without "auto" values (they are filled later), for validation."""
    if isinstance(d, dict):
        return {k: _auto_free(v) for k, v in d.items() if v != "auto"}
    return d


def validate(cfg: dict[str, Any], where: str) -> None:
    """ConfigError naming the key for an unknown top-level key (with the closest known one) or a
    `zero_optimization` entry DeepSpeed's own schema rejects."""
    if not isinstance(cfg, dict):
        raise ConfigError(f"{where}: a DeepSpeed config must be a JSON object")
    for key in cfg:
        if key not in KNOWN_KEYS:
            near = difflib.get_close_matches(key, sorted(KNOWN_KEYS), n=1)
            raise ConfigError(f"{where}: unknown DeepSpeed key {key!r}" + (f" (did you mean {near[0]!r}?)" if near else ""))
    zero = cfg.get("zero_optimization", {})
    if not isinstance(zero, dict):
        raise ConfigError(f"{where}: zero_optimization must be an object, got {zero!r}")
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from pydantic import ValidationError

    try:
        DeepSpeedZeroConfig(**_auto_free(zero))
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err.get("loc", ()))
        raise ConfigError(f"{where}: zero_optimization.{loc}: {err.get('msg')} (got {err.get('input')!r})") from None


def load_deepspeed_config(
    stage: int,
    explicit: str | None = None,
    *,
    offload_optimizer: bool = False,
    offload_param: bool = False,
    pin_memory: bool = False,
) -> tuple[dict[str, Any], Path]:
    """The checked config dict for ZeRO `stage` with the offload options applied, and its file.

    Raises DataError for a file that is missing or not JSON (naming line and column), and
    ConfigError for invalid keys or a file whose `zero_optimization.stage` differs from `stage`."""
    path = config_path(stage, explicit)
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"DeepSpeed config {path} does not exist") from None
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{e.lineno}:{e.colno}: not valid JSON ({e.msg})") from None
    validate(cfg, str(path))
    cfg = copy.deepcopy(cfg)
    zero = cfg.setdefault("zero_optimization", {})
    file_stage = zero.setdefault("stage", stage)
    if file_stage != stage:
        raise ConfigError(f"{path}: zero_optimization.stage is {file_stage} but --zero-stage is {stage}; make them agree")
    if offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": pin_memory}
        cfg.setdefault(
            "optimizer", {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}}
        )
    if offload_param:
        zero["offload_param"] = {"device": "cpu", "pin_memory": pin_memory}
    validate(cfg, str(path))
    return cfg, path
