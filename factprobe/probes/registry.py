"""The probe interface and the one list of probes.

A probe is one module that defines a `Probe` subclass and registers it. It declares four things:

1. `name`: the CLI subcommand, the component's and pipelines' `probe` value (`ic-lke`, ...);
2. `config_class`: its own config dataclass (a `ConfigBase`; fields carry their help text);
3. `prepare(cfg) -> Prepared`: how it builds its items from the facts (through `factprobe.build`);
4. `score_batch(session, state, batch) -> rows`: how it scores a batch of items into result rows.

Optional hooks have defaults: `open_relation` (per-relation state, e.g. a cached prefix),
`batches` (how a relation's items are cut), `item_keys` (result keys of an item), `metrics`
(metrics.json content), `artifacts` (extra files such as a parquet table, written atomically
with the results) and `model_kinds` ("causal", "masked").

The runner scores `groups(cfg, prepared)` (default `prepared.items`: one group per relation), in
order. A probe whose later items depend on earlier results (counterfactual ICL needs the model's
known facts first) returns phases instead; `session.done` holds every row already scored
(resumed ones included) when a group is opened.

The runner (`probes/runner.py`) calls only these and never names a probe. Built-in probes are
listed in `BUILTIN_MODULES`; more can be added without touching factprobe through the
environment variable `FACTPROBE_PROBE_MODULES` (comma-separated module names) or the
`factprobe.probes` entry-point group: each module registers its probe on import.
"""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, Sequence

from ..errors import ConfigError

if TYPE_CHECKING:  # torch stays unimported for callers that only build data
    from ..build.prepared import Prepared
    from .config import ConfigBase, RunConfig

#: the built-in probes: one line per probe module
BUILTIN_MODULES = (
    "factprobe.probes.ic_lke",
    "factprobe.probes.eic_lke",
    "factprobe.probes.prompt_lke",
    "factprobe.probes.coherency",
    "factprobe.probes.qa",
    "factprobe.probes.counterfactual",
    "factprobe.probes.belief_mlm",
    "factprobe.probes.belief_icl",
)
PLUGIN_ENV = "FACTPROBE_PROBE_MODULES"
ENTRY_POINT_GROUP = "factprobe.probes"

_REGISTRY: dict[str, "Probe"] = {}
_loaded = False


@dataclass
class Session:
    """What a probe scores with: the run config, the loaded model, the prepared data, a way to
    leave notes for metrics.json, and lazily built engines (`scorer`, `generator`)."""

    cfg: "RunConfig"
    loaded: Any  # factprobe.lm.models.LoadedModel
    prepared: "Prepared"
    note: Callable[[str], None]
    #: rows scored so far in this output folder, by key (resumed rows included); read-only for probes
    done: dict[str, dict] = field(default_factory=dict)
    _engines: dict[str, Any] = field(default_factory=dict)

    @property
    def scorer(self):
        """The shared-prefix log-prob scorer (`factprobe.lm.scorer.Scorer`) for this model."""
        if "scorer" not in self._engines:
            from ..lm.scorer import Scorer

            m = self.loaded
            self._engines["scorer"] = Scorer(m.model, m.tokenizer, device=m.device, token_budget=self.cfg.base.token_budget,
                                             max_length=m.max_length)
        return self._engines["scorer"]

    @property
    def generator(self):
        """The generation engine (`factprobe.lm.generate.Generator`) for this model."""
        if "generator" not in self._engines:
            from ..lm.generate import Generator

            m = self.loaded
            self._engines["generator"] = Generator(m.model, m.tokenizer, device=m.device,
                                                   token_budget=self.cfg.base.token_budget, max_length=m.max_length)
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
            out.update(tokens_forwarded=s.total_tokens, forwards=s.forwards, tokenization_fallbacks=s.fallbacks,
                       naive_tokens=s.naive_tokens, token_savings=s.savings)
        gen = self._engines.get("generator")
        if gen is not None:
            g = gen.stats
            out.update(generated_tokens=g.decode_tokens, generation_tokens_forwarded=g.total_tokens,
                       generation_prefix_tokens=g.prefix_tokens, generation_naive_prompt_tokens=g.naive_prompt_tokens,
                       generation_forwards=g.forwards)
        return out


class Probe:
    """Base class of every probe; see the module docstring for the contract."""

    name: ClassVar[str]
    config_class: ClassVar[type["ConfigBase"]]
    description: ClassVar[str] = ""
    model_kinds: ClassVar[tuple[str, ...]] = ("causal",)
    #: name of the prepared dataset; probes with the same name and data fields share one build
    dataset: ClassVar[str] = ""
    batch_size: ClassVar[int] = 8

    def prepare(self, cfg: "RunConfig") -> "Prepared":
        """Build this probe's items from the facts the config names (no model needed)."""
        raise NotImplementedError

    def item_keys(self, cfg: "RunConfig", prepared: "Prepared", item: Any) -> list[str]:
        """The result-row keys one item yields (default: its fact id); used for resuming."""
        return [item.fact_id]

    def open_relation(self, session: Session, relation: str) -> Any:
        """Per-relation state shared by the batches of that relation (default: None)."""
        return None

    def batches(self, cfg: "RunConfig", items: Sequence[Any]) -> Iterable[Sequence[Any]]:
        """Cut a relation's items (those still to score) into batches; one checkpoint each."""
        for b in range(0, len(items), self.batch_size):
            yield items[b : b + self.batch_size]

    def score_batch(self, session: Session, state: Any, batch: Sequence[Any]) -> list[dict]:
        """Result rows for a batch; each row has a unique `key` among `item_keys`."""
        raise NotImplementedError

    def metrics(self, rows: Sequence[dict], prepared: "Prepared", cfg: "RunConfig") -> dict:
        """metrics.json content from the ordered result rows (pure)."""
        raise NotImplementedError

    #: top-level metrics.json numbers a person looks at first, in this order (those present are shown)
    HEADLINE = ("accuracy", "em", "f1", "contains", "coherency", "coherency_round1", "coherency_round2",
                "correct_round1", "correct_round2")

    def headline(self, metrics: dict) -> str:
        """One line of the run's main numbers for the terminal, e.g. `em 0.412, f1 0.530 over 200
        items` (default: the `HEADLINE` keys present in `metrics`, then `n` or `n_items`)."""
        shown = [f"{k} {metrics[k]:.3f}" for k in self.HEADLINE
                 if isinstance(metrics.get(k), (int, float)) and not isinstance(metrics.get(k), bool)]
        n = metrics.get("n", metrics.get("n_items"))
        return ", ".join(shown) + (f" over {n} items" if shown and n is not None else "")

    def validate(self, cfg: "RunConfig", prepared: "Prepared") -> None:
        """Checks that need the prepared data (before the model loads); default: none."""

    def check_model(self, cfg: "RunConfig", prepared: "Prepared", loaded: Any) -> None:
        """Checks that need the loaded model (e.g. its revision), run before anything is written to
        the output folder, so a refused run leaves no run_config.json behind; default: none."""

    def groups(self, cfg: "RunConfig", prepared: "Prepared") -> dict[str, list[Any]]:
        """The items to score, in ordered groups (default: `prepared.items`, one group per
        relation). Each group is opened once (`open_relation(session, group name)`)."""
        return prepared.items

    def artifacts(self, rows: Sequence[dict], prepared: "Prepared", cfg: "RunConfig", metrics: dict) -> dict[str, Any]:
        """Extra output files {file name: DataFrame (parquet) | dict (JSON) | str}, written
        atomically next to results.jsonl when the run finishes; `metrics` is the final
        metrics.json content (model revision included). Pure; default: none."""
        return {}


def register(probe: Probe) -> Probe:
    """Add `probe` to the registry (one line per probe module). A name is registered once."""
    if not getattr(probe, "name", ""):
        raise ConfigError(f"{type(probe).__name__}: a probe needs a name")
    old = _REGISTRY.get(probe.name)
    if old is not None and type(old) is not type(probe):
        raise ConfigError(f"probe name {probe.name!r} is registered twice ({type(old).__name__}, {type(probe).__name__})")
    _REGISTRY[probe.name] = probe
    return probe


def _plugin_modules() -> list[str]:
    mods = [m.strip() for m in os.environ.get(PLUGIN_ENV, "").split(",") if m.strip()]
    try:
        from importlib.metadata import entry_points

        mods += [ep.value.split(":")[0] for ep in entry_points(group=ENTRY_POINT_GROUP)]
    except Exception:  # noqa: BLE001 - broken metadata must not stop the built-ins
        pass
    return mods


def load_probes() -> dict[str, Probe]:
    """Import the built-in and plugin probe modules (once) and return {name: probe}."""
    global _loaded
    if not _loaded:
        modules = BUILTIN_MODULES + tuple(_plugin_modules())
        for mod in modules:
            try:
                importlib.import_module(mod)
            except ImportError as e:
                raise ConfigError(f"cannot import probe module {mod!r} (from {PLUGIN_ENV} or the "
                                  f"{ENTRY_POINT_GROUP} entry points): {e}") from None
        # list order = module order (built-ins first), whatever order they were first imported in
        rank = {m: i for i, m in enumerate(modules)}
        ordered = sorted(_REGISTRY.items(), key=lambda kv: rank.get(type(kv[1]).__module__, len(rank)))
        _REGISTRY.clear()
        _REGISTRY.update(ordered)
        _loaded = True
    return dict(_REGISTRY)


def probe_names() -> list[str]:
    """Registered probe names, built-ins first."""
    return list(load_probes())


def get_probe(name: str) -> Probe:
    """The probe registered as `name`; an unknown name raises ConfigError listing the known ones."""
    probes = load_probes()
    if name not in probes:
        raise ConfigError(f"unknown probe {name!r}; choose one of {', '.join(probes)}")
    return probes[name]


def option_classes() -> list[type]:
    """BaseConfig then every probe's config class (each once): the source of CLI and pipeline options."""
    from .config import BaseConfig

    out: list[type] = [BaseConfig]
    for p in load_probes().values():
        if p.config_class not in out:
            out.append(p.config_class)
    return out
