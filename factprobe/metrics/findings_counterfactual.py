"""yuan2024's counterfactual-ICL claim (section 4.2, Figure 7) as a verdict (issue 37 item 1); imported
through `factprobe.metrics.findings`, the one place to import the claims from.

The paper's comparison: "Comparing known-shuffle with unknown-shuffle ... LLaMA-65B drops from 52.45%
EM (regular 10-shot) to 26.60% with known-shuffle while the drop with unknown-shuffle is much less
significant". So the claim is

    value = EM(unknown-shuffle) - EM(known-shuffle)   (= (R - KS) - (R - US), R the regular 10-shot)

and it holds when the 95% interval lies above 0. The paper also states "we observe comparable
performances for known-unshuffle and unknown-unshuffle": the premise that the known and unknown
exemplar sets are equally good when true. `premise` = EM(known-unshuffle) - EM(unknown-unshuffle)
is reported beside the claim with the same kind of interval, and when that interval excludes 0 the
verdict's note says the premise fails (the claim's difference may then come from the exemplar sets,
not from the shuffling).

The interval covers both sources of chance: the evaluation questions and the exemplar draw (which
known / unknown facts are the exemplars, and which wrong answers they are shown with). The
counterfactual probe draws `exemplar_draws` independent exemplar sets per setting
(`factprobe.probes.counterfactual`); every question is asked with every draw, so the per-question
differences form a crossed draws x questions table D. `crossed_t_interval` gives the mean of D with
the variance var(draw means) / draws + var(question means) / questions (each term also holds the
interaction / (draws x questions), so the sum counts it twice: conservative, as resampling draws and
questions independently, Owen's pigeonhole bootstrap, does) and the t quantile of draws - 1 degrees
of freedom (the fewer of the two terms' degrees of freedom). Why this one: in a simulation of 0/1
EM with a known zero effect, 240 questions and 2, 3 or 5 draws (draw effects up to 0.6 and
question effects up to 2 on the logit scale, 1000 runs each), it covered 0.966-1.0; a two-level
percentile bootstrap (draws, then questions) covered down to 0.73 (2 draws give 3 distinct draw
resamples and a normal quantile where t(1) is 12.7), a t-interval over the draw means alone down
to 0.82 (the questions are the same in every draw, so their spread is not in the draw means), and
Satterthwaite's degrees of freedom down to 0.87 at 2-3 draws. The price is width: with 2 draws the
quantile is 12.7. tests/metrics/test_findings_counterfactual.py repeats the coverage check. With ONE
draw the draw's variance cannot be estimated: the interval then covers the questions only (a
t-interval over the question means) and the verdict is inconclusive.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .findings_rule import INCONCLUSIVE, MIN_DRAWS, Finding, not_measured, num_or_none, verdict

#: yuan2024 Figure 7's k (shots)
PAPER_SHOTS = (10, 15, 20, 32)
#: yuan2024: for LLaMA-7B "its performances stay flat across different settings" (Figure 7); "the performance of
#: smaller models remains flat and unaffected" (Figure 6). At most this many parameters: the paper reports no effect.
PAPER_NO_EFFECT_PARAMS = 7.5e9
FIGURE7 = ("known-unshuffle", "known-shuffle", "unknown-unshuffle", "unknown-shuffle")
CLAIM = "counterfactual-known"
METHOD = "crossed t-interval over exemplar draws x questions (df = draws - 1)"


def crossed_t_interval(table: np.ndarray | Sequence[Sequence[float]], alpha: float = 0.05) -> tuple[float, float, float, float]:
    """(mean, lo, hi, df) of a crossed draws x questions table (rows: draws; module docstring):
    variance var(row means) / rows + var(column means) / columns, t quantile at rows - 1 degrees of
    freedom. One row (one draw): the column term alone at columns - 1 degrees of freedom (a
    t-interval over the questions). NaN ends when the table has fewer than 2 columns; (m, m, m, df)
    when every value is equal."""
    from scipy import stats

    d = np.asarray(table, dtype=float)
    if d.ndim != 2 or d.size == 0:
        return (float("nan"),) * 4
    rows, cols = d.shape
    m = float(d.mean())
    if cols < 2:
        return m, float("nan"), float("nan"), float("nan")
    v_draw = float(d.mean(axis=1).var(ddof=1)) / rows if rows > 1 else 0.0
    v_q = float(d.mean(axis=0).var(ddof=1)) / cols
    df = float(rows - 1 if rows > 1 else cols - 1)
    h = float(stats.t.ppf(1 - alpha / 2, df)) * math.sqrt(v_draw + v_q)
    return m, m - h, m + h, df


def em_tables(rows: Iterable[Mapping[str, Any]], k: int) -> dict[str, dict[tuple[int, str], float]]:
    """{Figure-7 setting: {(draw, fact_id): EM}} of the evaluation rows asked with k shots (a row
    without `draw`, from a probe run before issue 37, is draw 0)."""
    em: dict[str, dict[tuple[int, str], float]] = {s: {} for s in FIGURE7}
    for r in rows:
        if r.get("split", "eval") == "eval" and r["setting"] in em and int(r["shots_asked"]) == k:
            em[r["setting"]][(draw_of(r), str(r["fact_id"]))] = float(r["em"])
    return em


def draw_of(row: Mapping[str, Any]) -> int:
    """The row's exemplar draw: 0 when it has none (None, or NaN in a table mixing older rows)."""
    d = row.get("draw")
    return 0 if d is None or (isinstance(d, float) and math.isnan(d)) else int(d)


def _crossed(em: Mapping[str, Mapping[tuple[int, str], float]]) -> tuple[list[int], list[str]]:
    """The draws and the questions present in every Figure-7 setting (the table is then full)."""
    keys = set.intersection(*(set(v) for v in em.values()))
    draws = sorted({d for d, _ in keys})
    facts = sorted({f for _, f in keys})
    draws = [d for d in draws if all((d, f) in keys for f in facts)]
    facts = [f for f in facts if all((d, f) in keys for d in draws)]
    return draws, facts


def _diff(em, a: str, b: str, draws: list[int], facts: list[str]) -> np.ndarray:
    return np.array([[em[a][(d, f)] - em[b][(d, f)] for f in facts] for d in draws], dtype=float)


def _interval(table: np.ndarray) -> dict[str, Any]:
    m, lo, hi, df = crossed_t_interval(table)
    return {"value": num_or_none(m), "ci": [num_or_none(lo), num_or_none(hi)], "df": num_or_none(df)}


def premise_note(premise: Mapping[str, Any]) -> str | None:
    """The verdict's note when the paper's premise fails (the known-unshuffle - unknown-unshuffle
    interval excludes 0), else None."""
    lo, hi = premise.get("ci") or (None, None)
    if lo is None or hi is None or lo <= 0.0 <= hi:
        return None
    return (
        f"the paper's premise fails: known-unshuffle - unknown-unshuffle = {premise['value']:+.3f} "
        f"[{lo:+.3f}, {hi:+.3f}], where yuan2024 observes them comparable"
    )


def counterfactual_known_vs_unknown(
    model: str,
    rows: Iterable[Mapping[str, Any]],
    k: int,
    *,
    shots_used: Mapping[str, int] | None = None,
    n_boot: int = 2000,
    seed: int = 0,
) -> Finding:
    """Known exemplars with shuffled answers lower EM more than unknown ones, at one k (module
    docstring): value = EM(unknown-shuffle) - EM(known-shuffle) over the questions and exemplar draws
    present in all four Figure-7 settings; n = questions; `detail["premise"]` = known-unshuffle -
    unknown-unshuffle with its interval. `rows`: the counterfactual probe's result rows (`split`,
    `setting`, `shots_asked`, `fact_id`, `em`, `draw`). `n_boot`, `seed`: unused (the interval is
    analytic), kept so every claim takes the same arguments."""
    rows = list(rows)
    em = em_tables(rows, k)
    draws, facts = _crossed(em)
    detail: dict[str, Any] = {
        "rule": "EM(unknown-shuffle) - EM(known-shuffle) per question and exemplar draw (yuan2024 4.2: (R - KS) - (R - US)); "
        "holds when the 95% interval > 0; known-unshuffle - unknown-unshuffle beside it checks the paper's premise",
        "method": METHOD,
        "k": k,
        "unit": "questions",
        "draws": len(draws),
        **{f"em_{s}": (float(np.mean([em[s][(d, f)] for d in draws for f in facts])) if facts else None) for s in FIGURE7},
    }
    regular = [float(r["em"]) for r in rows if r.get("split", "eval") == "eval" and r["setting"] == "regular"]
    if regular and facts:
        detail["em_regular"] = float(np.mean(regular))
        detail["drop_known_shuffle"] = detail["em_regular"] - detail["em_known-shuffle"]
        detail["drop_unknown_shuffle"] = detail["em_regular"] - detail["em_unknown-shuffle"]
    if shots_used:
        detail["shots_used"] = dict(shots_used)
        if len({int(v or 0) for v in shots_used.values()}) > 1:
            detail["caveat"] = "the settings used different k (too few known or unknown train facts)"
        empty = sorted(s for s, v in shots_used.items() if not v)
        if empty:
            why = f"no exemplar in {', '.join(empty)} (the model knows too few or too many of the train facts)"
            return Finding(CLAIM, model, INCONCLUSIVE, None, (None, None), 0, {**detail, "not_measured": why})
    if not facts:
        why = f"no question has all four Figure-7 settings at k={k}"
        return Finding(CLAIM, model, INCONCLUSIVE, None, (None, None), 0, {**detail, "not_measured": why})
    claim = _diff(em, "unknown-shuffle", "known-shuffle", draws, facts)
    premise = _interval(_diff(em, "known-unshuffle", "unknown-unshuffle", draws, facts))
    value, lo, hi, df = crossed_t_interval(claim)
    detail.update(df=num_or_none(df), per_draw=[float(x) for x in claim.mean(axis=1)], premise=premise)
    detail["method"] = f"{METHOD}: {len(draws)} draw(s) x {len(facts)} questions"
    v = verdict(lo, hi, len(facts), direction="above")
    if len(draws) < MIN_DRAWS:
        detail["caveat_draws"] = (
            "one exemplar draw: the interval covers the questions only, not the draw (run the probe with exemplar_draws >= 2)"
        )
        v = INCONCLUSIVE
    note = premise_note(premise)
    if note:
        detail["verdict_note"] = note
    return Finding(CLAIM, model, v, value, (lo, hi), len(facts), detail)


def paper_scale_note(n_params: float | None) -> str | None:
    """The note a counterfactual verdict carries for a model at a scale where yuan2024 reports no
    effect (at most `PAPER_NO_EFFECT_PARAMS` parameters); None for a larger or unknown size."""
    if n_params is None or not n_params <= PAPER_NO_EFFECT_PARAMS:
        return None
    return (
        f'the paper reports no effect at this scale ({n_params / 1e9:.2g}B parameters): for LLaMA-7B "its '
        'performances stay flat across different settings" (yuan2024 Figure 7); with 10 counterfactual shots "the '
        'performance of smaller models remains flat and unaffected" (Figure 6)'
    )


def counterfactual_over_k(
    model: str,
    rows: Iterable[Mapping[str, Any]],
    ks: Sequence[int],
    *,
    shots_used: Mapping[int, Mapping[str, int]] | None = None,
    n_params: float | None = None,
    n_boot: int = 2000,
    seed: int = 0,
) -> Finding:
    """yuan2024 Figure 7 over the k values run (`ks`, the paper's are `PAPER_SHOTS`): the finding at
    the largest k with a measured value (the paper's gap grows with k), with every k's value,
    interval, n, premise and verdict in `detail["per_k"]`; `detail["verdict_note"]` says when the
    paper's premise fails at that k and when the paper reports no effect at the model's scale
    (`paper_scale_note`)."""
    rows = list(rows)
    per = [
        counterfactual_known_vs_unknown(model, rows, int(k), shots_used=(shots_used or {}).get(int(k)), n_boot=n_boot, seed=seed)
        for k in sorted({int(k) for k in ks})
    ]
    if not per:
        return not_measured(CLAIM, model, "no k was run")
    measured = [f for f in per if f.value is not None]
    main = measured[-1] if measured else per[-1]
    main.detail["per_k"] = [
        {
            "k": f.detail["k"],
            "value": num_or_none(f.value),
            "ci": [num_or_none(f.ci[0]), num_or_none(f.ci[1])],
            "n": f.n,
            "draws": f.detail.get("draws"),
            "premise": (f.detail.get("premise") or {}).get("value"),
            "premise_ci": (f.detail.get("premise") or {}).get("ci"),
            "verdict": f.verdict,
        }
        for f in per
    ]
    main.detail["judged_at"] = "the largest k measured (the paper's gap grows with k)"
    missing = sorted(set(PAPER_SHOTS) - {int(k) for k in ks})
    if missing:
        main.detail["paper_k_not_run"] = missing
    if n_params is not None:
        main.detail["n_params"] = float(n_params)
    notes = [n for n in (main.detail.get("verdict_note"), paper_scale_note(n_params)) if n]
    if notes:
        main.detail["verdict_note"] = "; ".join(notes)
    return main


__all__ = [
    "FIGURE7",
    "PAPER_NO_EFFECT_PARAMS",
    "PAPER_SHOTS",
    "counterfactual_known_vs_unknown",
    "counterfactual_over_k",
    "crossed_t_interval",
    "em_tables",
    "paper_scale_note",
    "premise_note",
]
