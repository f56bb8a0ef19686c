"""MLflow conventions for factprobe (DESIGN.md section 6). Only this package, `factprobe_ops/components/` and
`factprobe_ops/pipelines/` import mlflow; the science in `factprobe/` never does."""

from .conventions import TRIGGERS, default_tracking_uri, experiment_name, git_sha
from .run import TrackedRun, TrackingError

__all__ = ["TRIGGERS", "TrackedRun", "TrackingError", "default_tracking_uri", "experiment_name", "git_sha"]
