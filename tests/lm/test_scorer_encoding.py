"""The scorer's tokenization from pieces (factprobe.lm.encoding, issue 40 item 1): the same ids as the joint
harness encoding, for every context/option shape, while a relation's shared prefix is tokenized once per
relation, not once per option of every fact."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from factprobe.lm.encoding import ChoiceEncoder, SpliceRule, encode_choices
from factprobe.lm.scorer import ChoiceRequest, Scorer

PIECES = [
    "Paris", "France", "Côte d'Ivoire", "東京都", "Αθήνα", "12", "3.5", "U.S.", "(a)", "x", "-", ",", ".", "'s", "ce",
    "  ", " ", "\n", "\t", "am Rhein", "Bern", ">", "</", "\u2581a", "São", "  Tokyo", "don't", "e\u0301",
]  # fmt: skip


def _texts(seed: int, n: int) -> list[tuple[str, list[str], str | None]]:
    """(context, options, head) triples of every shape: heads that end at a safe boundary and ones that
    do not, contexts with trailing whitespace, options with and without a leading space, merges."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        head = " ".join(rng.choice(PIECES) for _ in range(rng.randint(0, 6)))
        tail = "".join(rng.choice([" ", "", " "]) + rng.choice(PIECES) for _ in range(rng.randint(0, 3)))
        context = head + tail + rng.choice(["", "", " ", "  ", "\n"])
        options = [rng.choice(["", " ", " ", "  "]) + rng.choice(PIECES) + rng.choice(["", " x", "."]) for _ in range(5)]
        out.append((context, [o for o in options if o.strip()] or [" y"], head if rng.random() < 0.7 else None))
    return out


def _check_pieces(tok, n: int = 300) -> ChoiceEncoder:
    enc = ChoiceEncoder(tok)
    for context, options, head in _texts(0, n):
        if not (context + options[0]).strip():
            continue
        want = encode_choices(tok, context, options)
        assert enc.choices(context, options, head) == want, (context, options, head)
    assert enc.mismatches == 0
    return enc


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_pieces_give_the_joint_ids_on_byte_level_bpe(tiny_model_path, kind):
    tok = AutoTokenizer.from_pretrained(tiny_model_path(kind))
    assert _check_pieces(tok).rule == SpliceRule("byte_level")


def test_a_tokenizer_without_a_rule_is_encoded_jointly(tiny_model_path):
    """WordPiece (BERT) has no rule: every pair is encoded jointly (exact, not faster)."""
    tok = AutoTokenizer.from_pretrained(tiny_model_path("bert"))
    enc = ChoiceEncoder(tok)
    assert enc.rule is None
    assert enc.choices("Paris is in", [" France", "Fran"]) == encode_choices(tok, "Paris is in", [" France", "Fran"])


@pytest.mark.real_model
@pytest.mark.parametrize("alias,kind", [("smollm2-135m-instruct", "byte_level"), ("gemma-3-270m", "metaspace")])
def test_pieces_give_the_joint_ids_on_real_tokenizers(real_model_path, alias, kind):
    tok = AutoTokenizer.from_pretrained(real_model_path(alias))
    enc = _check_pieces(tok, 1500)
    assert enc.rule is not None and enc.rule.kind == kind
    if kind == "metaspace":
        assert ">" in enc.rule.banned_left  # Gemma-3 has a token '>\u2581</' that spans '> <'


def test_a_wrong_rule_is_caught_and_turned_off(tiny_model_path):
    """A rule that calls every space safe splits where the tokenizer merges: the first request of the head
    is compared with the joint encoding, the joint ids are returned and the pieces are off for good."""

    class Everywhere(SpliceRule):
        def safe(self, text: str, b: int) -> bool:
            return 0 < b < len(text)

    tok = AutoTokenizer.from_pretrained(tiny_model_path("gpt2"))
    enc = ChoiceEncoder(tok)
    enc.rule = Everywhere("byte_level")
    context, options = "Paris is in Fran", ["ce", " France"]  # 'Fran' + 'ce' merge across the cut
    assert enc.choices(context, options) == encode_choices(tok, context, options)
    assert enc.mismatches == 1 and enc.rule is None


class _Counting:
    """A tokenizer wrapper that records every text it is asked to encode."""

    def __init__(self, tok):
        self.tok, self.texts = tok, []

    def __call__(self, text, **kw):
        self.texts += [text] if isinstance(text, str) else list(text)
        return self.tok(text, **kw)

    def __getattr__(self, name):
        return getattr(self.tok, name)


def test_a_relations_prefix_is_tokenized_once_not_per_option(tiny_model_path):
    """IC-LKE: after the first fact, no text handed to the tokenizer holds the 10 examples again
    (before: 1 + options times per fact), and the ids scored are the joint encoding's."""
    path = tiny_model_path("llama")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    counting = _Counting(AutoTokenizer.from_pretrained(path))
    prefix = " ".join(f"Country{i} City{i}" for i in range(10))
    options = [f" City{j}" for j in range(12)] + [" Bern am See", " Zürich"]
    facts = ["Peru", "Côte d'Ivoire", "Chile", "Peru Norte", "Kenya"]
    scorer = Scorer(model, counting, token_budget=256)
    base = scorer.prefix(prefix)
    scorer.score_choices([ChoiceRequest(f"{prefix} {facts[0]}", options)], shared_prefix=base)
    counting.texts.clear()
    got = scorer.score_choices([ChoiceRequest(f"{prefix} {s}", options) for s in facts[1:]], shared_prefix=base)
    assert counting.texts and not [t for t in counting.texts if "Country3 City3" in t]
    assert sum(map(len, counting.texts)) < 200  # the subjects only: every option was cached by text
    ref = Scorer(model, counting.tok, token_budget=256)
    want = ref.score_choices([ChoiceRequest(f"{prefix} {s}", options) for s in facts[1:]], shared_prefix=prefix)
    for a, b in zip(got, want):
        assert abs(a - b).max() <= 1e-5


def test_the_text_cache_never_grows_past_its_bound(tiny_model_path):
    """A run of many unique contexts keeps at most `max_tokens` in the cache (item 3: nothing grows with
    the run), and the ids stay those of the joint encoding across the cache's emptying."""
    tok = AutoTokenizer.from_pretrained(tiny_model_path("gpt2"))
    enc = ChoiceEncoder(tok, max_tokens=300)
    for i in range(120):
        context, options = f"Fact number {i} is about Paris", [" France", f" Country{i}"]
        assert enc.choices(context, options, head="Fact number") == encode_choices(tok, context, options)
        assert 0 < enc._held <= 300 + 40  # one call's misses may land on an emptied cache
