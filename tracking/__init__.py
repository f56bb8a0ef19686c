"""MLflow conventions for factprobe (DESIGN.md section 6). Only this package, `components/` and
`pipelines/` import mlflow; the science in `factprobe/` never does."""

from .conventions import TRIGGERS, experiment_name, git_sha, resolve_tracking_uri
from .run import TrackedRun, TrackingError

__all__ = ["TRIGGERS", "TrackedRun", "TrackingError", "experiment_name", "git_sha", "resolve_tracking_uri"]
