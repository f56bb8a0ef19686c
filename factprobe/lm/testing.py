"""Tiny RANDOM models for unit tests: a real tokenizer, random weights, never a result.

`make_tiny_random_model("gpt2" | "llama", path)` builds (once) a 2-layer model folder whose
config says `factprobe_random_weights: true`; `LoadedModel.is_random` is True for it.
"""
from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Literal

from factprobe.errors import ConfigError
from factprobe.lm.models import CACHE_FORMAT, MARKER_NAME, _versions

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


def _tiny_tokenizer(kind: str) -> Any:
    """A small byte-level BPE (any text encodes) trained here, without the hub."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    if kind == "gpt2":
        specials = ["<|endoftext|>"]
    else:
        specials = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(_TINY_TEXT * 4, trainer)
    if kind == "gpt2":
        tk.post_processor = processors.ByteLevel(trim_offsets=False)
        return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<|endoftext|>",
                                       eos_token="<|endoftext|>", unk_token="<|endoftext|>")
    bos_id = tk.token_to_id("<s>")
    tk.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                      special_tokens=[("<s>", bos_id)]),
    ])
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>",
                                  unk_token="<unk>", pad_token="</s>")
    tok.chat_template = _TINY_CHAT_TEMPLATE
    return tok


def make_tiny_random_model(kind: Literal["gpt2", "llama"], path: str | os.PathLike[str], *,
                           seed: int = 0) -> Path:
    """Build (once) a TINY model with RANDOM weights and a real tokenizer, for unit tests.

    Creates `<path>/tiny-random-<kind>` (or uses `path` itself when it already ends in that
    name) and returns it. 2 layers, hidden size 32, a byte-level BPE vocabulary of ~450 tokens
    (any text encodes), context 256; weights are deterministic for a given `seed`. "gpt2" adds
    no BOS token and has no chat template; "llama" prepends `<s>` and has a ChatML-style chat
    template. config.json carries `factprobe_random_weights: true` and a `factprobe_name`
    containing "RANDOM": numbers from these models are never results. An existing complete
    folder is reused.
    """
    import torch
    from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig

    if kind not in ("gpt2", "llama"):
        raise ConfigError(f"unknown tiny model kind {kind!r}: use 'gpt2' or 'llama'")
    folder_name = f"tiny-random-{kind}"
    base = Path(path).expanduser()
    out = base if base.name == folder_name else base / folder_name
    if (out / "config.json").is_file() and (out / MARKER_NAME).is_file():
        return out
    tok = _tiny_tokenizer(kind)
    common = dict(vocab_size=len(tok), bos_token_id=tok.bos_token_id,
                  eos_token_id=tok.eos_token_id, tie_word_embeddings=True)
    if kind == "gpt2":
        config = GPT2Config(n_embd=32, n_layer=2, n_head=2, n_positions=256, **common)
    else:
        config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2,
                             max_position_embeddings=256, pad_token_id=tok.pad_token_id,
                             **common)
    config.factprobe_random_weights = True
    # transformers 5 does not serialise `_name_or_path`; keep the warning in config.json itself.
    config.factprobe_name = f"factprobe/{folder_name} (RANDOM WEIGHTS, unit tests only)"
    config.name_or_path = config.factprobe_name
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.eval()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{folder_name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir()
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / MARKER_NAME).write_text(json.dumps({
            "format": CACHE_FORMAT, "kind": kind, "seed": seed, "random_weights": True,
            "note": "tiny RANDOM model for unit tests; never a real-model result",
            "versions": _versions(),
        }, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        os.rename(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out
