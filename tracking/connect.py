"""`open_client(uri)`: the `TrackingClient` (tracking/clients.py) for a tracking URI.

- `http://` / `https://`: `factprobe_ops.tracking.rest_client.RestTrackingClient`, MLflow's REST API over
  `requests`; a pipeline step that logs to a server never imports `mlflow`.
- every other URI (the embedded `sqlite:///...` store, `file:` stores, databricks, ...):
  `factprobe_ops.tracking.library_client.LibraryTrackingClient`, on `mlflow.tracking.MlflowClient`.

It sits above both clients and the interface they implement (`factprobe_ops.tracking.clients`), so none of them
needs to import it back. Each client module is imported only when its kind of URI is opened.
"""

from __future__ import annotations

from .clients import TrackingClient


def is_http(uri: str) -> bool:
    """True for an `http://` or `https://` URI (any case)."""
    return uri.lower().startswith(("http://", "https://"))


def open_client(uri: str) -> TrackingClient:
    """The client for `uri`: REST for http(s) servers, the MLflow library for everything else."""
    if is_http(uri):
        from .rest_client import RestTrackingClient

        return RestTrackingClient(uri)
    from .library_client import LibraryTrackingClient

    return LibraryTrackingClient(uri)
