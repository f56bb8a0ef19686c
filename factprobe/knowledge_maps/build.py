"""Build a knowledge map folder from finished runs: `build_map(refs, out)`.

Steps: the runs are found (`reading.find_runs`) and checked like with like (`inputs.check_alike`);
a folder holding the finished map of the same inputs is reused, one of other inputs refused
(`inputs.reuse_or_refuse`); each run is read as one verdict per fact (`reading.read_verdicts`) and
coded against one index of fact ids, so a run costs a few arrays and no row dicts. The map's facts
are those every run probed; a fact some runs lack is counted apart (`tables/partial_facts.parquet`,
`n_partial` in the summary), never silently dropped. Per model a facts x probes matrix gives the
robust shares, the probe pairs and the disputed facts (`stats`); the models' robust sets give the
facts every model knows and the sharing rates. Large tables are streamed to parquet one model at a time.

What the folder holds (`OUTPUTS`; docs/knowledge-map.md):
- `knowledge_map.json`: the summary (inputs, per model shares and pairs with intervals, cross-model);
- `tables/`: `runs`, `shares`, `shares_by_relation`, `pairs`, `pairs_by_relation`, `disputed`,
  `verdicts` (every joined fact: each probe's verdict and gold probability), `partial_facts`,
  `known_everywhere`, `sharing` (parquet);
- `figures/agreement_<model>.png`, `figures/facts_<model>.png`, `figures/sharing.png`;
- `knowledge_map.html`: the page a person reads;
- `map_inputs.json`, written last: the inputs' identities (`inputs.map_inputs`); a folder without it
  holds no finished map. Everything is written into a staging folder first and moved in.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import DataError
from ..framework.reporting import model_label
from ..io import atomic_write_json
from .inputs import INPUTS_FILE, check_alike, map_inputs, reuse_or_refuse
from .reading import Reading, RunSource, find_runs, map_probes, read_verdicts, reading_of

SUMMARY, PAGE = "knowledge_map.json", "knowledge_map.html"
TABLES = (
    "runs",
    "shares",
    "shares_by_relation",
    "pairs",
    "pairs_by_relation",
    "disputed",
    "verdicts",
    "partial_facts",
    "known_everywhere",
    "sharing",
)
OUTPUTS = (SUMMARY, PAGE, "tables", "figures")


@dataclass
class RunFacts:
    """One run coded against the map's fact index: codes (int64), verdicts, gold probabilities."""

    source: RunSource
    codes: np.ndarray
    right: np.ndarray
    prob: np.ndarray
    n_rows: int


@dataclass
class FactIndex:
    """Every fact id seen (pyarrow chunks in code order), its relation (codes into `relations`) and the run
    that first named it. A run whose distinct ids are the very array an earlier run had (the reader's
    `Encoder` hands the same one back for an equal column) reuses that run's codes."""

    chunks: list = field(default_factory=list)
    relation: list = field(default_factory=list)
    first_run: list = field(default_factory=list)
    relations: dict = field(default_factory=dict)
    size: int = 0
    _ids: Any = None
    _known: Any = None
    _by_ids: dict = field(default_factory=dict)

    def ids(self):
        """Every fact id, in code order (a pyarrow string array)."""
        import pyarrow as pa

        if self._ids is None or len(self._ids) != self.size:
            self._ids = pa.concat_arrays(self.chunks) if self.chunks else pa.array([], pa.string())
        return self._ids

    def relation_codes(self) -> np.ndarray:
        if self._known is None or self._known.size != self.size:
            self._known = np.concatenate(self.relation) if self.relation else np.zeros(0, dtype=np.int32)
        return self._known

    def add(self, fv, run: int, runs: Sequence[RunFacts]) -> np.ndarray:
        """Codes of `fv`'s facts (`reading.FactVerdicts`; new ids appended); DataError when a fact's
        relation differs from an earlier run's."""
        import pyarrow as pa
        import pyarrow.compute as pc

        to_global = np.array([self.relations.setdefault(str(r), len(self.relations)) for r in fv.rel_names], dtype=np.int32)
        rel = to_global[fv.rel] if fv.rel.size else np.zeros(0, dtype=np.int32)
        cached = self._by_ids.get(id(fv.fact_id))
        if cached is not None and cached[0] is fv.fact_id:
            codes = cached[1]
        else:
            found = pc.index_in(fv.fact_id, value_set=self.ids()) if self.size else pa.nulls(len(fv.fact_id), pa.int32())
            codes = found.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
            new = codes < 0
            if new.any():
                codes[new] = np.arange(self.size, self.size + int(new.sum()))
                self.chunks.append(fv.fact_id.filter(pa.array(new)))
                self.relation.append(rel[new])
                self.first_run.append(np.full(int(new.sum()), run, dtype=np.int32))
                self.size += int(new.sum())
            self._by_ids[id(fv.fact_id)] = (fv.fact_id, codes)
        known = self.relation_codes()
        bad = np.flatnonzero(known[codes] != rel)
        if bad.size:
            i = int(bad[0])
            names = list(self.relations)
            other = runs[int(np.concatenate(self.first_run)[codes[i]])].source
            raise DataError(
                f"fact {fv.fact_id[i].as_py()} is relation {names[known[codes[i]]]} in run {other.ref} and {names[rel[i]]} "
                "in this run; the runs were made on other facts under the same ids"
            )
        return codes


def _read_all(sources: Sequence[RunSource], readings: dict[str, Reading]) -> tuple[list[RunFacts], FactIndex]:
    from .reading import Encoder

    index, encoder = FactIndex(), Encoder()
    runs: list[RunFacts] = []
    for i, src in enumerate(sources):
        fv = read_verdicts(src, readings[src.probe], encoder)
        codes = index.add(fv, i, runs)
        runs.append(RunFacts(src, codes, fv.right, fv.gold_prob, int(fv.n_rows.sum())))
    return runs, index


def _partial(runs: Sequence[RunFacts], index: FactIndex, count: np.ndarray) -> pd.DataFrame:
    """Facts some runs lack: fact_id, relation, n_runs (that have it), missing_from (run names)."""
    import pyarrow as pa

    part = np.flatnonzero(count < len(runs))
    names = list(index.relations)
    if not part.size:
        return pd.DataFrame({"fact_id": [], "relation": [], "n_runs": [], "missing_from": []})
    pos = np.full(index.size, -1)
    pos[part] = np.arange(part.size)
    have = np.zeros((part.size, len(runs)), dtype=bool)
    for j, r in enumerate(runs):
        p = pos[r.codes]
        have[p[p >= 0], j] = True
    run_names = [r.source.name for r in runs]
    missing = []
    for row in have:
        lacking = [run_names[j] for j in np.flatnonzero(~row)]
        missing.append(", ".join(lacking[:10]) + (f" and {len(lacking) - 10} more" if len(lacking) > 10 else ""))
    return pd.DataFrame(
        {
            "fact_id": index.ids().take(pa.array(part)).to_pylist(),
            "relation": [names[r] for r in index.relation_codes()[part]],
            "n_runs": count[part].astype(int),
            "missing_from": missing,
        }
    )


def _no_shared_fact(runs: Sequence[RunFacts], n_facts: int) -> str:
    """The refusal of runs with no fact in common: how many facts each has, and which share none with the first."""
    first = np.zeros(n_facts, dtype=bool)
    first[runs[0].codes] = True
    apart = [r.source.name for r in runs[1:] if not first[r.codes].any()]
    sizes = ", ".join(f"{r.source.name} {r.codes.size}" for r in runs[:6]) + (", ..." if len(runs) > 6 else "")
    what = f"; {', '.join(apart[:6])} share{'s' if len(apart) == 1 else ''} none with {runs[0].source.name}" if apart else ""
    return (
        f"the runs share no fact (facts: {sizes}{what}): a map joins runs that probed the same facts; run the probes "
        "on the same relations and facts (runs capped by --max-facts-per-relation of coherency and belief-icl draw "
        "other facts than the multiple-choice and qa probes: run those uncapped)"
    )


def _stage_dir(out: Path) -> Path:
    for old in out.glob(".building-*"):  # a killed build's staging folder: the claim says nobody else writes here
        shutil.rmtree(old, ignore_errors=True)
    stage = out / f".building-{os.getpid()}"
    (stage / "tables").mkdir(parents=True)
    (stage / "figures").mkdir()
    return stage


def _move_in(stage: Path, out: Path) -> None:
    for name in OUTPUTS:
        target = out / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    for name in OUTPUTS:
        if (stage / name).exists():
            os.replace(stage / name, out / name)
    shutil.rmtree(stage, ignore_errors=True)


def build_map(refs: Sequence[str], out: str | Path) -> tuple[Path, bool, list[str]]:
    """Build (or reuse) the knowledge map of the runs `refs` in folder `out` (module docstring). Returns
    (the folder, whether a finished map of the same inputs was reused, notes: runs a folder left out,
    numerics that differ, what was not checked). Raises ConfigError/DataError (one line) for bad input
    or runs that are not like with like, and for a folder holding another kind of run or another map."""
    from ..run_folder import claim

    if not refs:
        raise DataError("a knowledge map needs at least one run")
    sources, notes = find_runs(list(refs))
    readings = {s.probe: reading_of(s.probe) for s in sources}
    notes += check_alike(sources)
    inputs = map_inputs(sources, readings)
    with claim(out, "map", f"{len(sources)} runs") as folder:
        if reuse_or_refuse(folder, inputs):
            return folder, True, notes
        stage = _stage_dir(folder)
        try:
            write_map(sources, readings, inputs, notes, stage)
            _move_in(stage, folder)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
        atomic_write_json(folder / INPUTS_FILE, inputs)  # last: the map is finished
    return folder, False, notes


def _order(sources: Sequence[RunSource]) -> tuple[list[str], list[str]]:
    """(probes in registry order, models by short name)."""
    registry = map_probes()
    probes = sorted({s.probe for s in sources}, key=lambda p: (registry.index(p) if p in registry else len(registry), p))
    models = sorted({s.model for s in sources}, key=lambda m: (model_label(m), m))
    return probes, models


def write_map(sources: Sequence[RunSource], readings: dict[str, Reading], inputs: dict, notes: list[str], stage: Path) -> dict:
    """Write every output but `map_inputs.json` into `stage` (module docstring); returns the summary."""
    from .model_part import ModelPart, write_model_parts
    from .page import write_page

    runs, index = _read_all(sources, readings)
    count = np.zeros(index.size, dtype=np.int64)
    for r in runs:
        count[r.codes] += 1
    joined = np.flatnonzero(count == len(runs))
    partial = _partial(runs, index, count)
    if not joined.size:
        raise DataError(_no_shared_fact(runs, index.size))
    import pyarrow as pa
    import pyarrow.compute as pc

    rel_names = np.array(list(index.relations), dtype=str)[index.relation_codes()[joined]]
    used, rel = np.unique(rel_names, return_inverse=True)  # relation codes in name order
    ids = index.ids().take(pa.array(joined))
    order = pc.sort_indices(pa.table({"rel": rel, "id": ids}), sort_keys=[("rel", "ascending"), ("id", "ascending")])
    joined, ids, rel = joined[order.to_numpy()], ids.take(order), rel[order.to_numpy()]  # facts by relation, then id
    probes, models = _order(sources)
    part = ModelPart(
        fact_id=ids,
        relations=[str(r) for r in used],
        rel=rel.astype(np.int64),
        probes=probes,
        position=np.full(index.size, -1, dtype=np.int64),
    )
    part.position[joined] = np.arange(joined.size)
    runs_table = pd.DataFrame(
        [
            {
                "probe": r.source.probe,
                "model": r.source.model,
                "label": model_label(r.source.model),
                "model_revision": r.source.model_revision,
                "data_digest": r.source.data_digest,
                "verdict": readings[r.source.probe].describe(),
                "n_rows": r.n_rows,
                "n_facts": int(r.codes.size),
                "n_partial": int((count[r.codes] < len(runs)).sum()),
                "ref": r.source.ref,
            }
            for r in runs
        ]
    )
    summary = write_model_parts(part, models, runs, stage)
    tables = stage / "tables"
    runs_table.to_parquet(tables / "runs.parquet", index=False)
    partial.to_parquet(tables / "partial_facts.parquet", index=False)
    summary.update(
        format=inputs["format"],
        key=inputs["key"],
        probes=[
            {
                "probe": p,
                "verdict": readings[p].describe(),
                "data_digest": next((s.data_digest for s in sources if s.probe == p and s.data_digest), None),
            }
            for p in probes
        ],
        runs=runs_table.drop(columns=["ref"]).assign(ref=runs_table["ref"]).to_dict("records"),
        n_facts=int(joined.size),
        n_partial=int(len(partial)),
        n_relations=len(part.relations),
        notes=list(notes),
    )
    from ..metrics.json_safe import json_safe

    summary = json_safe(summary)
    atomic_write_json(stage / SUMMARY, summary)
    write_page(stage, summary)
    return summary


__all__ = ["OUTPUTS", "PAGE", "SUMMARY", "TABLES", "build_map", "write_map"]
