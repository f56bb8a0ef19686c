"""The output folder of one probe run: an exclusive lock, the run config, a checkpoint, the results.

Every probe uses this module unchanged. Files in `out/`:

- `.factprobe.lock`, `.factprobe-run.json`: the folder's claim (`factprobe.run_folder.claim`,
  the one mechanism of every command that writes an output folder), held for the whole run. A
  second run into the same folder fails at once, before any model loads, naming the folder and
  the holder's host and pid; a folder of another kind of run (a fine-tuning run) is refused,
  naming what it holds. A stale lock of a killed run is taken over (at once on the same host).
- `run_config.json`: the config (credentials inside URLs masked, `factprobe.redact.redact_values`)
  and its results key (of the real config), written only once the config and the data have
  been validated (`write_config`), so a run that fails on bad input leaves nothing that would
  refuse its corrected rerun. A folder holding another results key is refused.
- `checkpoint.jsonl`: finished rows, appended, flushed and fsynced per batch. A torn last line
  (a crash mid-write) is ignored and cut off before the next append (the rest of the file is not
  rewritten).
- `results.jsonl`, `metrics.json`: written atomically at the end; the checkpoint is removed
  afterwards. Rows already in `results.jsonl` count as done on a rerun.

No row is held in memory beyond its batch (issue 40 item 3, `factprobe.framework.row_stream`): the
finished rows are known by where they lie (`done_index`, a `RowIndex`: the results of an earlier
run, then the checkpoint), `append` records where each new row was written, and `write_results`
copies the rows into a new results file in the order asked for while handing back the few fields
the metrics read; `finish` then writes the probe's extra files, puts the results file in place,
writes metrics.json and drops the checkpoint.
- `model_revision.txt`: the revision of the weights that scored the rows; resuming with other
  weights is refused.
- The run's measurement identity (`factprobe.identity.RunIdentity`: model revision, data digest,
  config key, numerics) is stored in `run_config.json`; a folder holding results of another
  identity is refused in one line naming what changed (`check_identity`), and so is a folder of
  an older version that recorded none.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..identity import RunIdentity
from ..io import RESULT_FILE_MODE, atomic_write_json, atomic_write_parquet, atomic_write_text
from ..redact import redact_values
from ..run_folder import LOCK, MARKER, FolderBusyError, claim
from .row_stream import Projector, RowIndex, iter_rows, write_ordered

CHECKPOINT = "checkpoint.jsonl"
RESULTS = "results.jsonl"
METRICS = "metrics.json"
RUN_CONFIG = "run_config.json"
MODEL_REVISION = "model_revision.txt"
__all__ = [
    "CHECKPOINT",
    "LOCK",
    "MARKER",
    "METRICS",
    "MODEL_REVISION",
    "RESULTS",
    "RUN_CONFIG",
    "FolderBusyError",
    "RunFolder",
    "cut_torn_tail",
    "read_rows",
]


#: the numbers of the files a `RowIndex` of a run folder reads rows from
SOURCES = {0: RESULTS, 1: CHECKPOINT}


def read_rows(path: Path) -> list[dict]:
    """Rows of a jsonl results/checkpoint file; a truncated final line is dropped (all in memory: for
    tests and small files; a run reads its rows one at a time, `row_stream.iter_rows`)."""
    return list(iter_rows(path))


def cut_torn_tail(path: Path) -> None:
    """End a jsonl file whose last line lacks its newline (a crash mid-write): a whole JSON object gets
    its newline, anything else is cut off. Only the tail is read; the rest is not rewritten."""
    if not path.exists() or not path.stat().st_size:
        return
    with path.open("r+b") as fh:
        end = fh.seek(0, os.SEEK_END)
        fh.seek(end - 1)
        if fh.read(1) == b"\n":
            return
        start = end
        while start > 0:  # the start of the last line
            step = min(start, 1 << 16)
            fh.seek(start - step)
            found = fh.read(step).rfind(b"\n")
            if found >= 0:
                start = start - step + found + 1
                break
            start -= step
        fh.seek(start)
        try:
            whole = isinstance(json.loads(fh.read(end - start)), dict)
        except ValueError:
            whole = False
        if whole:
            fh.seek(end)
            fh.write(b"\n")
        else:
            fh.truncate(start)
        fh.flush()
        os.fsync(fh.fileno())


class RunFolder:
    """One run's output folder (see the module docstring); use as a context manager."""

    def __init__(self, out: str | Path, results_key: str, config: dict[str, Any]) -> None:
        self.out = Path(out)
        self.key = results_key
        self.config = config
        self._stack: ExitStack | None = None
        self._ckpt_fh = None
        #: the finished rows by key (`done_index`); `append` adds the rows it writes
        self.index: RowIndex | None = None
        self._pending: Path | None = None  # results written by `write_results`, not yet in place

    # ------------------------------------------------------------------ lock
    def __enter__(self) -> RunFolder:
        stack = ExitStack()
        try:
            stack.enter_context(claim(self.out, "probe", str(self.config.get("probe") or "")))
            self.check_config()
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        return self

    def __exit__(self, *exc: object) -> None:
        self.close_checkpoint()
        if self.index is not None:
            self.index.close()
        if self._pending is not None:  # a run stopped between write_results and finish
            self._pending.unlink(missing_ok=True)
            self._pending = None
        if self._stack is not None:
            self._stack.close()
            self._stack = None

    # ------------------------------------------------------------------ config
    def check_config(self) -> None:
        """Refuse a folder that holds results of another configuration (read-only)."""
        path = self.out / RUN_CONFIG
        if not path.exists():
            return
        try:
            old = json.loads(path.read_text(encoding="utf-8")).get("results_key")
        except (ValueError, AttributeError):
            old = None
        if old != self.key:
            raise ConfigError(
                f"{self.out} holds results of a different configuration (results key {old} != {self.key}); "
                "use another --out or remove that folder"
            )

    def stored_identity(self) -> RunIdentity | None:
        """The identity recorded in run_config.json, None when there is none."""
        try:
            ident = json.loads((self.out / RUN_CONFIG).read_text(encoding="utf-8")).get("identity")
        except (OSError, ValueError, AttributeError):
            return None
        return RunIdentity.from_dict(ident) if isinstance(ident, dict) else None

    def holds_results(self) -> bool:
        """True when the folder holds finished rows or metrics (anything a rerun would reuse)."""
        return any((self.out / n).is_file() and (self.out / n).stat().st_size for n in (RESULTS, CHECKPOINT, METRICS))

    def check_identity(self, ident: RunIdentity) -> None:
        """Refuse (one line, naming what changed and how to start afresh) a folder holding results of
        another measurement identity: other weights, data, config or numerics, or results of an
        older version that recorded no identity. A folder without results is never refused."""
        if not self.holds_results():
            return
        old = self.stored_identity()
        afresh = f"use another --out, or remove {self.out} to start afresh"
        if old is None:
            raise ConfigError(
                f"{self.out} holds results that record no measurement identity (made by an older factprobe), "
                f"so they cannot be shown to be of these weights, data and numerics; {afresh}"
            )
        changed = ident.changes_from(old)
        if changed:
            raise ConfigError(f"{self.out} holds results of other {'; other '.join(changed)}; {afresh}")

    def completed_identity(self, ident: RunIdentity) -> RunIdentity:
        """`ident` (checked against this folder) with the attention implementation the folder's rows were
        scored with when `ident`, computed before any model loads, does not know it."""
        old = self.stored_identity()
        attn = old.numerics.get("attn_implementation") if old is not None and self.holds_results() else None
        if attn and not ident.numerics.get("attn_implementation"):
            return dataclasses.replace(ident, numerics={**ident.numerics, "attn_implementation": attn})
        return ident

    def write_config(self, identity: RunIdentity | None = None) -> None:
        """Record the config (and the run's identity) once they have been validated. Credentials inside
        URLs are stored masked; the results key is the real config's."""
        content: dict[str, Any] = {"results_key": self.key, "config": redact_values(self.config)}
        if identity is not None:
            content["identity"] = redact_values(identity.to_dict())
        path = self.out / RUN_CONFIG
        try:
            same = json.loads(path.read_text(encoding="utf-8")) == json.loads(json.dumps(content))
        except (OSError, ValueError):
            same = False
        if not same:
            atomic_write_json(path, content)

    # ------------------------------------------------------------------ rows
    def done_index(self, accept: Callable[[str, dict], bool] | None = None) -> RowIndex:
        """The rows already finished, by key, as a `RowIndex` (kept as `self.index`): the results of an
        earlier run first, then the checkpoint; of several rows of one key the first that
        `accept(key, row)` keeps (default: every row). Rows are read one at a time, none is kept."""
        if self.index is not None:
            self.index.close()
        self.index = RowIndex({n: self.out / name for n, name in SOURCES.items()})
        for n in SOURCES:
            self.index.scan(n, accept)
        return self.index

    def append(self, rows: Iterable[dict]) -> None:
        """Append rows to the checkpoint, flushed and fsynced; `self.index` (when there is one) records
        where each row of a new key was written."""
        if self._ckpt_fh is None:
            path = self.out / CHECKPOINT
            cut_torn_tail(path)  # a torn final line from an earlier crash
            self._ckpt_fh = path.open("ab")
        source = next(n for n, name in SOURCES.items() if name == CHECKPOINT)
        for r in rows:
            offset = self._ckpt_fh.tell()
            self._ckpt_fh.write((json.dumps(r, ensure_ascii=False) + "\n").encode("utf-8"))
            if self.index is not None:
                self.index.add(r["key"], source, offset)
        self._ckpt_fh.flush()
        os.fsync(self._ckpt_fh.fileno())

    def close_checkpoint(self) -> None:
        if self._ckpt_fh is not None:
            self._ckpt_fh.close()
            self._ckpt_fh = None

    # ------------------------------------------------------------------ revision
    def revision(self) -> str:
        path = self.out / MODEL_REVISION
        return path.read_text(encoding="utf-8").strip() if path.exists() else ""

    def set_revision(self, revision: str, n_done: int, model: str) -> None:
        """Record the weights' revision; refuse to mix rows of other weights into this folder."""
        old = self.revision()
        if n_done and old and revision and revision != old:
            raise ConfigError(
                f"{self.out} holds {n_done} results scored with model revision {old}, but {model} is now "
                f"{revision}; use another --out or remove that folder rather than mix weights"
            )
        if revision and revision != old:
            atomic_write_text(self.out / MODEL_REVISION, revision + "\n")

    # ------------------------------------------------------------------ finish
    def write_results(self, keys: Iterable[str], projector: Projector) -> list[dict]:
        """Copy the finished rows of `keys` (each in `self.index`), in that order, into a new results
        file beside `results.jsonl` (fsynced; put in place by `finish`) and return their projections
        (`row_stream.write_ordered`): the rows the metrics are computed from."""
        if self.index is None:
            raise RuntimeError("write_results needs the finished rows' index (done_index) first")
        self.close_checkpoint()
        fd, tmp = tempfile.mkstemp(prefix=f".{RESULTS}.", suffix=".tmp", dir=self.out)
        self._pending = Path(tmp)
        os.fchmod(fd, RESULT_FILE_MODE)  # mkstemp creates 0600
        with os.fdopen(fd, "wb") as fh:
            projected = write_ordered(self.index, keys, fh, projector)
            fh.flush()
            os.fsync(fh.fileno())
        return projected

    def finish(self, metrics: dict, extra: dict[str, Any] | None = None) -> None:
        """Write a probe's extra files, put the results written by `write_results` in place, write
        metrics.json (each atomically), then drop the checkpoint.

        `extra` maps a file name in the folder to its content: a pandas DataFrame (written as
        parquet), a dict or list (JSON) or a str (text)."""
        if self._pending is None:
            raise RuntimeError("finish needs the results written first (write_results)")
        self.close_checkpoint()
        for name, content in (extra or {}).items():
            if Path(name).name != name or name in (RESULTS, METRICS, CHECKPOINT, RUN_CONFIG, MODEL_REVISION, LOCK, MARKER):
                raise ConfigError(f"a probe's extra output may not be named {name!r}")
            if isinstance(content, str):
                atomic_write_text(self.out / name, content)
            elif isinstance(content, (dict, list)):
                atomic_write_json(self.out / name, content)
            else:
                atomic_write_parquet(self.out / name, content)
        os.replace(self._pending, self.out / RESULTS)
        self._pending = None
        if self.index is not None:
            self.index.close()
        atomic_write_json(self.out / METRICS, metrics)
        (self.out / CHECKPOINT).unlink(missing_ok=True)
