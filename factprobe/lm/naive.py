"""The reference the scorer must match: one full forward per (context, continuation).

This is the papers' transformers setup (and what lm-evaluation-harness computes): encode
`context + continuation` jointly (whitespace at the end of the context moved to the
continuation), split at `len(encode(context))` (or, where a token merged across the boundary,
at the longest common prefix: `scorer.split_point`), run the whole sequence, and sum the log-probs
of the continuation tokens. It is slow on purpose: tests and benchmarks use it as ground truth.
"""

from __future__ import annotations

import torch

from .scorer import encode_choices


@torch.inference_mode()
def naive_logprob(model: torch.nn.Module, tokenizer, context: str, continuation: str) -> float:
    """Summed log P(continuation tokens | context) from a full forward; float64 sum of fp logits.
    The token ids are the scorer's (`scorer.encode_choices`: special tokens once, a stand-in for an
    empty context); tests/lm/test_bos.py checks them against lm-evaluation-harness's own."""
    _, (whole,), (n,) = encode_choices(tokenizer, context, [continuation])
    device = next(model.parameters()).device
    logits = model(input_ids=torch.tensor([whole], device=device)).logits[0].float()
    lp = torch.log_softmax(logits[:-1], dim=-1)
    tgt = torch.tensor(whole[n:], device=device)
    return lp[torch.arange(n - 1, len(whole) - 1, device=device), tgt].double().sum().item()


@torch.inference_mode()
def naive_token_logprobs(model: torch.nn.Module, token_ids: list[int]) -> list[float]:
    """log P(token_ids[i] | token_ids[:i]) for i >= 1 from one full forward (float64 list)."""
    device = next(model.parameters()).device
    logits = model(input_ids=torch.tensor([token_ids], device=device)).logits[0].float()
    lp = torch.log_softmax(logits[:-1], dim=-1)
    tgt = torch.tensor(token_ids[1:], device=device)
    return [0.0] + lp[torch.arange(len(token_ids) - 1, device=device), tgt].double().tolist()
