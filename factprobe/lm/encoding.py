"""Token ids of (context, continuation) pairs: the harness rule, and the same ids from pieces tokenized once.

The harness rule (`encode_choices`, lm-evaluation-harness's `loglikelihood`): the context's trailing
whitespace moves into the continuation, the context is encoded with the tokenizer's special tokens
exactly once (`context_token_ids`), and `context + continuation` is encoded jointly and split at
`len(encode(context))` (`split_point` where a token merged across). Done literally, a relation's 50
in-context examples are tokenized again for every option of every fact: about 37,000 tokens, 25 ms of
CPU, per IC-LKE fact with 100 options. `ChoiceEncoder.choices` returns the same ids from pieces that
are each tokenized once:

- A *safe boundary* of a text `T` is a position `b` where the tokenizer's output splits in two:
  `encode(T) == encode(T[:b]) + encode(T[b:], add_special_tokens=False)`. `SpliceRule.for_tokenizer`
  reads the tokenizer's own definition (its tokenizer.json) and returns a rule that tells safe
  boundaries from the character at `b` and the one before it, or None where it proves none:
  - byte-level BPE with GPT-2's pre-tokenizer regex (GPT-2, SmolLM2; `Digits` may come first) and no
    normalizer: every `b` with `T[b] == " "` and `T[b-1]` not whitespace. No alternative of the regex
    runs from a non-space into a space, so a piece ends at `b`; the pieces before `b` are those of
    `T[:b]` (the regex looks one character ahead, never behind); the pieces from `b` on are those of
    `T[b:]`; and BPE never merges across pieces.
  - SentencePiece-style BPE over the whole text with spaces written `▁` (Gemma: a `Replace(" ", "▁")`
    normalizer and no pre-tokenizer split that survives it): every `b` with `T[b] == " "` whose left
    neighbour is neither whitespace nor `▁` nor the left neighbour of a `▁` inside some vocabulary
    token (`>` in Gemma-3's `>▁</`). No token then spans `b`, so BPE's merges on the two sides never meet.
  Both also need special tokens only before the text (checked on sample texts), added tokens that are
  free of whitespace or all whitespace (so none spans `b`) and strip nothing, and no truncation. Any
  other tokenizer (a slow one, another normalizer or regex) gets no rule: every pair is encoded
  jointly, as exact as before, only not faster.
- Pieces are tokenized once and kept by text (`ChoiceEncoder.encode`, at most `max_tokens` token ids):
  a relation's prefix once per relation, an option once per run wherever it recurs.
- The first request of every shared prefix (and the first without one) is also encoded jointly and
  compared; a difference turns the pieces off for good (`ChoiceEncoder.mismatches`). The rule is the
  guarantee; this check guards against a tokenizer whose definition says one thing and does another.
"""

from __future__ import annotations

import contextlib
import json
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ConfigError

#: the space SentencePiece-style tokenizers write inside tokens
META = "\u2581"


def split_point(ctx_ids: Sequence[int], whole_ids: Sequence[int]) -> int:
    """Where the continuation's tokens start in `whole_ids = encode(c + y)`.

    Normally `len(encode(c))` (the harness rule). When joint tokenization rewrites the end of the
    context (a token merged across the boundary), it is the length of the longest common prefix
    of the two encodings: the merged token and everything after it are scored.
    """
    n = len(ctx_ids)
    if list(whole_ids[:n]) == list(ctx_ids):
        return n
    k = 0
    while k < min(n, len(whole_ids)) and whole_ids[k] == ctx_ids[k]:
        k += 1
    return k


def split_trailing_whitespace(context: str, continuation: str) -> tuple[str, str]:
    """Move whitespace at the end of `context` to the start of `continuation` (harness rule)."""
    stripped = context.rstrip()
    n = len(context) - len(stripped)
    if n:
        return stripped, context[len(stripped) :] + continuation
    return context, continuation


def stand_in_token_id(tokenizer) -> int | None:
    """The token that stands in for a truly empty context: BOS if the tokenizer has one, else EOS
    (lm-evaluation-harness's `HFLM.prefix_token_id`); None when it has neither."""
    if tokenizer.bos_token_id is not None:
        return int(tokenizer.bos_token_id)
    return None if tokenizer.eos_token_id is None else int(tokenizer.eos_token_id)


def _adds_special_tokens(tokenizer, text: str) -> bool:
    """Whether encoding `text` adds the tokenizer's special tokens: yes, unless the text already
    starts with the stand-in token's text (lm-eval's `tok_encode`), so that BOS is never doubled."""
    sid = stand_in_token_id(tokenizer)
    return sid is None or not text.startswith(tokenizer.decode([sid]))


def _no_stand_in(tokenizer) -> ConfigError:
    return ConfigError(
        f"the tokenizer {type(tokenizer).__name__} has neither a BOS nor an EOS token, so an empty context "
        "(a slot or template that starts the prompt, with no examples) cannot be scored; put text "
        "before the slot"
    )


def context_token_ids(tokenizer, text: str, stand_in: bool = True) -> list[int]:
    """The token ids a model sees for the context `text` (the rule every probe shares, docs/probes.md).

    The text is encoded with the tokenizer's own special tokens exactly once: `add_special_tokens=True`
    (Gemma/Llama: `<bos>` first; SmolLM2/GPT-2: nothing), unless the text itself starts with the BOS
    (else EOS) text, which is then not added again. Callers never prepend BOS text themselves.
    A context that encodes to no token at all (empty text, tokenizer that adds nothing) gets the
    stand-in `[BOS else EOS]` (`stand_in_token_id`, lm-evaluation-harness's empty-context rule),
    unless `stand_in` is False (the caller's own tokens follow, as in EIC-LKE's packed sequences).
    ConfigError if a stand-in is needed and the tokenizer has neither token.
    """
    ids = list(tokenizer(text, add_special_tokens=_adds_special_tokens(tokenizer, text))["input_ids"])
    if ids or not stand_in:
        return ids
    sid = stand_in_token_id(tokenizer)
    if sid is None:
        raise _no_stand_in(tokenizer)
    return [sid]


def encode_choices(tokenizer, context: str, continuations: Sequence[str]) -> tuple[list[int], list[list[int]], list[int]]:
    """`(context ids, whole ids per continuation, where each continuation starts)`, as lm-evaluation-
    harness's `loglikelihood` builds a request: the context's trailing whitespace moves into each
    continuation (`split_trailing_whitespace`), the context is `context_token_ids`, and the whole
    sequence is the joint encoding of context + continuation with the same special tokens, split at
    `split_point`. A context that encodes to nothing is the stand-in token followed by the
    continuation encoded without special tokens (the harness drops a leading stand-in from it).
    `whole[start:]` are the scored tokens; `start` is 0 only when nothing precedes them (an error for callers)."""
    pairs = [split_trailing_whitespace(context, c) for c in continuations]
    ctx = pairs[0][0] if pairs else split_trailing_whitespace(context, "")[0]
    specials = _adds_special_tokens(tokenizer, ctx)
    ctx_ids = list(tokenizer(ctx, add_special_tokens=specials)["input_ids"])
    if not pairs:
        return ctx_ids or context_token_ids(tokenizer, ctx), [], []
    if ctx_ids:
        wholes = [list(w) for w in tokenizer([ctx + c for _, c in pairs], add_special_tokens=specials)["input_ids"]]
        return ctx_ids, wholes, [split_point(ctx_ids, w) for w in wholes]
    sid = stand_in_token_id(tokenizer)
    if sid is None:
        raise _no_stand_in(tokenizer)
    conts = [list(c) for c in tokenizer([c for _, c in pairs], add_special_tokens=False)["input_ids"]]
    wholes = [[sid] + (c[1:] if c[:1] == [sid] else c) for c in conts]
    return [sid], wholes, [1] * len(wholes)


# ---------------------------------------------------------------------- pieces


@dataclass(frozen=True)
class SpliceRule:
    """Which boundaries of a text split the tokenizer's output (module docstring). `banned_left`:
    characters that may not stand left of a safe boundary, besides whitespace."""

    kind: str  # "byte_level" | "metaspace"
    banned_left: frozenset[str] = frozenset()

    def safe(self, text: str, b: int) -> bool:
        """Whether `b` (0 < b < len(text)) is a safe boundary of `text`: a space at `b`, and left of
        it a character that no token or pre-token joins to that space."""
        if not 0 < b < len(text) or text[b] != " ":
            return False
        left = text[b - 1]
        return not (left.isspace() or left in self.banned_left)

    def last_safe(self, text: str, lo: int, hi: int) -> int | None:
        """The largest safe boundary `b` of `text` with lo <= b < hi, or None."""
        b = text.rfind(" ", max(lo, 1), hi)
        while b >= max(lo, 1):
            if self.safe(text, b):
                return b
            b = text.rfind(" ", max(lo, 1), b)
        return None

    @classmethod
    def for_tokenizer(cls, tokenizer) -> SpliceRule | None:
        """The rule of `tokenizer`, or None where none is proven (then every pair is encoded jointly).
        Worked out once per tokenizer object (Gemma's vocabulary scan takes a few tenths of a second)."""
        try:
            return _RULES[tokenizer]
        except (KeyError, TypeError):
            pass
        rule = _rule_of(tokenizer)
        with contextlib.suppress(TypeError):  # a tokenizer that cannot be weakly referenced is asked again
            _RULES[tokenizer] = rule
        return rule


_RULES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _component(obj) -> dict | None:
    """A tokenizers pipeline component (normalizer, pre-tokenizer) as its JSON definition."""
    return None if obj is None else json.loads(obj.__getstate__())


def _rule_of(tokenizer) -> SpliceRule | None:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or getattr(backend, "truncation", None) or getattr(backend, "padding", None):
        return None
    try:
        model = backend.model
        norm, pre = _component(backend.normalizer), _component(backend.pre_tokenizer)
        added = list(backend.get_added_tokens_decoder().values())
    except Exception:  # noqa: BLE001 - a backend that cannot describe itself gets no rule, not an error
        return None
    if type(model).__name__ != "BPE" or getattr(model, "dropout", None) or not _added_tokens_ok(added):
        return None
    if norm is None and _byte_level_regex(pre):
        rule = SpliceRule("byte_level")
    elif _space_to_meta(norm) and _no_split_after_meta(pre) and not getattr(model, "ignore_merges", True):
        vocab = backend.get_vocab(with_added_tokens=False)
        left = {t[i - 1] for t in vocab for i in range(1, len(t)) if t[i] == META and t[i - 1] != META}
        rule = SpliceRule("metaspace", frozenset(left | {META}))
    else:
        return None
    return rule if _specials_only_before(tokenizer) else None


def _added_tokens_ok(added) -> bool:
    """No added token strips its neighbours, and each is free of whitespace (and `▁`) or all of it."""
    for a in added:
        if a.lstrip or a.rstrip or a.single_word:
            return False
        spaces = [c.isspace() or c == META for c in a.content]
        if any(spaces) and not all(spaces):
            return False
    return True


def _byte_level_regex(pre: dict | None) -> bool:
    """GPT-2's byte-level pre-tokenizer (its own regex, no prefix space), alone or after `Digits`."""
    if not pre:
        return False
    steps = pre.get("pretokenizers") or [] if pre.get("type") == "Sequence" else [pre]
    if not steps or steps[-1].get("type") != "ByteLevel" or any(p.get("type") != "Digits" for p in steps[:-1]):
        return False
    return bool(steps[-1].get("use_regex", True)) and not steps[-1].get("add_prefix_space")


def _space_to_meta(norm: dict | None) -> bool:
    """The normalizer is exactly `Replace(" ", "▁")`."""
    return bool(norm) and norm.get("type") == "Replace" and norm.get("pattern") == {"String": " "} and norm.get("content") == META


def _no_split_after_meta(pre: dict | None) -> bool:
    """No pre-tokenizer, or a split on " " (which finds none once every space is `▁`)."""
    return pre is None or (pre.get("type") == "Split" and pre.get("pattern") == {"String": " "} and not pre.get("invert"))


def _specials_only_before(tokenizer) -> bool:
    """The special tokens the tokenizer adds are the same ids before every sample text, none after it."""
    heads = set()
    for text in ("a", "Paris France", " x  y.", "1 2"):
        with_sp = list(tokenizer(text, add_special_tokens=True)["input_ids"])
        without = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        n = len(with_sp) - len(without)
        if n < 0 or with_sp[n:] != without:
            return False
        heads.add(tuple(with_sp[:n]))
    return len(heads) == 1


class ChoiceEncoder:
    """`encode_choices` from pieces, each tokenized once and kept by text (module docstring).

    Args:
        tokenizer: a transformers tokenizer; pieces are encoded with `tokenizer(texts, add_special_tokens=...)`,
            the call `encode_choices` makes.
        max_tokens: token ids kept (with their texts: about 60 MB at the default); the cache is emptied when
            it would hold more, so it never grows with the run (a relation's pieces come back
            with its next request).
    """

    def __init__(self, tokenizer, max_tokens: int = 1_000_000) -> None:
        self.tokenizer = tokenizer
        self.rule = SpliceRule.for_tokenizer(tokenizer)
        self.max_tokens = max_tokens
        self._ids: dict[tuple[str, bool], list[int]] = {}
        self._held = 0  # what `_ids` holds: its token ids plus a quarter of its texts' characters
        self._checked: set[str | None] = set()
        self.mismatches = 0

    def encode(self, texts: Sequence[str], specials: bool) -> list[list[int]]:
        """Token ids of each text (`tokenizer(text, add_special_tokens=specials)`), cached by text; the
        misses are encoded in one call. The lists are the cache's own: callers do not modify them."""
        found = {t: self._ids.get((t, specials)) for t in texts}
        missing = [t for t, ids in found.items() if ids is None]
        if missing:
            encoded = [list(ids) for ids in self.tokenizer(missing, add_special_tokens=specials)["input_ids"]]
            size = sum(len(t) // 4 + len(ids) for t, ids in zip(missing, encoded))
            if self._held + size > self.max_tokens:
                self._ids.clear()
                self._held = 0
            for t, ids in zip(missing, encoded):
                self._ids[(t, specials)] = found[t] = ids
            self._held += size
        return [found[t] for t in texts]  # type: ignore[misc]

    def choices(
        self, context: str, continuations: Sequence[str], head: str | None = None
    ) -> tuple[list[int], list[list[int]], list[int]]:
        """`encode_choices(tokenizer, context, continuations)`, the same ids, from pieces. `head` is a text
        the context may start with (a shared prefix): where it ends at a safe boundary, its ids are the
        cached ids of `head`, tokenized once for every request that starts with it."""
        rule = self.rule
        if rule is None or not continuations:
            return encode_choices(self.tokenizer, context, continuations)
        ctx = split_trailing_whitespace(context, continuations[0])[0]
        conts = [split_trailing_whitespace(context, c)[1] for c in continuations]
        specials = _adds_special_tokens(self.tokenizer, ctx)
        cut = len(head) if head and ctx.startswith(head) and (len(ctx) == len(head) or rule.safe(ctx, len(head))) else 0

        def ids_before(b: int) -> list[int]:
            """encode(ctx[:b]) for a safe boundary b (or the end): the head's ids, then the piece after it."""
            if not cut:
                return list(self.encode([ctx[:b]], specials)[0])
            (h,) = self.encode([ctx[:cut]], specials)
            return h + self.encode([ctx[cut:b]], False)[0] if b > cut else list(h)

        ctx_ids = ids_before(len(ctx))
        if not ctx_ids:  # a context that encodes to nothing: encode_choices' stand-in rules
            return encode_choices(self.tokenizer, context, continuations)
        # each continuation: after the whole context (a safe boundary at its end), after the last safe
        # boundary inside the context (the window from there is tokenized with it), or jointly (none)
        after_ctx, windows, joint = [], {}, []
        inner = rule.last_safe(ctx, cut, len(ctx))
        for i, c in enumerate(conts):
            if rule.safe(ctx + c[:1], len(ctx)):
                after_ctx.append(i)
            elif inner is not None:
                windows.setdefault(inner, []).append(i)
            else:
                joint.append(i)
        wholes: list[list[int]] = [[] for _ in conts]
        for i, ids in zip(after_ctx, self.encode([conts[i] for i in after_ctx], False)):
            wholes[i] = ctx_ids + ids
        for b, idx in windows.items():
            before = ids_before(b)
            for i, ids in zip(idx, self.encode([ctx[b:] + conts[i] for i in idx], False)):
                wholes[i] = before + ids
        for i, ids in zip(joint, self.encode([ctx + conts[i] for i in joint], specials)):
            wholes[i] = list(ids)
        key = head if cut else None
        if key not in self._checked:  # the first request of this head: the pieces against the joint encoding
            self._checked.add(key)
            want = encode_choices(self.tokenizer, context, continuations)
            if (want[0], want[1]) != (ctx_ids, wholes):
                self.mismatches += 1
                self.rule = None
                return want
        return ctx_ids, wholes, [split_point(ctx_ids, w) for w in wholes]
