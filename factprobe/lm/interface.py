"""What a probe may ask of a model: the one interface the local and the served engines share.

A probe never tests which kind of model it has. It asks the `LanguageModel` the run loaded (a local
`factprobe.models.loading.LoadedModel` or a served `factprobe.lm.served.ServedModel`) for its identity, its
tokenizer and its two engines, and asks the engines for numbers:

- `ScoringEngine` (`factprobe.lm.scorer.Scorer`, `factprobe.lm.served.ServedScorer`): summed log-probs of
  continuations after a context (`score_choices`: one array of per-option nats per `ChoiceRequest`), with a
  shared prefix where the probe has one (`prefix`, `extend`, `score_segments`), and the tokenization that
  decides where a context ends and a continuation starts (`encode_context`, `encode_continuation`: the
  word-boundary space belongs to the continuation, as in lm-evaluation-harness).
- `GenerationEngine` (`factprobe.lm.generate.Generator`, `factprobe.lm.served.ServedGenerator`): greedy and
  sampled continuations of prompts (`greedy`, `sample`: text, token ids, per-token log-probs, finish
  reason), with `encode` for counting prompt tokens and `clear_prefix_cache` between prompt families.

`tests/lm/test_interface.py` checks that both engines of both kinds have every method with the same
parameters, so a probe written against this module runs on either.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class ScoringEngine(Protocol):
    """Log-likelihoods of continuations (nats, summed over each continuation's tokens)."""

    def encode_context(self, text: str, stand_in: bool = True) -> list[int]: ...

    def encode_continuation(self, text: str) -> list[int]: ...

    def prefix(self, text_or_ids: str | Sequence[int]) -> Any: ...

    def extend(self, prefix: Any, ids: Sequence[int]) -> Any: ...

    def score_segments(self, prefix: Any, segments: Any) -> Any: ...

    def score_choices(self, requests: Sequence[Any], shared_prefix: Any = None, pack_contexts: bool = False) -> list[Any]: ...


@runtime_checkable
class GenerationEngine(Protocol):
    """Continuations of prompts, greedy or sampled."""

    def encode(self, text: str) -> list[int]: ...

    def clear_prefix_cache(self) -> None: ...

    def greedy(self, *args: Any, **kwargs: Any) -> Any: ...

    def sample(self, *args: Any, **kwargs: Any) -> Any: ...


@runtime_checkable
class LanguageModel(Protocol):
    """A model a run loaded: its name, its content identity (`revision`: factprobe.identity), its tokenizer,
    where its inputs go, and its engines (`token_budget`: tokens per forward or request batch; None: the
    engine's default)."""

    name: str
    tokenizer: Any

    @property
    def revision(self) -> str: ...

    def make_scorer(self, token_budget: int | None = None) -> ScoringEngine: ...

    def make_generator(self, token_budget: int | None = None) -> GenerationEngine: ...
