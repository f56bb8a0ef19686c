"""The small tracking-client interface `TrackedRun` and the bookkeeping steps talk to.

Two implementations, picked by `open_client(uri)`:

- `tracking.rest_client.RestTrackingClient` for `http(s)://` servers: MLflow's REST API over
  `requests` only. A pipeline step that logs to a server never imports `mlflow` (importing it
  costs ~1.5 s of CPU per step process; see benchmarks/bench_pipeline_overhead.py).
- `tracking.library_client.LibraryTrackingClient` for every other URI (the embedded
  `sqlite:///...` store, `file:` stores, databricks, ...): `mlflow.tracking.MlflowClient`.

Both raise on failure (`TrackedRun` turns that into a warning or a `TrackingError`) and write the
same runs: the same tags, params, metrics, dataset inputs and artifact files.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

MAX_PARAMS_PER_BATCH = 100
MAX_TAGS_PER_BATCH = 100
MAX_METRICS_PER_BATCH = 500


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

    def log_batch(self, run_id: str, params: dict[str, str], metrics: dict[str, float], step: int,
                  timestamp_ms: int) -> None:
        """Log params and metrics in as few calls as the store's batch limits allow."""

    def log_artifact(self, run_id: str, local_path: str, artifact_path: str | None) -> None:
        """Upload one file into the run's artifacts under `artifact_path` (None: the root)."""

    def log_artifacts(self, run_id: str, local_dir: str, artifact_path: str | None) -> None:
        """Upload a folder's files, keeping their relative paths."""

    def log_dataset(self, run_id: str, dataset: dict, context: str) -> None:
        """Record a dataset input (`dataset`: name, digest, source_type, source, schema, profile)."""


def is_http(uri: str) -> bool:
    return uri.lower().startswith(("http://", "https://"))


def open_client(uri: str) -> TrackingClient:
    """The client for `uri`: REST for http(s) servers, the MLflow library for everything else."""
    if is_http(uri):
        from .rest_client import RestTrackingClient

        return RestTrackingClient(uri)
    from .library_client import LibraryTrackingClient

    return LibraryTrackingClient(uri)


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
