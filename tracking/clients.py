"""The small tracking-client interface `TrackedRun` and the bookkeeping steps talk to.

Two implementations, picked by `factprobe_ops.tracking.connect.open_client(uri)` (which sits above them, so this
module imports neither):

- `factprobe_ops.tracking.rest_client.RestTrackingClient` for `http(s)://` servers: MLflow's REST API over
  `requests` only. A pipeline step that logs to a server never imports `mlflow` (importing it
  costs ~1.5 s of CPU per step process; see benchmarks/bench_pipeline_overhead.py).
- `factprobe_ops.tracking.library_client.LibraryTrackingClient` for every other URI (the embedded
  `sqlite:///...` store, `file:` stores, databricks, ...): `mlflow.tracking.MlflowClient`.

Both raise on failure (`TrackedRun` turns that into a warning or a `TrackingError`) and write the
same runs: the same tags, params, metrics, dataset inputs and artifact files.

Also here, shared by both clients and by `compare`:
- `TrackingError`, the one error class of tracking (a `factprobe.errors.ServiceError`: exit 1);
- `http_settings()`: fail-fast HTTP retries and timeout unless MLFLOW_HTTP_REQUEST_* say otherwise
  (nothing is written to the environment at import);
- `tag_filter()` / `find_tagged_runs()`: MLflow search filters built safely from any tag value
  (quotes, backslashes, spaces, non-ASCII), with an exact match on the client side;
- `sqlite_store_lock()`: the lock two processes take before the first open of the same sqlite store.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote

from factprobe.errors import ConfigError, ServiceError

MAX_PARAMS_PER_BATCH = 100
MAX_TAGS_PER_BATCH = 100
MAX_METRICS_PER_BATCH = 500

# Fail fast instead of retrying for minutes when a server is down (MLflow's own defaults are
# 7 retries, backoff factor 2 and a 120 s timeout). Environment values win.
FAIL_FAST_HTTP = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "15",
}


class TrackingError(ServiceError):
    """The tracking server is unreachable, rejected us, or failed mid-run (the CLI exits 1)."""


def http_settings() -> dict[str, str]:
    """MLFLOW_HTTP_REQUEST_{MAX_RETRIES,BACKOFF_FACTOR,TIMEOUT}: the environment's value, else the
    fail-fast default of `FAIL_FAST_HTTP`."""
    return {k: os.environ.get(k) or v for k, v in FAIL_FAST_HTTP.items()}


def apply_http_settings() -> None:
    """Give the MLflow library (which reads MLFLOW_HTTP_REQUEST_* from the environment at each
    request) the fail-fast defaults, and no artifact-download progress bar (`compare`/`regress`
    fetch one small table; the bar only buries their output and one-line errors on stderr).
    Called where a library client is opened, never at import."""
    for k, v in FAIL_FAST_HTTP.items():
        os.environ.setdefault(k, v)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


@dataclass(frozen=True)
class RunRef:
    """One run as a search returns it: id, status (RUNNING, FINISHED, FAILED, ...) and tags."""

    run_id: str
    status: str
    tags: dict[str, str] = field(default_factory=dict)


class TrackingClient(Protocol):
    """What factprobe needs from a tracking store. Every method raises on failure."""

    uri: str

    def check(self) -> None:
        """An authenticated call that fails when the store is unreachable or rejects us."""

    def experiment_id(self, name: str) -> str:
        """Id of experiment `name`, created if missing (safe when two runs race to create it)."""

    def experiment_tags(self, experiment_id: str) -> dict[str, str]:
        """The experiment's tags."""

    def set_experiment_tag(self, experiment_id: str, key: str, value: str) -> None:
        """Set one experiment tag."""

    def create_run(self, experiment_id: str, run_name: str | None, tags: dict[str, str]) -> str:
        """Start a RUNNING run; returns its id."""

    def find_runs(self, experiment_ids: list[str], filter_string: str) -> list[RunRef]:
        """Every run matching an MLflow search filter (all pages)."""

    def get_tags(self, run_id: str) -> dict[str, str]:
        """The run's current tags."""

    def set_terminated(self, run_id: str, status: str) -> None:
        """End the run with `status` (FINISHED, FAILED, KILLED) and the current time."""

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        """Set (overwrite) tags."""

    def log_batch(self, run_id: str, params: dict[str, str], metrics: dict[str, float], step: int, timestamp_ms: int) -> None:
        """Log params and metrics in as few calls as the store's batch limits allow."""

    def log_artifact(self, run_id: str, local_path: str, artifact_path: str | None) -> None:
        """Upload one file into the run's artifacts under `artifact_path` (None: the root)."""

    def log_artifacts(self, run_id: str, local_dir: str, artifact_path: str | None) -> None:
        """Upload a folder's files, keeping their relative paths."""

    def log_dataset(self, run_id: str, dataset: dict, context: str) -> None:
        """Record a dataset input (`dataset`: name, digest, source_type, source, schema, profile)."""


# ---------------------------------------------------------------------------------------------
# search filters

_WILDCARD_ONLY = re.compile(r"['\"\\]")


def _filter_literal(value: str) -> tuple[str, str]:
    """(comparator, quoted literal) matching `value` in MLflow's search grammar.

    MLflow strips the outer quotes of a literal and never unescapes inside it, and its tokenizer
    (sqlparse) ends a literal at its quote unless a backslash precedes it. So a value without
    `'` and `\\` goes in single quotes, one without `"` and `\\` in double quotes; any other
    value becomes a LIKE pattern with `_` (one character) in place of every quote and backslash.
    That pattern can match more runs (`_` and `%` are wildcards, sqlite LIKE ignores ASCII case),
    so `find_tagged_runs` re-checks each run's tags exactly."""
    if "'" not in value and "\\" not in value:
        return "=", f"'{value}'"
    if '"' not in value and "\\" not in value:
        return "=", f'"{value}"'
    return "LIKE", "'" + _WILDCARD_ONLY.sub("_", value) + "'"


def tag_filter(tags: dict[str, str], status: str | None = None) -> str:
    """An MLflow search filter for runs carrying every tag in `tags` (and in `status`, e.g.
    RUNNING, FINISHED). Values may hold any character (see `_filter_literal`: the filter can
    match a superset; check the tags of what comes back, as `find_tagged_runs` does). Tag keys
    must not hold a backtick (ConfigError)."""
    clauses = []
    for key, value in tags.items():
        if "`" in key:
            raise ConfigError(f"tag key {key!r} holds a backtick, which MLflow search filters cannot express")
        comparator, literal = _filter_literal(str(value))
        clauses.append(f"tags.`{key}` {comparator} {literal}")
    if status:
        clauses.append(f"attributes.status = '{status}'")
    return " and ".join(clauses)


def tags_match(run_tags: dict[str, str], tags: dict[str, str]) -> bool:
    """True when `run_tags` holds every key of `tags` with exactly that value."""
    return all(run_tags.get(k) == str(v) for k, v in tags.items())


def find_tagged_runs(
    client: TrackingClient, experiment_ids: list[str], tags: dict[str, str], status: str | None = None
) -> list[RunRef]:
    """Runs of `experiment_ids` carrying exactly `tags` (and `status`): `tag_filter` on the
    server, then an exact comparison of the tags here."""
    runs = client.find_runs(experiment_ids, tag_filter(tags, status))
    return [r for r in runs if tags_match(r.tags, tags) and (status is None or r.status == status)]


# ---------------------------------------------------------------------------------------------
# the embedded sqlite store


def sqlite_path(uri: str) -> Path | None:
    """The file of a `sqlite:///path` store URI (relative paths from the working folder), else None
    (other stores, in-memory sqlite)."""
    if not uri.lower().startswith("sqlite:///"):
        return None
    path = unquote(uri[len("sqlite:///") :].split("?", 1)[0])
    if not path or path == ":memory:":
        return None
    return Path(path).absolute()


@contextlib.contextmanager
def sqlite_store_lock(uri: str) -> Iterator[None]:
    """Hold an exclusive lock while a process opens (and on first use creates and migrates) the
    sqlite store `uri`. MLflow creates the schema of a fresh file without any lock of its own,
    so two processes opening the same new `mlruns.db` at once can both try to create it and one
    fails. The lock is `flock` on a hidden sibling file `.<name>.lock` (kept: deleting a lock
    file races with its next user); non-sqlite URIs take no lock."""
    path = sqlite_path(uri)
    if path is None:
        yield
        return
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    lock_file = path.with_name(f".{path.name}.lock")
    try:
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:  # read-only folder: nobody can create the store there anyway; let MLflow say why
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def batches(items: list, size: int) -> list[list]:
    """`items` in consecutive chunks of at most `size`."""
    return [items[i : i + size] for i in range(0, len(items), size)]


def dataset_record(df, name: str, source: str, digest: str) -> dict:
    """The dataset entity MLflow's `mlflow.data.from_pandas(df, source, name, digest)` logs,
    built from the DataFrame's dtypes without importing mlflow (string/long/double/boolean columns)."""
    import json

    kinds = {"i": "long", "u": "long", "f": "double", "b": "boolean"}
    colspec = [{"type": kinds.get(df[c].dtype.kind, "string"), "name": str(c), "required": True} for c in df.columns]
    return {
        "name": name,
        "digest": digest,
        "source_type": "s3" if source.startswith("s3://") else "local",
        "source": json.dumps({"uri": source}),
        "schema": json.dumps({"mlflow_colspec": colspec}),
        "profile": json.dumps({"num_rows": len(df), "num_elements": int(df.size)}),
    }
