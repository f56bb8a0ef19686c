"""`factprobe finetune`: the command line of `run_finetune` (options generated from `FinetuneConfig`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .config import DEFAULT_TARGET_MODULES, FinetuneConfig

_GROUPS = {
    "model and training set": ("model", "train_set", "known_unknown", "train_set_dir", "train_size"),
    "data (as the qa probe)": ("source", "data", "train_data", "relations", "qa_train_per_relation", "qa_templates", "seed"),
    "optimisation (defaults: yuan2024 appendix B.2)": (
        "max_steps",
        "learning_rate",
        "lr_scheduler",
        "warmup_ratio",
        "weight_decay",
        "max_seq_len",
        "packing",
        "batch_size",
        "grad_accum",
        "effective_batch",
    ),
    "LoRA": ("lora_r", "full", "lora_alpha", "lora_dropout", "lora_target_modules"),
    "DeepSpeed": ("zero_stage", "deepspeed_config", "offload_optimizer", "offload_param", "gradient_checkpointing"),
    "run": ("save_steps", "save_total_limit", "logging_steps", "resume", "device", "dtype", "out"),
}

EPILOG = (
    "default LoRA target modules per architecture (config.model_type):\n"
    + "\n".join(f"  {arch:12s} {', '.join(mods)}" for arch, mods in DEFAULT_TARGET_MODULES.items())
    + "\n  (other)      all-linear\n\n"
    "multi-GPU: deepspeed --num_gpus N -m factprobe.cli finetune ...  |  "
    "accelerate launch --use_deepspeed --num_processes N -m factprobe.cli finetune ..."
)


def cmd_finetune(args: argparse.Namespace) -> int:
    from ..config import namespace_to_dict
    from ..config_files import with_config_file
    from ..errors import ConfigError
    from ..signals import sigterm_as_interrupt
    from . import run_finetune
    from .trainer import default_out

    flags = namespace_to_dict(args, (FinetuneConfig,))
    if flags.get("full") and "lora_r" in flags:
        raise ConfigError(f"--full trains every parameter; --lora-r {flags['lora_r']} would be ignored (give one of them)")
    # the flags over --config (a run's own finetune_config.json records every option, LoRA's of a full run too)
    given = with_config_file(args, "finetune", None, FinetuneConfig.field_names(), flags)
    cfg = FinetuneConfig.from_dict(given)
    if not cfg.use_lora and "lora_dropout" in flags:
        raise ConfigError(
            f"lora_dropout={cfg.lora_dropout!r}: a LoRA option, but "
            f"{'--full' if cfg.full else '--lora-r 0'} trains every parameter without LoRA"
        )
    out = Path(cfg.out) if cfg.out else default_out(cfg)
    cfg.out = str(out)
    with sigterm_as_interrupt():
        m = run_finetune(cfg, progress=not args.no_progress)
    resumed = f", resumed from {m['resumed_from']}" if m.get("resumed_from") else ""
    print(
        f"\nfinetune {cfg.model} on {m['train_set']} ({m['n_examples']} examples, digest {m['train_set_digest'][:12]}): "
        f"{m['steps']} steps{resumed}, loss {_fmt(m['first_loss'], '.4f')} -> {_fmt(m['final_loss'], '.4f')}, "
        f"{_fmt(m['tokens_per_second'], '.0f')} tokens/s, non-padding {_fmt(m['non_padding_fraction'], '.1%')}; "
        f"{m.get('output_dir', out)}"
    )
    return 0


def _fmt(value: float | None, spec: str) -> str:
    """`value` formatted with `spec`, or "n/a" when unknown (None)."""
    return "n/a" if value is None else format(value, spec)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `finetune` subcommand to the `factprobe` parser."""
    from ..config import add_config_arguments
    from ..config_files import add_config_option

    p = sub.add_parser(
        "finetune",
        help="fine-tune a model on known/unknown/mixed/counterfactual/regular facts (LoRA or full, DeepSpeed ZeRO 0-3)",
        description="Fine-tune a model on known, unknown, mixed, counterfactual or regular facts "
        "(yuan2024 section 5) with the Hugging Face Trainer under DeepSpeed.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    placed: set[str] = set()
    for title, names in _GROUPS.items():
        skip = tuple(n for n in FinetuneConfig.field_names() if n not in names)
        add_config_arguments(p.add_argument_group(title), FinetuneConfig, skip=skip)
        placed.update(names)
    rest = tuple(n for n in FinetuneConfig.field_names() if n in placed)
    if len(rest) != len(FinetuneConfig.field_names()):
        add_config_arguments(p.add_argument_group("other"), FinetuneConfig, skip=rest)
    for action in p._actions:  # integer choices: argparse compares the raw string unless told the type
        if action.dest == "zero_stage":
            action.type = int
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_config_option(p, "finetune_config.json")
    p.set_defaults(func=cmd_finetune)
