"""Answer matching for BELIEF-ICL (zhao2024 section 3.2): spaCy normalisation, partial matching.

Generated answers vary in form ("a guitar", "guitars", "Guitar."), so both strings are
normalised before they are compared:

1. lower case;
2. tokenised with `spacy.blank("en")` (spaCy's rule-based English tokenizer, no statistical model);
3. every token replaced by its lemma from the *lookup* lemmatizer (`lemmatizer` in mode
   `"lookup"`, the `lemma_lookup` table of `spacy-lookups-data`), so "guitars" -> "guitar",
   "mice" -> "mouse";
4. punctuation and whitespace tokens dropped, and the articles "a", "an", "the" dropped.

`normalize(text)` returns the remaining lemmas as a tuple ("A guitar." -> `("guitar",)`).

Matching is *partial*: the normalised token list of one string is included in the other's as a
contiguous run of tokens (so "york" is in "new york city", "78" is not in "1978", "lot" is not in
"lotus"). The paper says "if a normalized string list is included in the other"; we read
"included" as a contiguous run, the strictest reading that still accepts extra words around the
answer.

- Accuracy is one-directional (`accuracy_match`): some gold (any correct object label or alias)
  must be included in the generated answer. A generation of unrelated words containing no gold is
  wrong, and a gold longer than the answer never matches.
- Consistency and confidence are bidirectional (`consistency_match`): two generated answers match
  when either is included in the other.
- An empty answer (empty or whitespace-only text, or one that normalises to no token, e.g. ".")
  matches nothing, not even another empty answer: an empty generation is always wrong.

`one_word(text)`: the answer is one word, i.e. exactly one whitespace-separated chunk containing a
letter or digit ("Paris." and "Saint-Denis" are one word, "New York" and "a guitar" are two). This
is the "1-word ratio" of zhao2024 Table 4 (draft Table 4: "single-word generation").

The spaCy pipeline is built once per process (module-level cache); normalisations are memoised.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

from ..errors import ConfigError

ARTICLES = frozenset({"a", "an", "the"})
_WORD = re.compile(r"\S+")
_HAS_ALNUM = re.compile(r"\w")

Normalized = tuple[str, ...]


@lru_cache(maxsize=1)
def nlp():
    """The one spaCy pipeline: `spacy.blank("en")` plus the lookup lemmatizer (built once)."""
    try:
        import spacy
    except ImportError:  # spaCy comes with the `belief` extra
        raise ConfigError(
            "BELIEF-ICL answer matching needs spaCy, which is not installed: pip install 'factprobe[belief]'"
        ) from None
    pipeline = spacy.blank("en")
    pipeline.add_pipe("lemmatizer", config={"mode": "lookup"})
    try:
        pipeline.initialize()
    except (ValueError, OSError) as e:  # the lookup tables come from spacy-lookups-data
        raise ConfigError(
            "spaCy's lookup lemmatizer has no tables (spacy-lookups-data is missing): "
            f"pip install 'factprobe[belief]' ({type(e).__name__})"
        ) from None
    return pipeline


def _lemmas(doc) -> Normalized:
    return tuple(t.lemma_ for t in doc if not (t.is_punct or t.is_space) and t.lemma_ not in ARTICLES and t.lemma_.strip())


#: normalisations computed so far (text -> lemmas); cleared when it grows past _CACHE_MAX
_CACHE: dict[str, Normalized] = {}
_CACHE_MAX = 500_000


def _remember(text: str, value: Normalized) -> Normalized:
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.clear()
    _CACHE[text] = value
    return value


def normalize(text: str | None) -> Normalized:
    """Lower-cased lemmas of `text` without punctuation, whitespace and articles (see module doc)."""
    if text is None or not str(text).strip():
        return ()
    text = str(text)
    hit = _CACHE.get(text)
    return hit if hit is not None else _remember(text, _lemmas(nlp()(text.lower())))


def normalize_many(texts: Iterable[str | None]) -> list[Normalized]:
    """`normalize` of every text, in order; texts not seen before go through `nlp().pipe` together."""
    texts = ["" if t is None else str(t) for t in texts]
    todo = list(dict.fromkeys(t for t in texts if t.strip() and t not in _CACHE))
    for t, doc in zip(todo, nlp().pipe([t.lower() for t in todo])):
        _remember(t, _lemmas(doc))
    return [normalize(t) for t in texts]


def included(part: Sequence[str], whole: Sequence[str]) -> bool:
    """True when the non-empty token list `part` is a contiguous run of `whole`."""
    n = len(part)
    if n == 0 or n > len(whole):
        return False
    first = part[0]
    return any(whole[i] == first and tuple(whole[i : i + n]) == tuple(part) for i in range(len(whole) - n + 1))


def accuracy_match(answer: str, golds: Iterable[str]) -> bool:
    """One-directional: some gold's normalisation is included in the answer's (empty answer: False)."""
    a = normalize(answer)
    return bool(a) and any(included(normalize(g), a) for g in golds)


def consistency_match(a: str, b: str) -> bool:
    """Bidirectional: either answer's normalisation is included in the other's (empties: False)."""
    x, y = normalize(a), normalize(b)
    return bool(x) and bool(y) and (included(x, y) or included(y, x))


def is_empty(text: str | None) -> bool:
    """An empty or whitespace-only generation (always wrong, counted in metrics.json)."""
    return text is None or not str(text).strip()


def one_word(text: str | None) -> bool:
    """Exactly one whitespace-separated chunk holding a letter or digit ("Paris." yes, "New York" no)."""
    if text is None:
        return False
    return sum(1 for w in _WORD.findall(str(text)) if _HAS_ALNUM.search(w)) == 1


def confidence(greedy: str, samples: Sequence[str]) -> float | None:
    """Share of `samples` that `consistency_match` the greedy answer (None without samples); an
    empty greedy answer matches no sample, so its confidence is 0."""
    if not samples:
        return None
    normalize_many(list(samples) + [greedy])
    return sum(1 for s in samples if consistency_match(greedy, s)) / len(samples)
