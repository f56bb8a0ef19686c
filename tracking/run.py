"""A tracked MLflow run that never loses results and never stays RUNNING.

`TrackedRun` wraps one MLflow run (a CLI probe run, a pipeline parent run, or one step's nested
child run). Contract:

- On enter it checks the tracking store with an authenticated call. If that fails:
  `required=False` -> one warning line naming the URI (`warning: ...` on stderr, not a Python
  `UserWarning`), and tracking is switched off (the caller still
  writes its results to disk); `required=True` -> `TrackingError` with one clear line.
- The experiment is tagged (`conventions.experiment_tags`) so the MLflow UI opens its runs table
  with the pipeline's headline metric as primary metric: missing tags are added, tags a user set
  to another value are kept (the UI's own guesses, `*_inferred` kinds, are replaced). A store that
  refuses experiment tags (e.g. HTTP 403) gets one warning line per process; the run is logged.
- Runs carry MLflow's Source columns: `mlflow.source.type` JOB and `mlflow.source.name`
  `factprobe <pipeline>` unless the caller's tags say otherwise.
- Runs left RUNNING by an earlier crash of the same step (same `factprobe.step_key` tag) are
  marked FAILED before a new run starts.
- On exit the run ends FINISHED, KILLED on Ctrl-C or SIGTERM, or FAILED if another exception escaped the block (a run opened
  with `run_id=` to log into an existing run, e.g. the parent, is left as it is).
- A logging call that fails later (server gone) raises `TrackingError` when `required`; else it
  warns once, marks the run FAILED (when the store still answers) and disables tracking, and
  `failure` keeps the line: a caller must not report success (the CLI exits 1 on it).
- Metric names are made safe for MLflow (`factprobe_ops.tracking.metric_keys`): a name MLflow would
  refuse (and with it the whole batch), e.g. `accuracy/../../etc`, is logged under a sanitised name;
  two originals never share one. Every changed name (and every id `record_renamed_ids` reports) is
  listed in the run's `tables/metric_keys.json` (columns kind, original, logged).
- Messages never show credentials (`factprobe.redact`), e.g. of `https://user:token@host` URIs.
- Importing this module changes nothing in the environment: the fail-fast HTTP settings are
  given to each client when it is opened (`factprobe_ops.tracking.clients.http_settings`).
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

from factprobe.redact import redact

from .clients import TrackingError, find_tagged_runs
from .connect import open_client
from .context import RunContext
from .conventions import EXPERIMENT_KIND_TAG, experiment_name, experiment_tags, git_sha, resolve_tracking_uri, standard_tags, tag
from .metric_keys import KEY_MAP_ARTIFACT, KeyMap

LOGGED_ARTIFACTS_TAG = "mlflow.loggedArtifacts"

__all__ = ["LOGGED_ARTIFACTS_TAG", "TrackedRun", "TrackingError"]


def _describe(exc: BaseException) -> str:
    text = redact(exc).strip().splitlines()
    msg = text[0] if text else type(exc).__name__
    low = str(exc).lower()
    if "is not an mlflow tracking server" in low:  # rest_client.not_mlflow_answer: already one clear line
        return msg
    if "401" in low or "unauthorized" in low or "credentials" in low:
        return (
            "the server rejected the credentials (HTTP 401): check MLFLOW_TRACKING_USERNAME / "
            "MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN)"
        )
    if "403" in low or "permission" in low:
        return "permission denied (HTTP 403)"
    if "connection refused" in low or "failed to establish a new connection" in low:
        return "connection refused (is the server running and the URI right?)"
    if "timed out" in low or "timeout" in low:
        return "the server did not answer in time"
    return msg[:300]


_TAGGED_EXPERIMENTS: set[tuple[str, str]] = set()  # (uri, experiment id) marked or refused in this process


def _mark_experiment(
    client, uri: str, exp_id: str, headline_family: str, warn: Callable[[str], None], greater_is_better: bool = True
) -> None:
    """Add the experiment tags (`experiment_tags(headline_family, greater_is_better)`) that are missing; never
    overwrite a value already there (a user's, or the one the experiment's first run set)."""
    if (uri, exp_id) in _TAGGED_EXPERIMENTS:
        return
    _TAGGED_EXPERIMENTS.add((uri, exp_id))
    try:
        have = client.experiment_tags(exp_id)
        want = experiment_tags(headline_family, greater_is_better)
        if have.get(EXPERIMENT_KIND_TAG, "").endswith("_inferred") or have.get(EXPERIMENT_KIND_TAG) == "no_inferred_type":
            have.pop(EXPERIMENT_KIND_TAG)  # the UI's guess, not a choice of the user
        if any(k in have and have[k] != v for k, v in want.items()):
            return  # the user chose their own view of this experiment
        for k, v in want.items():
            if k not in have:
                client.set_experiment_tag(exp_id, k, v)
    except Exception as exc:  # noqa: BLE001 - a view preference never costs the run
        warn(
            f"MLflow tracking at {uri}: tagging experiment {exp_id} failed: {_describe(exc)}; "
            "the run is logged, but the UI may not open on its runs table"
        )


def _warn_line(message: str) -> None:
    """The default `warn` of a TrackedRun: one redacted `warning: ...` line on stderr."""
    print(f"warning: {redact(message)}", file=sys.stderr, flush=True)


class TrackedRun:
    """Context manager around one MLflow run; see the module docstring for the contract."""

    def __init__(
        self,
        pipeline: str = "probe",
        run_name: str | None = None,
        tracking_uri: str | None = None,
        tags: dict[str, str] | None = None,
        parent_run_id: str | None = None,
        step_key: str | None = None,
        required: bool = False,
        enabled: bool = True,
        warn: Callable[[str], None] | None = None,
        run_id: str | None = None,
        headline_family: str = "",
        headline_greater: bool = True,
    ) -> None:
        self.uri = resolve_tracking_uri(tracking_uri)
        self.pipeline = pipeline
        self.run_name = run_name
        self.tags = {
            tag("git_sha"): git_sha(),
            **standard_tags(),
            "mlflow.source.type": "JOB",
            "mlflow.source.name": f"factprobe {pipeline}",
            **(tags or {}),
        }
        self.parent_run_id = parent_run_id or None
        self.step_key = step_key
        self.required = required
        self.enabled = enabled
        self.warn = warn or _warn_line
        self.run_id: str | None = run_id
        self._resume = run_id is not None
        self.headline_family = headline_family
        self.headline_greater = headline_greater
        self._client = None
        #: the line of a logging call that failed after the run was created (None: none failed)
        self.failure: str | None = None
        self.keys = KeyMap()
        self._renamed_ids: dict[str, str] = {}
        self._key_rows: list[dict] = []

    @classmethod
    def from_context(
        cls,
        context: RunContext,
        run_name: str | None = None,
        tags: dict[str, str] | None = None,
        step_key: str | None = None,
        required: bool = False,
        child: bool = True,
        warn: Callable[[str], None] | None = None,
        run_id: str | None = None,
        headline_family: str = "",
        headline_greater: bool = True,
    ) -> TrackedRun:
        """The run of `context` (tracking URI, pipeline, parent run, trigger, KFP run id, git
        commit): a child of its parent run when `child`, else a top-level run (a pipeline's parent
        run, a CLI run). Tracking is off when the context says so, and for a child without a
        parent run. `tags` are added after the context's own. `headline_family`: the experiment's
        primary metric when this run is the first to mark it (`conventions.experiment_tags`), greater being
        better unless `headline_greater` is False."""
        enabled = context.uri is not None and (context.tracked or not child)
        own = dict(context.tags())
        if context.git_commit:
            own.update({tag("git_sha"): context.git_commit, "mlflow.source.git.commit": context.git_commit})
        if context.user:
            own["mlflow.user"] = context.user
        own.update(tags or {})
        return cls(
            pipeline=context.pipeline,
            run_name=run_name,
            tracking_uri=context.uri,
            tags=own,
            parent_run_id=context.parent_run_id if child else None,
            step_key=step_key,
            required=required,
            enabled=enabled,
            warn=warn,
            run_id=run_id,
            headline_family=headline_family,
            headline_greater=headline_greater,
        )

    @classmethod
    def parent_of(cls, context: RunContext, required: bool = True) -> TrackedRun:
        """The parent run of `context`, to log into (figures, tables, tags of a report step); it is
        not ended on exit. Disabled when the context is not tracked (tracking off, or no parent)."""
        return cls(
            pipeline=context.pipeline,
            tracking_uri=context.uri,
            required=required,
            enabled=context.tracked,
            run_id=context.parent_run_id or None,
        )

    # ------------------------------------------------------------------ lifecycle
    def _fail(self, what: str, exc: BaseException) -> None:
        msg = redact(f"MLflow tracking at {self.uri}: {what} failed: {_describe(exc)}")
        if self.required:
            raise TrackingError(msg) from exc
        if what == "connecting":
            why = _describe(exc)
            if "is not an MLflow tracking server" in why:  # a login page or proxy answered (rest_client)
                msg = redact(f"{why}; the run is not logged")
            else:
                msg = redact(
                    f"MLflow tracking server {self.uri} {'refused us' if '(HTTP 40' in why else 'unreachable'} "
                    f"({why}); the run is not logged"
                )
        if self.run_id and self._client is not None and not self._resume and what != "ending the run":
            try:  # a half-logged run is not left RUNNING
                self._client.set_terminated(self.run_id, "FAILED")
                msg += f"; run {self.run_id} is marked FAILED"
            except Exception:  # noqa: BLE001 - the store is gone: the line says what failed
                pass
        if self.run_id:
            self.failure = msg
        self.warn(msg + "; results are kept on disk only")
        self.enabled = False

    def __enter__(self) -> Self:
        if not self.enabled:
            return self
        try:
            client = open_client(self.uri)
            client.check()  # authenticated reachability check
            self._client = client
        except Exception as exc:  # noqa: BLE001 - any failure here means "not reachable"
            self._fail("connecting", exc)
            return self
        try:
            exp_id = client.experiment_id(experiment_name(self.pipeline))
            if self._resume:  # logging into an existing run (e.g. the parent): its status is not ours
                return self
            _mark_experiment(client, self.uri, exp_id, self.headline_family, self.warn, self.headline_greater)
            if self.step_key:
                self._fail_stale(client, exp_id)
            tags = dict(self.tags)
            if self.step_key:
                tags[tag("step_key")] = self.step_key
            if self.parent_run_id:
                tags["mlflow.parentRunId"] = self.parent_run_id
            self.run_id = client.create_run(exp_id, self.run_name, tags)
        except Exception as exc:  # noqa: BLE001
            self._fail("starting a run", exc)
        return self

    def _fail_stale(self, client, exp_id: str) -> None:
        # the step key holds user values (paths, model names): any character may occur
        for r in find_tagged_runs(client, [exp_id], {tag("step_key"): self.step_key}, status="RUNNING"):
            client.set_terminated(r.run_id, "FAILED")

    def open(self) -> Self:
        """Start (or attach to) the run and leave it RUNNING: for the one step whose run another step ends
        (a pipeline's start step creates the parent run; its exit handler, the finalize step, ends it).
        Everywhere else use `with`, which ends the run it started."""
        return self.__enter__()

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self.enabled and self.run_id and self._client is not None and not self._resume:
            # Ctrl-C and SIGTERM (factprobe.signals.Terminated, a KeyboardInterrupt) mean KILLED.
            status = "FINISHED" if exc_type is None else "KILLED" if issubclass(exc_type, KeyboardInterrupt) else "FAILED"
            try:
                self._client.set_terminated(self.run_id, status)
            except Exception as e:  # noqa: BLE001
                if exc_type is None:
                    self._fail("ending the run", e)
        return False

    @property
    def active(self) -> bool:
        return bool(self.enabled and self.run_id and self._client is not None)

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        if not self.active:
            return None
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001
            self._fail(what, exc)
            return None

    # ------------------------------------------------------------------ logging
    def set_tags(self, tags: dict[str, Any]) -> None:
        self._call("setting tags", lambda: self._client.set_tags(self.run_id, {k: str(v) for k, v in tags.items()}))

    def log_params(self, params: dict[str, Any]) -> None:
        """Every value as text (MLflow params are strings; capped at 6000 characters), credentials
        inside URLs masked (`factprobe.redact`: `s3://***@bucket`), also within JSON values."""
        ps = {k: redact(v)[:6000] for k, v in params.items()}
        self._call("logging parameters", lambda: self._client.log_batch(self.run_id, ps, {}, 0, 0))

    def log_metrics(self, metrics: dict[str, float], step: int = 0) -> None:
        """Finite-or-infinite floats; None and NaN values are skipped. Each name is logged under the
        name `self.keys` gives it (unchanged when MLflow takes it; see the module docstring)."""
        if not self.active:
            return
        kept = {k: float(v) for k, v in metrics.items() if v is not None and not math.isnan(float(v))}
        names = self.keys.names(list(kept))
        ms = {names[k]: v for k, v in kept.items()}
        self._call("logging metrics", lambda: self._client.log_batch(self.run_id, {}, ms, step, int(time.time() * 1000)))
        self._log_key_map()

    def record_renamed_ids(self, renamed: dict[str, str]) -> None:
        """Note ids (relations, templates) that were logged as other name segments ({original: logged}),
        for `tables/metric_keys.json`."""
        self._renamed_ids.update(renamed)
        self._log_key_map()

    def _log_key_map(self) -> None:
        """(Re)write `tables/metric_keys.json` when a name or id was changed since it was last written."""
        import pandas as pd

        rows = [{"kind": "id", "original": k, "logged": v} for k, v in self._renamed_ids.items()]
        rows += [{"kind": "metric", "original": k, "logged": v} for k, v in self.keys.renamed.items()]
        if rows == self._key_rows or not self.active:
            return
        self._key_rows = rows
        self.log_table(pd.DataFrame(rows, columns=["kind", "original", "logged"]), KEY_MAP_ARTIFACT)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        self._call("uploading an artifact", lambda: self._client.log_artifact(self.run_id, str(path), artifact_path))

    def log_artifacts(self, path: str | Path, artifact_path: str | None = None) -> None:
        self._call("uploading artifacts", lambda: self._client.log_artifacts(self.run_id, str(path), artifact_path))

    def _log_file(self, what: str, artifact_file: str, write: Callable[[Path], None]) -> None:
        """Write `artifact_file` with `write(path)` in a temporary folder, then upload it."""

        def do() -> None:
            with tempfile.TemporaryDirectory() as d:
                p = Path(d) / Path(artifact_file).name
                write(p)
                parent = str(Path(artifact_file).parent)
                self._client.log_artifact(self.run_id, str(p), None if parent == "." else parent)

        self._call(what, do)

    def log_text(self, text: str, artifact_file: str) -> None:
        self._log_file("logging text", artifact_file, lambda p: p.write_text(text, encoding="utf-8"))

    def log_figure(self, fig, artifact_file: str) -> None:
        self._log_file("logging a figure", artifact_file, lambda p: fig.savefig(p))

    def log_parquet(self, df, artifact_file: str) -> None:
        self._log_file("logging a parquet table", artifact_file, lambda p: df.to_parquet(p, index=False))

    def log_table(self, df, artifact_file: str) -> None:
        """Like `MlflowClient.log_table`: JSON in pandas' split layout, listed in the run's
        `mlflow.loggedArtifacts` tag so the MLflow UI shows it as a table."""
        self._log_file("logging a table", artifact_file, lambda p: df.to_json(p, orient="split", index=False, date_format="iso"))

        def register() -> None:
            listed = json.loads(self._client.get_tags(self.run_id).get(LOGGED_ARTIFACTS_TAG, "[]"))
            entry = {"path": artifact_file, "type": "table"}
            if entry not in listed:
                self._client.set_tags(self.run_id, {LOGGED_ARTIFACTS_TAG: json.dumps(listed + [entry])})

        self._call("registering a table", register)

    def log_input(
        self, df, name: str, source: str, digest: str | None = None, context: str = "test", also_parent: bool = False
    ) -> None:
        """Record `df` as a dataset input of the run (what `mlflow.data.from_pandas` would log);
        with `also_parent`, of the parent run too (the pipeline run lists the data of its probes)."""
        from .clients import dataset_record

        if digest is None:
            import hashlib

            digest = hashlib.md5(df.to_json(orient="split", index=False).encode()).hexdigest()[:8]
        # MLflow caps a dataset digest at 36 characters: a content digest `sha256:<64 hex>` keeps its hex prefix
        digest = digest.removeprefix("sha256:")[:36]
        record = dataset_record(df, name, redact(source), digest)
        self._call("logging the dataset", lambda: self._client.log_dataset(self.run_id, record, context))
        if also_parent and self.parent_run_id:
            self._call("logging the dataset", lambda: self._log_parent_dataset(record, context))

    def _log_parent_dataset(self, record: Any, context: str) -> None:
        """The dataset on the parent run. Sibling steps that read the same data log the same dataset there; when two
        do it at the same moment, the server's check-then-insert lets both through and the second insert breaks the
        inputs table's unique key (SQLite: "UNIQUE constraint failed: inputs...", PostgreSQL: "duplicate key ...
        inputs_pk"). That input is then already logged: it is not an error of this step."""
        try:
            self._client.log_dataset(self.parent_run_id, record, context)
        except Exception as exc:  # only the duplicate input is swallowed
            text = str(exc)
            if "UNIQUE constraint failed: inputs." in text or ("duplicate key" in text and "inputs_pk" in text):
                return
            raise
