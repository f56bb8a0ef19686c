"""The model a fine-tuning run trains: the base checked to be a causal LM, loaded in float32, and
wrapped with a fresh LoRA adapter (`factprobe.finetune.trainer.plan_training` calls these).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ConfigError, ModelError
from .config import DEFAULT_TARGET_MODULES, FinetuneConfig


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
        raise ConfigError(
            f"lora_target_modules: {', '.join(missing)} not in {cfg.model} ({model_type}); "
            f"its linear modules are {', '.join(have)}"
        )
    return list(wanted)


def base_model(cfg: FinetuneConfig) -> tuple[Path, str]:
    """(folder, revision) of `cfg.model`, checked to be a causal LM, without loading weights.

    The revision identifies the weights as the probes record them (`LoadedModel.revision`:
    `local-sha256:<hex>` over a local folder's bytes, whatever a `factprobe_complete.json` in it
    claims; the alias's only for bytes proven to be its conversion's; the hub commit's). A PEFT adapter,
    a masked LM (BERT-style, two-way attention) or a model without a causal-LM head is refused as
    the probes refuse it (ConfigError)."""
    from transformers import AutoConfig

    from ..models.hub import _resolve, is_adapter_folder
    from ..models.loading import _folder_revision, detect_kind

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

    lora = LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=target_modules(cfg, model),
        task_type="CAUSAL_LM",
        fan_in_fan_out=getattr(model.config, "model_type", "") == "gpt2",
    )
    return get_peft_model(model, lora)


def count_params(model: Any) -> tuple[int, int]:
    """(trainable, total) parameter counts (ZeRO-3 partitioned parameters by their full size)."""
    trainable = total = 0
    for p in model.parameters():
        n = getattr(p, "ds_numel", None) or p.numel()
        total += n
        trainable += n if p.requires_grad else 0
    return trainable, total
