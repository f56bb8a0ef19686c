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
- the page a person reads (`knowledge_map.html`), the summary (`knowledge_map.json`) and the inputs'
  identities (`map_inputs.json`), so a later run can open the map again (`download_map`);
- tags `factprobe.knowledge_map_key` (the map's input identity), `factprobe.knowledge_map_models` (the
  models' labels) and `factprobe.knowledge_map_probes` (its probes, in the map's order).
Metric names are made safe by `TrackedRun.log_metrics` (a model path or a relation id with `/`).

`previous_maps` finds the maps an earlier run of the same pipeline logged (the nightly sweep's previous
night) and `download_map` fetches one as a map folder `KnowledgeMap.open` reads (what a diff needs).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .conventions import tag

if TYPE_CHECKING:
    from .run import TrackedRun

#: what a diff reads of a logged map (`download_map`), under its prefix
MAP_FILES = ("knowledge_map.json", "map_inputs.json", "tables/verdicts.parquet")
#: how many earlier map runs `previous_maps` looks through
LOOK_BACK = 50

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
            tag("knowledge_map_probes"): ",".join(km.probes)[:5000],
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
    run.log_artifact(folder / "map_inputs.json", prefix)


def map_models(run) -> list[str]:
    """The model labels an MLflow map run (`mlflow.entities.Run`) maps, from its tag."""
    text = run.data.tags.get(tag("knowledge_map_models"), "")
    return [m for m in text.split(",") if m]


def previous_maps(client, experiment_id: str, parent_run_id: str, before_ms: int, probes: list[str]) -> list:
    """The FINISHED map runs (`factprobe.step=knowledge-map`) of experiment `experiment_id` that map
    exactly `probes` (in the map's order), of another parent run than `parent_run_id` and started no later
    than `before_ms` (ms since the epoch), newest first (at most `LOOK_BACK`). `client`: an MLflow client."""
    from .clients import tag_filter, tags_match

    wanted = {tag("step"): "knowledge-map", tag("knowledge_map_probes"): ",".join(probes)}
    found = client.search_runs(
        [experiment_id],
        filter_string=tag_filter(wanted, "FINISHED"),
        order_by=["attributes.start_time DESC"],
        max_results=LOOK_BACK,
    )
    return [
        r
        for r in found
        if tags_match(r.data.tags, wanted)
        and r.data.tags.get("mlflow.parentRunId") != parent_run_id
        and r.info.start_time <= before_ms
    ]


def download_map(client, run_id: str, dest: str | Path, prefix: str = "knowledge_map") -> Path:
    """Download what a diff reads of the map logged in run `run_id` under `prefix` (`MAP_FILES`) into the
    map folder `dest`/map, which `KnowledgeMap.open` reads, and return it. Raises what the MLflow client
    raises (a run logged before `map_inputs.json` was logged has none)."""
    import shutil

    fetched, folder = Path(dest) / "fetched", Path(dest) / "map"
    fetched.mkdir(parents=True, exist_ok=True)  # the client wants an existing folder
    for name in MAP_FILES:
        got = client.download_artifacts(run_id, f"{prefix}/{name}", str(fetched))
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(got, folder / name)  # where the client puts it differs by artifact store
    return folder


__all__ = ["MAP_FILES", "download_map", "log_knowledge_map", "map_metrics", "map_models", "previous_maps"]
