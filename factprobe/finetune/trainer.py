"""`run_finetune(cfg)`: LoRA or full-parameter fine-tuning with the Hugging Face `Trainer` under DeepSpeed.

Why the HF `Trainer` (and not TRL's `SFTTrainer`): our examples are already instruction/answer
pairs with answer-only labels and our own packing (`factprobe.finetune.data`), so SFTTrainer's
dataset formatting, chat templating and packing would be bypassed; what we need is exactly the
`Trainer` core that SFTTrainer inherits: its DeepSpeed integration (fills the "auto" values of
`configs/deepspeed/zero<N>.json` from the run's settings), gradient accumulation, the cosine
schedule, PEFT-aware saving, and checkpoints that resume (optimizer, scheduler, RNG and data
position included). One dependency fewer (no `trl`), same behaviour under every launcher.

Where it runs (the same code):

- CPU, one process (tests, `make run-finetune`): `factprobe finetune ... --device cpu`. Without a
  launcher the process sets `MASTER_ADDR=127.0.0.1`, a free `MASTER_PORT`, `RANK=0`,
  `LOCAL_RANK=0`, `WORLD_SIZE=1`, `DS_ACCELERATOR=cpu`, and opens a gloo process group of size
  1, which DeepSpeed reuses. The first run compiles DeepSpeed's small shm op (about 40 s, cached in
  `TORCH_EXTENSIONS_DIR`).
- One node, several GPUs: either launcher starts one process per GPU and sets the environment::

      deepspeed --num_gpus 8 -m factprobe.cli finetune --model M --train-set known --known-unknown T --out DIR
      accelerate launch --use_deepspeed --num_processes 8 -m factprobe.cli finetune --model M --train-set known ...

  (`torchrun --nproc-per-node 8 -m factprobe.cli finetune ...` works too: the DeepSpeed config
  comes from `--zero-stage` / `--deepspeed-config`, not from the launcher.) The effective batch
  stays `--effective-batch`: accumulation is divided by the number of processes.
- Several nodes: a Kubeflow `TrainJob` runs the same command under `torchrun` on each node (the
  pipeline layer builds it).

Outputs in `cfg.out` (written by rank 0; `out` may be a mounted PersistentVolumeClaim):

- `adapter/`: the PEFT adapter (`adapter_config.json` names `--model` as its base, so
  `factprobe probe qa --model <out>/adapter` loads it); `model/` instead for full-parameter
  training (a complete model folder with its tokenizer);
- `checkpoints/checkpoint-<step>/`: every `--save-steps` steps (DeepSpeed and trainer state, RNG,
  and `finetune_config.json`, written last and atomically: a checkpoint without it is torn and is
  skipped with a note, so a crash or a full disk mid-save never leaves one that a resume picks; it
  records the base weights' revision and the tokens trained so far); a rerun with the same options
  resumes from the last complete one; a checkpoint of another model or configuration, or of other
  base weights (the files at the model path changed), is refused, naming both;
- `trainer_state.json` (the `Trainer`'s state: log history, steps), `loss_history.json`
  ([{step, loss, learning_rate, grad_norm}]; `grad_norm` is the pre-clip gradient norm, read under
  every ZeRO stage, ZeRO-0 included, and under the plain Trainer), `loss.png` (the loss curve),
  `train_set.jsonl` and `train_set.json` (the examples and their sha256 `digest`),
  `finetune_config.json`;
- `metrics.json` (returned): `train_loss` (mean logged loss over all steps), `final_loss`,
  `first_loss`, `tokens_per_second` (non-padding tokens trained per second of the training loop
  in this process: from the trainer's train-begin, after the DeepSpeed engine set-up, to its
  train-end; `setup_seconds` is the rest of `Trainer.train`), `peak_memory_bytes` (CUDA: peak allocated on this process's GPU; CPU: the process's
  peak resident set size), `tokens_trained` and `non_padding_fraction` (real / fed tokens) over
  the whole run, steps before a resume included, `steps`, `n_examples`,
  `n_sequences`, `examples_per_sequence`, `effective_batch`, `grad_accum`, `world_size`,
  `trainable_params`, `total_params`, `trainable_fraction`, `adapter_bytes`, `train_set_digest`, ...

Trust: only causal LMs are trained (a masked LM is refused as the probes refuse it, and so is a
model whose logits at a position change when a later token changes, whatever its class name says:
`factprobe.lm.causality`). A non-finite loss, gradient norm or weight stops training with
`TrainingDivergedError` naming the step (the Trainer's logs would hide it); a run whose trainable
weights did not move from their values at the start (an adapter that would be the base model) is
refused with `TrainingDidNotLearnError`; a full disk is one `DiskFullError` line naming the path.
A failed run leaves no `adapter/`, `model/` or `metrics.json` (the weights folder is written under
a temporary name and renamed; `metrics.json` comes last); loss values are numbers or null, never NaN.

Nothing here imports MLflow (`report_to="none"`); the pipeline logs these files.

The run is this module (`plan_training`, `run_finetune`); its parts are modules of their own:
`process_group` (the process group and the device), `model_setup` (the base model checked, loaded and
wrapped with LoRA), `checkpoints` (checkpoints and what a resume is checked against), `loss_history`
(`loss_history.json`, `loss.png`) and `guards` (divergence, a run that did not learn, a full disk).

Over 500 lines: the run itself (plan, the Trainer under DeepSpeed, resume, the guards' wiring), one job; its other
jobs live in process_group, model_setup, checkpoints, loss_history and guards, and ruff format's one-argument-per-line
calls add the rest.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..io import atomic_write_json
from ..redact import redact_values
from .checkpoints import CHECKPOINTS, CONFIG_FILE, carried_tokens, check_base_revision, check_resume, prune_checkpoints
from .config import FinetuneConfig
from .guards import disk_full_names, diverged, guarded_trainer, weights_finite
from .loss_history import finite_or_none, loss_history, plot_loss
from .model_setup import base_model, count_params, load_base, wrap_lora
from .process_group import restore_launcher_env, setup_distributed, training_device, training_precision


def default_out(cfg: FinetuneConfig) -> Path:
    """`runs/finetune-<model>-<train set>`: the run folder when `--out` is not given."""
    slug = Path(cfg.model).name if Path(cfg.model).exists() else cfg.model.replace("/", "_")
    return Path(f"runs/finetune-{slug}-{cfg.train_set}")


def train_set_for(cfg: FinetuneConfig) -> Any:
    """The `TrainSet` of `cfg`: read from `cfg.train_set_dir` (its kind must be `cfg.train_set`),
    else built by `factprobe.finetune.sets.build_train_set` from the config's data options."""
    from .sets import TrainSet, build_train_set

    if cfg.train_set_dir:
        ts = TrainSet.load(cfg.train_set_dir)
        if ts.kind != cfg.train_set:
            raise ConfigError(
                f"train_set_dir={cfg.train_set_dir!r} holds a {ts.kind!r} training set, but --train-set is {cfg.train_set!r}"
            )
        return ts
    return build_train_set(
        cfg.train_set,
        model=cfg.model,
        source=cfg.source,
        data=cfg.data,
        train_data=cfg.train_data,
        relations=cfg.relations,
        seed=cfg.seed,
        qa_train_per_relation=cfg.qa_train_per_relation,
        qa_templates=cfg.qa_templates,
        size=cfg.train_size,
        known_unknown=cfg.known_unknown,
    )


@dataclass(frozen=True)
class TrainPlan:
    """One training run, worked out once by `plan_training` before anything is written: the config,
    where it goes, the process group, the DeepSpeed config, the loaded (and LoRA-wrapped) model, the
    training data in its three forms, and the config stamp written next to every checkpoint.

    Every field is fixed for the run; `_train` only reads them."""

    cfg: FinetuneConfig
    out: Path  # the run folder
    target: Path  # out/adapter (LoRA) or out/model (full-parameter training)
    device: str  # "cpu" | "cuda"
    precision: str  # "float32" | "bfloat16" | "float16"
    ds_config: dict[str, Any]  # the DeepSpeed config given to TrainingArguments
    ds_path: Path  # the file it came from (named in errors)
    rank: int  # this process's rank; 0 writes the files
    world: int  # number of processes
    accum: int  # gradient accumulation steps per optimizer step
    per_step: int  # examples (sequences) per optimizer step over all processes
    resume_from: Path | None  # the complete checkpoint this run continues from
    train_set: Any  # a `factprobe.finetune.sets.TrainSet`
    model: Any  # the model to train (PEFT-wrapped with LoRA)
    tok: Any  # its tokenizer
    seqs: list[Any]  # one tokenized `factprobe.finetune.data.TrainRow` per example
    rows: list[Any]  # what the trainer sees: `seqs` packed, or `seqs` itself
    trainable: int  # trainable parameters
    total: int  # all parameters
    use_cache: bool  # the model's `use_cache` before training, restored in the saved model
    random_weights: bool  # the base is a tiny RANDOM test model (`factprobe.models.testing`)
    saved_config: dict[str, Any]  # `finetune_config.json`: what a resume is checked against

    @property
    def digest(self) -> str:
        """The training set's content digest."""
        return str(self.train_set.digest)

    @property
    def start_step(self) -> int:
        """The optimizer step this run starts at (the resumed checkpoint's, else 0)."""
        return int(self.resume_from.name.rsplit("-", 1)[-1]) if self.resume_from else 0


def plan_training(cfg: FinetuneConfig, train_set: Any = None) -> TrainPlan:
    """Check `cfg` against the machine, the output folder and the data, load the base model and
    the training data, and return the `TrainPlan`; writes nothing. `train_set` (a `TrainSet`)
    replaces the one `cfg` names (tests). Refusals come in this order: the DeepSpeed config, the
    training set, another model or configuration in `out` (`check_resume`), a masked LM or adapter
    as base, the base weights' revision against the resumed checkpoint, a set smaller than one
    effective batch."""
    from .data import no_kv_cache, pack_sequences, tokenize_examples
    from .deepspeed_config import load_deepspeed_config

    out = Path(cfg.out) if cfg.out else default_out(cfg)
    device = training_device(cfg)
    precision = training_precision(cfg, device)
    ds_config, ds_path = load_deepspeed_config(
        cfg.zero_stage,
        cfg.deepspeed_config,
        offload_optimizer=cfg.offload_optimizer,
        offload_param=cfg.offload_param,
        pin_memory=device == "cuda",
    )
    if train_set is None:
        train_set = train_set_for(cfg)
    digest = train_set.digest
    rank, world = setup_distributed(device)
    accum = cfg.grad_accum_for(world)
    resume_from = check_resume(cfg, out, digest, rank=rank)  # another model or configuration: refused first
    folder, revision = base_model(cfg)  # a masked LM or an adapter is refused before anything is loaded
    if resume_from is not None:
        check_base_revision(cfg, resume_from, revision, rank)

    model, tok, folder = load_base(cfg, folder)
    random_weights = bool(getattr(model.config, "factprobe_random_weights", False))
    seqs = tokenize_examples(tok, train_set.examples, cfg.max_seq_len)
    rows = pack_sequences(seqs, cfg.max_seq_len) if cfg.packing else seqs
    per_step = cfg.batch_size * accum * world
    if len(rows) < per_step:
        raise ConfigError(
            f"the {train_set.kind} training set has {len(train_set)} examples in {len(rows)} sequences, "
            f"fewer than one effective batch of {per_step} (batch_size {cfg.batch_size} x grad_accum "
            f"{accum} x {world} process(es)); lower --effective-batch / --grad-accum / --batch-size or "
            "raise --train-size"
        )
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    if cfg.use_lora:
        from transformers import set_seed

        set_seed(cfg.seed)  # the LoRA A matrices are random: same seed, same adapter, in any process
        model = wrap_lora(cfg, model)
    trainable, total = count_params(model)
    use_cache = no_kv_cache(model)  # packed examples are isolated only without a KV cache (data.py)

    saved_config = {
        "config": redact_values(cfg.to_dict()),
        "fingerprint": redact_values(cfg.fingerprint()),
        "train_set_digest": digest,
        "train_set": train_set.kind,
        "base_folder": str(folder),
        "model_revision": revision,
        "deepspeed_config": str(ds_path),
    }
    return TrainPlan(
        cfg=cfg,
        out=out,
        target=out / ("adapter" if cfg.use_lora else "model"),
        device=device,
        precision=precision,
        ds_config=ds_config,
        ds_path=ds_path,
        rank=rank,
        world=world,
        accum=accum,
        per_step=per_step,
        resume_from=resume_from,
        train_set=train_set,
        model=model,
        tok=tok,
        seqs=seqs,
        rows=rows,
        trainable=trainable,
        total=total,
        use_cache=use_cache,
        random_weights=random_weights,
        saved_config=saved_config,
    )


def run_finetune(
    cfg: FinetuneConfig, *, progress: bool = True, callbacks: Sequence[Any] = (), train_set: Any = None
) -> dict[str, Any]:
    """Fine-tune `cfg.model` on `cfg.train_set` and write `cfg.out` (see the module docstring).

    `callbacks` are extra `transformers.TrainerCallback`s; `train_set` (a
    `factprobe.finetune.sets.TrainSet`) replaces the built one (tests). Returns the metrics
    dict. Raises ConfigError / DataError / ModelError for bad input (module docstring of
    `factprobe.finetune`), `TrainingDivergedError` naming the step when a loss, gradient norm or
    weight becomes non-finite, `TrainingDidNotLearnError` when no trainable weight moved, and `DiskFullError` naming the path when the disk fills up. Whenever
    it raises, no `adapter/`, `model/` or `metrics.json` of this run is left in `cfg.out`, and every
    checkpoint it leaves is complete and holds finite weights."""
    try:
        return _plan_and_train(cfg, progress=progress, callbacks=callbacks, train_set=train_set)
    finally:
        restore_launcher_env()  # a later subprocess of this process must not join its process group


def _plan_and_train(cfg: FinetuneConfig, *, progress: bool, callbacks: Sequence[Any], train_set: Any) -> dict[str, Any]:
    """`run_finetune` without the launcher-variable restore: plan, write the run's files, train."""
    plan = plan_training(cfg, train_set)
    out, target = plan.out, plan.target
    try:
        if plan.rank == 0:
            with disk_full_names(out):
                out.mkdir(parents=True, exist_ok=True)
                plan.train_set.save(out)
                atomic_write_json(out / CONFIG_FILE, plan.saved_config)
        return _train(plan, progress=progress, callbacks=callbacks)
    except BaseException:
        if plan.rank == 0:  # nothing of a failed run may pass for a result
            for p in (target, _partial(target)):
                shutil.rmtree(p, ignore_errors=True)
            (out / "metrics.json").unlink(missing_ok=True)
        raise
    finally:
        # a ZeRO-3 TrainingArguments registers itself globally: later from_pretrained calls in this
        # process would partition their weights (zero.Init) unless it is unset
        from transformers.integrations.deepspeed import unset_hf_deepspeed_config

        unset_hf_deepspeed_config()


def _partial(target: Path) -> Path:
    """Where `target` (adapter/ or model/) is written before it is renamed into place."""
    return target.with_name(f".{target.name}.partial")


def _train(plan: TrainPlan, *, progress: bool, callbacks: Sequence[Any]) -> dict[str, Any]:
    """The training part of `run_finetune`: trains `plan` (already checked, its files written) and
    writes the model or adapter, `trainer_state.json`, `loss_history.json`, `loss.png` and, last,
    `metrics.json`. Returns the metrics."""
    from transformers import PrinterCallback, TrainerCallback, TrainingArguments

    from ..lm import without_library_lines
    from .data import Collator, RowDataset

    cfg, out, accum, device, precision, tok = plan.cfg, plan.out, plan.accum, plan.device, plan.precision, plan.tok
    model, train_set, resume_from, saved_config, target = (
        plan.model,
        plan.train_set,
        plan.resume_from,
        plan.saved_config,
        plan.target,
    )
    digest = plan.digest
    start_step = plan.start_step
    carried = carried_tokens(resume_from)
    collator = Collator(pad_id=tok.pad_token_id)

    def run_tokens(step: int) -> tuple[int, int] | None:
        """(real, fed) tokens of the whole run up to optimizer `step` (the collator may run one
        batch ahead: only the batches trained count); None when the resumed checkpoint lacks them."""
        real, fed = collator.counts(max(0, step - start_step) * accum)
        return None if carried is None else (carried[0] + real, carried[1] + fed)

    class Stamp(TrainerCallback):
        """Completes each checkpoint: checks its weights are finite (else deletes it and stops),
        writes `finetune_config.json` last and atomically (the config, the base weights' revision and
        the tokens trained so far: what a resume is checked against and carries on from), then
        keeps the newest `save_total_limit` complete checkpoints (the Trainer's own rotation is
        off: it could delete the last complete checkpoint in favour of a torn one)."""

        def on_save(self, args, state, control, model=None, **kw):
            ck = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if model is not None and not weights_finite(model):
                if state.is_world_process_zero:
                    shutil.rmtree(ck, ignore_errors=True)
                raise diverged(cfg, state.global_step, "a weight is not finite")
            if state.is_world_process_zero and ck.is_dir():
                tokens = run_tokens(state.global_step)
                atomic_write_json(
                    ck / CONFIG_FILE,
                    {
                        **saved_config,
                        "step": state.global_step,
                        "tokens": {"real": tokens[0], "fed": tokens[1]} if tokens else None,
                    },
                )
                prune_checkpoints(Path(args.output_dir), cfg.save_total_limit, current=ck)

    try:
        args = TrainingArguments(
            output_dir=str(out / CHECKPOINTS),
            per_device_train_batch_size=cfg.batch_size,
            gradient_accumulation_steps=accum,
            max_steps=cfg.max_steps,
            learning_rate=cfg.learning_rate,
            lr_scheduler_type=cfg.lr_scheduler,
            warmup_steps=round(cfg.warmup_ratio * cfg.max_steps),
            weight_decay=cfg.weight_decay,
            optim="adamw_torch",
            logging_steps=cfg.logging_steps,
            save_strategy="steps",
            save_steps=cfg.save_steps,
            save_total_limit=None,  # rotation: Stamp
            report_to="none",
            deepspeed=plan.ds_config,
            use_cpu=device == "cpu",
            ddp_backend="gloo" if device == "cpu" else None,
            seed=cfg.seed,
            data_seed=cfg.seed,
            bf16=precision == "bfloat16",
            fp16=precision == "float16",
            remove_unused_columns=False,
            dataloader_num_workers=0,
            disable_tqdm=not progress,
            max_grad_norm=1.0,
            logging_nan_inf_filter=False,
        )
        timer = _timer()
        trainer = guarded_trainer(cfg, precision != "float16")(
            model=model,
            args=args,
            train_dataset=RowDataset(plan.rows),
            data_collator=collator,
            callbacks=[Stamp(), timer, *callbacks],
        )
        trainer.remove_callback(PrinterCallback)  # without a progress bar it printed each raw log dict
        t0 = time.perf_counter()
        with disk_full_names(out / CHECKPOINTS), without_library_lines():  # no DeepSpeed op-build line
            result = trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
        total_seconds = time.perf_counter() - t0
        seconds = timer.seconds if timer.seconds is not None else total_seconds
    except ValueError as e:
        text = str(e)
        if "DeepSpeed" in text or "deepspeed" in text:
            lines = [ln.strip(" -") for ln in text.splitlines() if ln.strip()]
            raise ConfigError(f"{plan.ds_path}: " + "; ".join(lines[:4])) from None
        raise

    steps = int(trainer.state.global_step)
    if not weights_finite(trainer.model):
        raise diverged(cfg, steps, "a weight is not finite after the last step")
    session_real, _ = collator.counts(max(0, steps - start_step) * accum)
    whole = run_tokens(steps)
    history = loss_history(trainer.state.log_history)
    losses = [h["loss"] for h in history if h["loss"] is not None]
    peak, peak_kind = _peak_memory(device)
    metrics: dict[str, Any] = {
        "train_loss": sum(losses) / len(losses) if losses else finite_or_none(result.training_loss),
        "first_loss": history[0]["loss"] if history else None,
        "final_loss": history[-1]["loss"] if history else None,
        "tokens_per_second": session_real / seconds if seconds > 0 else None,
        "peak_memory_bytes": peak,
        "peak_memory_kind": peak_kind,
        # over the whole run, steps before a resume included (None: resumed from an older checkpoint)
        "non_padding_fraction": whole[0] / whole[1] if whole and whole[1] else None,
        "tokens_trained": whole[0] if whole else None,
        "steps": steps,
        "max_steps": cfg.max_steps,
        "resumed_from": str(resume_from) if resume_from else None,
        "train_seconds": seconds,
        "setup_seconds": total_seconds - seconds,
        "tokens_trained_this_session": session_real,
        "n_examples": len(train_set),
        "n_sequences": len(plan.rows),
        "examples_per_sequence": len(plan.seqs) / len(plan.rows),
        "packing": cfg.packing,
        "batch_size": cfg.batch_size,
        "grad_accum": accum,
        "world_size": plan.world,
        "effective_batch": plan.per_step,
        "zero_stage": cfg.zero_stage,
        "deepspeed_zero_stage": (
            trainer.model_wrapped.zero_optimization_stage() if hasattr(trainer.model_wrapped, "zero_optimization_stage") else None
        ),
        # where the running engine keeps optimizer state and parameters ("none" | "cpu" | "nvme"; None without DeepSpeed)
        "deepspeed_offload_optimizer": _offload_device(trainer.model_wrapped, "zero_offload_optimizer"),
        "deepspeed_offload_param": _offload_device(trainer.model_wrapped, "zero_offload_param"),
        "device": device,
        "precision": precision,
        "lora": cfg.use_lora,
        "lora_r": cfg.lora_r if cfg.use_lora else 0,
        "trainable_params": plan.trainable,
        "total_params": plan.total,
        "trainable_fraction": plan.trainable / plan.total if plan.total else None,
        "train_set": train_set.kind,
        "train_set_digest": digest,
        "train_set_info": train_set.info,
        "model": cfg.model,
        "model_revision": saved_config["model_revision"],
        "random_weights": plan.random_weights,
    }
    partial = _partial(target)
    model.config.use_cache = plan.use_cache
    with disk_full_names(target):
        if trainer.is_world_process_zero() and partial.exists():
            shutil.rmtree(partial)
        trainer.save_model(str(partial))  # every rank (ZeRO-3 gathers); renamed into place when complete
        if trainer.is_world_process_zero():
            if cfg.use_lora:
                _fix_adapter_base(partial, cfg.model)
            else:
                tok.save_pretrained(partial)
            if target.exists():
                shutil.rmtree(target)
            partial.rename(target)
            metrics["adapter_bytes" if cfg.use_lora else "model_bytes"] = _dir_bytes(target)
            metrics["output_dir"] = str(target)
            trainer.state.save_to_json(str(out / "trainer_state.json"))
            atomic_write_json(out / "loss_history.json", history)
            if history:
                plot_loss(
                    history,
                    out / "loss.png",
                    f"{cfg.model} {train_set.kind} "
                    f"({'LoRA r=' + str(cfg.lora_r) if cfg.use_lora else 'full'}, ZeRO-{cfg.zero_stage})",
                )
            atomic_write_json(out / "metrics.json", metrics)  # last: its presence means a finished run
    return metrics


class _TimerBase:
    """Seconds from the trainer's `on_train_begin` (after the DeepSpeed engine is set up and a
    checkpoint loaded) to `on_train_end`: the training loop alone."""

    def __init__(self) -> None:
        self.t0: float | None = None
        self.seconds: float | None = None

    def on_train_begin(self, args, state, control, **kw):
        self.t0 = time.perf_counter()

    def on_train_end(self, args, state, control, **kw):
        if self.t0 is not None:
            self.seconds = time.perf_counter() - self.t0


def _timer() -> Any:
    """A `_TimerBase` that is a `TrainerCallback` (transformers is imported only when training)."""
    from transformers import TrainerCallback

    return type("Timer", (_TimerBase, TrainerCallback), {})()


def _peak_memory(device: str) -> tuple[int, str]:
    if device == "cuda":
        import torch

        return int(torch.cuda.max_memory_allocated()), "cuda_max_allocated"
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024, "cpu_max_rss"


def _offload_device(engine, getter: str) -> str | None:
    """The offload device the DeepSpeed `engine` really uses for `getter` (`zero_offload_optimizer` or
    `zero_offload_param`): "none", "cpu" or "nvme"; None when training ran without a DeepSpeed engine."""
    if not hasattr(engine, getter):
        return None
    conf = getattr(engine, getter)()
    device = getattr(conf, "device", None)
    return "none" if device is None else str(getattr(device, "value", device))


def _fix_adapter_base(adapter: Path, base: str) -> None:
    """Name the base model as the user did (an alias resolves on any machine)."""
    p = adapter / "adapter_config.json"
    d = json.loads(p.read_text(encoding="utf-8"))
    d["base_model_name_or_path"] = base if not Path(base).exists() else str(Path(base).resolve())
    p.write_text(json.dumps(d, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _dir_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
