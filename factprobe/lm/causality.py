"""A model is causal only if it behaves so: `check_causal` runs it once and refuses two-way attention.

The class name is not proof: a BERT saved as `BertLMHeadModel` without `is_decoder` loads through
`AutoModelForCausalLM` and is named a causal LM by its config, yet every position attends to every
other one. Trained or probed as a causal LM it reads the answer from later tokens.

The check is behavioural and cheap: one forward pass over two rows of `PROBE_LENGTH` tokens that
differ only in their last token. In a causal model the logits at every earlier position are the
same in both rows (each row is computed alone; masked positions contribute exactly 0); a model whose
earlier logits move by more than `tolerance(dtype)` of their scale is refused with one line.

It works for plain models and PEFT adapters (the wrapper's forward is called), on any device and
dtype; the model's train/eval mode is restored. Callers: `factprobe.models.require_kind` (every
probe that accepts causal LMs) and `factprobe.finetune.model_setup.load_base`.
"""

from __future__ import annotations

from typing import Any

from factprobe.errors import ConfigError

#: tokens per row of the probe
PROBE_LENGTH = 6
#: largest relative change of an earlier position's logits a causal model may show (float32)
REL_TOL = 1e-4


def tolerance(dtype: Any) -> float:
    """`REL_TOL`, or the machine epsilon of a coarser floating dtype (bfloat16: 7.8e-3, float16:
    9.8e-4), so that rounding in half precision is never taken for attention to later tokens."""
    import torch

    try:
        eps = torch.finfo(dtype).eps
    except TypeError:
        return REL_TOL
    return max(REL_TOL, float(eps))


def probe_ids(vocab_size: int, special_ids: set[int] = frozenset(), n: int = PROBE_LENGTH) -> tuple[list[int], int]:
    """(`n` token ids, a replacement for the last one): ordinary tokens (not in `special_ids`)
    spread over the vocabulary, deterministic, the replacement different from the last id."""
    pool = [i for i in range(vocab_size) if i not in special_ids] or list(range(vocab_size))
    if len(pool) < 2:
        raise ValueError(f"a vocabulary of {vocab_size} token(s) cannot show causality")
    picks = [pool[len(pool) * (k + 1) // (n + 2)] for k in range(n + 1)]
    ids, other = picks[:n], picks[n]
    if other == ids[-1]:
        other = pool[0] if pool[0] != ids[-1] else pool[-1]
    return ids, other


def _vocab_size(model: Any) -> int:
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    n = getattr(emb, "num_embeddings", None)
    return int(n) if n else int(model.config.vocab_size)


def _input_weight(model: Any) -> Any:
    """The input embedding matrix (its device takes the input ids; its dtype is the model's)."""
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    weight = getattr(emb, "weight", None)
    return weight if weight is not None else next(model.parameters())


def earlier_logit_change(model: Any, tokenizer: Any = None) -> tuple[int | None, float, int]:
    """(the first earlier position whose logits changed beyond the tolerance or None, the largest
    relative change over the earlier positions, the position of the changed token), from one
    forward pass of two rows that differ only in their last token."""
    import torch

    special = set(getattr(tokenizer, "all_special_ids", None) or ()) if tokenizer is not None else set()
    ids, other = probe_ids(_vocab_size(model), special)
    weight = _input_weight(model)
    rows = torch.tensor([ids, ids[:-1] + [other]], device=weight.device)
    modes = [(m, m.training) for m in model.modules()] if hasattr(model, "modules") else []
    model.eval()  # no dropout
    try:
        with torch.no_grad():
            out = model(input_ids=rows, attention_mask=torch.ones_like(rows))
    finally:
        for m, training in modes:
            m.training = training
    raw = out.logits if hasattr(out, "logits") else out[0]
    logits = raw.float()
    before, after = logits[0, :-1], logits[1, :-1]
    scale = before.abs().amax().clamp_min(torch.finfo(torch.float32).tiny)
    change = (after - before).abs().amax(dim=-1) / scale  # per earlier position
    tol = max(tolerance(d) for d in (raw.dtype, weight.dtype) if d.is_floating_point)
    moved = (change > tol).nonzero()
    first = int(moved[0, 0]) if len(moved) else None
    return first, float(change.max()), len(ids) - 1


def check_causal(model: Any, name: str, tokenizer: Any = None) -> None:
    """Raise `ConfigError` (one line) unless `model` (a causal-LM model or a PEFT wrapper of one)
    behaves causally: no logit at a position may change when a later token changes."""
    first, change, last = earlier_logit_change(model, tokenizer)
    if first is None:
        return
    from factprobe.lm.body import unwrap_peft

    inner = unwrap_peft(model)
    cls = type(inner).__name__
    config = getattr(inner, "config", None)
    if config is not None and getattr(config, "is_decoder", None) is False and hasattr(config, "add_cross_attention"):
        fix = (
            f'it is an encoder loaded as {cls}: set "is_decoder": true in its config.json to run it as a decoder, '
            "or use it with a probe that accepts masked LMs"
        )
    else:
        fix = f"its attention ({cls}) lets a position see later tokens; a causal LM must not"
    raise ConfigError(
        f"model {name} is not causal: its logits at position {first} change when a later token "
        f"(position {last}) changes (bidirectional attention; relative change {change:.1e}); {fix}"
    )
