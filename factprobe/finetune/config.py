"""`FinetuneConfig`: one validated fine-tuning run (yuan2024 section 5, appendix B.2).

The fields follow the project's config pattern (`factprobe.config.ConfigBase`, `option`):
each one carries its help text, which generates the `factprobe finetune` options and the
Kubeflow parameters; `to_dict()` / `from_dict()` pass a run as one flat JSON-able dict (strings
from a command line or Kubeflow are coerced). Validation raises `ConfigError` naming the field;
options that conflict or would be silently ignored are refused: `--full` with another `--lora-r`,
a LoRA option (`--lora-alpha`, `--lora-target-modules`) without LoRA, `--known-unknown` with a set
that does not use it, a `--device` other than auto, cpu or cuda. Floats are finite and the seed is
in [0, 2**32) (`ConfigBase`).

Defaults are the paper's (B.2): AdamW, learning rate 1e-4, cosine schedule, effective batch 512
(through gradient accumulation), sequence length 256, 40 steps, and full-parameter training as
yuan2024 does (`lora_r` 0; `--full` says the same), like the `finetune_known_unknown` pipeline.
LoRA is a flag: `--lora-r 16` trains a rank-16 adapter instead, to save memory and time on small
machines, at the cost of no longer being the paper's setting. Batches count *sequences* of at
most `max_seq_len` tokens: one example each without `--packing`, several short examples each with
it (so with packing one optimizer step sees more examples than the paper's 512).

The data options are those of the `qa` probe (`--source --data --train-data --relations --seed
--qa-train-per-relation --qa-templates`): the training sets are drawn from the train split that
`factprobe probe qa` builds from the same options, and a known/unknown table is only usable when
it was made with them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields
from typing import Any

from ..config import DECIDES_RESULTS, ConfigBase, option, split_relations
from ..sources import SOURCES

TRAIN_SETS = ("known", "unknown", "mixed", "counterfactual", "regular")
#: the sets drawn from the base model's known/unknown table
NEEDS_TABLE = ("known", "unknown", "mixed")
ZERO_STAGES = (0, 1, 2, 3)
#: `--device` values (a GPU index would be ignored: each process takes its LOCAL_RANK GPU)
DEVICES = ("auto", "cpu", "cuda")
#: the default: full-parameter training, yuan2024's setting (section 5); `--lora-r N` > 0 is LoRA
LORA_R_DEFAULT = 0

#: default LoRA target modules per `config.model_type` (every linear layer of attention and MLP, as
#: QLoRA/PEFT recommend); other architectures: `--lora-target-modules` or PEFT's "all-linear"
DEFAULT_TARGET_MODULES: dict[str, tuple[str, ...]] = {
    "llama": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
    "gemma3_text": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
    "gemma3": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
    "gemma2": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
    "gemma": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
    "mistral": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
    "qwen2": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
    "gpt2": ("c_attn", "c_proj", "c_fc"),
}


def target_modules_help() -> str:
    """One line per architecture: its default LoRA target modules (for `--help`)."""
    return "; ".join(f"{arch}: {','.join(mods)}" for arch, mods in DEFAULT_TARGET_MODULES.items())


@dataclass
class FinetuneConfig(ConfigBase):
    """One fine-tuning run: model, training set, data, optimisation, LoRA, DeepSpeed, outputs."""

    # ---- model and training set
    model: str = option("smollm2-135m-instruct", "base model: alias, local Hugging Face folder or hub id")
    train_set: str = option(
        "regular",
        "training set: known | unknown | mixed (the base model's known/unknown table, "
        "train split), counterfactual (the regular set with answers shuffled within "
        "each relation) or regular (the train split)",
        choices=TRAIN_SETS,
    )
    known_unknown: str | None = option(
        None,
        "the base model's known/unknown table (known_unknown.parquet, its folder, "
        "or runs:/<MLflow run id>); needed by known, unknown and mixed",
    )
    train_set_dir: str | None = option(
        None,
        "train on this saved training set (a folder with train_set.jsonl and "
        "train_set.json, as `build_train_set(...).save(folder)` or an earlier run "
        "writes it) instead of building one; its kind must be --train-set",
        decides_results=False,
    )
    train_size: int | None = option(
        None,
        "examples in the training set, sampled with --seed (default: known/unknown/"
        "mixed: the most all three can share, min(#known, #unknown); regular/"
        "counterfactual: the whole train split)",
    )
    # ---- data (as the qa probe)
    source: str = option("countryinfo", "fact source", choices=SOURCES)
    data: str | None = option(
        None, "test facts: lama folder, Nobel CSV, triples file or s3://bucket/prefix (default: the source's)"
    )
    train_data: str | None = option(None, "folder of P*.jsonl training facts (default: split the test facts)")
    relations: list[str] | None = option(None, "comma-separated relation ids, e.g. P36,P19 (default: every usable relation)")
    qa_train_per_relation: int | None = option(
        50, "train-split facts per relation (as the qa probe that made the known/unknown table); empty: all"
    )
    qa_templates: str | None = option(None, "question templates file (default: factprobe/datasets/data/qa_templates.tsv)")
    seed: int = option(0, "seed of the data splits, the training-set sample, the shuffle and training")
    # ---- optimisation (paper defaults, appendix B.2)
    max_steps: int = option(40, "optimizer steps")
    learning_rate: float = option(1e-4, "peak learning rate of AdamW")
    lr_scheduler: str = option(
        "cosine",
        "learning-rate schedule (a transformers SchedulerType)",
        choices=("cosine", "linear", "constant", "constant_with_warmup", "cosine_with_restarts"),
    )
    warmup_ratio: float = option(0.0, "share of max_steps spent warming up")
    weight_decay: float = option(0.0, "AdamW weight decay")
    max_seq_len: int = option(256, "tokens per sequence; longer examples are refused")
    packing: bool = option(
        False,
        "pack several examples into each sequence of --max-seq-len (they never attend to "
        "each other: position ids restart and the attention mask is block-diagonal)",
    )
    batch_size: int = option(8, "sequences per device per micro-batch")
    grad_accum: int | None = option(
        None, "micro-batches per optimizer step (default: effective_batch / (batch_size x devices), rounded up)"
    )
    effective_batch: int = option(512, "sequences per optimizer step over all devices (ignored when --grad-accum is given)")
    # ---- LoRA / full
    lora_r: int = option(LORA_R_DEFAULT, "LoRA rank; 0 trains every parameter (same as --full)")
    full: bool = option(
        False,
        "full-parameter training (yuan2024's setting and the default; --lora-r N > 0 trains a "
        "LoRA adapter instead, cheaper but not the paper's setting)",
    )
    lora_alpha: int | None = option(None, "LoRA alpha (default: 2 x rank)")
    lora_dropout: float = option(0.05, "LoRA dropout")
    lora_target_modules: list[str] | None = option(
        None,
        "comma-separated module names to adapt (default per "
        "architecture, listed by --help: llama/gemma/qwen2/mistral "
        "q,k,v,o,gate,up,down_proj; gpt2 c_attn,c_proj,c_fc; others "
        "all-linear)",
    )
    # ---- DeepSpeed
    zero_stage: int = option(2, "DeepSpeed ZeRO stage: the packaged deepspeed_configs/zero<N>.json", choices=ZERO_STAGES)
    deepspeed_config: str | None = option(
        None,
        "DeepSpeed config JSON (default: the packaged deepspeed_configs/zero<stage>.json); "
        'batch, accumulation, optimizer and precision values may be "auto"',
    )
    offload_optimizer: bool = option(False, "ZeRO-Offload: optimizer states in CPU memory (stages 1-3)")
    offload_param: bool = option(False, "ZeRO-Infinity: parameters in CPU memory (stage 3)")
    gradient_checkpointing: bool = option(False, "recompute activations in the backward pass (less memory)")
    # ---- run
    save_steps: int = option(10, "checkpoint every N optimizer steps into <out>/checkpoints", decides_results=False)
    save_total_limit: int | None = option(2, "checkpoints kept (oldest deleted); empty: all", decides_results=False)
    logging_steps: int = option(1, "log the loss every N steps", decides_results=False)
    resume: bool = option(True, "resume from the last checkpoint in --out when there is one", decides_results=False)
    device: str = option(
        "auto",
        "auto | cpu | cuda (under a launcher each process takes its LOCAL_RANK GPU; pick GPUs with CUDA_VISIBLE_DEVICES)",
        choices=DEVICES,
        decides_results=False,
    )
    dtype: str = option(
        "auto",
        "training dtype: auto (bfloat16 on a GPU that has it, else float32) | float32 | bfloat16 | float16",
        choices=("auto", "float32", "bfloat16", "float16"),
    )
    out: str | None = option(
        None,
        "output folder, e.g. on a PersistentVolumeClaim (default runs/finetune-<model>-<set>)",
        decides_results=False,
        pipeline=False,
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check(bool(self.model and self.model.strip()), "model", self.model, "must not be empty")
        self.relations = split_relations(self.relations)
        if isinstance(self.lora_target_modules, str):
            mods = [m.strip() for m in self.lora_target_modules.split(",") if m.strip()]
            self.lora_target_modules = mods or None
        self.check(
            not (self.source in ("triples", "s3") and not self.data), "data", self.data, f"source {self.source} needs --data"
        )
        for name in ("max_steps", "max_seq_len", "batch_size", "effective_batch", "save_steps", "logging_steps"):
            self.check(getattr(self, name) >= 1, name, getattr(self, name), "must be >= 1")
        for name in ("train_size", "grad_accum", "qa_train_per_relation", "save_total_limit"):
            value = getattr(self, name)
            self.check(value is None or value >= 1, name, value, "must be >= 1 (or empty)")
        self.check(self.learning_rate > 0, "learning_rate", self.learning_rate, "must be > 0")  # finite: ConfigBase
        self.check(0 <= self.warmup_ratio < 1, "warmup_ratio", self.warmup_ratio, "must be in [0, 1)")
        self.check(self.weight_decay >= 0, "weight_decay", self.weight_decay, "must be >= 0")
        self.check(self.lora_r >= 0, "lora_r", self.lora_r, "must be >= 0 (0: full-parameter training)")
        self.check(0 <= self.lora_dropout < 1, "lora_dropout", self.lora_dropout, "must be in [0, 1)")
        self.check(self.lora_alpha is None or self.lora_alpha > 0, "lora_alpha", self.lora_alpha, "must be > 0")
        # options that would be silently ignored are refused
        self.check(
            not (self.full and self.lora_r > 0),
            "full",
            self.full,
            f"--full trains every parameter; --lora-r {self.lora_r} would be ignored (give one of them)",
        )
        if not self.use_lora:
            why = "--full" if self.full else "--lora-r 0"
            for name in ("lora_alpha", "lora_target_modules"):
                self.check(
                    getattr(self, name) is None,
                    name,
                    getattr(self, name),
                    f"a LoRA option, but {why} trains every parameter without LoRA",
                )
        self.check(
            self.known_unknown is None or self.train_set in NEEDS_TABLE,
            "known_unknown",
            self.known_unknown,
            f"only the {', '.join(NEEDS_TABLE)} sets use the known/unknown table, not {self.train_set}",
        )
        self.check(
            not (self.offload_param and self.zero_stage != 3),
            "offload_param",
            self.offload_param,
            f"parameter offload needs --zero-stage 3 (got {self.zero_stage})",
        )
        self.check(
            not (self.offload_optimizer and self.zero_stage == 0),
            "offload_optimizer",
            self.offload_optimizer,
            "optimizer offload needs --zero-stage 1, 2 or 3",
        )

    # ------------------------------------------------------------------ derived
    @property
    def use_lora(self) -> bool:
        """False for full-parameter training (`--full` or `--lora-r 0`)."""
        return not self.full and self.lora_r > 0

    @property
    def alpha(self) -> int:
        """LoRA alpha: `lora_alpha`, else 2 x rank."""
        return self.lora_alpha if self.lora_alpha is not None else 2 * self.lora_r

    def grad_accum_for(self, world_size: int) -> int:
        """Micro-batches per optimizer step on `world_size` processes (`grad_accum`, else
        ceil(effective_batch / (batch_size x world_size)))."""
        if self.grad_accum is not None:
            return self.grad_accum
        per_step = self.batch_size * max(1, world_size)
        return max(1, -(-self.effective_batch // per_step))

    def fingerprint(self) -> dict[str, Any]:
        """The fields that decide the trained weights (not device, checkpointing or `out`): a resume
        is refused when they differ from the checkpoint's."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.metadata.get(DECIDES_RESULTS, True)}

    def fingerprint_digest(self) -> str:
        return hashlib.sha256(json.dumps(self.fingerprint(), sort_keys=True).encode()).hexdigest()[:16]
