"""What a fine-tuning run is trusted for: it stops at the first non-finite loss, gradient norm or
weight (`TrainingDivergedError` naming the step), refuses a run whose trainable weights did not move
(`TrainingDidNotLearnError`), and turns a full disk into one `DiskFullError` line naming the path.

`guarded_trainer` is the `transformers.Trainer` that `factprobe.finetune.trainer` trains with;
`EngineGradNorm` reads the gradient norm where the DeepSpeed engine computes none (ZeRO-0).
"""

from __future__ import annotations

import errno
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import DiskFullError, TrainingDivergedError
from .config import FinetuneConfig
from .process_group import all_ranks


def is_disk_full(err: BaseException) -> bool:
    """True for "no space left on device" (or a quota) anywhere in `err`'s chain: an OSError with
    ENOSPC/EDQUOT, or the RuntimeError that torch and safetensors raise for it."""
    seen = 0
    e: BaseException | None = err
    while e is not None and seen < 8:
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(s in str(e) for s in ("No space left on device", "StorageFull", "Disk quota exceeded")):
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


@contextmanager
def disk_full_names(path: Path) -> Iterator[None]:
    """Turn a full disk into one `DiskFullError` line naming the file (when known) or `path`."""
    try:
        yield
    except (DiskFullError, TrainingDivergedError):
        raise
    except Exception as e:
        if not is_disk_full(e):
            raise
        where = getattr(e, "filename", None) or path
        raise DiskFullError(
            f"no space left on the device while writing {where}; free space (or use another --out) "
            "and rerun: training resumes from the last complete checkpoint"
        ) from None


def weights_finite(model: Any) -> bool:
    """Every trainable weight (this process's ZeRO-3 partition) is finite, on every rank."""
    import torch

    ok, dev = True, None
    for p in model.parameters():
        if not p.requires_grad:
            continue
        t = getattr(p, "ds_tensor", None)
        t = p if t is None else t
        dev = t.device
        if t.numel() and not bool(torch.isfinite(t.detach()).all()):
            ok = False
            break
    return all_ranks(ok, dev or "cpu")


def diverged(cfg: FinetuneConfig, step: int, what: str) -> TrainingDivergedError:
    return TrainingDivergedError(
        f"training diverged at step {step} of {cfg.max_steps}: {what} (learning rate {cfg.learning_rate:g}); no "
        "adapter, model or metrics of this run are kept; lower --learning-rate and rerun with --no-resume"
    )


class TrainingDidNotLearnError(TrainingDivergedError):
    """Training ran, but no trainable weight moved from its value at the start: the adapter (or
    model) would be the base model itself. A `TrainingDivergedError`, so that every handler of a
    failed run treats both alike: nothing of the run is kept, exit 2."""


def _local(p: Any) -> Any:
    """The tensor of parameter `p` that this process holds: its ZeRO-3 partition, else `p`."""
    t = getattr(p, "ds_tensor", None)
    return (p if t is None else t).detach()


#: trainable weights up to this many bytes (per process) are copied whole when training begins;
#: larger ones (full-parameter training of a big model) are remembered by checksums
EXACT_SNAPSHOT_BYTES = 1 << 30


def _checksum(t: Any) -> Any:
    """(sum, sum of squares) of tensor `t` in float64, on the CPU, computed in chunks (no float64
    copy of a large tensor): two numbers that any real update of `t` changes."""
    import torch

    acc = torch.zeros(2, dtype=torch.float64, device=t.device)
    for chunk in t.reshape(-1).split(1 << 24):
        c = chunk.double()
        acc[0] += c.sum()
        acc[1] += (c * c).sum()
    return acc.cpu()


class StartWeights:
    """The trainable weights of this process as they were when training began: copied to the CPU
    when they take at most `EXACT_SNAPSHOT_BYTES` (LoRA adapters, small models; compared exactly),
    else one `_checksum` per tensor. `moved(model)` says whether any of them changed since, on any
    process (one all-reduce)."""

    def __init__(self, model: Any, exact_bytes: int = EXACT_SNAPSHOT_BYTES) -> None:
        tensors = [_local(p) for p in model.parameters() if p.requires_grad]
        self.count = sum(getattr(p, "ds_numel", None) or p.numel() for p in model.parameters() if p.requires_grad)
        self.exact = sum(t.numel() * t.element_size() for t in tensors) <= exact_bytes
        self.saved = [self._state(t) for t in tensors]

    def _state(self, t: Any) -> Any:
        return t.to("cpu", copy=True) if self.exact else _checksum(t)

    def moved(self, model: Any) -> bool:
        import torch

        tensors = [_local(p) for p in model.parameters() if p.requires_grad]
        here = len(tensors) != len(self.saved) or any(
            not torch.equal(t.to("cpu") if self.exact else _checksum(t), s) for t, s in zip(tensors, self.saved)
        )
        device = tensors[0].device if tensors else "cpu"
        return not all_ranks(not here, device)


class _LearningCheckBase:
    """Refuses a run that did not learn: remembers the trainable weights at `on_train_begin` (after
    the DeepSpeed engine is set up and a resumed checkpoint loaded) and, at `on_train_end`, when
    at least one optimizer step ran, raises `TrainingDidNotLearnError` unless one of them moved."""

    def __init__(self, cfg: FinetuneConfig) -> None:
        self.cfg = cfg
        self.start: StartWeights | None = None
        self.start_step = 0

    def on_train_begin(self, args, state, control, model=None, **kw):
        if model is not None:
            self.start, self.start_step = StartWeights(model), int(state.global_step)

    def on_train_end(self, args, state, control, model=None, **kw):
        steps = int(state.global_step) - self.start_step
        if self.start is None or model is None or steps <= 0 or self.start.moved(model):
            return
        raise _did_not_learn(
            self.cfg,
            self.start_step,
            int(state.global_step),
            self.start.count,
            [e.get("grad_norm") for e in state.log_history if "loss" in e and int(e.get("step", 0)) > self.start_step],
        )


def _did_not_learn(cfg: FinetuneConfig, first: int, last: int, count: int, norms: Sequence[Any]) -> TrainingDidNotLearnError:
    """The one-line refusal of a run whose `count` trainable parameters did not move in steps
    `first`+1 .. `last`; `norms`: the gradient norms logged in those steps (None: not logged)."""
    known = [float(n) for n in norms if n is not None]
    norm = f"; gradient norm {known[-1]:.3g} at the last logged step" if known else "; no gradient norm was logged"
    knobs = "--learning-rate" + (" and --lora-alpha" if cfg.use_lora else "")
    what = "adapter" if cfg.use_lora else "model"
    return TrainingDidNotLearnError(
        f"training did not learn: after {last - first} optimizer step(s) (to step {last} of {cfg.max_steps}) none of "
        f"the {count:,} trainable parameters moved from its value at step {first}, so the {what} would be the base model "
        f"itself{norm} (learning rate {cfg.learning_rate:g}"
        + (f", LoRA alpha {cfg.alpha:g}" if cfg.use_lora else "")
        + f"); no adapter, model or metrics of this run are "
        f"kept; check {knobs} and rerun with --no-resume"
    )


def _learning_check(cfg: FinetuneConfig) -> Any:
    """A `_LearningCheckBase` that is a `TrainerCallback`."""
    from transformers import TrainerCallback

    return type("LearningCheck", (_LearningCheckBase, TrainerCallback), {})(cfg)


def _grad_norm(params: Any) -> float | None:
    """The 2-norm of the gradients of `params` (inf or nan when one is not finite); None when none has one."""
    import torch

    grads = [p.grad.detach() for p in params if p.grad is not None]
    if not grads:
        return None
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads])))


class EngineGradNorm:
    """The gradient norm of a DeepSpeed engine that does not compute one: ZeRO stage 0 with a
    plain torch optimizer (float32), where `engine.get_global_grad_norm()` stays None, so that the
    Trainer logs no `grad_norm` and a non-finite one goes unseen (issue 28). `attach` wraps the
    engine's `_take_model_step` (called at each accumulation boundary, after the gradients are
    all-reduced and before DeepSpeed clips them): the norm it computes there is the pre-clip norm,
    as ZeRO 1-3 report it. Other engines (ZeRO 1-3, half precision) report their own norm: None."""

    def __init__(self) -> None:
        self.value: float | None = None

    @classmethod
    def attach(cls, engine: Any) -> EngineGradNorm | None:
        import torch

        stage = getattr(engine, "zero_optimization_stage", None)
        take_step = getattr(engine, "_take_model_step", None)
        if (
            not callable(stage)
            or stage() != 0
            or take_step is None
            or not isinstance(getattr(engine, "optimizer", None), torch.optim.Optimizer)
        ):
            return None
        probe = cls()

        def take_model_step(*args: Any, **kwargs: Any) -> Any:
            probe.value = _grad_norm(engine.module.parameters())
            return take_step(*args, **kwargs)

        engine._take_model_step = take_model_step
        return probe

    def take(self) -> float | None:
        """The norm of the last optimizer step (once; None when none was computed since)."""
        value, self.value = self.value, None
        return value


def guarded_trainer(cfg: FinetuneConfig, check_grad_norm: bool) -> type:
    """A `transformers.Trainer` that stops at the first non-finite loss (every micro-batch, all
    ranks agreeing) or gradient norm, raising `TrainingDivergedError` naming the step, and refuses
    a run whose trainable weights did not move (`TrainingDidNotLearnError`, `_LearningCheckBase`).
    The Trainer's own logs hide such losses (`logging_nan_inf_filter`), so the real values are
    checked here, before the step's checkpoint is saved. The gradient norm is read under DeepSpeed
    (the engine's, or `EngineGradNorm` under ZeRO-0 where the engine has none) and under the plain
    Trainer, and logged every logging step (`grad_norm` in `loss_history.json`). `check_grad_norm`
    is off for float16, whose loss scaler skips overflowing steps by design."""
    from transformers import Trainer

    class GuardedTrainer(Trainer):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.add_callback(_learning_check(cfg))
            self._engine_norm: EngineGradNorm | None = None
            self._norm_attached = False

        def training_step(self, *args: Any, **kwargs: Any) -> Any:
            if not self._norm_attached:  # the DeepSpeed engine exists once training runs
                self._norm_attached = True
                self._engine_norm = EngineGradNorm.attach(args[0] if args else kwargs.get("model"))
            loss = super().training_step(*args, **kwargs)
            if not all_ranks(bool(loss.isfinite().all()), loss.device):
                raise diverged(cfg, self.state.global_step + 1, f"the loss is {loss.float().mean().item()}")
            return loss

        def _get_grad_norm(self, *args: Any, **kwargs: Any) -> Any:
            norm = super()._get_grad_norm(*args, **kwargs)
            if norm is None and self._engine_norm is not None:
                norm = self._engine_norm.take()
            if check_grad_norm and norm is not None and not math.isfinite(float(norm)):
                raise diverged(cfg, self.state.global_step + 1, f"the gradient norm is {float(norm)}")
            return norm

    return GuardedTrainer
