"""Step: run one registered probe for one model. GPU step."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from factprobe_ops.tracking.context import RunContext


def work_dir(work_root: str, key: str):
    """Stable working folder of a probe (so a rerun of the same identity resumes): `<root>/probe/<key>`,
    `key` naming the config and the measurement identity (`RunIdentity.key`)."""
    import os
    from pathlib import Path

    from factprobe.paths import cache_root

    root = Path(work_root or os.environ.get("FACTPROBE_WORK") or cache_root() / "work")
    return root / "probe" / key


def work_key(cfg, ident) -> str:
    """The name of a probe's work folder: `<results key>-<identity key>` (`RunIdentity.key`: weights,
    data, config and numerics), so a folder is reused only by a run of the same identity."""
    return f"{cfg.results_key()}-{ident.key()}"


#: how long a step waits for another live run that holds its work folder (env FACTPROBE_WORK_WAIT_S, seconds)
WORK_WAIT_S = 6 * 3600


def when_free(attempt, wait_s: float | None = None, poll_s: float = 5.0):
    """`attempt()`, retried while its work folder is held by another live run (`FolderBusyError`:
    another pipeline of the same identity on the same volume), for at most `wait_s` seconds
    (default env FACTPROBE_WORK_WAIT_S, else `WORK_WAIT_S`); one line says who it waits for."""
    import os
    import time

    from factprobe.run_folder import FolderBusyError

    if wait_s is None:
        wait_s = float(os.environ.get("FACTPROBE_WORK_WAIT_S") or WORK_WAIT_S)
    deadline = time.monotonic() + wait_s
    said = False
    while True:
        try:
            return attempt()
        except FolderBusyError as e:
            if time.monotonic() >= deadline:
                raise
            if not said:
                print(f"waiting: {e} (up to {wait_s:.0f} s; its rows are then reused)", flush=True)
                said = True
            time.sleep(poll_s)


def shard_prepared(cfg, prepared, shard: int, shards: int):
    """The items of fact shard `shard` (0-based) of `shards`: every item goes to one shard by the rank
    of a stable hash (sha256) of its fact id among all the items' (rank mod `shards`), so
    the assignment depends only on the prepared data (a rerun, or a resumed shard, gets the same
    items) and no shard is empty. Relations and fact sets stay; relations left without items are
    dropped from the shard's `items`. ConfigError (one line) when `shards` exceeds the items."""
    import dataclasses
    import hashlib

    from factprobe.errors import ConfigError
    from factprobe.framework.registry import get_probe

    spec = get_probe(cfg.probe)
    items = [(rel, it) for rel, its in prepared.items.items() for it in its]
    if shards > len(items):
        raise ConfigError(
            f"shards={shards} is more than the {len(items)} facts of probe {cfg.probe}'s data; "
            f"use shards={max(len(items), 1)} or fewer"
        )
    if shards <= 1:
        return prepared
    # the fact id where the item has one (every built-in probe's), else its first result key
    digest = [
        hashlib.sha256(str(getattr(it, "fact_id", None) or spec.item_keys(cfg, prepared, it)[0]).encode("utf-8")).hexdigest()
        for _, it in items
    ]
    rank = {i: r for r, i in enumerate(sorted(range(len(items)), key=lambda i: (digest[i], i)))}
    mine: dict[str, list] = {}
    for i, (rel, it) in enumerate(items):
        if rank[i] % shards == shard:
            mine.setdefault(rel, []).append(it)
    return dataclasses.replace(prepared, items=mine)


#: a unit step's record of what each of its probe folders holds (model, probe, shard, shards; the merge step reads it)
SHARD_FILE = "shard.json"


def run_probe_step(
    items_dir: str,
    out_dir: str,
    model: str,
    probe: str,
    config: dict,
    context: RunContext | str,
    work_root: str = "",
    overrides: dict | None = None,
    shard: int = 0,
    shards: int = 1,
    loader=None,
) -> dict:
    """Probe `model` on the prepared items in `items_dir/<dataset kind>`; results go to a stable work
    folder (resumable, locked against a second writer) and every file the run wrote there
    (results.jsonl, metrics.json, run_config.json, model_revision.txt and the probe's extra files
    such as known_unknown.parquet) is copied to `out_dir`. `overrides` replaces config fields for
    this step only (a pipeline that runs one probe twice with different options). Logs a nested
    child run; tracking is required, so an unreachable server fails the step after the results
    are safely on disk. The child run is opened only once the work folder is claimed and the run
    validated: a step refused there leaves no MLflow run. SIGTERM (pod eviction) stops it like
    Ctrl-C: the checkpoint stays, the child run is marked KILLED. `context` is the pipeline run's
    `RunContext` (or its JSON, as the start step wrote it): the child run nests under its parent.
    With `shards` > 1 only fact shard `shard` is probed (`shard_prepared`), in its own work folder
    (the work key plus `-shard<i>of<n>`, so a killed shard resumes alone), and its child run is named
    and tagged with the shard. `loader(cfg)` (a unit step's one load per model) gives the loaded model
    when the work folder has no finished run. Returns the scalar metrics, the MLflow run id and the files copied."""
    import shutil
    from contextlib import ExitStack
    from pathlib import Path

    from factprobe.datasets.prepared import Prepared
    from factprobe.framework.registry import get_probe
    from factprobe.framework.runner import run_identity, run_probe
    from factprobe.signals import sigterm_as_interrupt
    from factprobe_ops.tracking.context import RunContext
    from factprobe_ops.tracking.conventions import tag
    from factprobe_ops.tracking.probe_logging import log_probe_outcome, metric_dict, run_files
    from factprobe_ops.tracking.probe_run import probe_run

    from ._common import run_config
    from .progress import ProgressLog

    cfg = run_config({**config, **(overrides or {})}, probe=probe, model=model)
    spec = get_probe(probe)
    prepared = shard_prepared(cfg, Prepared.load(Path(items_dir) / (spec.dataset or probe)), shard, shards)
    # the work folder is keyed by the whole measurement identity (weights, data, config, numerics), so
    # a night over changed weights scores afresh and an unchanged night reuses everything
    ident = run_identity(cfg, prepared)
    part = f"-shard{shard + 1}of{shards}" if shards > 1 else ""
    key = work_key(cfg, ident) + part
    work = work_dir(work_root, key)
    loaded = loader(cfg) if loader is not None and not (work / "metrics.json").exists() else None
    # the one run context of this step (tracking/context.py): every tracking call below takes it
    ctx = RunContext.from_json(context)
    runs = []
    with sigterm_as_interrupt(), ExitStack() as stack:

        def start() -> None:  # the child run begins once the folder is claimed and the run validated
            runs.append(
                stack.enter_context(
                    probe_run(
                        cfg,
                        ctx,
                        enabled=ctx.tracked,
                        required=True,
                        run_name=f"{probe}-{model}{part}",
                        # a shard's run is no probe run of its own (the nightly comparison finds probe runs by step):
                        # the merge step logs the merged run as the probe run (components/steps/merge.py)
                        extra_tags={
                            tag("step"): "probe-shard" if part else "probe",
                            tag("kfp_run_id"): ctx.kfp_run_id,
                            tag("dataset_digest"): ident.data_digest,
                            tag("identity_key"): ident.key(),
                            **({tag("shard"): f"{shard + 1}/{shards}"} if part else {}),
                        },
                        step_key=f"{ctx.pipeline}/{ctx.kfp_run_id}/probe/{key}",
                    )
                )
            )

        # progress=False: no tqdm bar in a pod log; one progress line every 30 s instead
        # two pipelines of the same identity on one PVC share this folder: the second waits for the
        # first and then reuses its rows instead of failing as "busy"
        outcome = when_free(
            lambda: run_probe(
                cfg,
                work,
                loaded=loaded,
                prepared=prepared,
                progress=False,
                on_batch=ProgressLog(f"{probe} {model}{part}"),
                on_start=start,
            )
        )
        run = runs[0]
        log_probe_outcome(run, outcome, cfg)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    copied = []
    for path in run_files(work):
        shutil.copy2(path, out / path.name)
        copied.append(path.name)
    scalars = {k: v for k, v in metric_dict(outcome.metrics).items() if "/" not in k}
    head = spec.headline(outcome.metrics)
    if head and not part:  # one line for `factprobe pipeline run`'s step summary (pipelines/cli.py: HEADLINE_PREFIX)
        print(f"headline: {probe} {model}: {head}", flush=True)
    return {
        "scalars": scalars,
        "model": model,
        "probe": probe,
        "run_id": run.run_id or "",
        "scored_now": outcome.n_scored_now,
        "resumed": outcome.n_resumed,
        "files": copied,
    }


FAILED_FILE = "failed.json"  # a tolerant probe step's record of its failure (load_results skips the folder)


def run_probe_step_tolerant(
    items_dir: str, out_dir: str, model: str, probe: str, config: dict, context: RunContext | str, **kwargs
) -> dict:
    """`run_probe_step` that never fails the pipeline: for a sweep where one broken model must not
    cost the report of the others. On an error it writes `<out_dir>/failed.json` ({"model", "probe",
    "error": one line}) and returns {"failed": that line, ...}; the child MLflow run is already
    marked FAILED by `run_probe_step`. A SIGTERM (eviction) or Ctrl-C still stops the step."""
    import json
    from pathlib import Path

    from factprobe.redact import redact

    try:
        return run_probe_step(items_dir, out_dir, model, probe, config, context, **kwargs)
    except Exception as e:  # noqa: BLE001 - any failure of this model is recorded, the sweep goes on
        text = str(e).strip().splitlines()
        line = redact(f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": "))[:500]
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / FAILED_FILE).write_text(json.dumps({"model": model, "probe": probe, "error": line}), encoding="utf-8")
        print(f"error: probe {probe} on model {model} failed: {line} (the sweep goes on)", flush=True)
        return {"scalars": {}, "model": model, "probe": probe, "run_id": "", "failed": line, "files": [FAILED_FILE]}


def run_unit_step(
    items_dir: str, out_dir: str, unit: dict, config: dict, context: RunContext | str, work_root: str = "", tolerant: bool = False
) -> dict:
    """Run one unit of a sweep (components/steps/plan.py `run_plan_units`): each of its
    probes on its model, one after the other, over its fact shard, into `<out_dir>/<probe>/` (the
    files of `run_probe_step` plus `SHARD_FILE`). A unit of several probes loads the model once, at
    the first probe that has something to score, and hands it to the others (the probes' model kinds
    are checked each time). `tolerant`: a probe's failure is recorded (`run_probe_step_tolerant`) and
    the next probe still runs. Returns {"probes": {probe: the step's info}}."""
    import json
    from pathlib import Path

    from factprobe.framework.registry import get_probe
    from factprobe.framework.runner import load_for_probe
    from factprobe.models import require_kind

    held: dict = {}

    def loader(cfg):
        if "model" not in held:
            held["model"] = load_for_probe(cfg)
        else:
            require_kind(held["model"], get_probe(cfg.probe).model_kinds, cfg.probe)
        return held["model"]

    probes = [str(p) for p in unit["probes"]]
    shard, shards = int(unit.get("shard", 0)), int(unit.get("shards", 1))
    step = run_probe_step_tolerant if tolerant else run_probe_step
    infos = {}
    for probe in probes:
        sub = Path(out_dir) / probe
        infos[probe] = step(
            items_dir,
            str(sub),
            str(unit["model"]),
            probe,
            config,
            context,
            work_root=work_root,
            overrides=dict(unit.get("overrides") or {}),
            shard=shard,
            shards=shards,
            loader=loader if len(probes) > 1 else None,
        )
        sub.mkdir(parents=True, exist_ok=True)
        (sub / SHARD_FILE).write_text(
            json.dumps({"model": str(unit["model"]), "probe": probe, "shard": shard, "shards": shards}), encoding="utf-8"
        )
    return {"probes": infos}
