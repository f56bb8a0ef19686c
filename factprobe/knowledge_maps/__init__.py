"""The knowledge map: which facts a model knows under every probe, and which it only seems to know.

It joins the per-fact verdicts of finished probe runs (probes x models) on `fact_id`; see
docs/knowledge-map.md. `knowledge_map(runs, out)` builds (or reuses) a map folder and returns it
as DataFrames (`KnowledgeMap`); `diff_runs(before, after, work)` diffs the maps of two sets of runs;
`factprobe map` is the command (`cli`).

Modules: `reading` (a run as one verdict per fact), `inputs` (like with like, the map's identity),
`stats` (shares, kappa, eta, sharing rates, intervals over relations), `model_part` and `build`
(the folder), `figures`, `page`, `result` (`KnowledgeMap`), `diff` (two maps).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .result import KnowledgeMap


def knowledge_map(runs: Sequence[str | Path], out: str | Path | None = None) -> KnowledgeMap:
    """The knowledge map of `runs` (run folders, folders of runs, MLflow run ids) built into folder
    `out` (reused when it holds the map of the same inputs; refused when it holds another), or into a
    temporary folder removed when the process exits. Returns it as `KnowledgeMap` (its tables as
    DataFrames). Raises ConfigError/DataError (one line) as `factprobe map` does."""
    import atexit
    import shutil
    import tempfile

    from .build import build_map

    if isinstance(runs, (str, Path)):
        runs = [runs]
    if out is None:
        out = tempfile.mkdtemp(prefix="factprobe-map-")
        atexit.register(shutil.rmtree, out, True)
    folder, reused, notes = build_map([str(r) for r in runs], out)
    km = KnowledgeMap.open(folder)
    km.reused, km.notes = reused, notes
    return km


def diff_runs(before: Sequence[str | Path], after: Sequence[str | Path], work: str | Path):
    """The diff (`diff.MapDiff`) of the maps of two sets of runs of one model each (a model before and
    after fine-tuning, two nights), the maps built into `work`/before and `work`/after."""
    a = knowledge_map(before, Path(work) / "before")
    return a.diff(knowledge_map(after, Path(work) / "after"))


__all__ = ["KnowledgeMap", "diff_runs", "knowledge_map"]
