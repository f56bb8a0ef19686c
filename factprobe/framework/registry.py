"""The one list of probes: registration, plug-in loading and lookup by name.

A probe module defines a `Probe` subclass (`factprobe.framework.base`, which states the contract)
and registers one instance: `register(MyProbe())`. The runner (`framework/runner.py`) and the
operations layer call the registered probes only and never name one.

Built-in probes (`factprobe.probes`) are listed in `BUILTIN_MODULES` by name (imported by name, never
by this module's code: the framework sits below its instances, as lm-eval's `api/` below its `tasks/`); more can be added without touching factprobe
through the environment variable `FACTPROBE_PROBE_MODULES` (comma-separated module names) or the
`factprobe.probes` entry-point group: each module registers its probe on import.
"""

from __future__ import annotations

from ..errors import ConfigError
from .base import Probe
from .config import use_probes

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
    "factprobe.probes.mc_items",
)
PLUGIN_ENV = "FACTPROBE_PROBE_MODULES"
ENTRY_POINT_GROUP = "factprobe.probes"

_REGISTRY: dict[str, Probe] = {}
_loaded = False


def register(probe: Probe) -> Probe:
    """Add `probe` to the registry (one line per probe module). A name is registered once; a probe's
    `fact_verdict` must be one of its `per_fact_columns` (the table `compare` reads)."""
    if not getattr(probe, "name", ""):
        raise ConfigError(f"{type(probe).__name__}: a probe needs a name")
    if probe.fact_verdict and probe.fact_verdict not in probe.per_fact_columns:
        raise ConfigError(
            f"probe {probe.name}: fact_verdict {probe.fact_verdict!r} is not one of its per_fact_columns "
            f"({', '.join(probe.per_fact_columns)}); compare reads it from the per-fact table"
        )
    old = _REGISTRY.get(probe.name)
    if old is not None and type(old) is not type(probe):
        raise ConfigError(f"probe name {probe.name!r} is registered twice ({type(old).__name__}, {type(probe).__name__})")
    _REGISTRY[probe.name] = probe
    return probe


def load_probes() -> dict[str, Probe]:
    """Import the built-in and plugin probe modules (once) and return {name: probe}."""
    global _loaded
    if not _loaded:
        from ..plugins import import_registered

        import_registered("probe", BUILTIN_MODULES, PLUGIN_ENV, ENTRY_POINT_GROUP, _REGISTRY)
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


class _Lookup:
    """This registry as `factprobe.framework.config.ProbeLookup` (handed down with `use_probes`)."""

    @staticmethod
    def get(name: str) -> Probe:
        return get_probe(name)

    @staticmethod
    def all() -> dict[str, Probe]:
        return load_probes()


use_probes(_Lookup())
