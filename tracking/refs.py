"""`runs:/<run id>[/<artifact path>]` references for the science's file options (`factprobe.refs`).

Registered through the `factprobe.ref_resolvers` entry point `runs`. The artifact (a file or a
folder; default: the run's `results/` folder, where probe runs log the files they wrote, e.g.
`results/known_unknown.parquet`) is downloaded once into `<cache>/artifacts/<run id>/` and that
local path is returned. The tracking server is `MLFLOW_TRACKING_URI`, else the embedded store of
the working directory. Errors are one line: an unknown run, a missing artifact, an unreachable server.
"""

from __future__ import annotations

from pathlib import Path

from factprobe.errors import ConfigError
from factprobe.paths import cache_root
from factprobe.redact import redact

from .clients import TrackingError
from .conventions import resolve_tracking_uri

SCHEME = "runs:/"
DEFAULT_ARTIFACT = "results"


def resolve_run_ref(ref: str, tracking_uri: str | None = None) -> Path:
    """Download the artifact `ref` names and return its local path (see the module docstring)."""
    from .library_client import open_mlflow_client

    rest = ref[len(SCHEME) :].strip("/")
    run_id, _, artifact = rest.partition("/")
    if not run_id:
        raise ConfigError(f"{ref}: expected runs:/<run id>[/<artifact path>]")
    artifact = artifact or DEFAULT_ARTIFACT
    uri = resolve_tracking_uri(tracking_uri)
    client = open_mlflow_client(uri)
    try:  # first: is there such a run (one clear line when not)
        client.get_run(run_id)
    except Exception as e:  # noqa: BLE001 - unknown run, unreachable server, rejected credentials
        raise TrackingError(f"{ref}: no such run at {redact(uri)} ({redact(str(e).splitlines()[0][:160])})") from None
    dest = cache_root() / "artifacts" / run_id
    if (dest / artifact).exists():  # a run's logged artifacts do not change: downloaded once
        return dest / artifact
    dest.mkdir(parents=True, exist_ok=True)
    try:
        return Path(client.download_artifacts(run_id, artifact, str(dest)))
    except Exception as e:  # noqa: BLE001
        raise ConfigError(f"{ref}: run {run_id} has no artifact {artifact!r} ({redact(str(e).splitlines()[0][:160])})") from None
