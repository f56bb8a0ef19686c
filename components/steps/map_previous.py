"""Step part: tonight's knowledge map against the previous night's (issue 39 item 2; the nightly sweep).

For each model of tonight's map (`factprobe.knowledge_maps`), the previous night is the newest FINISHED
map run logged by an earlier run of the same pipeline (its experiment; another parent run, started
before this one) that maps the same probes and this model (`factprobe_ops.tracking.map_logging.previous_maps`).
Its map is downloaded and diffed with tonight's (`factprobe.knowledge_maps.diff`: facts gained and lost
under every probe, a robust gain apart from a gain one probe sees); a previous map of the same probes on
other data is refused by the diff and named, never paired. A model without a previous night is said to
be the new reference.

`previous_night_diffs` returns the rows (`NIGHT_COLUMNS`) and the notes; `log_previous_night` logs them
to the pipeline's parent run: the table `tables/nightly_knowledge_map.json`, the Markdown
`report/nightly_knowledge_map.md`, metrics `knowledge_map_diff/<model>/<change>` and the tag
`factprobe.previous_knowledge_map` (the previous map runs, or `none`). Never raises for what MLflow
holds: an unreadable previous map is a note (the report stands without its diff).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from factprobe.knowledge_maps import KnowledgeMap
    from factprobe_ops.tracking.context import RunContext

#: the columns of the nightly diff table after `model`, `previous_map_run` and `previous_sweep`
NIGHT_COLUMNS = (
    "n_facts",
    "robust gain",
    "gain",
    "robust loss",
    "loss",
    "mixed",
    "unchanged",
    "n_gain_one_probe",
    "became_robust",
    "no_longer_robust",
)
TABLE_ARTIFACT = "tables/nightly_knowledge_map.json"
MARKDOWN_ARTIFACT = "report/nightly_knowledge_map.md"


def previous_night_diffs(km: KnowledgeMap, ctx: RunContext) -> tuple[list[dict], list[str]]:
    """(one row per model of `km` diffed against its previous night, notes: models without a previous
    night, previous maps that could not be read or compared). `ctx`: the pipeline run's context (tracked)."""
    from factprobe.errors import FactprobeError
    from factprobe.knowledge_maps import KnowledgeMap
    from factprobe_ops.tracking.library_client import open_mlflow_client
    from factprobe_ops.tracking.map_logging import download_map, map_models, previous_maps

    client = open_mlflow_client(ctx.uri)
    me = client.get_run(ctx.parent_run_id)
    found = previous_maps(client, me.info.experiment_id, ctx.parent_run_id, me.info.start_time, km.probes)
    probes = ", ".join(km.probes)
    chosen: dict[str, tuple] = {}
    notes = []
    for m in km.summary.get("models", []):
        prev = next((r for r in found if m["label"] in map_models(r)), None)
        if prev is None:
            notes.append(f"{m['label']}: no previous night's map of {probes}: tonight's is the reference")
            continue
        chosen.setdefault(prev.info.run_id, (prev, []))[1].append(m)
    rows = []
    with tempfile.TemporaryDirectory(prefix="previous-map-") as work:
        for run_id, (prev, models) in chosen.items():
            try:
                before = KnowledgeMap.open(download_map(client, run_id, Path(work) / run_id))
            except Exception as e:  # noqa: BLE001 - an old or partly logged map run is a note, not a failed sweep
                notes.append(f"previous map run {run_id} could not be read: {str(e).splitlines()[0][:200]}")
                continue
            for m in models:
                try:
                    d = before.diff(km, m["label"], m["model"]).summary
                except FactprobeError as e:
                    notes.append(f"{m['label']}: not compared with previous map run {run_id}: {str(e).splitlines()[0]}")
                    continue
                rows.append(
                    {
                        "model": m["label"],
                        "previous_map_run": run_id,
                        "previous_sweep": prev.data.tags.get("mlflow.parentRunId", ""),
                        "n_facts": d["n_facts"],
                        **d["changes"],
                        **{k: d[k] for k in NIGHT_COLUMNS[-3:]},
                    }
                )
    return rows, notes


def night_markdown(rows: list[dict], notes: list[str]) -> str:
    """The diff section of the nightly report: a table of the models compared, then the notes."""
    lines = ["## Knowledge map against the previous night", ""]
    if rows:
        lines += [
            "Per fact: a robust gain flips to right under every probe, a gain under some (how many under one "
            "probe only: `n_gain_one_probe`); likewise losses.",
            "",
            "| model | previous map run | " + " | ".join(NIGHT_COLUMNS) + " |",
            "|---|---|" + "---|" * len(NIGHT_COLUMNS),
        ]
        lines += [
            f"| {r['model']} | {r['previous_map_run']} | " + " | ".join(str(r[c]) for c in NIGHT_COLUMNS) + " |" for r in rows
        ]
    elif not notes:
        notes = ["no model to compare"]
    if notes:
        lines += ["", *[f"- {n}" for n in notes]]
    return "\n".join(lines) + "\n"


def log_previous_night(ctx: RunContext, rows: list[dict], markdown: str) -> None:
    """Log the nightly diff (module docstring) to the parent run of `ctx`."""
    import pandas as pd

    from factprobe_ops.tracking.conventions import tag
    from factprobe_ops.tracking.run import TrackedRun

    with TrackedRun.parent_of(ctx) as run:  # logged into, not ended (the finalize step ends it)
        run.set_tags({tag("previous_knowledge_map"): ",".join(sorted({r["previous_map_run"] for r in rows})) or "none"})
        run.log_metrics(
            {
                f"knowledge_map_diff/{r['model'].replace('/', '_')}/{c.replace(' ', '_')}": float(r[c])
                for r in rows
                for c in NIGHT_COLUMNS[1:]
            }
        )
        if rows:
            run.log_table(pd.DataFrame(rows), TABLE_ARTIFACT)
        run.log_text(markdown, MARKDOWN_ARTIFACT)


def compare_with_previous_night(km: KnowledgeMap, ctx: RunContext) -> str:
    """Diff `km` against the previous night's maps, log it to the parent run (when tracking is on) and
    return the Markdown section for the step's summary."""
    if not ctx.tracked:
        return night_markdown([], ["tracking is off: no previous night's map to compare with"])
    rows, notes = previous_night_diffs(km, ctx)
    text = night_markdown(rows, notes)
    log_previous_night(ctx, rows, text)
    return text


__all__ = ["NIGHT_COLUMNS", "compare_with_previous_night", "log_previous_night", "night_markdown", "previous_night_diffs"]
