"""Step: the knowledge map of a pipeline's finished probe runs (`factprobe.knowledge_maps`), logged to MLflow.

The map joins every finished run of the given run folders whose probe the map reads (a failed
probe step's folder and runs of probes without a per-fact verdict are left out and named on the
page); it is built into `map_dir` (the step's output folder: a later step, e.g. a diff against the
previous night's map, reads it), logged into a child run `knowledge-map` of the pipeline's parent run
(`factprobe_ops.tracking.map_logging`), and its page and summary are written to `html_path` and
`md_path`. A map compares two or more probes on the same facts: it is not drawn from runs of fewer
than two probes (a sweep of one probe), from runs that share no fact or are not like with like: the step
then prints the reason (the step's log), writes a page saying why, logs it to the parent run
(`report/knowledge_map.md`) and returns {"built": False, "reason"} instead of failing the pipeline (the
report and the comparison stand without it). With `against_previous` (the nightly sweep) each model's
map is diffed against the previous night's (components/steps/map_previous.py) and the diff joins the
summary.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from factprobe_ops.tracking.context import RunContext


def run_probe(folder: str) -> str:
    """The probe a finished run folder's metrics.json names ("" when none)."""
    import json

    try:
        return str(json.loads((Path(folder) / "metrics.json").read_text(encoding="utf-8")).get("probe", ""))
    except (OSError, ValueError, AttributeError):
        return ""


def too_few_probes(runs: list[str]) -> str:
    """ "" when `runs` (readable run folders) hold two or more probes, else the reason there is no map."""
    probes = sorted({run_probe(d) for d in runs})
    if len(probes) > 1:
        return ""
    return (
        f"the finished runs hold one probe ({probes[0]}): a knowledge map compares two or more probes on the same facts; "
        'run the pipeline with two or more probes (e.g. probes=["ic-lke", "hgp", "qa"])'
    )


def readable_runs(result_dirs: list[str]) -> tuple[list[str], list[str]]:
    """(the folders of finished runs the map reads, notes on those left out: failed, unfinished, no verdict)."""
    import json

    from factprobe.knowledge_maps.reading import reading_of

    runs, notes = [], []
    for d in result_dirs:
        p = Path(d)
        if (p / "failed.json").exists():
            notes.append(f"{d}: a failed probe step, left out")
            continue
        try:
            metrics = json.loads((p / "metrics.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            notes.append(f"{d}: no finished run (no metrics.json), left out")
            continue
        probe = str(metrics.get("probe", ""))
        if reading_of(probe) is None:
            notes.append(f"{d}: a {probe or 'unnamed'} run, no verdict per fact the map reads, left out")
            continue
        runs.append(d)
    return runs, notes


def run_knowledge_map(
    result_dirs: list[str], map_dir: str, html_path: str, md_path: str, context: RunContext | str, against_previous: bool = False
) -> dict:
    """Build the map of `result_dirs` into `map_dir`, log it into a child run of `context`'s parent run
    (the pipeline run's `RunContext` or its JSON), write its page to `html_path` and a Markdown summary
    to `md_path`; with `against_previous`, diff it against the previous night's map (module docstring).
    Returns {"built": True, "key", "n_facts", "models"} or {"built": False, "reason"}."""
    import html
    import shutil

    from factprobe.errors import FactprobeError
    from factprobe.io import atomic_write_text
    from factprobe.knowledge_maps import knowledge_map
    from factprobe.knowledge_maps.page import format_summary
    from factprobe_ops.tracking.context import RunContext
    from factprobe_ops.tracking.conventions import tag
    from factprobe_ops.tracking.map_logging import log_knowledge_map
    from factprobe_ops.tracking.run import TrackedRun

    ctx = RunContext.from_json(context)
    runs, notes = readable_runs(result_dirs)
    try:
        if not runs:
            raise FactprobeError("no finished run whose probe the knowledge map reads")
        if too_few_probes(runs):
            raise FactprobeError(too_few_probes(runs))
        km = knowledge_map(runs, map_dir)
    except FactprobeError as e:
        reason = str(e).splitlines()[0]
        text = "\n".join([f"No knowledge map: {reason}", *notes])
        print(f"knowledge map skipped: {reason}", flush=True)
        atomic_write_text(md_path, f"# Knowledge map\n\n{text}\n")
        atomic_write_text(
            html_path, f"<!doctype html><html><body><h1>Knowledge map</h1><pre>{html.escape(text)}</pre></body></html>"
        )
        if ctx.tracked:
            with TrackedRun.parent_of(ctx) as parent:  # logged into, not ended (the finalize step ends it)
                parent.log_text(f"# Knowledge map\n\n{text}\n", "report/knowledge_map.md")
        return {"built": False, "reason": reason}
    with TrackedRun.from_context(ctx, run_name="knowledge-map", required=True, tags={tag("step"): "knowledge-map"}) as run:
        log_knowledge_map(run, km.folder)
        if notes:
            run.log_text("\n".join(notes), "knowledge_map/left_out.txt")
    summary = format_summary(km.summary)
    night = ""
    if against_previous:
        from .map_previous import compare_with_previous_night

        night = "\n" + compare_with_previous_night(km, ctx)
    atomic_write_text(md_path, "# Knowledge map\n\n```\n" + "\n".join([summary, *notes]) + "\n```\n" + night)
    shutil.copyfile(km.folder / "knowledge_map.html", html_path)
    return {"built": True, "key": km.inputs["key"], "n_facts": km.summary["n_facts"], "models": km.models}


#: the columns of `finetune_knowledge_diffs`' table, after `setting`
DIFF_COLUMNS = (
    "n_facts",
    "robust gain",
    "gain",
    "robust loss",
    "loss",
    "mixed",
    "unchanged",
    "became_robust",
    "no_longer_robust",
)


def finetune_knowledge_diffs(qa_dirs: list[str], mc_dirs: list[str]):
    """For the fine-tuning report: per fine-tuned setting, the diff of its knowledge map (its QA and
    IC-LKE evaluation runs) against the base model's (`factprobe.knowledge_maps.diff`): a DataFrame with
    `setting` and `DIFF_COLUMNS`, and a note, "" or the one line saying why there is no diff (e.g. runs
    without metrics.json, or QA and IC-LKE runs on different facts). Never raises for the runs' content:
    the report stands without it."""
    import tempfile

    import pandas as pd

    from factprobe.errors import FactprobeError
    from factprobe.knowledge_maps import diff_runs
    from factprobe.metrics.finetune_compare import BASE

    from .finetune_evaluate import evaluation_dirs

    qa, mc = evaluation_dirs(qa_dirs), evaluation_dirs(mc_dirs)
    runs = {s: [d for d in (qa.get(s), mc.get(s)) if d] for s in dict.fromkeys([*qa, *mc])}
    rows = []
    with tempfile.TemporaryDirectory(prefix="finetune-map-") as work:
        try:
            if BASE not in runs:
                raise FactprobeError(f"no {BASE} evaluation to compare with")
            for setting, folders in runs.items():
                if setting == BASE:
                    continue
                d = diff_runs(runs[BASE], folders, Path(work) / setting).summary
                rows.append({"setting": setting, "n_facts": d["n_facts"], **d["changes"], **{k: d[k] for k in DIFF_COLUMNS[-2:]}})
        except FactprobeError as e:
            return pd.DataFrame(rows, columns=["setting", *DIFF_COLUMNS]), f"no knowledge-map diff: {str(e).splitlines()[0]}"
    return pd.DataFrame(rows, columns=["setting", *DIFF_COLUMNS]), ""


__all__ = ["DIFF_COLUMNS", "finetune_knowledge_diffs", "readable_runs", "run_knowledge_map", "run_probe", "too_few_probes"]
