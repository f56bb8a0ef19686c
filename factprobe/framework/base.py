"""The probe interface: the `Probe` base class and the `Session` a probe scores with.

A probe is one module that defines a `Probe` subclass and registers it (`factprobe.framework.registry`).
It declares four things:

1. `name`: the CLI subcommand, the component's and pipelines' `probe` value (`ic-lke`, ...);
2. `config_class`: its own config dataclass (a `ConfigBase`; fields carry their help text);
3. `prepare(cfg) -> Prepared`: how it builds its items from the facts (through `factprobe.datasets`);
4. `score_batch(session, state, batch) -> rows`: how it scores a batch of items into result rows.

The data contract (`factprobe.framework.contract`, checked right after `prepare` on every path)
-------------------------------------------------------------------------------------------
`prepare` returns a `Prepared` with the run's test facts in `facts["test"]` (a `FactSet`) and its
items in `items` {relation: [item, ...]}. Each item is a record a pipeline can save and read back:
a non-empty string `fact_id` (the test fact it asks about; several items may share one, e.g. one per
template), a `relation` equal to its group's key, `to_dict()` giving a JSON object with that
`relation`, and a `from_dict` class method that reads it back to the same item; one item class per
dataset. Plain tuples or dicts are refused. A `Prepared` that breaks a rule is refused in one line
naming the probe and the rule (`ContractError`) before anything is saved or scored.

Which test facts a run covers is the framework's: after `prepare` it keeps only the items of
`--relations` and at most `--max-facts-per-relation` facts per relation (a seeded draw over each
relation's facts in item order, every item of a kept fact kept; `factprobe.datasets.cap`). A probe
need not apply either itself; one that caps earlier (to build less) uses the same draw. `Probe` wraps
every subclass's `prepare` with this check and cap, so the CLI, the Python API, the pipeline's
data-build step and `regress` all see the same items.

Optional hooks have defaults: `open_relation` (per-relation state, e.g. a cached prefix),
`item_tokens` (the tokens an item forwards: the runner then fills the scorer's token budget with items,
`batches_for`), `batches` (how a relation's items are cut otherwise: `batch_size` at a time, or the
probe's own grouping), `item_keys` (result keys of an item), `metrics`
(metrics.json content), `artifacts` (extra files such as a parquet table, written atomically
with the results) and `model_kinds` ("causal", "masked").

The runner scores `groups(cfg, prepared)` (default `prepared.items`: one group per relation), in
order. A probe whose later items depend on earlier results (counterfactual ICL needs the model's
known facts first) returns phases instead; `session.done` holds every row already scored
(resumed ones included) when a group is opened.

Reporting is the probe's too (`factprobe.framework.reporting` describes each declaration):
`headline_metric`, `headline_keys`, `per_fact_columns`, `relation_metric`, `fact_verdict`,
`report_group`, and the hooks `flat_metrics`, `stepped_metrics`, `relation_table`, `relation_text`,
`run_figures` and `report`. The defaults fit a probe with top-level numbers and a `per_relation`
table; the operations layer (tracking/, components/, the CLI) calls only these.

`metric_columns` names the row fields `metrics` and `artifacts` read: the runner hands them the
written rows read back and cut down to those fields (`factprobe.framework.row_stream`), so a run's memory
does not grow with its rows; reading another field raises `ProjectionError`. None (the default, for
plug-ins written before it): whole rows, held in memory together.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from .reporting import (
    DEFAULT_PER_FACT_COLUMNS,
    Headline,
    MapVerdict,
    ReportPart,
    ReportRun,
    generic_flat_metrics,
    generic_relation_table,
    model_label,
    number,
    relation_rows,
    top_level_metrics,
)

if TYPE_CHECKING:  # torch stays unimported for callers that only build data
    import pandas as pd

    from ..config import ConfigBase
    from ..datasets.prepared import Prepared
    from .config import RunConfig


def _with_contract(prepare: Callable[[Any, RunConfig], Any]) -> Callable[[Any, RunConfig], Prepared]:
    """`prepare` followed by the data contract (the raw method stays reachable as `__wrapped__`)."""

    @functools.wraps(prepare)
    def checked(self: Any, cfg: RunConfig) -> Prepared:
        from .contract import apply_contract

        return apply_contract(self, cfg, prepare(self, cfg))

    checked._contract_applied = True  # type: ignore[attr-defined]
    return checked


@dataclass
class Session:
    """What a probe scores with: the run config, the loaded model, the prepared data, a way to
    leave notes for metrics.json, and lazily built engines (`scorer`, `generator`)."""

    cfg: RunConfig
    loaded: Any  # a factprobe.lm.interface.LanguageModel: factprobe.models.LoadedModel or a served model
    prepared: Prepared
    note: Callable[[str], None]
    #: rows scored so far in this output folder, by key (resumed rows included); read-only for probes
    done: dict[str, dict] = field(default_factory=dict)
    _engines: dict[str, Any] = field(default_factory=dict)

    @property
    def scorer(self):
        """The log-prob engine of this model (`factprobe.lm.interface.ScoringEngine`: the local shared-prefix
        scorer or a served model's), made once by the model (`LanguageModel.make_scorer`)."""
        if "scorer" not in self._engines:
            self._engines["scorer"] = self.loaded.make_scorer(self.cfg.base.token_budget)
        return self._engines["scorer"]

    @property
    def generator(self):
        """The generation engine of this model (`factprobe.lm.interface.GenerationEngine`), made once by the
        model (`LanguageModel.make_generator`)."""
        if "generator" not in self._engines:
            self._engines["generator"] = self.loaded.make_generator(self.cfg.base.token_budget)
        return self._engines["generator"]

    def generator_for_rows(self, rows: int, tokens_per_row: int):
        """The generator, with a token budget that holds `rows` prompts of `tokens_per_row` tokens
        (prompt + new tokens) per batch unless the run set `--token-budget` (which then wins).
        For k-shot blocks: the budget counts the shared block in every row."""
        gen = self.generator
        if self.cfg.base.token_budget is None:
            gen.token_budget = max(gen.token_budget, rows * tokens_per_row)
        return gen

    def token_stats(self) -> dict[str, Any]:
        """Token counters of the engines used so far (for metrics.json and MLflow)."""
        out: dict[str, Any] = {}
        scorer = self._engines.get("scorer")
        if scorer is not None:
            s = scorer.stats
            out.update(
                tokens_forwarded=s.total_tokens,
                forwards=s.forwards,
                tokenization_fallbacks=s.fallbacks,
                naive_tokens=s.naive_tokens,
                token_savings=s.savings,
            )
        gen = self._engines.get("generator")
        if gen is not None:
            g = gen.stats
            out.update(
                generated_tokens=g.decode_tokens,
                generation_tokens_forwarded=g.total_tokens,
                generation_prefix_tokens=g.prefix_tokens,
                generation_naive_prompt_tokens=g.naive_prompt_tokens,
                generation_forwards=g.forwards,
            )
        return out


class Probe:
    """Base class of every probe; see the module docstring for the contract."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Wrap a subclass's own `prepare` so that what it returns goes through the data contract
        (`factprobe.framework.contract.apply_contract`: checked, then `--relations` and the cap applied)."""
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("prepare")
        if own is not None and not getattr(own, "_contract_applied", False):
            cls.prepare = _with_contract(own)  # type: ignore[method-assign]

    name: ClassVar[str]
    config_class: ClassVar[type[ConfigBase]]
    description: ClassVar[str] = ""
    model_kinds: ClassVar[tuple[str, ...]] = ("causal",)
    #: name of the prepared dataset; probes with the same name and data fields share one build
    dataset: ClassVar[str] = ""
    #: items per batch of a probe without `item_tokens` (or on a served model): `batches`
    batch_size: ClassVar[int] = 8

    def prepare(self, cfg: RunConfig) -> Prepared:
        """Build this probe's items from the facts the config names (no model needed). What it returns
        goes through the data contract (module docstring): checked, then `--relations` and
        `--max-facts-per-relation` applied by the framework."""
        raise NotImplementedError

    def item_keys(self, cfg: RunConfig, prepared: Prepared, item: Any) -> list[str]:
        """The result-row keys one item yields (default: its fact id); used for resuming."""
        return [item.fact_id]

    def open_relation(self, session: Session, relation: str) -> Any:
        """Per-relation state shared by the batches of that relation (default: None)."""
        return None

    def batches(self, cfg: RunConfig, items: Sequence[Any]) -> Iterable[Sequence[Any]]:
        """Cut a relation's items (those still to score) into batches; one checkpoint each. Used by
        `batches_for` for a probe without `item_tokens` (default: `batch_size` items at a time)."""
        for b in range(0, len(items), self.batch_size):
            yield items[b : b + self.batch_size]

    def item_tokens(self, session: Session, state: Any, item: Any) -> int | None:
        """The query tokens `score_batch` has the scorer forward for `item` in packed passes (after the
        group's shared prefix; exact per-candidate fallbacks not counted); None (default): this probe's
        batches are `batches`. The tokenization it needs is cached, so scoring costs no second one."""
        return None

    def batches_for(self, session: Session, state: Any, items: Sequence[Any]) -> Iterable[Sequence[Any]]:
        """The batches the runner scores (one checkpoint each), lazily, in item order. A probe with
        `item_tokens` on an in-process model gets batches that fill the scorer's token budget: items are
        added while their tokens fit (`session.scorer.token_budget`: 1024 on CPU, 8192 on CUDA, or
        `--token-budget`); an item over the budget is a batch of its own; an item counts at least 1. Other
        probes, and served models (which pack nothing), get `batches(cfg, items)`."""
        if not items:
            return
        sized = not getattr(session.loaded, "served", False) and self.item_tokens(session, state, items[0]) is not None
        if not sized:
            yield from self.batches(session.cfg, items)
            return
        budget = session.scorer.token_budget
        batch: list[Any] = []
        used = 0
        for item in items:
            n = max(1, int(self.item_tokens(session, state, item) or 0))
            if batch and used + n > budget:
                yield batch
                batch, used = [], 0
            batch.append(item)
            used += n
        yield batch

    def score_batch(self, session: Session, state: Any, batch: Sequence[Any]) -> list[dict]:
        """Result rows for a batch; each row has a unique `key` among `item_keys`."""
        raise NotImplementedError

    def metrics(self, rows: Sequence[dict], prepared: Prepared, cfg: RunConfig) -> dict:
        """metrics.json content from the ordered result rows (pure)."""
        raise NotImplementedError

    def check_inputs(self, cfg: RunConfig) -> None:
        """Checks of the configuration alone that no config class can make (an input file this probe
        cannot run without), reading no file: a pipeline refuses them before anything runs or is sent
        (`factprobe_ops.pipelines.checks.check_run_values`); default: none."""

    def validate(self, cfg: RunConfig, prepared: Prepared) -> None:
        """Checks that need the prepared data (before the model loads); default: none."""

    def check_model(self, cfg: RunConfig, prepared: Prepared, loaded: Any) -> None:
        """Checks that need the loaded model (e.g. its revision), run before anything is written to
        the output folder, so a refused run leaves no run_config.json behind; default: none."""

    def groups(self, cfg: RunConfig, prepared: Prepared) -> dict[str, list[Any]]:
        """The items to score, in ordered groups (default: `prepared.items`, one group per
        relation). Each group is opened once (`open_relation(session, group name)`)."""
        return prepared.items

    def artifacts(self, rows: Sequence[dict], prepared: Prepared, cfg: RunConfig, metrics: dict) -> dict[str, Any]:
        """Extra output files {file name: DataFrame (parquet) | dict (JSON) | str}, written
        atomically next to results.jsonl when the run finishes; `metrics` is the final
        metrics.json content (model revision included). Pure; default: none."""
        return {}

    # ------------------------------------------------------------------ reporting (see factprobe.framework.reporting)
    #: the run's one number and the family it is logged under (`headline/<family>`); None: no headline
    headline_metric: ClassVar[Headline | None] = None
    #: top-level metrics.json numbers of the terminal line, in this order (default: the headline's metric)
    headline_keys: ClassVar[tuple[str, ...] | None] = None
    #: the slim per-fact table's columns (those present in the results are kept)
    per_fact_columns: ClassVar[tuple[str, ...]] = DEFAULT_PER_FACT_COLUMNS
    #: the per-relation number drawn as bars per run and across runs (None: no bars)
    relation_metric: ClassVar[str | None] = None
    #: how `relation_metric` is named in figure titles (default: the metric)
    relation_metric_title: ClassVar[str] = ""
    #: boolean per-fact column (one of `per_fact_columns`) whose share of True is the headline: the one
    #: contract of every gate (compare, regress, baseline promote, the nightly paired test, the
    #: cross-model maps), read with the headline's direction by `factprobe.framework.verdict`; None: the
    #: probe's runs are not compared fact by fact
    fact_verdict: ClassVar[str | None] = None
    #: how the knowledge map reads one verdict per fact (`reporting.MapVerdict`); None: the
    #: `fact_verdict` in its headline's direction, several rows of a fact by majority (none without it)
    map_verdict: ClassVar[MapVerdict | None] = None
    #: probes with the same group share one cross-run report part (default: the probe's name)
    report_group: ClassVar[str] = ""
    #: the row fields `metrics` and `artifacts` read (module docstring); None: whole rows
    metric_columns: ClassVar[tuple[str, ...] | None] = None

    def input_name(self, cfg: RunConfig) -> str:
        """Name of the run's test items as a dataset (MLflow input): `<source>-<probe>` by default;
        runs with equal names test the same kind of items."""
        return f"{cfg.base.source}-{self.name}"

    def headline(self, metrics: Mapping[str, Any]) -> str:
        """One line of the run's main numbers for the terminal, e.g. `em 0.412, f1 0.530 over 200
        items`: the `headline_keys` present in `metrics`, then `n` or `n_items`; "" when none is."""
        keys = (
            self.headline_keys
            if self.headline_keys is not None
            else ((self.headline_metric.metric,) if self.headline_metric else ())
        )
        shown = [f"{k} {metrics[k]:.3f}" for k in keys if number(metrics.get(k))]
        n = metrics.get("n", metrics.get("n_items"))
        return ", ".join(shown) + (f" over {n} items" if shown and n is not None else "")

    def headline_row(self, metrics: Mapping[str, Any]) -> dict | None:
        """The run's headline (`Headline.row`): family, metric, value, 95% interval, n; None without one."""
        return self.headline_metric.row(metrics) if self.headline_metric else None

    def flat_metrics(self, metrics: Mapping[str, Any]) -> dict[str, Any]:
        """metrics.json as flat {name: number} (MLflow metrics, step outputs). Default: every top-level
        number, `<metric>/<relation>` and `<metric>/<group>/<key>` of the `per_<group>` tables."""
        return generic_flat_metrics(metrics)

    def stepped_metrics(self, metrics: Mapping[str, Any]) -> dict[int, dict[str, float]]:
        """{step: {name: number}}: metrics logged against a step (a curve in the MLflow UI); default none."""
        return {}

    def relation_table(self, metrics: Mapping[str, Any]) -> pd.DataFrame:
        """The run's per-relation table (default: every number or string of each `per_relation` entry)."""
        return generic_relation_table(metrics)

    def relation_text(self, metrics: Mapping[str, Any]) -> str | None:
        """A plain-text per-relation table the CLI prints after a run; default none."""
        return None

    @property
    def relation_title(self) -> str:
        return self.relation_metric_title or self.relation_metric or ""

    def run_figures(self, metrics: Mapping[str, Any], model: str) -> dict[str, Any]:
        """{file stem: matplotlib Figure} of one run of `model`. Default: `relation_metric` per
        relation (`per_relation_<metric>`) when the run has it."""
        metric = self.relation_metric
        if not (metric and metrics.get(metric) is not None and metrics.get("per_relation")):
            return {}
        from ..report.plots import relation_bars

        title = f"{self.name} {self.relation_title} per relation"
        return {f"per_relation_{metric}": relation_bars({model_label(model): dict(metrics)}, title=title, metric=metric)}

    def report(self, runs: Sequence[ReportRun], everything: Sequence[ReportRun]) -> ReportPart:
        """This group's part of a pipeline's report from its `runs` (`everything`: every run of the
        report, for parts that draw on other probes). Default: the `relation_metric` bars across
        models (`figures/per_relation_<metric>.png`), a table named after the group (headline and
        per-relation numbers per run) and every top-level number as `<metric>/<probe>/<model>`."""
        part = ReportPart(metrics=top_level_metrics(runs))
        group = self.report_group or self.name
        metric = self.relation_metric
        drawn = {r.label: r.metrics for r in runs if metric and r.metrics.get("per_relation")}
        if drawn:
            from ..report.plots import relation_bars

            title = f"{group}: {self.relation_title} per relation"
            part.figures[title] = (f"per_relation_{metric}", relation_bars(drawn, title=title, metric=metric))
        if self.headline_metric or metric:
            rows = relation_rows(runs, self.headline_metric, metric)
            if rows:
                part.tables[group] = rows
        return part
