"""`TrackingClient` on `mlflow.tracking.MlflowClient`: for the embedded sqlite store and every
non-HTTP tracking URI (see tracking/clients.py)."""

from __future__ import annotations

from .clients import (
    MAX_METRICS_PER_BATCH,
    MAX_PARAMS_PER_BATCH,
    MAX_TAGS_PER_BATCH,
    RunRef,
    apply_http_settings,
    batches,
    sqlite_path,
    sqlite_store_lock,
)


def open_mlflow_client(uri: str):
    """`MlflowClient(uri)` with the fail-fast HTTP settings, and with a sqlite store already
    opened (created and migrated on first use) under `sqlite_store_lock`, so that processes
    opening the same fresh `mlruns.db` at once never race on its schema."""
    from mlflow.tracking import MlflowClient

    apply_http_settings()
    with sqlite_store_lock(uri):
        client = MlflowClient(uri)
        if sqlite_path(uri) is not None:
            client.search_experiments(max_results=1)  # opens the store: creates/migrates the schema
    return client


class LibraryTrackingClient:
    """The tracking-client interface implemented with the MLflow library."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._client = open_mlflow_client(uri)

    def check(self) -> None:
        self._client.search_experiments(max_results=1)

    def experiment_id(self, name: str) -> str:
        from mlflow.exceptions import MlflowException

        exp = self._client.get_experiment_by_name(name)
        if exp is not None:
            return exp.experiment_id
        try:
            return self._client.create_experiment(name)
        except MlflowException as e:
            if e.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            return self._client.get_experiment_by_name(name).experiment_id

    def experiment_tags(self, experiment_id: str) -> dict[str, str]:
        return dict(self._client.get_experiment(experiment_id).tags)

    def set_experiment_tag(self, experiment_id: str, key: str, value: str) -> None:
        self._client.set_experiment_tag(experiment_id, key, value)

    def create_run(self, experiment_id: str, run_name: str | None, tags: dict[str, str]) -> str:
        return self._client.create_run(experiment_id, run_name=run_name, tags=tags).info.run_id

    def find_runs(self, experiment_ids: list[str], filter_string: str) -> list[RunRef]:
        out, token = [], None
        while True:
            page = self._client.search_runs(experiment_ids, filter_string=filter_string, max_results=1000, page_token=token)
            out += [RunRef(r.info.run_id, r.info.status, dict(r.data.tags)) for r in page]
            token = page.token
            if not token:
                return out

    def get_tags(self, run_id: str) -> dict[str, str]:
        return dict(self._client.get_run(run_id).data.tags)

    def set_terminated(self, run_id: str, status: str) -> None:
        self._client.set_terminated(run_id, status=status)

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        from mlflow.entities import RunTag

        for chunk in batches([RunTag(k, str(v)) for k, v in tags.items()], MAX_TAGS_PER_BATCH):
            self._client.log_batch(run_id, tags=chunk)

    def log_batch(self, run_id: str, params: dict[str, str], metrics: dict[str, float], step: int, timestamp_ms: int) -> None:
        from mlflow.entities import Metric, Param

        for chunk in batches([Param(k, v) for k, v in params.items()], MAX_PARAMS_PER_BATCH):
            self._client.log_batch(run_id, params=chunk)
        ms = [Metric(k, v, timestamp_ms, step) for k, v in metrics.items()]
        for chunk in batches(ms, MAX_METRICS_PER_BATCH):
            self._client.log_batch(run_id, metrics=chunk)

    def log_artifact(self, run_id: str, local_path: str, artifact_path: str | None) -> None:
        self._client.log_artifact(run_id, local_path, artifact_path)

    def log_artifacts(self, run_id: str, local_dir: str, artifact_path: str | None) -> None:
        self._client.log_artifacts(run_id, local_dir, artifact_path)

    def log_dataset(self, run_id: str, dataset: dict, context: str) -> None:
        from mlflow.entities import Dataset, DatasetInput, InputTag

        entity = Dataset(
            dataset["name"], dataset["digest"], dataset["source_type"], dataset["source"], dataset["schema"], dataset["profile"]
        )
        self._client.log_inputs(run_id, datasets=[DatasetInput(entity, tags=[InputTag("mlflow.data.context", context)])])
