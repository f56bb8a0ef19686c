"""The process group of a fine-tuning run and the device it trains on (`factprobe.finetune.trainer`).

Without a launcher a run is a one-process group (`setup_distributed` sets the variables a launcher
would); under `deepspeed`, `accelerate launch` or `torchrun` the launcher's variables stand.
The variables set here are taken back by `restore_launcher_env` when the run ends: a process that
fine-tunes in-process and then starts another (lm-eval, a served model, a benchmark) must not hand
it `WORLD_SIZE=1` and the port this process's gloo store still holds (EADDRINUSE in the child).
`all_ranks` makes every process agree on one flag, so that all of them stop together.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from ..errors import ConfigError
from .config import FinetuneConfig


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_LAUNCHER_VARS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "DS_ACCELERATOR")
_saved_env: dict[str, str | None] | None = None  # the launcher variables before `setup_distributed` set them


def setup_distributed(device: str) -> tuple[int, int]:
    """(rank, world size). Without a launcher (no WORLD_SIZE in the environment) sets the
    variables of a one-process group; on CPU selects DeepSpeed's CPU accelerator and opens a
    gloo group, which DeepSpeed and accelerate reuse (it stays open for later runs of this process).
    Call `restore_launcher_env` when the run ends."""
    global _saved_env
    if _saved_env is None:
        _saved_env = {k: os.environ.get(k) for k in _LAUNCHER_VARS}
    if "WORLD_SIZE" not in os.environ:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    if device == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def restore_launcher_env() -> None:
    """Put the launcher variables back as they were before `setup_distributed` (no-op when it did not run):
    the subprocesses this process starts later see no one-process group that is not theirs."""
    global _saved_env
    if _saved_env is None:
        return
    for key, value in _saved_env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    _saved_env = None


def training_device(cfg: FinetuneConfig) -> str:
    """The device to train on, "cuda" or "cpu", for `cfg.device` ("auto": CUDA when available); ConfigError for CUDA
    without a GPU."""
    import torch

    if cfg.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device={cfg.device!r}: no CUDA GPU is available")
    return "cuda" if cfg.device.startswith("cuda") else cfg.device


def training_precision(cfg: FinetuneConfig, device: str) -> str:
    """`cfg.dtype`, or for "auto" bfloat16 on a GPU that supports it, else float32."""
    import torch

    if cfg.dtype != "auto":
        return cfg.dtype
    return "bfloat16" if device == "cuda" and torch.cuda.is_bf16_supported() else "float32"


def all_ranks(ok: bool, device: Any) -> bool:
    """`ok` on every process of the group (one all-reduce when there are several), so that all
    ranks stop together instead of leaving the others waiting in a collective."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return ok
    if dist.get_backend() == "nccl" and torch.device(device).type != "cuda":  # e.g. an offloaded ZeRO-3 partition
        device = torch.device("cuda", torch.cuda.current_device())
    flag = torch.tensor([1 if ok else 0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())
