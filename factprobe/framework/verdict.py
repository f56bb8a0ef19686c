"""The per-fact verdict: the one contract of every gate (`compare`, `regress`, `baseline promote`, the
nightly paired test and the cross-model maps).

A probe declares a boolean per-fact column, `Probe.fact_verdict` (one of its `per_fact_columns`), and
a headline metric with a direction (`Headline.higher_is_better`). The headline is the share of facts
whose verdict is True, as `accuracy` is the share of `correct`. A fact is therefore *right* (it counts
for the model) when its verdict is True under a higher-is-better headline, and when it is False under
a lower-is-better one (`hallucinated` under `hallucination_rate`).

Every paired statistic (`factprobe.metrics.comparison`: McNemar, the paired bootstrap, subsumption
eta, `regression_gate`; `factprobe.report.cross_model_maps`) reads a `correct` column as "right".
`verdict_table` is the one place where a probe's verdict becomes that column; a gate never names a
probe, a column or a metric of its own. A table whose probe is not named (a bare results.jsonl) is
read with `DEFAULT_VERDICT`, the multiple-choice one (`correct`, `accuracy`, higher is better).

Pure: nothing here reads a file or loads a model; pandas is only handed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

    from .base import Probe

#: the column every paired statistic reads as "this fact is right"
RIGHT = "correct"


@dataclass(frozen=True)
class FactVerdict:
    """What a gate reads of a probe: its boolean per-fact `column`, the headline `metric` that column
    is the share of, and whether a higher headline is better."""

    column: str = RIGHT
    metric: str = "accuracy"
    higher_is_better: bool = True

    @property
    def compared(self) -> str:
        """The name of the compared proportion, the share of right facts: the headline metric when
        higher is better (`accuracy`, `hit_rate`), else `not_<column>` (`not_hallucinated`)."""
        return self.metric if self.higher_is_better else f"not_{self.column}"

    @property
    def direction(self) -> str:
        return "higher is better" if self.higher_is_better else "lower is better"

    def note(self) -> str:
        """ "" for a higher-is-better verdict; else one line saying what is compared, e.g. `compared:
        not_hallucinated, the share of facts without `hallucinated` (a lower hallucination_rate is better,
        so a rise of it is a drop here)`."""
        if self.higher_is_better:
            return ""
        return (
            f"compared: {self.compared}, the share of facts without `{self.column}` (a lower {self.metric} is "
            f"better, so a rise of it is a drop here)"
        )


#: the verdict of a per-fact table whose probe is not named (a bare results.jsonl): multiple choice
DEFAULT_VERDICT = FactVerdict()


def verdict_of(probe: Probe | str | None) -> FactVerdict | None:
    """The verdict of `probe` (a registered probe, its name, or None for a table that names none):
    its `fact_verdict` column with its headline's metric and direction (the column itself as the
    metric when it declares no headline); `DEFAULT_VERDICT` for None; None for a probe that declares
    no verdict or a name that is not registered here."""
    if probe is None:
        return DEFAULT_VERDICT
    if isinstance(probe, str):
        from .registry import load_probes

        found = load_probes().get(probe)
        if found is None:
            return None
        probe = found
    column = getattr(probe, "fact_verdict", None)
    if not column:
        return None
    head = getattr(probe, "headline_metric", None)
    return FactVerdict(column, head.metric if head else column, bool(getattr(head, "higher_is_better", True)))


def verdict_probes() -> list[str]:
    """Names of the registered probes (registry order, plug-ins included) that declare a per-fact verdict."""
    from .registry import load_probes

    return [name for name, p in load_probes().items() if verdict_of(p) is not None]


def why_no_verdict(probe: str) -> str:
    """Why runs of the probe named `probe` have no verdict, completing "<run> is a <probe> run...":
    ` (closed-book QA), with no verdict per fact`, or `, a probe not registered here (load its module
    with FACTPROBE_PROBE_MODULES)`."""
    from .registry import PLUGIN_ENV, load_probes

    known = load_probes().get(probe)
    if known is None:
        return f", a probe not registered here (load its module with {PLUGIN_ENV} or its entry point)"
    what = known.description.split(":")[0].strip()
    return f"{f' ({what})' if what else ''}, with no verdict per fact"


def table_problem(df: pd.DataFrame, verdict: FactVerdict) -> str:
    """ "" when per-fact table `df` can be read with `verdict`; else what is wrong, completing "<run> ...":
    `has no 'fact_id', 'hit' column in its per-fact table` or `has rows without a boolean `hit``."""
    missing = [c for c in ("fact_id", "relation", verdict.column) if c not in df.columns]
    if missing:
        return f"has no {', '.join(map(repr, missing))} column in its per-fact table"
    col = df[verdict.column]
    if col.isna().any() or not col.isin([True, False, 0, 1]).all():
        return f"has rows without a boolean `{verdict.column}` (not one verdict per fact)"
    return ""


def right_series(df: pd.DataFrame, verdict: FactVerdict) -> pd.Series:
    """The boolean "right" series of a checked per-fact table (`table_problem` is ""): its verdict
    column, negated when the headline is lower is better. Named `correct`, on `df`'s index."""
    right = df[verdict.column].astype(bool)
    return (right if verdict.higher_is_better else ~right).rename(RIGHT)


def verdict_table(
    df: pd.DataFrame, probe: Probe | str | None, who: str, needs: str, error: type[Exception] = ConfigError
) -> tuple[pd.DataFrame, FactVerdict]:
    """The per-fact table `df` of a run of `probe` (see `verdict_of`) as every gate reads it: a copy
    whose `correct` column is the right series (`right_series`; a `correct` column of another meaning
    is replaced), and the verdict read. Raises ConfigError (one line, `<who> is a <probe> run ...;
    <needs>`) when the probe declares no verdict or is not registered, and `error` (`<who> <problem>;
    <needs>`) when the table lacks `fact_id`, `relation` or a boolean verdict on every row. `who` names
    the run (`run a (path)`), `needs` says what the gate joins."""
    verdict = verdict_of(probe)
    if verdict is None:
        name = probe if isinstance(probe, str) else probe.name
        raise ConfigError(f"{who} is a {name} run{why_no_verdict(name)}; {needs}")
    problem = table_problem(df, verdict)
    if problem:
        raise error(f"{who} {problem}; {needs}")
    out = df.drop(columns=[RIGHT]) if RIGHT in df.columns and verdict.column != RIGHT else df.copy()
    out[RIGHT] = right_series(df, verdict)
    return out, verdict


__all__ = [
    "DEFAULT_VERDICT",
    "RIGHT",
    "FactVerdict",
    "right_series",
    "table_problem",
    "verdict_of",
    "verdict_probes",
    "verdict_table",
    "why_no_verdict",
]
