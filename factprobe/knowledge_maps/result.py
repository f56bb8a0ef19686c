"""A finished knowledge map folder as DataFrames: what `factprobe.knowledge_map(...)` returns.

    km = KnowledgeMap.open("maps/tonight")
    km.shares        # model x category (every, majority, none, disputed): value [ci_low, ci_high], pooled
    km.pairs         # model x probe pair: kappa, eta_a_given_b, eta_b_given_a with intervals, 2x2 counts
    km.disputed      # the disputed facts, each probe's verdict and gold probability, most split first
    km.diff(other)   # facts gained and lost since another map (`factprobe.knowledge_maps.diff`)

Tables are read from the folder's parquet files when first asked for (`verdicts` can be large).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import DataError
from .build import SUMMARY, TABLES
from .inputs import recorded

if TYPE_CHECKING:
    import pandas as pd

    from .diff import MapDiff


@dataclass
class KnowledgeMap:
    """A map folder: `summary` (knowledge_map.json), `inputs` (map_inputs.json) and its tables as
    DataFrame attributes named as in `TABLES` (runs, shares, shares_by_relation, pairs,
    pairs_by_relation, disputed, verdicts, partial_facts, known_everywhere, sharing)."""

    folder: Path
    summary: dict
    inputs: dict
    reused: bool = False
    notes: list[str] = field(default_factory=list)
    _tables: dict = field(default_factory=dict, repr=False)

    @classmethod
    def open(cls, folder: str | Path) -> KnowledgeMap:
        """The finished map in `folder`; DataError (one line) when it holds none."""
        folder = Path(folder)
        inputs = recorded(folder)
        try:
            summary = json.loads((folder / SUMMARY).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            summary = None
        if inputs is None or not isinstance(summary, dict):
            raise DataError(
                f"{folder} holds no finished knowledge map (no map_inputs.json or {SUMMARY}); build one with `factprobe map`"
            )
        return cls(folder, summary, inputs)

    def table(self, name: str) -> pd.DataFrame:
        """The table `name` (one of `TABLES`) as a DataFrame."""
        import pandas as pd

        if name not in TABLES:
            raise KeyError(f"no table {name!r}; tables: {', '.join(TABLES)}")
        if name not in self._tables:
            self._tables[name] = pd.read_parquet(self.folder / "tables" / f"{name}.parquet")
        return self._tables[name]

    def __getattr__(self, name: str):
        if name in TABLES:
            return self.table(name)
        raise AttributeError(name)

    @property
    def models(self) -> list[str]:
        return [m["model"] for m in self.summary.get("models", [])]

    @property
    def probes(self) -> list[str]:
        return [p["probe"] for p in self.summary.get("probes", [])]

    def diff(self, after: KnowledgeMap | str | Path, model_a: str | None = None, model_b: str | None = None) -> MapDiff:
        """What changed from this map (before) to `after` (a map or its folder), one model of each
        (`model_a`, `model_b`: needed when a map holds several); see `factprobe.knowledge_maps.diff`."""
        from .diff import diff_maps

        other = after if isinstance(after, KnowledgeMap) else KnowledgeMap.open(after)
        return diff_maps(self, other, model_a, model_b)


__all__ = ["KnowledgeMap"]
