"""The set-up the scorer and the generator share: one causal LM ready to run forwards on.

`ModelEngine.__init__` puts the model in eval mode and works out, once, everything both
`factprobe.lm.scorer.Scorer` and `factprobe.lm.generate.Generator` read from the model: the device
it runs on, the per-forward token budget, the context window, the dtype of its masks and the
attention layout (sliding-window layers and their window, as Gemma-3 has). Both classes inherit
it, so the two stay equal by construction.
"""

from __future__ import annotations

import torch

from ..errors import ConfigError

#: query tokens per forward when no budget is given: small on CPU, larger on a GPU
DEFAULT_TOKEN_BUDGET = {"cpu": 1024, "cuda": 8192}
#: the context window assumed for a config that names none
FALLBACK_MAX_LENGTH = 2048


class ModelEngine:
    """A causal LM and its tokenizer, set up for running forwards.

    Args:
        model: a causal LM (a transformers `PreTrainedModel`, a `peft.PeftModel` on one, or a
            merged model); put in eval mode.
        tokenizer: its tokenizer.
        device: where to run; defaults to the device of the model's first parameter.
        token_budget: a bound on the tokens of one batched forward (its meaning is the subclass's);
            None or 0 take `DEFAULT_TOKEN_BUDGET` (8192 on CUDA, else 1024). Negative: ConfigError.
        max_length: the model's context window; defaults to the text config's
            `max_position_embeddings`, else `FALLBACK_MAX_LENGTH`.

    Attributes set: `model`, `tokenizer`, `device`, `token_budget`, `max_length`, `dtype` (of the
    first parameter), `sliding_window` (None without one) and `layer_types` (the sorted distinct
    `config.layer_types`, None where the config has none).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer,
        device: torch.device | str | None = None,
        token_budget: int | None = None,
        max_length: int | None = None,
    ) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        self.token_budget = token_budget or DEFAULT_TOKEN_BUDGET["cuda" if self.device.type == "cuda" else "cpu"]
        if self.token_budget < 1:
            raise ConfigError(f"token_budget must be >= 1, got {token_budget}")
        cfg = model.config.get_text_config()
        self.max_length = max_length or getattr(cfg, "max_position_embeddings", None) or FALLBACK_MAX_LENGTH
        self.dtype = next(model.parameters()).dtype
        layer_types = getattr(cfg, "layer_types", None)
        self.sliding_window = getattr(cfg, "sliding_window", None)
        self.layer_types = sorted(set(layer_types)) if layer_types else None
