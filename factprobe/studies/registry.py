"""The studies `factprobe study` knows, by name: `STUDY_MODULES` maps a name to the module that
defines `STUDY` (an instance of `factprobe.studies.base.Study`). Modules load lazily, so a
study's imports (plots, models) cost nothing until it runs."""
from __future__ import annotations

import importlib
import importlib.util

from ..errors import ConfigError
from .base import Study

STUDY_MODULES: dict[str, str] = {
    "icl-examples": "factprobe.studies.icl_examples",
    "icl-sequence": "factprobe.studies.icl_sequence",
    "findings": "factprobe.studies.findings",
}


def available() -> list[str]:
    """Names whose module exists (a study still being written is left out, not an error)."""
    out = []
    for name, module in STUDY_MODULES.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except ValueError:  # already imported without a spec (a module built at run time)
            found = True
        if found:
            out.append(name)
    return out


def get_study(name: str) -> Study:
    """The registered study `name`; ConfigError naming the known ones otherwise."""
    if name not in STUDY_MODULES or name not in available():
        raise ConfigError(f"unknown study {name!r}; known: {', '.join(available()) or 'none'}")
    study = importlib.import_module(STUDY_MODULES[name]).STUDY
    if not isinstance(study, Study):
        raise TypeError(f"{STUDY_MODULES[name]}.STUDY is not a factprobe.studies.base.Study")
    return study
