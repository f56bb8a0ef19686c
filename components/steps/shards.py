"""The bounds of a sweep's `shards` (pods per probe run), checked before a unit is planned
(`plan.run_plan_units`) and before a run starts or is sent (`factprobe_ops.pipelines.checks`):

- `MAX_SHARDS`: a documented cap that needs no data (a run split across more pods than this is refused);
- the facts of the run's data, known without building it: for a probe whose items come from the fact
  source (`SOURCE_KINDS`: every built-in probe but mc-items), the source's facts of the chosen relations
  (every relation when `relations` is unset), each relation capped at `max_facts_per_relation` (a
  probe's items are never more: measured for every kind on countryinfo and LAMA); for mc-items, the
  items of its `--data` file. Every (model, probe) run is split into `shards` pods, so the probe with
  the fewest facts decides. Data this machine cannot read (an s3:// source, a path only the cluster's
  volume holds) leaves the cap (the probe step refuses a shard without facts there);
- `MAX_UNITS`: the units of a sweep in all (models x probe runs x shards).

Each refusal is one line (ConfigError) naming the value and the bound.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

#: the most pods one probe run may be split into (`shards`), whatever the data
MAX_SHARDS = 1000
#: the most units of work (pods) one sweep may plan: models x probe runs per model x shards
MAX_UNITS = 10000
#: dataset kinds (`Probe.dataset`) whose items are at most the source's facts, per relation at most
#: `max_facts_per_relation`
SOURCE_KINDS = ("mc", "qa", "coherency", "multiprompt")


def parse_shards(shards: Any) -> int:
    """`shards` as a whole number from 1 to `MAX_SHARDS` (an int, its text, or a whole float such as
    2.0 that travelled through JSON); ConfigError (one line) otherwise."""
    from factprobe.errors import ConfigError

    try:
        n = int(str(shards).strip().removesuffix(".0"))
    except ValueError:
        n = 0
    if isinstance(shards, bool) or n < 1:
        raise ConfigError(f"shards={shards!r}: give a whole number of pods per probe run, 1 or more")
    if n > MAX_SHARDS:
        raise ConfigError(f"shards={n}: at most {MAX_SHARDS} pods per probe run (factprobe's cap on shards)")
    return n


def check_units(n_models: int, runs_per_model: int, shards: int) -> None:
    """ConfigError (one line) when models x probe runs x shards is more than `MAX_UNITS`."""
    from factprobe.errors import ConfigError

    total = n_models * runs_per_model * shards
    if total > MAX_UNITS:
        raise ConfigError(
            f"{n_models} model(s) x {runs_per_model} probe run(s) x {shards} shards = {total} units of work: "
            f"at most {MAX_UNITS} pods per sweep; use fewer shards or split the sweep"
        )


def fact_bound(config: dict, probes: Iterable[str]) -> tuple[int, str] | None:
    """(the facts of the probe of `probes` whose run config (`config`, as the steps build it) has the
    fewest, that probe), or None when no probe's facts can be known here (module docstring).
    ConfigError from the config itself (an unknown relation) passes through."""
    from factprobe.errors import DataError
    from factprobe.framework.registry import get_probe

    from ._common import run_config

    best: tuple[int, str] | None = None
    loaded: dict[tuple, Any] = {}
    for name in dict.fromkeys(map(str, probes)):
        spec = get_probe(name)
        cfg = run_config(config, probe=name, model="-")
        try:
            n = _facts(spec, cfg, loaded)
        except (DataError, OSError):  # not readable here: the data step reads it where it is
            n = None
        if n is not None and (best is None or n < best[0]):
            best = (n, name)
    return best


def _facts(spec, cfg, loaded: dict[tuple, Any]) -> int | None:
    """The facts of one probe's run (`fact_bound`); `loaded` caches fact sets by source, data and relations."""
    from pathlib import Path

    base = cfg.base
    kind = spec.dataset or spec.name
    if kind == "mc-items":
        if not base.data or not Path(str(base.data)).expanduser().is_file():
            return None
        return spec.prepare(_without_train_data(cfg)).n_items
    if kind not in SOURCE_KINDS or base.source == "s3" or str(base.data or "").startswith("s3://"):
        return None
    from factprobe.sources import load_facts

    key = (base.source, str(base.data or ""), tuple(base.relations or ()))
    if key not in loaded:
        facts = load_facts(base.source, base.data, None)
        loaded[key] = (facts.select(base.relations) if base.relations else facts).by_relation()
    cap = base.max_facts_per_relation
    return sum(len(fs) if cap is None else min(len(fs), cap) for fs in loaded[key].values())


def _without_train_data(cfg):
    """`cfg` without its training items file: the test items alone are counted (that file may be elsewhere)."""
    import dataclasses

    return dataclasses.replace(cfg, base=dataclasses.replace(cfg.base, train_data=None))


def check_shards(shards: Any, config: dict | None = None, probes: Iterable[str] = ()) -> int:
    """`shards` checked against `MAX_SHARDS` and, with `config` and more than one shard, against the
    facts of every probe's run (`fact_bound`); returns it as an int. ConfigError, one line."""
    from factprobe.errors import ConfigError

    n = parse_shards(shards)
    if n == 1 or config is None:
        return n
    bound = fact_bound(config, probes)
    if bound is not None and n > bound[0]:
        facts, probe = bound
        raise ConfigError(
            f"shards={n} is more than the {facts} facts of probe {probe}'s data "
            f"({_described(config, probe)}); use shards={max(facts, 1)} or fewer"
        )
    return n


def _described(config: dict, probe: str) -> str:
    """What bounds the facts: `source countryinfo, every relation, max_facts_per_relation=3`, or the items file."""
    from factprobe.framework.registry import get_probe

    from ._common import run_config

    base = run_config(config, probe=probe, model="-").base
    if (get_probe(probe).dataset or probe) == "mc-items":
        where = f"the items of {base.data}"
    else:
        where = f"source {base.source}" + (f" {base.data}" if base.data else "")
    rels = f"relations {','.join(base.relations)}" if base.relations else "every relation"
    cap = f", max_facts_per_relation={base.max_facts_per_relation}" if base.max_facts_per_relation else ""
    return f"{where}, {rels}{cap}"
