"""Step: join the probe folders of a sweep's units (components/steps/probe.py `run_unit_step`)
into one run folder per (model, probe): the fact shards of a run merged, a run of one shard as it is.

A merged run is what an unsharded run of the same configuration writes: `results.jsonl` holds every
shard's rows in the probe's item order (`Probe.groups` / `Probe.item_keys` over the whole prepared
data), `metrics.json` is the probe's own `metrics()` over all of them (never an average of shard
metrics) with the run's identity over the whole data, and the probe's extra files are written again
from the merged rows. The engines' cost counters (`COST_SUMS`: tokens forwarded, forwards, ...) are
work done, which splitting changes (each shard builds its own shared prefixes): they are the sums
over the shards, and `token_savings` is recomputed from the summed counts.

A merge proves what it merges before it stamps the whole data's digest on the rows (`proven_rows`):
every row must be of an item of the data, with that item's `item_digest` (the content it was scored
on), and two rows of one fact (in one shard or two) must be equal, then kept once. Anything else is
one line (DataError) naming the shard(s), the fact and what differs: a forged or stale row is
refused, never merged or silently replaced by a later one.

A merged run is logged as the (model, probe)'s child probe run of the pipeline run (tag `step` =
`probe`, what the nightly comparison looks for); the shards' own child runs are tagged `probe-shard`.
A run of one shard was logged by its probe step already.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from factprobe_ops.tracking.context import RunContext

#: metrics.json counters that add up over shards (`factprobe.framework.base.Session.token_stats`, resume counts)
COST_SUMS = (
    "tokens_forwarded",
    "forwards",
    "tokenization_fallbacks",
    "naive_tokens",
    "generated_tokens",
    "generation_tokens_forwarded",
    "generation_prefix_tokens",
    "generation_naive_prompt_tokens",
    "generation_forwards",
    "n_resumed",
)


def unit_folders(unit_dirs: list[str]) -> dict[tuple[str, str], list[tuple[int, int, Path]]]:
    """{(model, probe): [(shard, shards, folder), ...] sorted by shard} from the unit output folders
    (each `<unit>/<probe>/` with the step's `shard.json`), in the order the runs first appear."""
    import json

    from factprobe.errors import DataError

    from .probe import SHARD_FILE

    runs: dict[tuple[str, str], list[tuple[int, int, Path]]] = {}
    for d in unit_dirs:
        for sub in sorted(p for p in Path(d).iterdir() if p.is_dir()):
            info_path = sub / SHARD_FILE
            if not info_path.is_file():
                raise DataError(f"{sub}: no {SHARD_FILE}; not the output of a sweep's probe step")
            info = json.loads(info_path.read_text(encoding="utf-8"))
            runs.setdefault((info["model"], info["probe"]), []).append((int(info["shard"]), int(info["shards"]), sub))
    return {k: sorted(v, key=lambda t: t[0]) for k, v in runs.items()}


def run_merge(unit_dirs: list[str], out_dir: str, items_dir: str, context: RunContext | str = "") -> list[str]:
    """Write one run folder per (model, probe) of the units' outputs under `out_dir` (`001`, `002`, ...
    in the order the runs appear) and return their paths: a run of one shard copied as it is, a run
    of several merged (`merge_shards`), a run with a failed shard marked failed (`failed.json`
    naming the shard and its error, as a tolerant probe step writes it). A merged run is logged to
    `context`'s pipeline run (module docstring; nothing when tracking is off or `context` is empty)."""
    import json
    import shutil

    from factprobe.errors import DataError

    from .probe import FAILED_FILE, SHARD_FILE

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for i, ((model, probe), parts) in enumerate(unit_folders(unit_dirs).items(), start=1):
        dest = out / f"{i:03d}"
        shards = parts[0][1]
        failed = [
            (s, json.loads((d / FAILED_FILE).read_text(encoding="utf-8"))) for s, _, d in parts if (d / FAILED_FILE).exists()
        ]
        if failed:
            dest.mkdir(parents=True, exist_ok=True)
            shard, record = failed[0]
            where = f"shard {shard + 1}/{shards}: " if shards > 1 else ""
            (dest / FAILED_FILE).write_text(
                json.dumps({**record, "error": where + str(record.get("error", ""))}), encoding="utf-8"
            )
        elif [s for s, _, _ in parts] != list(range(shards)):
            raise DataError(
                f"run {probe} of {model}: shards {[s + 1 for s, _, _ in parts]} of {shards} came back; "
                "rerun the pipeline (finished shards are reused)"
            )
        elif shards == 1:
            shutil.copytree(parts[0][2], dest, ignore=shutil.ignore_patterns(SHARD_FILE))
        else:
            outcome, cfg = merge_shards([d for _, _, d in parts], dest, items_dir)
            if context:
                log_merged(outcome, cfg, context, shards)
        written.append(str(dest))
    return written


def merge_shards(shard_dirs: list[Path], dest: Path, items_dir: str):
    """Write the run folder of an unsharded run from the folders of its shards (module docstring);
    returns its (`ProbeOutcome`, `RunConfig`). DataError when the shards ran on other weights,
    numerics or configs than each other."""
    import dataclasses
    import json

    import pandas as pd

    from factprobe.datasets.prepared import Prepared
    from factprobe.errors import DataError
    from factprobe.framework.checkpoint import METRICS, MODEL_REVISION, RESULTS, RUN_CONFIG
    from factprobe.framework.config import RunConfig
    from factprobe.framework.registry import get_probe
    from factprobe.framework.runner import ProbeOutcome
    from factprobe.identity import RunIdentity, data_digest, item_digest
    from factprobe.io import atomic_write_json, atomic_write_jsonl, atomic_write_parquet, atomic_write_text
    from factprobe.metrics.json_safe import json_safe
    from factprobe.redact import redact_values

    configs = [json.loads((d / RUN_CONFIG).read_text(encoding="utf-8")) for d in shard_dirs]
    metrics_of = [json.loads((d / METRICS).read_text(encoding="utf-8")) for d in shard_dirs]
    idents = [RunIdentity.from_dict(c.get("identity") or {}) for c in configs]
    same = {(i.model_revision, i.config_key, json.dumps(i.numerics, sort_keys=True)) for i in idents}
    if len(same) > 1 or len({json.dumps(c["config"], sort_keys=True) for c in configs}) > 1:
        raise DataError(
            f"the shards in {', '.join(map(str, shard_dirs))} ran on different weights, numerics or configs; rerun the pipeline"
        )
    cfg = RunConfig.from_dict(configs[0]["config"])
    probe = get_probe(cfg.probe)
    prepared = Prepared.load(Path(items_dir) / (probe.dataset or cfg.probe))
    probe.validate(cfg, prepared)  # as `run_probe` does before its groups (a probe may complete `prepared.info` here)
    full = data_digest(prepared)  # the whole data's, as the unsharded run has it (its inputs carry it too)
    ident = dataclasses.replace(
        idents[0],
        data_digest=full,
        inputs=[{**i, "digest": full} if i.get("digest") == idents[0].data_digest else i for i in idents[0].inputs],
    )
    groups = probe.groups(cfg, prepared)
    keys = {id(it): probe.item_keys(cfg, prepared, it) for its in groups.values() for it in its}
    content = {k: item_digest(it) for its in groups.values() for it in its for k in keys[id(it)]}
    rows = proven_rows([(shard_name(d), d / RESULTS) for d in shard_dirs], content)
    order = [k for its in groups.values() for it in its for k in keys[id(it)]]
    missing = [k for k in order if k not in rows]
    if missing or len(rows) != len(order):
        raise DataError(
            f"the shards in {', '.join(map(str, shard_dirs))} hold {len(rows)} rows for the {len(order)} items of the "
            f"data ({len(missing)} missing, e.g. {missing[:1]}); a shard did not finish or ran on other data: rerun the pipeline"
        )
    ordered = [rows[k] for k in order]
    metrics = probe.metrics(ordered, prepared, cfg)
    costs = {k: sum(m[k] for m in metrics_of if k in m) for k in COST_SUMS if any(k in m for m in metrics_of)}
    if "naive_tokens" in costs:
        costs["token_savings"] = 1.0 - costs["tokens_forwarded"] / costs["naive_tokens"] if costs["naive_tokens"] else 0.0
    resumed = costs.pop("n_resumed", 0)
    metrics.update(costs)
    notes = list(dict.fromkeys(n for m in metrics_of for n in m.get("notes", [])))
    metrics.update(
        model_revision=ident.model_revision,
        n_resumed=resumed,
        notes=notes,
        probe=cfg.probe,
        model=cfg.base.model,
        data_digest=ident.data_digest,
        identity=redact_values(ident.to_dict()),
        threads=metrics_of[0].get("threads"),
    )
    metrics = json_safe(metrics)
    dest.mkdir(parents=True, exist_ok=True)
    for name, content in probe.artifacts(ordered, prepared, cfg, metrics).items():
        if isinstance(content, str):
            atomic_write_text(dest / name, content)
        elif isinstance(content, (dict, list)):
            atomic_write_json(dest / name, content)
        else:
            atomic_write_parquet(dest / name, content)
    atomic_write_jsonl(dest / RESULTS, ordered)
    atomic_write_json(dest / METRICS, metrics)
    atomic_write_json(dest / RUN_CONFIG, {**configs[0], "identity": redact_values(ident.to_dict())})
    if (shard_dirs[0] / MODEL_REVISION).exists():
        atomic_write_text(dest / MODEL_REVISION, (shard_dirs[0] / MODEL_REVISION).read_text(encoding="utf-8"))
    return ProbeOutcome(dest, pd.DataFrame(ordered), metrics, prepared, 0, resumed, notes), cfg


def shard_name(folder: Path) -> str:
    """`shard 2/4 (<folder>)` from the folder's `shard.json` (the unit step's record); the folder alone without one."""
    import json

    from .probe import SHARD_FILE

    try:
        info = json.loads((folder / SHARD_FILE).read_text(encoding="utf-8"))
        return f"shard {int(info['shard']) + 1}/{int(info['shards'])} ({folder})"
    except (OSError, ValueError, KeyError, TypeError):
        return str(folder)


def proven_rows(shards: list[tuple[str, Path]], content: dict[str, str]) -> dict[str, dict]:
    """{key: row} over the result files of `shards` ([(shard name, results.jsonl)], in shard order),
    each row proved to be of the data whose item digests by key are `content` (module docstring).
    DataError, one line naming the shard(s) and the fact, for a row of a fact the data lacks, a row
    whose `item_digest` is missing or not its item's, or two rows of one fact that differ (naming the
    fields); two equal rows of one fact are kept once."""
    from factprobe.errors import DataError
    from factprobe.io import read_jsonl

    rows: dict[str, dict] = {}
    seen: dict[str, str] = {}
    for name, path in shards:
        for line, row in read_jsonl(path):
            key = row.get("key")
            if key not in content:
                raise DataError(
                    f"{name}: {path.name}:{line}: a row of fact {key!r}, which the data does not hold; "
                    "the shard ran on other data: rerun the pipeline"
                )
            if row.get("item_digest") != content[key]:
                raise DataError(
                    f"{name}: fact {key}: item_digest {row.get('item_digest')!r} is not its item's "
                    f"({content[key]}): the row was not scored on this data's item (stale or forged); rerun the pipeline"
                )
            if key in rows and rows[key] != row:
                other = rows[key]
                fields = sorted(k for k in set(other) | set(row) if other.get(k) != row.get(k))
                where = f"{name} holds two rows" if seen[key] == name else f"{seen[key]} and {name} hold rows"
                raise DataError(
                    f"fact {key}: {where} of it that differ ({', '.join(fields)}); a fact has one row: rerun the pipeline"
                )
            rows[key] = row
            seen.setdefault(key, name)
    return rows


def log_merged(outcome, cfg, context: RunContext | str, shards: int) -> None:
    """Log a merged run as a child probe run of the pipeline run of `context` (its `RunContext` or
    JSON), as `run_probe_step` logs an unsharded one; tracking is required when it is on."""
    from factprobe.identity import RunIdentity
    from factprobe_ops.tracking.context import RunContext
    from factprobe_ops.tracking.conventions import tag
    from factprobe_ops.tracking.probe_logging import log_probe_outcome
    from factprobe_ops.tracking.probe_run import probe_run

    ctx = RunContext.from_json(context)
    ident = RunIdentity.from_dict(outcome.metrics.get("identity") or {})
    with probe_run(
        cfg,
        ctx,
        enabled=ctx.tracked,
        required=True,
        run_name=f"{cfg.probe}-{cfg.base.model}",
        extra_tags={
            tag("step"): "probe",
            tag("kfp_run_id"): ctx.kfp_run_id,
            tag("shards"): str(shards),
            tag("dataset_digest"): ident.data_digest,
            tag("identity_key"): ident.key(),
        },
        step_key=f"{ctx.pipeline}/{ctx.kfp_run_id}/merge/{cfg.results_key()}-{ident.key()}",
    ) as run:
        log_probe_outcome(run, outcome, cfg)


def merged_runs(folder: str) -> list[str]:
    """The run folders `run_merge` wrote under `folder`, in its order."""
    return [str(p) for p in sorted(Path(folder).iterdir()) if p.is_dir()]
