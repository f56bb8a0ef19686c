"""What a knowledge map logs to MLflow, in one place (the map step; `factprobe.knowledge_maps`).

`log_knowledge_map(run, folder)` logs a finished map folder into `run` (a `TrackedRun`), under
`knowledge_map/` unless told otherwise:
- metrics: per model `knowledge_map/<model>/<category>` (every, majority, none, disputed: the relation
  mean) with `.../<category>_pooled`, `knowledge_map/<model>/kappa/<probe a>/<probe b>` and
  `.../eta/<probe a>/<probe b>` (eta(a | b)) both ways; `knowledge_map/n_facts`, `n_partial`,
  `n_known_everywhere`;
- tables the MLflow UI shows (`log_table`): shares, pairs, sharing, runs, shares per relation, and the
  first `TOP_ROWS` disputed and partial facts; every table of the folder as parquet under `tables/`;
- figures: each model's probe-agreement matrix and facts x probes heatmap ordered by agreement, the
  sharing matrix (`figures/`);
- the page a person reads (`knowledge_map.html`) and the summary (`knowledge_map.json`);
- tags `factprobe.knowledge_map_key` (the map's input identity) and `factprobe.knowledge_map_models`.
Metric names are made safe by `TrackedRun.log_metrics` (a model path or a relation id with `/`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .conventions import tag

if TYPE_CHECKING:
    from .run import TrackedRun

#: rows of the disputed and partial facts logged as UI tables (all of them are in the parquet files)
TOP_ROWS = 1000
#: the tables logged whole as UI tables
UI_TABLES = ("shares", "pairs", "sharing", "runs", "shares_by_relation")


def _part(text: str) -> str:
    return str(text).replace("/", "_")


def map_metrics(summary: dict, prefix: str = "knowledge_map") -> dict[str, float]:
    """The metrics of a map's summary (module docstring); undefined values are left out."""
    import math

    out: dict[str, float] = {
        f"{prefix}/n_facts": summary.get("n_facts", 0),
        f"{prefix}/n_partial": summary.get("n_partial", 0),
        f"{prefix}/n_known_everywhere": summary.get("cross_model", {}).get("n_known_everywhere", 0),
    }
    for m in summary.get("models", []):
        base = f"{prefix}/{_part(m['label'])}"
        for cat, s in m["shares"].items():
            out[f"{base}/{cat}"] = s.get("value")
            out[f"{base}/{cat}_pooled"] = s.get("pooled")
        for p in m.get("pairs", []):
            a, b = _part(p["probe_a"]), _part(p["probe_b"])
            out[f"{base}/kappa/{a}/{b}"] = p.get("kappa")
            out[f"{base}/eta/{a}/{b}"] = p.get("eta_a_given_b")
            out[f"{base}/eta/{b}/{a}"] = p.get("eta_b_given_a")
    return {k: float(v) for k, v in out.items() if v is not None and not (isinstance(v, float) and math.isnan(v))}


def log_knowledge_map(run: TrackedRun, folder: str | Path, prefix: str = "knowledge_map") -> None:
    """Log the finished map in `folder` into `run` (module docstring). Nothing when the run is not active."""
    from factprobe.knowledge_maps import KnowledgeMap

    if not run.active:
        return
    km = KnowledgeMap.open(folder)
    run.set_tags(
        {
            tag("knowledge_map_key"): km.inputs["key"],
            tag("knowledge_map_models"): ",".join(m["label"] for m in km.summary.get("models", []))[:5000],
        }
    )
    run.log_metrics(map_metrics(km.summary, prefix))
    for name in UI_TABLES:
        run.log_table(km.table(name), f"{prefix}/{name}.json")
    run.log_table(km.table("disputed").head(TOP_ROWS), f"{prefix}/disputed_top.json")
    if km.summary.get("n_partial"):
        run.log_table(km.table("partial_facts").head(TOP_ROWS), f"{prefix}/partial_facts_top.json")
    folder = Path(folder)
    run.log_artifacts(folder / "tables", f"{prefix}/tables")
    run.log_artifacts(folder / "figures", f"{prefix}/figures")
    run.log_artifact(folder / "knowledge_map.html", prefix)
    run.log_artifact(folder / "knowledge_map.json", prefix)


__all__ = ["log_knowledge_map", "map_metrics"]
