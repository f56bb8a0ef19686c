"""What changed between two maps (two models, two nights, a model and its fine-tune): `diff_maps`.

Like with like: the two maps must hold the same probes, each read from the same data (its data
digest in both maps), else the diff is refused in one line. Facts are joined on `fact_id`; a fact
in one map only is counted apart (`only_before`, `only_after`), never silently dropped.

Per fact, with P probes, g the probes under which it went from wrong to right and l the reverse:
- `robust gain`: every probe flips to right (g = P); `robust loss`: every probe flips to wrong (l = P);
- `gain`: some probes flip to right and none to wrong (0 < g < P, l = 0), a gain only some probes
  see (`n_gain_one_probe` counts those only one probe sees); `loss` likewise;
- `mixed`: some probes flip each way; `unchanged`.
Beside them, the robust sets: facts that became known under every probe (`became robust`) and
those that stopped (`no longer robust`). Per probe: the share right before and after, facts
gained and lost and McNemar's test (`factprobe.metrics.comparison.mcnemar`); the same for the
robust sets.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd

from ..errors import ConfigError, DataError
from ..metrics.comparison import mcnemar


class KnowledgeMap(Protocol):
    """What a diff reads of a map (`factprobe.knowledge_maps.result.KnowledgeMap` is one): named here, not
    imported, because the map's own `diff` method calls this module (no import circle, tests/test_layers.py)."""

    folder: Path
    summary: dict
    inputs: dict

    @property
    def models(self) -> list[str]: ...

    @property
    def probes(self) -> list[str]: ...

    def table(self, name: str) -> pd.DataFrame: ...


CHANGES = ("robust gain", "gain", "robust loss", "loss", "mixed", "unchanged")
DIFF_SUMMARY = "diff.json"


@dataclass
class MapDiff:
    """`summary` (counts, per probe, robust sets; JSON-safe), `probes` (one row per probe), `facts`
    (every changed fact: its change, each probe's verdict before and after), `only_in_one` (facts of one map only)."""

    summary: dict
    probes: pd.DataFrame
    facts: pd.DataFrame
    only_in_one: pd.DataFrame


def _pick(km: KnowledgeMap, model: str | None, which: str) -> str:
    models = km.models
    if model is None:
        if len(models) != 1:
            raise ConfigError(
                f"{km.folder} maps {len(models)} models ({', '.join(models)}); name the one to diff with --model-{which}"
            )
        return models[0]
    found = [m for m in models if model in (m, next(x["label"] for x in km.summary["models"] if x["model"] == m))]
    if not found:
        raise ConfigError(f"{km.folder} has no model {model}; it maps {', '.join(models)}")
    return found[0]


def _check_alike(a: KnowledgeMap, b: KnowledgeMap) -> None:
    if a.probes != b.probes:
        raise ConfigError(
            f"{a.folder} maps probes {', '.join(a.probes)} and {b.folder} {', '.join(b.probes)}: a diff compares the same "
            "probes; build both maps from runs of the same probes"
        )
    digests_b = {p["probe"]: p.get("data_digest") for p in b.summary.get("probes", [])}
    for p in a.summary.get("probes", []):
        da, db = p.get("data_digest"), digests_b.get(p["probe"])
        if da and db and da != db:
            raise DataError(
                f"{p['probe']} read other data in the two maps ({a.folder}: {da}, {b.folder}: {db}); a diff compares the "
                "same items: probe both on the same data and options"
            )


def _verdicts(km: KnowledgeMap, model: str) -> pd.DataFrame:
    cols = ["fact_id", "relation", *km.probes]
    return pd.read_parquet(km.folder / "tables" / "verdicts.parquet", columns=cols, filters=[("model", "==", model)])


def diff_maps(before: KnowledgeMap, after: KnowledgeMap, model_a: str | None = None, model_b: str | None = None) -> MapDiff:
    """The diff from `before` to `after` (module docstring), one model of each (the only one, or the
    one named: its model string or short label)."""
    _check_alike(before, after)
    ma, mb = _pick(before, model_a, "a"), _pick(after, model_b, "b")
    probes = before.probes
    a, b = _verdicts(before, ma), _verdicts(after, mb)
    joined = a.merge(b, on="fact_id", how="inner", suffixes=(":before", ":after"))
    if (joined["relation:before"] != joined["relation:after"]).any():
        bad = joined[joined["relation:before"] != joined["relation:after"]].iloc[0]
        raise DataError(
            f"fact {bad['fact_id']} is relation {bad['relation:before']} in {before.folder} and {bad['relation:after']} "
            f"in {after.folder}; the maps were made on other facts under the same ids"
        )
    only_a = a.loc[~a["fact_id"].isin(joined["fact_id"]), ["fact_id", "relation"]].assign(only_in="before")
    only_b = b.loc[~b["fact_id"].isin(joined["fact_id"]), ["fact_id", "relation"]].assign(only_in="after")
    if joined.empty:
        raise DataError(f"the maps share no fact ({len(a)} and {len(b)} facts): a diff compares the same facts")
    bf = joined[[f"{p}:before" for p in probes]].to_numpy(dtype=bool)
    af = joined[[f"{p}:after" for p in probes]].to_numpy(dtype=bool)
    n_probes = len(probes)
    ng, nl = (~bf & af).sum(axis=1), (bf & ~af).sum(axis=1)
    change = np.select(
        [ng == n_probes, nl == n_probes, (ng > 0) & (nl == 0), (nl > 0) & (ng == 0), (ng > 0) & (nl > 0)],
        ["robust gain", "robust loss", "gain", "loss", "mixed"],
        "unchanged",
    )
    rob_b, rob_a = bf.all(axis=1), af.all(axis=1)
    facts = joined.rename(columns={"relation:before": "relation"}).drop(columns=["relation:after"])
    facts.insert(2, "change", change)
    facts.insert(3, "n_gained", ng.astype(np.int16))
    facts.insert(4, "n_lost", nl.astype(np.int16))
    facts.insert(5, "robust_before", rob_b)
    facts.insert(6, "robust_after", rob_a)
    rows = []
    for j, p in enumerate(probes):
        mc = mcnemar(bf[:, j], af[:, j])
        rows.append(
            {
                "probe": p,
                "n_facts": int(len(joined)),
                "before": float(bf[:, j].mean()),
                "after": float(af[:, j].mean()),
                "gained": mc["b01"],
                "lost": mc["b10"],
                "net": mc["b01"] - mc["b10"],
                "mcnemar_p": mc["p_value"],
            }
        )
    mc = mcnemar(rob_b, rob_a)
    rows.append(
        {
            "probe": "every probe (robust)",
            "n_facts": int(len(joined)),
            "before": float(rob_b.mean()),
            "after": float(rob_a.mean()),
            "gained": mc["b01"],
            "lost": mc["b10"],
            "net": mc["b01"] - mc["b10"],
            "mcnemar_p": mc["p_value"],
        }
    )
    counts = {c: int((change == c).sum()) for c in CHANGES}
    summary = {
        "before": {"folder": str(before.folder), "model": ma, "key": before.inputs.get("key")},
        "after": {"folder": str(after.folder), "model": mb, "key": after.inputs.get("key")},
        "probes": probes,
        "n_facts": int(len(joined)),
        "only_before": int(len(only_a)),
        "only_after": int(len(only_b)),
        "changes": counts,
        "n_gain_one_probe": int(((ng == 1) & (nl == 0)).sum()),
        "n_loss_one_probe": int(((nl == 1) & (ng == 0)).sum()),
        "became_robust": int((~rob_b & rob_a).sum()),
        "no_longer_robust": int((rob_b & ~rob_a).sum()),
        "per_probe": rows,
    }
    changed = facts[facts["change"] != "unchanged"].sort_values(["change", "relation", "fact_id"], kind="stable")
    return MapDiff(summary, pd.DataFrame(rows), changed.reset_index(drop=True), pd.concat([only_a, only_b], ignore_index=True))


def write_diff(diff: MapDiff, out: str | Path) -> Path:
    """Write `diff` into folder `out` (kind `map-diff`): diff.json, tables/diff_probes.parquet,
    tables/diff_facts.parquet (changed facts), tables/diff_only_in_one.parquet."""
    from ..io import atomic_write_json, atomic_write_parquet
    from ..metrics.json_safe import json_safe
    from ..run_folder import claim

    with claim(out, "map-diff") as folder:
        atomic_write_parquet(folder / "tables" / "diff_probes.parquet", diff.probes)
        atomic_write_parquet(folder / "tables" / "diff_facts.parquet", diff.facts)
        atomic_write_parquet(folder / "tables" / "diff_only_in_one.parquet", diff.only_in_one)
        atomic_write_json(folder / DIFF_SUMMARY, json_safe(diff.summary))
    return Path(out)


def format_diff(diff: MapDiff) -> str:
    """The diff as text: what was compared, the changes per fact, then per probe."""
    s = diff.summary
    c = s["changes"]
    lines = [
        f"before = {s['before']['model']} ({s['before']['folder']})",
        f"after  = {s['after']['model']} ({s['after']['folder']})",
        f"facts compared: {s['n_facts']:,} (in the before map only: {s['only_before']:,}, in the after map only: {s['only_after']:,})",
        f"robust gain (every probe flips to right): {c['robust gain']:,}; gain some probes see: {c['gain']:,} "
        f"({s['n_gain_one_probe']:,} seen by one probe only)",
        f"robust loss (every probe flips to wrong): {c['robust loss']:,}; loss some probes see: {c['loss']:,} "
        f"({s['n_loss_one_probe']:,} seen by one probe only); mixed: {c['mixed']:,}; unchanged: {c['unchanged']:,}",
        f"known under every probe: {s['became_robust']:,} became so, {s['no_longer_robust']:,} no longer",
        "",
        f"{'probe':<24}{'before':>8}{'after':>8}{'gained':>8}{'lost':>8}{'McNemar p':>11}",
    ]
    for r in s["per_probe"]:
        lines.append(
            f"{r['probe']:<24}{r['before']:>8.3f}{r['after']:>8.3f}{r['gained']:>8}{r['lost']:>8}{r['mcnemar_p']:>11.3g}"
        )
    return "\n".join(lines)


__all__ = ["CHANGES", "MapDiff", "diff_maps", "format_diff", "write_diff"]
