"""Fact sources: one registry, `load_facts(source, path, relations)`, over the readers below.

| source        | path (`--data`)                                          | default path            |
|---------------|----------------------------------------------------------|-------------------------|
| `countryinfo` | ignored: built in from the `countryinfo` package          | -                       |
| `lama`        | folder with `relations.jsonl` + `P*.jsonl` (see `lama`)   | `<data root>/lama`      |
| `lpaqa-train` | folder of `P*.jsonl` training facts                      | `<data root>/lpaqa/trex_train` |
| `nobel`       | `nobel.csv` or its folder                                | `<data root>/nobel/nobel.csv`  |
| `triples`     | jsonl / csv / parquet file, or a folder of them          | required                |
| `s3`          | `s3://bucket/prefix` (LAMA layout or triples files)      | required                |

`<data root>` is `factprobe.paths.data_root()` (env `FACTPROBE_DATA`). An unknown source raises
ConfigError listing the known ones; `relations` keeps only those relation ids and raises
ConfigError for ids the source does not hold. Data errors raise DataError naming file and line.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError, DataError
from ..facts import FactSet
from ..paths import data_root
from .lama import load_relations_meta

SOURCES = ("countryinfo", "lama", "lpaqa-train", "nobel", "triples", "s3")
DEFAULT_SOURCE = "countryinfo"
_DEFAULT_PATHS = {"lama": ("lama",), "lpaqa-train": ("lpaqa", "trex_train"), "nobel": ("nobel", "nobel.csv")}

__all__ = ["DEFAULT_SOURCE", "SOURCES", "default_path", "load_facts", "load_relations_meta"]


def default_path(source: str) -> Path | None:
    """Where `source` reads from when no path is given (None: built in or path required)."""
    parts = _DEFAULT_PATHS.get(source)
    return data_root().joinpath(*parts) if parts else None


def load_facts(source: str = DEFAULT_SOURCE, path: str | None = None, relations: list[str] | None = None) -> FactSet:
    """Load facts from `source` (table in the module docstring), optionally only `relations`."""
    if source not in SOURCES:
        raise ConfigError(f"unknown fact source {source!r}; known: {', '.join(SOURCES)}")
    if source == "countryinfo":
        from .countryinfo import load_countryinfo

        return load_countryinfo(relations)
    if path is None or str(path).strip() == "":
        default = default_path(source)
        if default is None:
            raise ConfigError(f"source {source!r} needs a path (--data)")
        if not default.exists():
            raise DataError(f"{default}: default data for source {source!r} not found; pass --data or set FACTPROBE_DATA")
        path = str(default)
    if source == "s3":
        from .s3 import load_s3

        return load_s3(str(path), relations)
    if str(path).startswith("s3://"):
        raise ConfigError(f"source {source!r} reads local files; use source 's3' for {path}")
    if source == "lama":
        from .lama import load_lama

        return load_lama(path, relations)
    if source == "lpaqa-train":
        from .lpaqa import load_lpaqa_train

        return load_lpaqa_train(path, relations)
    if source == "nobel":
        from .nobel import load_nobel

        return load_nobel(path).select(relations)
    from .triples import load_triples

    return load_triples(path, relations)
