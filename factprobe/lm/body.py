"""The transformer body and the output head of a language model, found the same way for every
wrapper: plain Hugging Face models, PEFT-wrapped models and merged ones.

The scorer runs the body (hidden states, KV cache) and the head (logits) separately, so that
the head sees only the rows it needs. `model.base_model` is the body of a plain transformers
model, but on a `peft.PeftModel` it is the LoRA wrapper (`LoraModel`) around the WHOLE model,
head included. `decoder_parts` unwraps PEFT first (`PeftModel.get_base_model()`). The LoRA
layers live inside the base model's modules, so running the unwrapped body runs them too; after
`merge_and_unload()` the model is a plain one again.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import torch

from factprobe.errors import ModelError


@dataclass(frozen=True)
class DecoderParts:
    """The pieces of a language model that the scorer calls.

    - `body`: the transformer stack (`model.base_model` of the unwrapped model: the decoder of a
      causal LM, the encoder of a masked LM). Called with `input_ids` (and `attention_mask`,
      `position_ids`, `past_key_values`, `use_cache`), it returns an output with
      `last_hidden_state` `[batch, tokens, hidden]` (and `past_key_values` when asked).
    - `head`: maps hidden states `[..., hidden]` to logits `[..., vocab]` exactly as the model's
      own forward does, except final-logit soft-capping (see `text_config`). For a causal LM it
      is the output embedding (`lm_head`); for a BERT-style masked LM the whole prediction head
      (dense + activation + layer norm + decoder).
    - `text_config`: the text part of the config (`config.get_text_config()`), which carries
      `final_logit_softcapping`, `sliding_window`, `layer_types`, ...
    """

    body: torch.nn.Module
    head: torch.nn.Module
    text_config: Any


def unwrap_peft(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model inside a PEFT wrapper (`PeftModel` or its tuner), else `model`.

    LoRA layers stay in place: they are modules of the returned model.
    """
    peft = sys.modules.get("peft")  # a PEFT wrapper cannot exist unless peft was imported
    if peft is None:
        return model
    from peft.tuners.tuners_utils import BaseTuner

    if isinstance(model, peft.PeftModel):
        model = model.get_base_model()
    if isinstance(model, BaseTuner):  # `peft_model.base_model` passed in directly
        model = model.model
    return model


def decoder_parts(model: torch.nn.Module) -> DecoderParts:
    """Body, output head and text config of a plain, PEFT-wrapped or merged language model.

    Raises `ModelError` (one line) when the model has no separate body or no output head,
    e.g. a headless `AutoModel`.
    """
    inner = unwrap_peft(model)
    body = getattr(inner, "base_model", None)
    out_emb = inner.get_output_embeddings() if hasattr(inner, "get_output_embeddings") else None
    if body is None or body is inner or out_emb is None:
        raise ModelError(
            f"{type(inner).__name__} has no separate transformer body and output "
            "head; load it as a language model (AutoModelForCausalLM/MaskedLM)"
        )
    head = out_emb
    # The head is the top-level child that holds the output embedding: `lm_head` itself for
    # causal LMs, the whole prediction head (`cls`, `lm_head`) for BERT/RoBERTa-style MLMs.
    for child in inner.children():
        if child is not body and any(m is out_emb for m in child.modules()):
            head = child
            break
    return DecoderParts(body=body, head=head, text_config=inner.config.get_text_config())
