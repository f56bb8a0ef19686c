"""Tiny RANDOM models for unit tests: a real tokenizer, random weights, never a result.

`make_tiny_random_model("gpt2" | "llama" | "bert", path)` builds (once) a 2-layer model folder
whose config says `factprobe_random_weights: true`; `LoadedModel.is_random` is True for it.
"bert" is a masked LM (`BertForMaskedLM`, WordPiece vocabulary with `[MASK]`).
`make_tiny_lora_adapter(base, path)` writes a LoRA adapter folder with NON-ZERO random weights
on one of them, so that adapter loading and scoring can be tested.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import string
import uuid
from pathlib import Path
from typing import Any, Literal

from factprobe.errors import ConfigError
from factprobe.lm._util import versions
from factprobe.models.gguf_cache import CACHE_FORMAT, MARKER_NAME

_TINY_TEXT = [
    "The capital of France is Paris. The capital of Germany is Berlin.",
    "The capital of Italy is Rome. The capital of Spain is Madrid.",
    "The capital of Japan is Tokyo. The capital of Canada is Ottawa.",
    "Albert Einstein was born in Ulm. Marie Curie was born in Warsaw.",
    "The Nobel Prize in Physics was awarded to Niels Bohr in 1922.",
    "Q: What is the capital of Peru? A: Lima. Answer with one of the choices.",
    "0 1 2 3 4 5 6 7 8 9 10 100 1000 1900 2000 2024, ; : ! ? ( ) [ ] ' \" - _",
]
_TINY_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _tiny_wordpiece_tokenizer() -> Any:
    """A small BERT-style WordPiece (lowercased, accents stripped; unknown characters become
    `[UNK]`). The vocabulary is built here, in a fixed order: the tokenizers WordPiece trainer
    orders its `##` pieces differently from run to run."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words = sorted({w for line in _TINY_TEXT for w in re.findall(r"\w+|[^\w\s]", line.lower())})
    chars = sorted({c for w in words for c in w} | set(string.ascii_lowercase + string.digits))
    pieces = specials + chars + [f"##{c}" for c in chars if c.isalnum()]
    pieces += [w for w in words if w not in pieces]
    tk = Tokenizer(models.WordPiece(vocab={t: i for i, t in enumerate(pieces)}, unk_token="[UNK]"))
    tk.normalizer = normalizers.BertNormalizer(lowercase=True)
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tk.decoder = decoders.WordPiece()
    cls_id, sep_id = pieces.index("[CLS]"), pieces.index("[SEP]")
    tk.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]"
    )


def _tiny_tokenizer(kind: str) -> Any:
    """A small byte-level BPE (any text encodes) trained here, without the hub; WordPiece for
    "bert"."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    if kind == "bert":
        return _tiny_wordpiece_tokenizer()
    if kind == "gpt2":
        specials = ["<|endoftext|>"]
    else:
        specials = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512, special_tokens=specials, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tk.train_from_iterator(_TINY_TEXT * 4, trainer)
    if kind == "gpt2":
        tk.post_processor = processors.ByteLevel(trim_offsets=False)
        return PreTrainedTokenizerFast(
            tokenizer_object=tk, bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>"
        )
    bos_id = tk.token_to_id("<s>")
    tk.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos_id)]),
        ]
    )
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="</s>")
    tok.chat_template = _TINY_CHAT_TEMPLATE
    return tok


TinyKind = Literal["gpt2", "llama", "bert"]


def make_tiny_random_model(kind: TinyKind, path: str | os.PathLike[str], *, seed: int = 0) -> Path:
    """Build (once) a TINY model with RANDOM weights and a real tokenizer, for unit tests.

    Creates `<path>/tiny-random-<kind>` (or uses `path` itself when it already ends in that
    name) and returns it. 2 layers, hidden size 32, context 256; weights are deterministic for
    a given `seed`. "gpt2" and "llama" are causal LMs with a byte-level BPE vocabulary of ~450
    tokens (any text encodes): "gpt2" adds no BOS token and has no chat template; "llama"
    prepends `<s>` and has a ChatML-style chat template. "bert" is a masked LM
    (`BertForMaskedLM`) with a lowercasing WordPiece vocabulary of ~140 tokens that wraps text
    in `[CLS] ... [SEP]` and has `[MASK]`, `[PAD]` and `[UNK]`. config.json carries
    `factprobe_random_weights: true` and a `factprobe_name` containing "RANDOM": numbers from
    these models are never results. An existing complete folder is reused.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, BertConfig, GPT2Config, LlamaConfig

    if kind not in ("gpt2", "llama", "bert"):
        raise ConfigError(f"unknown tiny model kind {kind!r}: use 'gpt2', 'llama' or 'bert'")
    folder_name = f"tiny-random-{kind}"
    base = Path(path).expanduser()
    out = base if base.name == folder_name else base / folder_name
    if (out / "config.json").is_file() and (out / MARKER_NAME).is_file():
        return out
    tok = _tiny_tokenizer(kind)
    common = {
        "vocab_size": len(tok),
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
        "tie_word_embeddings": True,
    }
    if kind == "gpt2":
        config = GPT2Config(n_embd=32, n_layer=2, n_head=2, n_positions=256, **common)
    elif kind == "bert":
        config = BertConfig(
            vocab_size=len(tok),
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=256,
            pad_token_id=tok.pad_token_id,
            tie_word_embeddings=True,
        )
    else:
        config = LlamaConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
            pad_token_id=tok.pad_token_id,
            **common,
        )
    config.factprobe_random_weights = True
    # transformers 5 does not serialise `_name_or_path`; keep the warning in config.json itself.
    config.factprobe_name = f"factprobe/{folder_name} (RANDOM WEIGHTS, unit tests only)"
    config.name_or_path = config.factprobe_name
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        auto_cls = AutoModelForMaskedLM if kind == "bert" else AutoModelForCausalLM
        model = auto_cls.from_config(config, dtype=torch.float32)
    model.eval()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{folder_name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir()
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / MARKER_NAME).write_text(
            json.dumps(
                {
                    "format": CACHE_FORMAT,
                    "kind": kind,
                    "seed": seed,
                    "random_weights": True,
                    "note": "tiny RANDOM model for unit tests; never a real-model result",
                    "versions": versions(),
                },
                indent=2,
                sort_keys=True,
            )
            + "\n",
            encoding="utf-8",
        )
        if out.exists():
            shutil.rmtree(out)
        os.rename(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def make_tiny_lora_adapter(
    base: str | os.PathLike[str], path: str | os.PathLike[str], *, base_name: str | None = None, seed: int = 0, rank: int = 4
) -> Path:
    """Write a LoRA adapter folder with NON-ZERO random weights on the model folder `base`.

    `base` is a tiny random model folder (`make_tiny_random_model`); the adapter targets all its
    linear layers except the output head, with `LoraConfig(init_lora_weights=False)` so that it
    really changes the model's outputs (a freshly initialised LoRA is a no-op). `path` is the
    adapter folder itself and is (re)written: `adapter_config.json`, `adapter_model.safetensors`.
    Its `base_model_name_or_path` is `base_name` when given (an alias, a hub id, a missing name
    for error tests), else the absolute path of `base`. Weights are deterministic for `seed`.
    Returns the adapter folder. For unit tests only: the adapter is as random as its base.
    """
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

    from factprobe.models.loading import detect_kind

    base_dir = Path(base).expanduser().resolve()
    masked = detect_kind(AutoConfig.from_pretrained(base_dir, local_files_only=True)) == "masked"
    auto_cls = AutoModelForMaskedLM if masked else AutoModelForCausalLM
    model = auto_cls.from_pretrained(base_dir, dtype=torch.float32, local_files_only=True)
    config = LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        target_modules="all-linear",
        init_lora_weights=False,
        task_type=None if masked else "CAUSAL_LM",
        fan_in_fan_out=model.config.model_type == "gpt2",
    )  # GPT-2 uses Conv1D
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        peft_model = get_peft_model(model, config)
    out = Path(path).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        peft_model.save_pretrained(tmp)
        cfg_path = tmp / "adapter_config.json"
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
        cfg["base_model_name_or_path"] = base_name if base_name is not None else str(base_dir)
        cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        os.rename(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def redraw_weights(model, seed: int = 0, gain: float = 3.0) -> None:
    """Redraw every matrix of `model` in place from N(0, (gain / sqrt(fan_in))^2), seeded: RANDOM
    weights whose logits are sharp (the stock init gives near-uniform logits and repeated tokens,
    which make equality tests weak). Vectors (norms, biases) are kept."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim >= 2:
                p.copy_((torch.randn(p.shape, generator=gen) * gain / p.shape[-1] ** 0.5).to(p.dtype))


def widen_tiny_llama(
    llama: str | os.PathLike[str], root: str | os.PathLike[str], *, window: int = 2048, newline_gain: float | None = None
) -> Path:
    """A copy (once) of the tiny RANDOM llama at `llama` in `<root>/tiny-random-llama`, whose context
    window is `window` instead of 256 (rotary positions: no weight depends on it), so k-shot blocks
    fit, and whose matrices are redrawn with std 3/sqrt(n) from seed 0 (the stock init answers every
    prompt with the same repeated token). `newline_gain` scales the newline token's embedding (tied
    embeddings: its logit grows), so that generated answers also end at the stop string. Still
    RANDOM weights: never a result."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dst = Path(root) / "tiny-random-llama"
    if dst.exists():
        return dst
    shutil.copytree(llama, dst)
    config = json.loads((dst / "config.json").read_text(encoding="utf-8"))
    config["max_position_embeddings"] = window
    (dst / "config.json").write_text(json.dumps(config), encoding="utf-8")
    model = AutoModelForCausalLM.from_pretrained(dst, dtype=torch.float32)
    redraw_weights(model)
    with torch.no_grad():
        if newline_gain is not None:
            newline = AutoTokenizer.from_pretrained(dst).convert_tokens_to_ids("\u010a")
            model.get_input_embeddings().weight[newline] *= newline_gain
    model.save_pretrained(dst)
    return dst
