"""Closed-book QA metrics of FACT-Bench (Yuan et al. 2024, `papers/yuan2024-*`, section 2.2).

Per item: a free-text prediction against every accepted gold answer (the labels of all correct
objects of the subject-relation pair); each score is the maximum over the golds.

- `exact_match` (EM) and `f1`: the SQuAD v1.1 metrics over `normalize_answer` (lower case,
  punctuation removed, articles a/an/the removed as whole words, whitespace collapsed) and its
  whitespace tokens. `f1` is the token-overlap F1 of the SQuAD script.
- `contains`: 1 when some normalised gold occurs in the normalised prediction **on token
  boundaries**: the gold's tokens are a contiguous run of the prediction's tokens. So gold "78" is
  in "78 floors" but not in "1978", and gold "Lot" is not in "Lotus". (The paper: "checks if any of
  the ground-truth answers appear in the prediction"; a plain substring test would credit
  "1978" for "78" and any prediction containing "Iran" for "Ira".)
- Empty predictions (None, "" or whitespace only; `is_empty`) score 0 on all three.

Answer types (`ANSWER_TYPES`) change the normalisation applied before the SQuAD one, to both
prediction and gold:

- `entity`: none (SQuAD only).
- `date`: every date written in an unambiguous form is rewritten as "Month D, YYYY" (the
  paper's "month, day, year"), wherever it occurs in the text (`canonical_dates`): ISO
  `1964-03-10` (also `1964/03/10`), `10 March 1964`, `10th of March, 1964`, `March 10, 1964`,
  `Mar 10 1964`, `Mar. 10th, 1964`. Month-year forms become "Month YYYY" (`March 1964`,
  `Mar 1964`, `1964-03`, `1964-03-00`) and a year stays a year (`1964`, `1964-00-00`): a
  coarser date is never widened to a day. All-numeric day/month orders (`10/03/1964`,
  `03.10.1964`) are ambiguous and left as they are; so are impossible dates (`1964-02-30`).
  `normalize_date(s)` parses one whole string.
- `number`: thousands separators are removed ("1,000" == "1000"), numbers are written
  canonically (`+5` -> `5`, `78.0` -> `78`, `1.50` -> `1.5`, `007` -> `7`, the Unicode minus
  -> `-`), a decimal point and a leading minus sign survive the punctuation removal (SQuAD
  alone would turn "1.5" into "15"), and a unit written onto the number is split off
  ("500km" -> "500 km"). Units are *not* stripped: as in the paper ("for length, we check for
  500 kilometers or 500 km instead of just 500"), a gold with a unit needs the unit in the
  prediction, and `UNIT_ALIASES` makes the spellings of one unit equivalent in golds and
  predictions ("500 kilometres" == "500 km"). A bare gold ("78", the paper's "How many floors
  above ground does Premier Tower have? Answer: 78") against "78 floors": EM 0, F1 2/3,
  Contains 1. Number words ("seventy-eight") are not converted.

A gold whose SQuAD normalisation is empty (a band called "The The") is compared, with the
prediction, under a normalisation that keeps articles, so it can still be matched.

`summarize_qa` aggregates a per-item table; `popularity_bucket` assigns the paper's popularity
buckets. Everything here is a pure function (re, numpy and pandas only).
"""

from __future__ import annotations

import calendar
import math
import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

ANSWER_TYPES = ("entity", "date", "number")
SCORE_COLUMNS = ("em", "f1", "contains")
SUMMARY_COLUMNS = ("relation", "answer_type", "em", "f1", "contains", "empty")
POPULARITY_BUCKETS = ("top-25%", "middle", "bottom-25%", "unknown")


# ------------------------------------------------------------------ SQuAD v1.1 normalisation
def normalize_answer(s: str) -> str:
    """Lower text and remove punctuation, articles and extra whitespace (the SQuAD v1.1
    evaluation script's `normalize_answer`, unchanged)."""

    def remove_articles(text: str) -> str:
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text: str) -> str:
        return " ".join(text.split())

    def remove_punc(text: str) -> str:
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    def lower(text: str) -> str:
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


def _normalize_keep_articles(s: str) -> str:
    exclude = set(string.punctuation)
    return " ".join("".join(ch for ch in s.lower() if ch not in exclude).split())


# ------------------------------------------------------------------ dates
_MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_MONTH_OF = {name: i + 1 for i, name in enumerate(_MONTHS)}
_MONTH_OF.update({name[:3]: i + 1 for i, name in enumerate(_MONTHS)})
_MONTH_OF["sept"] = 9
_MONTH = r"(?:" + "|".join(sorted(_MONTH_OF, key=len, reverse=True)) + r")\.?"
_DAY = r"\d{1,2}(?:st|nd|rd|th)?"
_YEAR = r"\d{4}"
_DATE_RE = re.compile(
    r"(?<![\w/.\-])(?:"
    rf"(?P<iso_y>{_YEAR})(?P<sep>[-/])(?P<iso_m>\d{{1,2}})(?:(?P=sep)(?P<iso_d>\d{{1,2}}))?"
    rf"|(?P<dmy_d>{_DAY})\s+(?:of\s+)?(?P<dmy_m>{_MONTH}),?\s+(?P<dmy_y>{_YEAR})"
    rf"|(?P<mdy_m>{_MONTH})\s+(?P<mdy_d>{_DAY}),?\s+(?P<mdy_y>{_YEAR})"
    rf"|(?P<my_m>{_MONTH}),?\s+(?P<my_y>{_YEAR})"
    r")(?![\w/\-]|\.\d)",
    re.IGNORECASE,
)


def _canonical(year: str, month: str | int | None, day: str | None) -> str | None:
    """ "Month D, YYYY" / "Month YYYY" / "YYYY", or None for an impossible date."""
    y = int(year)
    if isinstance(month, str):
        key = month.lower().rstrip(".")
        m = _MONTH_OF.get(key) if not key.isdigit() else int(key)
    else:
        m = month
    if not m:  # month 00: only the year is known
        return None if day and int(re.sub(r"\D", "", day)) else str(y)
    if not 1 <= m <= 12:
        return None
    d = int(re.sub(r"\D", "", day)) if day else 0
    if not d:  # no day, or day 00
        return f"{calendar.month_name[m]} {y}"
    if d > calendar.monthrange(y, m)[1]:
        return None
    return f"{calendar.month_name[m]} {d}, {y}"


def _match_date(m: re.Match) -> str | None:
    g = m.groupdict()
    if g["iso_y"]:
        if g["iso_d"] is None and g["sep"] == "/":
            return None  # "1964/03" reads as a fraction or a range as easily as a month
        return _canonical(g["iso_y"], g["iso_m"], g["iso_d"])
    if g["dmy_y"]:
        return _canonical(g["dmy_y"], g["dmy_m"], g["dmy_d"])
    if g["mdy_y"]:
        return _canonical(g["mdy_y"], g["mdy_m"], g["mdy_d"])
    return _canonical(g["my_y"], g["my_m"], None)


def normalize_date(s: str) -> str | None:
    """The date that the whole of `s` writes, as "Month D, YYYY" ("March 10, 1964"), or None.

    Accepted (case-insensitive, surrounding whitespace and a final "." ignored):
    `1964-03-10`, `1964/03/10`, `10 March 1964`, `10th of March, 1964`, `March 10, 1964`,
    `Mar 10 1964`, `Mar. 10th, 1964`. Coarser dates keep their precision: `March 1964`,
    `Mar 1964`, `1964-03` and `1964-03-00` give "March 1964"; `1964` and `1964-00-00` give
    "1964". Ambiguous all-numeric day/month orders (`10/03/1964`) and impossible dates
    (`1964-02-30`, `1964-13-01`) give None.
    """
    text = s.strip()
    if text.endswith("."):
        text = text[:-1].rstrip()
    if re.fullmatch(r"\d{4}", text):
        return text
    m = _DATE_RE.fullmatch(text)
    return _match_date(m) if m else None


def canonical_dates(text: str) -> str:
    """`text` with every date written in a form `normalize_date` accepts rewritten in its
    canonical form; everything else (and every ambiguous or impossible date) unchanged."""

    def repl(m: re.Match) -> str:
        out = _match_date(m)
        return out if out is not None else m.group(0)

    return _DATE_RE.sub(repl, text)


# ------------------------------------------------------------------ numbers
#: spellings of one unit, already in normalised form (lower case, no punctuation, no articles);
#: the first is the canonical one
UNIT_ALIASES: tuple[tuple[str, ...], ...] = (
    ("km", "kilometre", "kilometres", "kilometer", "kilometers"),
    ("m", "metre", "metres", "meter", "meters"),
    ("cm", "centimetre", "centimetres", "centimeter", "centimeters"),
    ("mm", "millimetre", "millimetres", "millimeter", "millimeters"),
    ("km2", "km²", "sq km", "square kilometre", "square kilometres", "square kilometer", "square kilometers"),
    ("kg", "kilogram", "kilograms", "kilogramme", "kilogrammes"),
    ("t", "tonne", "tonnes", "metric ton", "metric tons"),
    ("°c", "° c", "degrees celsius", "degree celsius", "celsius"),
    ("mi", "mile", "miles"),
    ("ft", "foot", "feet"),
)
_UNIT_CANON = {alias: group[0] for group in UNIT_ALIASES for alias in group}
_UNIT_RE = re.compile(r"(?<=\d) (" + "|".join(re.escape(a) for a in sorted(_UNIT_CANON, key=len, reverse=True)) + r")(?=$| )")
_THOUSANDS_RE = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_NUMBER_RE = re.compile(r"(?<![\d.])(?<![^\W\d_])(?P<sign>(?<![\w])[-+\u2212])?(?P<int>\d+)(?:\.(?P<frac>\d+))?(?!\d)")
_SLOT_RE = re.compile("\ue000(\\d+)\ue001")


def _canonical_number(m: re.Match) -> str:
    whole = m.group("int").lstrip("0") or "0"
    frac = (m.group("frac") or "").rstrip("0")
    sign = "-" if m.group("sign") in ("-", "\u2212") and (whole != "0" or frac) else ""
    return f"{sign}{whole}.{frac}" if frac else f"{sign}{whole}"


def _normalize_number_text(s: str) -> str:
    """SQuAD normalisation that keeps numbers whole (module docstring, `number`)."""
    numbers: list[str] = []

    def protect(m: re.Match) -> str:
        numbers.append(_canonical_number(m))
        return f" \ue000{len(numbers) - 1}\ue001 "

    text = _NUMBER_RE.sub(protect, _THOUSANDS_RE.sub("", s))
    text = _SLOT_RE.sub(lambda m: numbers[int(m.group(1))], normalize_answer(text))
    return _UNIT_RE.sub(lambda m: " " + _UNIT_CANON[m.group(1)], text)


# ------------------------------------------------------------------ per-item scores
def _check_type(answer_type: str) -> None:
    if answer_type not in ANSWER_TYPES:
        raise ValueError(f"answer_type must be one of {', '.join(ANSWER_TYPES)}, got {answer_type!r}")


def normalize_typed(s: str, answer_type: str = "entity") -> str:
    """`s` normalised for comparison as an answer of `answer_type` (module docstring)."""
    _check_type(answer_type)
    if answer_type == "date":
        return normalize_answer(canonical_dates(s))
    if answer_type == "number":
        return _normalize_number_text(s)
    return normalize_answer(s)


def is_empty(pred: str | None) -> bool:
    """True for a prediction that is None, empty or only whitespace (it scores 0 everywhere)."""
    return pred is None or not str(pred).strip()


def _pairs(pred: str | None, golds: Sequence[str] | str, answer_type: str) -> list[tuple[str, str]]:
    """(normalised prediction, normalised gold) per gold; [] for an empty prediction."""
    _check_type(answer_type)
    golds = [golds] if isinstance(golds, str) else list(golds)
    if not golds:
        raise ValueError("golds is empty: an item needs at least one accepted answer")
    if is_empty(pred):
        return []
    pred = str(pred)
    npred = normalize_typed(pred, answer_type)
    out = []
    for g in golds:
        ng = normalize_typed(g, answer_type)
        if ng:
            out.append((npred, ng))
        elif g.strip():  # "The The": compare without removing articles
            base = canonical_dates if answer_type == "date" else (lambda t: t)
            out.append((_normalize_keep_articles(base(pred)), _normalize_keep_articles(base(g))))
    return out


def exact_match(pred: str | None, golds: Sequence[str] | str, answer_type: str = "entity") -> float:
    """1.0 when the normalised prediction equals some normalised gold, else 0.0."""
    return max((float(p == g) for p, g in _pairs(pred, golds, answer_type)), default=0.0)


def _token_f1(pred: str, gold: str) -> float:
    p, g = pred.split(), gold.split()
    common = Counter(p) & Counter(g)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def f1(pred: str | None, golds: Sequence[str] | str, answer_type: str = "entity") -> float:
    """SQuAD token F1 between the normalised prediction and gold, maximised over the golds."""
    return max((_token_f1(p, g) for p, g in _pairs(pred, golds, answer_type)), default=0.0)


def contains(pred: str | None, golds: Sequence[str] | str, answer_type: str = "entity") -> float:
    """1.0 when some normalised gold occurs in the normalised prediction on token boundaries."""
    return max((float(f" {g} " in f" {p} ") for p, g in _pairs(pred, golds, answer_type) if g), default=0.0)


def score_answer(pred: str | None, golds: Sequence[str] | str, answer_type: str = "entity") -> dict:
    """All per-item scores at once: `{"em", "f1", "contains", "empty"}` (floats and a bool)."""
    return {
        "em": exact_match(pred, golds, answer_type),
        "f1": f1(pred, golds, answer_type),
        "contains": contains(pred, golds, answer_type),
        "empty": is_empty(pred),
    }


# ------------------------------------------------------------------ popularity
def popularity_bucket(values: Iterable[float | None]) -> list[str]:
    """The FACT-Bench popularity bucket of each value, in order: "top-25%", "bottom-25%",
    "middle", or "unknown" for None / NaN.

    Quartiles are those of the known values (numpy's default linear interpolation): a value
    <= the first quartile is "bottom-25%", one >= the third quartile "top-25%", any other
    "middle". When the two quartiles are equal (few or tied values), a value equal to both is
    "middle". The caller decides the population (all items, or one relation's items).
    """
    vals = [None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v) for v in values]
    known = np.array([v for v in vals if v is not None], dtype=float)
    if known.size == 0:
        return ["unknown"] * len(vals)
    q1, q3 = np.percentile(known, [25, 75])
    out = []
    for v in vals:
        if v is None:
            out.append("unknown")
        elif v <= q1 and v >= q3:
            out.append("middle")
        elif v <= q1:
            out.append("bottom-25%")
        elif v >= q3:
            out.append("top-25%")
        else:
            out.append("middle")
    return out


# ------------------------------------------------------------------ summary
def _mean(series: pd.Series) -> float | None:
    value = float(series.mean()) if len(series) else float("nan")
    return None if math.isnan(value) else value


def _group_summary(df: pd.DataFrame) -> dict:
    return {
        "n": len(df),
        "n_empty": int(df["empty"].sum()),
        **{c: _mean(df[c]) for c in SCORE_COLUMNS},
    }


def score_intervals(df: pd.DataFrame, n_boot: int = 1000, seed: int = 0) -> dict:
    """`{"em_ci", "f1_ci", "contains_ci"}`: the 95% percentile bootstrap interval `[lo, hi]` of each
    mean score over the items of `df` (`bootstrap.bootstrap_ci`, the intervals the multiple-choice
    probes give their accuracy); None where there is no item. The items (rows) are the only source
    of chance it covers, not the draw of the exemplars they were asked with (the counterfactual probe
    replaces them by a crossed t-interval when a setting has several exemplar draws)."""
    from .bootstrap import bootstrap_ci

    if not len(df):
        return {f"{c}_ci": None for c in SCORE_COLUMNS}
    return {f"{c}_ci": list(bootstrap_ci(df[c].to_numpy(dtype=float), n_boot=n_boot, seed=seed)) for c in SCORE_COLUMNS}


def summarize_qa(rows: pd.DataFrame, n_boot: int = 1000, seed: int = 0) -> dict:
    """All QA scalars of one run, from a per-item table.

    `rows` has one row per item with columns `relation` (str), `answer_type` (str), `em`,
    `f1`, `contains` (floats in [0, 1]) and `empty` (bool), and optionally
    `popularity_bucket` (str). Returns plain Python numbers::

        {"n", "n_empty", "em", "f1", "contains",            # micro: over all items
         "em_ci", "f1_ci", "contains_ci",                   # their 95% intervals (`score_intervals`)
         "macro_em", "macro_f1", "macro_contains",          # mean of the per-relation means
         "per_relation":    {relation: {"n", "n_empty", "em", "f1", "contains"}},
         "per_answer_type": {answer_type: {...the same keys}},
         "per_popularity":  {bucket: {...}}}                # only with a popularity_bucket column

    Groups are in sorted order. Undefined means (no rows) are None, never NaN. Raises
    ValueError naming the missing columns.
    """
    missing = [c for c in SUMMARY_COLUMNS if c not in rows.columns]
    if missing:
        raise ValueError(f"QA results table lacks column(s) {missing}; has {list(rows.columns)}")
    df = rows.copy()
    df["relation"] = df["relation"].astype(str)
    df["answer_type"] = df["answer_type"].astype(str)
    df["empty"] = df["empty"].astype(bool)
    for c in SCORE_COLUMNS:
        df[c] = df[c].astype(float)
    per_relation = {rel: _group_summary(g) for rel, g in sorted(df.groupby("relation", sort=False), key=lambda kv: kv[0])}
    out: dict = {**_group_summary(df), **score_intervals(df, n_boot, seed)}
    for c in SCORE_COLUMNS:
        vals = [r[c] for r in per_relation.values() if r[c] is not None]
        out[f"macro_{c}"] = float(np.mean(vals)) if vals else None
    out["per_relation"] = per_relation
    out["per_answer_type"] = {
        t: _group_summary(g) for t, g in sorted(df.groupby("answer_type", sort=False), key=lambda kv: kv[0])
    }
    if "popularity_bucket" in df.columns:
        buckets = df["popularity_bucket"].fillna("unknown").astype(str)
        out["per_popularity"] = {b: _group_summary(g) for b, g in sorted(df.groupby(buckets, sort=False), key=lambda kv: kv[0])}
    return out
