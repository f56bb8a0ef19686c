"""Like with like, before anything is joined, and the identity of a map's inputs.

`check_alike(sources)` refuses, in one line naming the runs:
- two runs of one probe on one model (`ConfigError`): a map holds one verdict per probe and model;
- runs of one model that read different weights (their model revisions differ; `DataError`);
- runs of one probe on different data (their data digests differ; `DataError`): every model must
  answer the same items. Runs of different probes prepare different items from the same facts, so
  their digests differ by design; they are joined on `fact_id`, and a fact some runs lack is counted
  apart by the builder, never silently dropped;
- models probed by different sets of probes (`ConfigError`): "known under every probe" must mean
  the same probes for every model.
It returns notes for what it cannot check (a run without a recorded revision or digest) and for
numerics that differ between the runs of one probe.

`map_inputs(sources, readings)` is what a map folder records (`map_inputs.json`): per run its probe,
model, model revision, data digest, the verdict read and the sha256 of the per-fact file read, and
`key`, the sha256 of all of them (order-free) and of `MAP_FORMAT`. `reuse_or_refuse` reuses a
folder holding a finished map of the same key and refuses one holding a map of other inputs, naming
what differs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from ..errors import ConfigError, DataError
from ..identity import file_sha256, numerics_changes, short
from .reading import Reading, RunSource

#: the version of what a map folder holds: a map of another version is rebuilt, never reused
MAP_FORMAT = 1
INPUTS_FILE = "map_inputs.json"


def _short(value: str | None) -> str:
    return short(value) if value else "none recorded"


def check_alike(sources: Sequence[RunSource]) -> list[str]:
    """Refuse runs that are not like with like (module docstring); the notes on what was not checked."""
    notes: list[str] = []
    seen: dict[tuple[str, str], RunSource] = {}
    for s in sources:
        other = seen.get((s.probe, s.model))
        if other is not None:
            raise ConfigError(
                f"two runs of {s.probe} on {s.model}: {other.ref} and {s.ref}; a map holds one verdict per probe and "
                "model: give one of them (a later night, a fine-tune: build a second map and `factprobe map --diff`)"
            )
        seen[(s.probe, s.model)] = s
    by_model: dict[str, list[RunSource]] = {}
    by_probe: dict[str, list[RunSource]] = {}
    for s in sources:
        by_model.setdefault(s.model, []).append(s)
        by_probe.setdefault(s.probe, []).append(s)
    for model, runs in by_model.items():
        known = [r for r in runs if r.model_revision]
        for r in known[1:]:
            if r.model_revision != known[0].model_revision:
                raise DataError(
                    f"runs of {model} read different weights: {known[0].name} ({known[0].ref}) revision "
                    f"{_short(known[0].model_revision)}, {r.name} ({r.ref}) revision {_short(r.model_revision)}; "
                    "a map joins runs of the same weights: probe them again on one revision"
                )
    for probe, runs in by_probe.items():
        known = [r for r in runs if r.data_digest]
        for r in known[1:]:
            if r.data_digest != known[0].data_digest:
                raise DataError(
                    f"{probe} runs on different data: {known[0].name} ({known[0].ref}) data digest "
                    f"{_short(known[0].data_digest)}, {r.name} ({r.ref}) {_short(r.data_digest)}; every model of a "
                    "map answers the same items: probe them again on the same data and options"
                )
        idents = [r for r in runs if r.identity and r.identity.get("numerics")]
        for r in idents[1:]:
            changes = numerics_changes(idents[0].identity["numerics"], r.identity["numerics"])
            if changes:
                notes.append(f"note: {idents[0].name} and {r.name} ran with different numerics ({'; '.join(changes)})")
    probe_sets = {m: sorted(r.probe for r in runs) for m, runs in by_model.items()}
    first = next(iter(probe_sets), None)
    for model, probes in probe_sets.items():
        if probes != probe_sets[first]:
            raise ConfigError(
                f"{first} was probed by {', '.join(probe_sets[first])} and {model} by {', '.join(probes)}; known "
                "under every probe must mean the same probes for every model: add the missing runs or leave "
                "those probes out"
            )
    unchecked = [s.name for s in sources if not (s.model_revision and s.data_digest)]
    if unchecked:
        notes.append(
            f"warning: {', '.join(unchecked)} record no model revision or data digest (made before they were "
            "recorded): their weights and data are not checked"
        )
    return notes


def map_inputs(sources: Sequence[RunSource], readings: dict[str, Reading]) -> dict:
    """{"format", "key", "runs": [...]}: the identity of a map's inputs (module docstring). Each run
    entry: ref, probe, model, model_revision, data_digest, verdict (what was read) and table_sha256."""
    runs = [
        {
            "probe": s.probe,
            "model": s.model,
            "model_revision": s.model_revision,
            "data_digest": s.data_digest,
            "verdict": readings[s.probe].describe(),
            "table_sha256": file_sha256(s.table),
            "ref": s.ref,
        }
        for s in sources
    ]
    ident = sorted(json.dumps({k: v for k, v in r.items() if k != "ref"}, sort_keys=True) for r in runs)
    key = hashlib.sha256(json.dumps({"format": MAP_FORMAT, "runs": ident}).encode()).hexdigest()
    return {"format": MAP_FORMAT, "key": key, "runs": runs}


def recorded(out: Path) -> dict | None:
    """The inputs `out`'s finished map records (`INPUTS_FILE`, written last), or None (no finished map)."""
    try:
        d = json.loads((out / INPUTS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) and d.get("key") else None


def _what_differs(old: dict, new: dict) -> str:
    def by_run(d: dict) -> dict:
        return {(r.get("probe"), r.get("model")): r for r in d.get("runs", [])}

    a, b = by_run(old), by_run(new)
    parts = [f"{p}:{m} only in the folder's map" for p, m in sorted(set(a) - set(b))]
    parts += [f"{p}:{m} only in these runs" for p, m in sorted(set(b) - set(a))]
    for k in sorted(set(a) & set(b)):
        changed = [f for f in ("model_revision", "data_digest", "verdict", "table_sha256") if a[k].get(f) != b[k].get(f)]
        if changed:
            parts.append(f"{k[0]}:{k[1]} differs in {', '.join(changed)}")
    if old.get("format") != new.get("format"):
        parts.append(f"map format {old.get('format')} vs {new.get('format')}")
    return "; ".join(parts[:6]) + (f"; and {len(parts) - 6} more" if len(parts) > 6 else "") or "the inputs differ"


def reuse_or_refuse(out: Path, inputs: dict) -> bool:
    """True when `out` holds a finished map of the same inputs (it is reused as it is); False when it
    holds none (an empty folder, or one whose map never finished). DataError (one line naming what
    differs) when it holds a finished map of other inputs: a map is reused only for the same inputs."""
    old = recorded(out)
    if old is None:
        return False
    if old["key"] == inputs["key"]:
        return True
    raise DataError(
        f"{out} holds a knowledge map of other inputs ({_what_differs(old, inputs)}); a map is reused only for the "
        "same inputs: use another --out"
    )


__all__ = ["INPUTS_FILE", "MAP_FORMAT", "check_alike", "map_inputs", "recorded", "reuse_or_refuse"]
