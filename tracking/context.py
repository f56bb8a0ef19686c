"""One run context: where a run is tracked and what it belongs to, as ONE value.

`RunContext` holds the tracking URI, the MLflow parent run, the pipeline (experiment
`factprobe/<pipeline>`), the trigger, the user, the git commit and the KFP run id. It is built
once (by the CLI, or by a pipeline's start step, which also fills in the parent run it opened)
and handed down to the tracking calls (`TrackedRun.from_context`, `probe_run`) and across KFP
step boundaries as one JSON string (`to_json` / `from_json`).

`tracking_uri` is kept as given: "" means `MLFLOW_TRACKING_URI` or the embedded store
(`conventions.resolve_tracking_uri`), "none" means tracking is off; `uri` resolves it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from factprobe.errors import ConfigError

from .conventions import git_sha, resolve_tracking_uri, run_user, tag

#: the tracking URI value that switches tracking off
TRACKING_OFF = "none"


@dataclass(frozen=True)
class RunContext:
    """Where a run is tracked and what it belongs to (see the module docstring)."""

    tracking_uri: str = ""
    pipeline: str = "probe"
    trigger: str = ""
    parent_run_id: str = ""
    kfp_run_id: str = ""
    user: str = ""
    git_commit: str = ""

    @classmethod
    def start(cls, tracking_uri: str = "", pipeline: str = "probe", trigger: str = "local", kfp_run_id: str = "") -> RunContext:
        """The context of a new run, with this process's user and git commit filled in."""
        return cls(
            tracking_uri=(tracking_uri or "").strip(),
            pipeline=pipeline,
            trigger=trigger or "local",
            kfp_run_id=kfp_run_id or "",
            user=run_user(),
            git_commit=git_sha(),
        )

    @property
    def uri(self) -> str | None:
        """The tracking URI to log to: None when tracking is off, else the given URI or the default."""
        if self.tracking_uri.strip().lower() == TRACKING_OFF:
            return None
        return resolve_tracking_uri(self.tracking_uri)

    @property
    def tracked(self) -> bool:
        """True when a step run of this context is logged: tracking on and a parent run opened."""
        return self.uri is not None and bool(self.parent_run_id)

    def with_parent(self, parent_run_id: str) -> RunContext:
        """This context under the parent run `parent_run_id`."""
        return replace(self, parent_run_id=parent_run_id or "")

    def tags(self) -> dict[str, str]:
        """The identifying tags a run of this context carries: its trigger and KFP run id, those
        that are set."""
        out = {tag("trigger"): self.trigger} if self.trigger else {}
        if self.kfp_run_id:
            out[tag("kfp_run_id")] = self.kfp_run_id
        return out

    def to_json(self) -> str:
        """One JSON object: what crosses a KFP step boundary as one string parameter."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | dict[str, Any] | RunContext) -> RunContext:
        """Read `to_json`'s text back (a dict is taken as is, a RunContext returned as is). Not a
        JSON object, or unknown keys: ConfigError naming them."""
        if isinstance(text, RunContext):
            return text
        try:
            value = text if isinstance(text, dict) else json.loads(text)
        except (TypeError, json.JSONDecodeError):
            raise ConfigError(f"run context: not JSON: {str(text)[:80]!r}") from None
        if not isinstance(value, dict):
            raise ConfigError(f"run context: expected a JSON object, got {str(text)[:80]!r}")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(value) - names)
        if unknown:
            raise ConfigError(f"run context: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        return cls(**{k: str(v) if v is not None else "" for k, v in value.items()})
