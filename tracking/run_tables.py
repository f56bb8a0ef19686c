"""A run reference's per-fact table, measurement identity and provenance: what `compare`, `regress`,
the regression gate step and the nightly comparison read a run from.

A run reference is any of:
- a results folder or a `results.jsonl` file written by `factprobe probe` (or a per_fact.parquet file);
- an MLflow run id (its `tables/per_fact.parquet` artifact is downloaded);
- a tag filter `key=value` (e.g. `factprobe.trigger=nightly`, or `baseline=true`): the latest
  FINISHED run of a probe with a per-fact verdict (`factprobe.framework.verdict`) in any factprobe
  experiment carrying that tag.

Bad input is one line: a truncated or damaged file (DataError naming the file and line), an unknown
run, a tag filter matching several runs where one is needed (ConfigError naming them).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pandas as pd

from factprobe.errors import ConfigError, DataError
from factprobe.framework.verdict import verdict_of
from factprobe.redact import redact

from .baseline import PROBE_TAG
from .clients import TrackingError, tag_filter, tags_match
from .conventions import resolve_tracking_uri, tag
from .identity_check import tracked_identity
from .probe_logging import CONFIG_PARAM


def _client(uri: str | None):
    from .library_client import open_mlflow_client

    uri = resolve_tracking_uri(uri)
    return open_mlflow_client(uri), uri


def _read_parquet(path, what: str) -> pd.DataFrame:
    """The parquet table at `path`; DataError (one line naming `what`) for a truncated or damaged file."""
    try:
        return pd.read_parquet(path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises many types for a cut-off file
        raise DataError(
            f"{what}: not a readable parquet table ({str(e).splitlines()[0][:160]}); the file is truncated or "
            "damaged: copy it again, or log or probe the run again"
        ) from None


#: columns a results file's table keeps besides its probe's `per_fact_columns`: what the gates join on
JOIN_COLUMNS = ("key", "probe", "item_digest")


def _keeper(probe_name: object):
    """The projection of a results file's rows (`factprobe.framework.row_stream.Projector`): the probe's
    per-fact columns and `JOIN_COLUMNS`; every field for a probe not registered here."""
    from factprobe.framework.registry import load_probes
    from factprobe.framework.row_stream import Projector

    probe = load_probes().get(str(probe_name))
    return Projector(None if probe is None else (*probe.per_fact_columns, *JOIN_COLUMNS), str(probe_name))


def _read_jsonl(f: Path) -> pd.DataFrame:
    """The per-fact table of a results.jsonl, read one row at a time, each cut down to its probe's
    per-fact columns and `JOIN_COLUMNS` (the table its run logs to MLflow, plus the join keys: the option
    lists, log-probs and prompts are never all in memory; issue 40 item 3). Lines end at `\\n` only.
    DataError (one line, naming the file and line) for a line that is not a whole JSON object (a
    truncated or damaged file) or a file that is not text."""
    rows = []
    keep = None
    try:
        with f.open("rb") as fh:
            for i, raw in enumerate(fh, start=1):
                if not raw.strip():
                    continue
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise DataError(
                        f"{f}: not a results.jsonl (not UTF-8 text); give a results folder or the results.jsonl that "
                        "`factprobe probe` wrote"
                    ) from None
                try:
                    row = json.loads(line)
                except ValueError as e:
                    raise DataError(
                        f"{f} line {i}: not a whole JSON record ({getattr(e, 'msg', e)}); the file is truncated or "
                        "damaged: copy it again, or probe the run again into a new --out"
                    ) from None
                if not isinstance(row, dict):
                    raise DataError(f"{f} line {i}: a JSON {type(row).__name__}, not a result row (an object per line)")
                keep = keep or _keeper(row.get("probe"))
                rows.append(keep.project(row))
    except OSError as e:
        raise DataError(f"{f}: cannot be read ({e.strerror or e})") from None
    return pd.DataFrame(rows)


def _from_results_file(path: Path) -> pd.DataFrame:
    """The per-fact rows of a results folder (its results.jsonl), a results.jsonl file or a
    per_fact.parquet file. DataError (one line) for a missing, truncated, damaged or empty file."""
    f = path / "results.jsonl" if path.is_dir() else path
    if not f.exists():
        raise DataError(f"{f}: no results.jsonl here")
    df = _read_parquet(f, str(f)) if f.suffix == ".parquet" else _read_jsonl(f)
    if df.empty:
        raise DataError(f"{f}: empty, no result rows (the run scored nothing); probe the run again, or give another run")
    return df


def folder_identity(ref: str) -> dict | None:
    """The measurement identity of a results folder (or of the folder of a results file): its
    metrics.json `identity`, else its run_config.json `identity`; None when neither has one."""
    from factprobe.identity import identity_of

    p = Path(ref)
    folder = p if p.is_dir() else p.parent
    for name in ("metrics.json", "run_config.json"):
        try:
            ident = identity_of(json.loads((folder / name).read_text(encoding="utf-8")))
        except (OSError, ValueError):
            ident = None
        if ident is not None:
            return ident
    return None


def _several(ref: str, uri: str, runs: list) -> ConfigError:
    """The refusal of a tag filter that matches several runs where one is needed."""
    named = ", ".join(f"{r.info.run_id} ({r.data.tags.get(PROBE_TAG, 'no probe')})" for r in runs[:10])
    more = f" and {len(runs) - 10} more" if len(runs) > 10 else ""
    return ConfigError(
        f"{ref} matches {len(runs)} finished probe runs at {redact(uri)}: {named}{more}; give the run id "
        f"of the one to use instead of the tag filter"
    )


def resolve_run(ref: str, tracking_uri: str | None = None, unique: bool = False) -> tuple[pd.DataFrame, dict]:
    """Per-fact table and a description dict (`{"ref", "identity", "run_id"?, "params"?, "tags"?}`) for a
    run reference; `identity` is the run's measurement identity or None (a run made before they were
    recorded). A tag filter names the latest matching run, or, with `unique` (a gate's baseline),
    must match exactly one run: several are refused in one line naming their run ids and probes."""
    p = Path(ref)
    if p.exists():
        return _from_results_file(p), {"ref": ref, "identity": folder_identity(ref)}
    client, uri = _client(tracking_uri)
    run_id = ref
    if "=" in ref:
        from .run import _describe

        key, value = ref.split("=", 1)
        wanted = {key: value}  # user text: quotes, spaces, non-ASCII are all fine (tag_filter)
        try:
            exps = [e.experiment_id for e in client.search_experiments() if e.name.startswith("factprobe/")]
            runs = (
                client.search_runs(
                    exps, filter_string=tag_filter(wanted, "FINISHED"), order_by=["attributes.start_time DESC"], max_results=50
                )
                if exps
                else []
            )
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001 - unreachable server, rejected credentials, ...
            raise TrackingError(f"MLflow tracking at {uri}: searching runs tagged {key}={value} failed: {_describe(e)}") from None
        runs = [r for r in runs if (p := r.data.tags.get(PROBE_TAG)) and verdict_of(p) and tags_match(r.data.tags, wanted)]
        if not runs:
            raise ConfigError(f"no finished probe run tagged {key}={value} at {uri}")
        if unique and len(runs) > 1:
            raise _several(ref, uri, runs)
        run_id = runs[0].info.run_id
    try:
        run = client.get_run(run_id)
    except Exception as e:  # noqa: BLE001
        raise ConfigError(f"{ref!r} is neither a results folder nor a run at {uri} ({str(e).splitlines()[0][:120]})") from None
    with tempfile.TemporaryDirectory() as d:
        try:
            local = client.download_artifacts(run_id, "tables/per_fact.parquet", d)
        except Exception as e:  # noqa: BLE001
            raise DataError(f"run {run_id} has no tables/per_fact.parquet artifact ({str(e).splitlines()[0][:120]})") from None
        df = _read_parquet(local, f"run {run_id}: tables/per_fact.parquet")
    if df.empty:
        raise DataError(f"run {run_id}: tables/per_fact.parquet is empty, no result rows (the run scored nothing)")
    return df, {
        "ref": ref,
        "run_id": run_id,
        "params": dict(run.data.params),
        "tags": dict(run.data.tags),
        "identity": tracked_identity(client, run),
    }


def run_provenance(desc: dict) -> tuple[dict | None, str | None]:
    """The flat configuration and the data digest of a resolved run (`resolve_run`'s `desc`): its
    identity's digest where it has one; else a folder's run_config.json and metrics.json `data_digest`,
    or an MLflow run's `config_json` parameter and `factprobe.data_digest` (older: `dataset_digest`) tag. None for what the run does not carry (a bare
    results.jsonl, a run logged without them)."""
    if "run_id" in desc:
        raw = (desc.get("params") or {}).get(CONFIG_PARAM)
        try:
            config = json.loads(raw) if raw else None
        except ValueError:
            config = None
        tags = desc.get("tags") or {}
        digest = (
            (desc.get("identity") or {}).get("data_digest") or tags.get(tag("data_digest")) or tags.get(tag("dataset_digest"))
        )
        return (config if isinstance(config, dict) else None), digest or None
    p = Path(desc.get("ref", ""))
    folder = p if p.is_dir() else p.parent
    config = digest = None
    try:
        config = json.loads((folder / "run_config.json").read_text(encoding="utf-8"))["config"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        digest = json.loads((folder / "metrics.json").read_text(encoding="utf-8")).get("data_digest")
    except (OSError, ValueError, AttributeError):
        pass
    digest = (desc.get("identity") or {}).get("data_digest") or digest
    return (config if isinstance(config, dict) else None), digest or None
