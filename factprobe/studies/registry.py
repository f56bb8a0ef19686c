"""The one list of studies: registration, plug-in loading and lookup by name (as the probes'
`factprobe/framework/registry.py`).

A study module defines a `Study` subclass (`factprobe.studies.base`, which states the contract)
and registers one instance: `register(MyStudy())`. The CLI (`factprobe study NAME`,
`factprobe/studies/cli.py`), the generic `study` pipeline and MLflow tracking call the registered
studies only and never name one.

Built-in studies are listed in `BUILTIN_MODULES`; more can be added without touching factprobe
through the environment variable `FACTPROBE_STUDY_MODULES` (comma-separated module names) or the
`factprobe.studies` entry-point group (`name = "package.module"`): each module registers its study
on import. A module that cannot be imported is one ConfigError naming it and where it came from.
"""

from __future__ import annotations

from ..errors import ConfigError
from .base import Study

#: the built-in studies: one line per study module
BUILTIN_MODULES = (
    "factprobe.studies.icl_examples",
    "factprobe.studies.icl_sequence",
    "factprobe.studies.findings",
)
PLUGIN_ENV = "FACTPROBE_STUDY_MODULES"
ENTRY_POINT_GROUP = "factprobe.studies"

_REGISTRY: dict[str, Study] = {}
_loaded = False


def register(study: Study) -> Study:
    """Add `study` (a `Study` instance with a name) to the registry; returns it. A name is
    registered once: the same class again replaces it (a module imported twice), another class is
    a ConfigError naming both."""
    if not isinstance(study, Study):
        raise ConfigError(
            f"{type(study).__name__} is not a factprobe.studies.base.Study; register an instance of a Study subclass"
        )
    if not getattr(study, "name", ""):
        raise ConfigError(f"{type(study).__name__}: a study needs a name")
    old = _REGISTRY.get(study.name)
    if old is not None and type(old) is not type(study):
        raise ConfigError(f"study name {study.name!r} is registered twice ({type(old).__name__}, {type(study).__name__})")
    _REGISTRY[study.name] = study
    return study


def plugin_modules() -> list[str]:
    """The plug-in study modules: `FACTPROBE_STUDY_MODULES`, then the `factprobe.studies` entry points, each once."""
    from ..plugins import plugin_modules as modules

    return modules(PLUGIN_ENV, ENTRY_POINT_GROUP)


def load_studies() -> dict[str, Study]:
    """Import the built-in and plug-in study modules (once) and return {name: study}, built-ins
    first. A module that cannot be imported raises ConfigError naming it."""
    global _loaded
    if not _loaded:
        from ..plugins import import_registered

        import_registered("study", BUILTIN_MODULES, PLUGIN_ENV, ENTRY_POINT_GROUP, _REGISTRY)
        _loaded = True
    return dict(_REGISTRY)


def available() -> list[str]:
    """Registered study names, built-ins first."""
    return list(load_studies())


def get_study(name: str) -> Study:
    """The study registered as `name`; an unknown name raises ConfigError listing the known ones."""
    studies = load_studies()
    if name not in studies:
        raise ConfigError(f"unknown study {name!r}; known: {', '.join(studies) or 'none'}")
    return studies[name]
