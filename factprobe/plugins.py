"""Entry points of the installed packages, and which extra of factprobe installs a missing module.

`pip install factprobe` gives the science and the command line; what the operations layer needs comes
with extras (pyproject.toml: `kubeflow`, `tracking`, `belief`, `train`, `adapters`, `all`). Two rules follow:

- `load_entry_points(group)` loads a group's entry points (sorted by name) and leaves out one whose import
  fails because a module that an extra installs is missing: without `tracking` the MLflow hooks of `factprobe
  probe` and `factprobe study` are not there, and the science runs untracked, printing nothing about it. Any
  other import failure is raised: a broken plug-in is not hidden.
- `missing_extra(err)`: for a `ModuleNotFoundError` of such a module, the one line that says which extra to
  install (`factprobe pipeline` without kfp); None for any other module (a bug, or a broken install).

The extras are read from the installed distribution's metadata (`Requires-Dist: kfp==2.17.0; extra == "kubeflow"`),
so pyproject.toml is the one place they are written. A module matches a requirement by its normalised name
(`spacy_lookups_data` <-> `spacy-lookups-data`; for `kfp.kubernetes` the longest dotted prefix that matches).
The gathering extras (`all`, `dev`) are named only when no other extra installs the module.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import metadata
from typing import Any

DISTRIBUTION = "factprobe"
#: extras that gather the others: named only when no narrower extra installs the module
GATHERING = ("all", "dev")


def _normal(name: str) -> str:
    """A project or module name compared the PEP 503 way: case, `-`, `_` and `.` do not matter."""
    return re.sub(r"[-_.]+", "_", name).lower()


@lru_cache(maxsize=1)
def optional_requirements() -> dict[str, tuple[str, ...]]:
    """Normalised project name -> the extras of the installed factprobe that require it (narrow ones first,
    then `all`/`dev`). Base requirements and the extras' references to factprobe itself are left out;
    empty when factprobe's metadata cannot be read (a source tree that was never installed)."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return {}
    extras = dist.metadata.get_all("Provides-Extra") or []
    base: set[str] = set()
    found: dict[str, list[str]] = {}
    for line in dist.requires or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        name = _normal(req.name)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            base.add(name)
        elif name != _normal(DISTRIBUTION):  # not an extra that gathers other extras
            found.setdefault(name, []).extend(e for e in extras if req.marker.evaluate({"extra": e}))
    return {name: tuple(sorted(set(e), key=lambda x: (x in GATHERING, x))) for name, e in found.items() if name not in base and e}


def extras_for(module: str) -> tuple[str, ...]:
    """The extras that install `module` (a dotted import name), narrowest first; () when none does."""
    known = optional_requirements()
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        extras = known.get(_normal(".".join(parts[:n])))
        if extras:
            narrow = tuple(e for e in extras if e not in GATHERING)
            return narrow or extras
    return ()


def missing_extra(err: BaseException, command: str | None = None) -> str | None:
    """One line for a `ModuleNotFoundError` of a module that an extra installs: which extra to install
    (`command` names what needed it); None for any other error."""
    name = getattr(err, "name", None)
    if not isinstance(err, ModuleNotFoundError) or not name:
        return None
    extras = extras_for(name)
    if not extras:
        return None
    who = f"factprobe {command}" if command else "this command"
    install = "pip install " + " or ".join(f"'factprobe[{e}]'" for e in extras)
    return f"{who} needs {name.split('.')[0]}, which is not installed: {install}"


def load_entry_points(group: str) -> list[Any]:
    """The loaded objects of entry-point `group`, sorted by entry-point name, without those whose import
    fails for a module that one of factprobe's extras installs (module docstring)."""
    loaded = []
    for ep in sorted(metadata.entry_points(group=group), key=lambda e: e.name):
        try:
            loaded.append(ep.load())
        except ModuleNotFoundError as err:
            if missing_extra(err) is None:
                raise
    return loaded


def plugin_modules(env: str, group: str) -> list[str]:
    """The plug-in modules of one kind: `$env` (comma-separated module names) first, then the module part of
    each entry point of `group`, each once. Unreadable package metadata leaves the entry points out (the
    built-ins must still load)."""
    import os

    mods = [m.strip() for m in os.environ.get(env, "").split(",") if m.strip()]
    try:
        mods += [ep.value.split(":")[0].strip() for ep in metadata.entry_points(group=group)]
    except Exception:  # noqa: BLE001 - broken metadata must not stop the built-ins
        pass
    return list(dict.fromkeys(mods))


def import_registered(kind: str, builtins: tuple[str, ...], env: str, group: str, registry: dict[str, Any]) -> None:
    """Import the built-in modules, then the plug-in modules (`plugin_modules`), each of which registers its
    objects into `registry` on import; then order `registry` by module (built-ins first, in their order),
    whatever order the modules were first imported in. A module that cannot be imported raises ConfigError
    naming it and where it came from (`kind`: "probe", "study")."""
    import importlib

    from .errors import ConfigError

    modules = builtins + tuple(m for m in plugin_modules(env, group) if m not in builtins)
    for mod in modules:
        try:
            importlib.import_module(mod)
        except ImportError as e:
            raise ConfigError(f"cannot import {kind} module {mod!r} (from {env} or the {group} entry points): {e}") from None
    rank = {m: i for i, m in enumerate(modules)}
    ordered = sorted(registry.items(), key=lambda kv: rank.get(type(kv[1]).__module__, len(rank)))
    registry.clear()
    registry.update(ordered)
