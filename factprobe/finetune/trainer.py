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
"""
from __future__ import annotations

import errno
import json
import logging
import math
import os
import re
import shutil
import socket
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, DiskFullError, ModelError, TrainingDivergedError
from ..io import atomic_write_json
from ..redact import redact_values
from .config import DEFAULT_TARGET_MODULES, FinetuneConfig

log = logging.getLogger(__name__)

CONFIG_FILE = "finetune_config.json"
CHECKPOINTS = "checkpoints"
#: the Trainer's own file in each checkpoint
TRAINER_STATE = "trainer_state.json"
_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")


def _note(msg: str) -> None:
    print(f"factprobe: {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ process group
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def setup_distributed(device: str) -> tuple[int, int]:
    """(rank, world size). Without a launcher (no WORLD_SIZE in the environment) sets the
    variables of a one-process group; on CPU selects DeepSpeed's CPU accelerator and opens a
    gloo group, which DeepSpeed and accelerate reuse."""
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


def _device(cfg: FinetuneConfig) -> str:
    import torch

    if cfg.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device={cfg.device!r}: no CUDA GPU is available")
    return "cuda" if cfg.device.startswith("cuda") else cfg.device


def _precision(cfg: FinetuneConfig, device: str) -> str:
    import torch

    if cfg.dtype != "auto":
        return cfg.dtype
    return "bfloat16" if device == "cuda" and torch.cuda.is_bf16_supported() else "float32"


# ------------------------------------------------------------------ model and LoRA
def linear_module_names(model: Any) -> list[str]:
    """Sorted last-name parts of the model's linear layers (the names LoRA can target), without
    the output head."""
    import torch

    out = set()
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) or type(mod).__name__ == "Conv1D":
            leaf = name.rsplit(".", 1)[-1]
            if leaf not in ("lm_head", "embed_out", "output"):
                out.add(leaf)
    return sorted(out)


def target_modules(cfg: FinetuneConfig, model: Any) -> list[str] | str:
    """`--lora-target-modules`, else the architecture's default, else PEFT's "all-linear".
    ConfigError naming the model's linear modules when a target does not exist."""
    model_type = getattr(model.config, "model_type", "")
    wanted = cfg.lora_target_modules or list(DEFAULT_TARGET_MODULES.get(model_type, ()))
    if not wanted:
        return "all-linear"
    have = linear_module_names(model)
    missing = [m for m in wanted if m not in have]
    if missing:
        raise ConfigError(f"lora_target_modules: {', '.join(missing)} not in {cfg.model} ({model_type}); "
                          f"its linear modules are {', '.join(have)}")
    return list(wanted)


def base_model(cfg: FinetuneConfig) -> tuple[Path, str]:
    """(folder, revision) of `cfg.model`, checked to be a causal LM, without loading weights.

    The revision identifies the weights as the probes record them (`LoadedModel.revision`:
    `local-sha256:<hex>` for a local folder, the alias's or hub commit's otherwise). A PEFT adapter,
    a masked LM (BERT-style, two-way attention) or a model without a causal-LM head is refused as
    the probes refuse it (ConfigError)."""
    from transformers import AutoConfig

    from ..lm.hub import _resolve, is_adapter_folder
    from ..lm.loading import _folder_revision, detect_kind

    res = _resolve(cfg.model)
    if is_adapter_folder(res.path):
        raise ConfigError(f"model={cfg.model!r} is a PEFT adapter folder; fine-tune its base model instead")
    try:
        config = AutoConfig.from_pretrained(res.path, local_files_only=True)
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot read the config of {cfg.model} at {res.path}: {str(e).splitlines()[0]}") from None
    kind = detect_kind(config)
    if kind == "causal" and not _has_causal_head(config):
        kind = f"{getattr(config, 'model_type', '?')} model without a causal-LM head, not a causal"
    if kind != "causal":
        raise ConfigError(f"model {cfg.model} is a {kind} LM; finetune accepts causal LMs only")
    return res.path, res.revision or _folder_revision(res.path)


def _has_causal_head(config: Any) -> bool:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    return "AutoModelForCausalLM" in (getattr(config, "auto_map", None) or {}) or type(config) in MODEL_FOR_CAUSAL_LM_MAPPING


def load_base(cfg: FinetuneConfig, folder: Path | None = None) -> tuple[Any, Any, Path]:
    """(model in float32, tokenizer, folder) of `cfg.model` (alias, folder or hub id; `folder`:
    already resolved by `base_model`). A model that does not behave causally (its logits at a
    position change when a later token changes: a BERT saved as `BertLMHeadModel` without
    `is_decoder`) is refused with one ConfigError line (`factprobe.lm.causality.check_causal`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..lm.causality import check_causal

    if folder is None:
        folder, _ = base_model(cfg)
    try:
        tok = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot load {cfg.model} from {folder} for training: {str(e).splitlines()[0]}") from None
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    check_causal(model, cfg.model, tok)  # a two-way-attention model named a causal LM is refused (issue 28)
    return model, tok, folder


def wrap_lora(cfg: FinetuneConfig, model: Any) -> Any:
    """`model` with a fresh LoRA adapter (rank, alpha, dropout, targets of `cfg`)."""
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=target_modules(cfg, model), task_type="CAUSAL_LM",
                      fan_in_fan_out=getattr(model.config, "model_type", "") == "gpt2")
    return get_peft_model(model, lora)


def count_params(model: Any) -> tuple[int, int]:
    """(trainable, total) parameter counts (ZeRO-3 partitioned parameters by their full size)."""
    trainable = total = 0
    for p in model.parameters():
        n = getattr(p, "ds_numel", None) or p.numel()
        total += n
        trainable += n if p.requires_grad else 0
    return trainable, total


# ------------------------------------------------------------------ checkpoints and resume
def checkpoint_step(path: Path) -> int | None:
    """N of a `checkpoint-N` folder, else None."""
    m = _CHECKPOINT_RE.match(path.name)
    return int(m.group(1)) if m and path.is_dir() else None


def is_complete(ckpt: Path) -> bool:
    """A checkpoint is complete when its `finetune_config.json` exists: written (atomically) after
    every file of the Trainer and DeepSpeed, by the `on_save` callback. Older versions wrote it last
    too; a folder without it (or without the Trainer's state) is torn."""
    return (ckpt / CONFIG_FILE).is_file() and (ckpt / TRAINER_STATE).is_file()


def list_checkpoints(ckdir: Path) -> list[tuple[int, Path, bool]]:
    """(step, folder, complete?) of every `checkpoint-N` in `ckdir`, oldest first."""
    if not ckdir.is_dir():
        return []
    found = [(checkpoint_step(p), p) for p in ckdir.iterdir()]
    return sorted((n, p, is_complete(p)) for n, p in found if n is not None)


def prune_checkpoints(ckdir: Path, keep: int | None, current: Path | None = None) -> None:
    """Delete torn checkpoints (except `current`) and, with `keep`, all but the newest `keep`
    complete ones. A complete checkpoint is never deleted in favour of a torn one."""
    found = list_checkpoints(ckdir)
    complete = [p for _, p, ok in found if ok]
    drop = [p for _, p, ok in found if not ok and p != current]
    if keep is not None and len(complete) > keep:
        drop += complete[:-keep]
    for p in drop:
        shutil.rmtree(p, ignore_errors=True)


def check_resume(cfg: FinetuneConfig, out: Path, digest: str, revision: str | None = None,
                 rank: int = 0) -> Path | None:
    """The checkpoint to resume from (None: start fresh): the newest COMPLETE one; torn ones (a
    crash or full disk mid-save) are skipped with a note and deleted (by rank 0). Refuses a
    checkpoint made with another model or configuration (or training set), naming both, and one
    made on other base weights than `revision` (the weights at the model path changed)."""
    ckdir = out / CHECKPOINTS
    found = list_checkpoints(ckdir)
    if not found:
        return None
    if not cfg.resume:
        if rank == 0:
            shutil.rmtree(ckdir)
        return None
    complete = [p for _, p, ok in found if ok]
    last = complete[-1] if complete else None
    for _, p, ok in found:
        if not ok and rank == 0:
            _note(f"skipping the torn checkpoint {p} (a crash or a full disk while it was written; deleted); "
                  + (f"resuming from {last.name}" if last else "no complete checkpoint: training starts over"))
            shutil.rmtree(p, ignore_errors=True)
    if last is None:
        return None
    saved = json.loads((last / CONFIG_FILE).read_text(encoding="utf-8"))
    # finetune_config.json stores credentials inside URLs masked (issue 18): compare both sides masked
    old, new = redact_values(saved.get("fingerprint", {})), redact_values({**cfg.fingerprint(), "train_set_digest": digest})
    old = {**old, "train_set_digest": saved.get("train_set_digest")}
    diff = {k: (old.get(k), new.get(k)) for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)}
    if diff:
        what = "; ".join(f"{k}: checkpoint {a!r}, this run {b!r}" for k, (a, b) in diff.items())
        raise ConfigError(f"{last} was made by model {old.get('model')!r} with another configuration than this run "
                          f"(model {cfg.model!r}): {what}; refusing to resume (use another --out, or --no-resume "
                          "to delete the checkpoints and start over)")
    if revision is not None:
        check_base_revision(cfg, last, revision, rank)
    return last


def check_base_revision(cfg: FinetuneConfig, ckpt: Path, revision: str, rank: int = 0) -> None:
    """Refuse to resume `ckpt` when it was trained on other base weights than `revision` (the
    files at the model path changed), naming both revisions. A checkpoint of an older version that
    did not record the revision is resumed with a note."""
    had = json.loads((ckpt / CONFIG_FILE).read_text(encoding="utf-8")).get("model_revision")
    if had is not None and had != revision:
        raise ConfigError(f"{ckpt}: the base weights of {cfg.model!r} changed since this checkpoint was written "
                          f"(checkpoint {had}, this run {revision}); refusing to resume an adapter on two different "
                          "bases (restore the weights, use another --out, or --no-resume to start over)")
    if had is None and rank == 0:
        _note(f"{ckpt} was written by an older factprobe that did not record the base weights' revision; "
              "resuming without that check")


# ------------------------------------------------------------------ outputs
def loss_history(log_history: Sequence[dict]) -> list[dict]:
    """[{step, loss, learning_rate, grad_norm}] of the trainer's log entries that carry a loss."""
    out = []
    for e in log_history:
        if "loss" in e and "step" in e:
            out.append({"step": int(e["step"]), "loss": finite_or_none(e["loss"]),
                        "learning_rate": finite_or_none(e.get("learning_rate")),
                        "grad_norm": finite_or_none(e.get("grad_norm"))})
    return out


def finite_or_none(x: Any) -> float | None:
    """`float(x)` when it is a finite number, else None (so a NaN is never written as a number)."""
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def plot_loss(history: Sequence[dict], path: Path, title: str) -> None:
    """The loss curve as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([h["step"] for h in history], [h["loss"] if h["loss"] is not None else float("nan") for h in history],
            marker="o", ms=3)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss (answer tokens)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _peak_memory(device: str) -> tuple[int, str]:
    if device == "cuda":
        import torch

        return int(torch.cuda.max_memory_allocated()), "cuda_max_allocated"
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024, "cpu_max_rss"


def _fix_adapter_base(adapter: Path, base: str) -> None:
    """Name the base model as the user did (an alias resolves on any machine)."""
    p = adapter / "adapter_config.json"
    d = json.loads(p.read_text(encoding="utf-8"))
    d["base_model_name_or_path"] = base if not Path(base).exists() else str(Path(base).resolve())
    p.write_text(json.dumps(d, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _dir_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def default_out(cfg: FinetuneConfig) -> Path:
    slug = Path(cfg.model).name if Path(cfg.model).exists() else cfg.model.replace("/", "_")
    return Path(f"runs/finetune-{slug}-{cfg.train_set}")


# ------------------------------------------------------------------ run
def train_set_for(cfg: FinetuneConfig) -> Any:
    """The `TrainSet` of `cfg`: read from `cfg.train_set_dir` (its kind must be `cfg.train_set`),
    else built by `factprobe.finetune.sets.build_train_set` from the config's data options."""
    from .sets import TrainSet, build_train_set

    if cfg.train_set_dir:
        ts = TrainSet.load(cfg.train_set_dir)
        if ts.kind != cfg.train_set:
            raise ConfigError(f"train_set_dir={cfg.train_set_dir!r} holds a {ts.kind!r} training set, "
                              f"but --train-set is {cfg.train_set!r}")
        return ts
    return build_train_set(cfg.train_set, model=cfg.model, source=cfg.source, data=cfg.data,
                           train_data=cfg.train_data, relations=cfg.relations, seed=cfg.seed,
                           qa_train_per_relation=cfg.qa_train_per_relation, qa_templates=cfg.qa_templates,
                           size=cfg.train_size, known_unknown=cfg.known_unknown)


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
    random_weights: bool  # the base is a tiny RANDOM test model (`factprobe.lm.testing`)
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
    device = _device(cfg)
    precision = _precision(cfg, device)
    ds_config, ds_path = load_deepspeed_config(cfg.zero_stage, cfg.deepspeed_config,
                                               offload_optimizer=cfg.offload_optimizer, offload_param=cfg.offload_param,
                                               pin_memory=device == "cuda")
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
        raise ConfigError(f"the {train_set.kind} training set has {len(train_set)} examples in {len(rows)} sequences, "
                          f"fewer than one effective batch of {per_step} (batch_size {cfg.batch_size} x grad_accum "
                          f"{accum} x {world} process(es)); lower --effective-batch / --grad-accum / --batch-size or "
                          "raise --train-size")
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    if cfg.use_lora:
        from transformers import set_seed

        set_seed(cfg.seed)  # the LoRA A matrices are random: same seed, same adapter, in any process
        model = wrap_lora(cfg, model)
    trainable, total = count_params(model)
    use_cache = no_kv_cache(model)  # packed examples are isolated only without a KV cache (data.py)

    saved_config = {"config": redact_values(cfg.to_dict()), "fingerprint": redact_values(cfg.fingerprint()),
                    "train_set_digest": digest,
                    "train_set": train_set.kind, "base_folder": str(folder), "model_revision": revision,
                    "deepspeed_config": str(ds_path)}
    return TrainPlan(cfg=cfg, out=out, target=out / ("adapter" if cfg.use_lora else "model"), device=device,
                     precision=precision, ds_config=ds_config, ds_path=ds_path, rank=rank, world=world, accum=accum,
                     per_step=per_step, resume_from=resume_from, train_set=train_set, model=model, tok=tok,
                     seqs=seqs, rows=rows, trainable=trainable, total=total, use_cache=use_cache,
                     random_weights=random_weights, saved_config=saved_config)


def run_finetune(cfg: FinetuneConfig, *, progress: bool = True, callbacks: Sequence[Any] = (),
                 train_set: Any = None) -> dict[str, Any]:
    """Fine-tune `cfg.model` on `cfg.train_set` and write `cfg.out` (see the module docstring).

    `callbacks` are extra `transformers.TrainerCallback`s; `train_set` (a
    `factprobe.finetune.sets.TrainSet`) replaces the built one (tests). Returns the metrics
    dict. Raises ConfigError / DataError / ModelError for bad input (module docstring of
    `factprobe.finetune`), `TrainingDivergedError` naming the step when a loss, gradient norm or
    weight becomes non-finite, `TrainingDidNotLearnError` when no trainable weight moved, and `DiskFullError` naming the path when the disk fills up. Whenever
    it raises, no `adapter/`, `model/` or `metrics.json` of this run is left in `cfg.out`, and every
    checkpoint it leaves is complete and holds finite weights."""
    plan = plan_training(cfg, train_set)
    out, target = plan.out, plan.target
    try:
        if plan.rank == 0:
            with _disk_full_names(out):
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


# ------------------------------------------------------------------ trust: divergence and full disks
def _is_disk_full(err: BaseException) -> bool:
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
def _disk_full_names(path: Path) -> Iterator[None]:
    """Turn a full disk into one `DiskFullError` line naming the file (when known) or `path`."""
    try:
        yield
    except (DiskFullError, TrainingDivergedError):
        raise
    except Exception as e:
        if not _is_disk_full(e):
            raise
        where = getattr(e, "filename", None) or path
        raise DiskFullError(f"no space left on the device while writing {where}; free space (or use another --out) "
                            "and rerun: training resumes from the last complete checkpoint") from None


def _all_ranks(ok: bool, device: Any) -> bool:
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


def _weights_finite(model: Any) -> bool:
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
    return _all_ranks(ok, dev or "cpu")


def _diverged(cfg: FinetuneConfig, step: int, what: str) -> TrainingDivergedError:
    return TrainingDivergedError(
        f"training diverged at step {step} of {cfg.max_steps}: {what} (learning rate {cfg.learning_rate:g}); no "
        "adapter, model or metrics of this run are kept; lower --learning-rate and rerun with --no-resume")


def _carried_tokens(resume_from: Path | None) -> tuple[int, int] | None:
    """(real, fed) tokens trained before `resume_from` (its stamp); (0, 0) for a fresh run; None
    when a checkpoint of an older version did not record them."""
    if resume_from is None:
        return 0, 0
    t = json.loads((resume_from / CONFIG_FILE).read_text(encoding="utf-8")).get("tokens")
    return (int(t["real"]), int(t["fed"])) if isinstance(t, dict) else None


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
            not torch.equal(t.to("cpu") if self.exact else _checksum(t), s) for t, s in zip(tensors, self.saved))
        device = tensors[0].device if tensors else "cpu"
        return not _all_ranks(not here, device)


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
        raise _did_not_learn(self.cfg, self.start_step, int(state.global_step), self.start.count,
                             [e.get("grad_norm") for e in state.log_history if "loss" in e
                              and int(e.get("step", 0)) > self.start_step])


def _did_not_learn(cfg: FinetuneConfig, first: int, last: int, count: int, norms: Sequence[Any]) -> TrainingDidNotLearnError:
    """The one-line refusal of a run whose `count` trainable parameters did not move in steps
    `first`+1 .. `last`; `norms`: the gradient norms logged in those steps (None: not logged)."""
    known = [float(n) for n in norms if n is not None]
    norm = (f"; gradient norm {known[-1]:.3g} at the last logged step" if known else "; no gradient norm was logged")
    knobs = "--learning-rate" + (" and --lora-alpha" if cfg.use_lora else "")
    what = "adapter" if cfg.use_lora else "model"
    return TrainingDidNotLearnError(
        f"training did not learn: after {last - first} optimizer step(s) (to step {last} of {cfg.max_steps}) none of "
        f"the {count:,} trainable parameters moved from its value at step {first}, so the {what} would be the base model "
        f"itself{norm} (learning rate {cfg.learning_rate:g}"
        + (f", LoRA alpha {cfg.alpha:g}" if cfg.use_lora else "") + f"); no adapter, model or metrics of this run are "
        f"kept; check {knobs} and rerun with --no-resume")


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
        if not callable(stage) or stage() != 0 or take_step is None \
                or not isinstance(getattr(engine, "optimizer", None), torch.optim.Optimizer):
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


def _guarded_trainer(cfg: FinetuneConfig, check_grad_norm: bool) -> type:
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
            if not _all_ranks(bool(loss.isfinite().all()), loss.device):
                raise _diverged(cfg, self.state.global_step + 1, f"the loss is {loss.float().mean().item()}")
            return loss

        def _get_grad_norm(self, *args: Any, **kwargs: Any) -> Any:
            norm = super()._get_grad_norm(*args, **kwargs)
            if norm is None and self._engine_norm is not None:
                norm = self._engine_norm.take()
            if check_grad_norm and norm is not None and not math.isfinite(float(norm)):
                raise _diverged(cfg, self.state.global_step + 1, f"the gradient norm is {float(norm)}")
            return norm

    return GuardedTrainer


def _train(plan: TrainPlan, *, progress: bool, callbacks: Sequence[Any]) -> dict[str, Any]:
    """The training part of `run_finetune`: trains `plan` (already checked, its files written) and
    writes the model or adapter, `trainer_state.json`, `loss_history.json`, `loss.png` and, last,
    `metrics.json`. Returns the metrics."""
    from transformers import PrinterCallback, TrainerCallback, TrainingArguments

    from ..lm import without_library_lines
    from .data import Collator, RowDataset

    cfg, out, accum, device, precision, tok = plan.cfg, plan.out, plan.accum, plan.device, plan.precision, plan.tok
    model, train_set, resume_from, saved_config, target = (plan.model, plan.train_set, plan.resume_from,
                                                           plan.saved_config, plan.target)
    digest = plan.digest
    start_step = plan.start_step
    carried = _carried_tokens(resume_from)
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
            if model is not None and not _weights_finite(model):
                if state.is_world_process_zero:
                    shutil.rmtree(ck, ignore_errors=True)
                raise _diverged(cfg, state.global_step, "a weight is not finite")
            if state.is_world_process_zero and ck.is_dir():
                tokens = run_tokens(state.global_step)
                atomic_write_json(ck / CONFIG_FILE, {**saved_config, "step": state.global_step,
                                                     "tokens": {"real": tokens[0], "fed": tokens[1]} if tokens else None})
                prune_checkpoints(Path(args.output_dir), cfg.save_total_limit, current=ck)

    try:
        args = TrainingArguments(
            output_dir=str(out / CHECKPOINTS), per_device_train_batch_size=cfg.batch_size,
            gradient_accumulation_steps=accum, max_steps=cfg.max_steps, learning_rate=cfg.learning_rate,
            lr_scheduler_type=cfg.lr_scheduler, warmup_steps=round(cfg.warmup_ratio * cfg.max_steps),
            weight_decay=cfg.weight_decay, optim="adamw_torch", logging_steps=cfg.logging_steps,
            save_strategy="steps", save_steps=cfg.save_steps, save_total_limit=None,  # rotation: Stamp
            report_to="none", deepspeed=plan.ds_config, use_cpu=device == "cpu",
            ddp_backend="gloo" if device == "cpu" else None, seed=cfg.seed, data_seed=cfg.seed,
            bf16=precision == "bfloat16", fp16=precision == "float16", remove_unused_columns=False,
            dataloader_num_workers=0, disable_tqdm=not progress, max_grad_norm=1.0, logging_nan_inf_filter=False)
        timer = _timer()
        trainer = _guarded_trainer(cfg, precision != "float16")(
            model=model, args=args, train_dataset=RowDataset(plan.rows), data_collator=collator,
            callbacks=[Stamp(), timer, *callbacks])
        trainer.remove_callback(PrinterCallback)  # without a progress bar it printed each raw log dict
        t0 = time.perf_counter()
        with _disk_full_names(out / CHECKPOINTS), without_library_lines():  # no DeepSpeed op-build line
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
    if not _weights_finite(trainer.model):
        raise _diverged(cfg, steps, "a weight is not finite after the last step")
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
        "peak_memory_bytes": peak, "peak_memory_kind": peak_kind,
        # over the whole run, steps before a resume included (None: resumed from an older checkpoint)
        "non_padding_fraction": whole[0] / whole[1] if whole and whole[1] else None,
        "tokens_trained": whole[0] if whole else None,
        "steps": steps, "max_steps": cfg.max_steps,
        "resumed_from": str(resume_from) if resume_from else None,
        "train_seconds": seconds, "setup_seconds": total_seconds - seconds, "tokens_trained_this_session": session_real,
        "n_examples": len(train_set), "n_sequences": len(plan.rows),
        "examples_per_sequence": len(plan.seqs) / len(plan.rows),
        "packing": cfg.packing, "batch_size": cfg.batch_size, "grad_accum": accum, "world_size": plan.world,
        "effective_batch": plan.per_step, "zero_stage": cfg.zero_stage,
        "deepspeed_zero_stage": (trainer.model_wrapped.zero_optimization_stage()
                                 if hasattr(trainer.model_wrapped, "zero_optimization_stage") else None),
        # where the running engine keeps optimizer state and parameters ("none" | "cpu" | "nvme"; None without DeepSpeed)
        "deepspeed_offload_optimizer": _offload_device(trainer.model_wrapped, "zero_offload_optimizer"),
        "deepspeed_offload_param": _offload_device(trainer.model_wrapped, "zero_offload_param"),
        "device": device, "precision": precision,
        "lora": cfg.use_lora, "lora_r": cfg.lora_r if cfg.use_lora else 0,
        "trainable_params": plan.trainable, "total_params": plan.total,
        "trainable_fraction": plan.trainable / plan.total if plan.total else None,
        "train_set": train_set.kind, "train_set_digest": digest, "train_set_info": train_set.info,
        "model": cfg.model, "model_revision": saved_config["model_revision"], "random_weights": plan.random_weights,
    }
    partial = _partial(target)
    model.config.use_cache = plan.use_cache
    with _disk_full_names(target):
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
                plot_loss(history, out / "loss.png", f"{cfg.model} {train_set.kind} "
                          f"({'LoRA r=' + str(cfg.lora_r) if cfg.use_lora else 'full'}, ZeRO-{cfg.zero_stage})")
            atomic_write_json(out / "metrics.json", metrics)  # last: its presence means a finished run
    return metrics


def _offload_device(engine, getter: str) -> str | None:
    """The offload device the DeepSpeed `engine` really uses for `getter` (`zero_offload_optimizer` or
    `zero_offload_param`): "none", "cpu" or "nvme"; None when training ran without a DeepSpeed engine."""
    if not hasattr(engine, getter):
        return None
    conf = getattr(engine, getter)()
    device = getattr(conf, "device", None)
    return "none" if device is None else str(getattr(device, "value", device))
