"""The checkpoints of a fine-tuning run and what a resume is checked against.

`<out>/checkpoints/checkpoint-<step>/` holds the Trainer's and DeepSpeed's files and, written last
and atomically, `finetune_config.json` (`CONFIG_FILE`): a checkpoint without it is torn and is never
resumed. A rerun resumes from the newest complete checkpoint made with the same model, configuration,
training set and base weights (`check_resume`, `check_base_revision`), and refuses any other.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

from ..errors import ConfigError
from ..redact import redact_values
from .config import FinetuneConfig

CONFIG_FILE = "finetune_config.json"
CHECKPOINTS = "checkpoints"
#: the Trainer's own file in each checkpoint
TRAINER_STATE = "trainer_state.json"
_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")


def _note(msg: str) -> None:
    print(f"factprobe: {msg}", file=sys.stderr, flush=True)


def checkpoint_step(path: Path) -> int | None:
    """N of a `checkpoint-N` folder, else None."""
    m = _CHECKPOINT_RE.match(path.name)
    return int(m.group(1)) if m and path.is_dir() else None


def is_complete(ckpt: Path) -> bool:
    """A checkpoint is complete when its `finetune_config.json` exists: written (atomically) after
    every file of the Trainer and DeepSpeed, by the `on_save` callback. Older versions wrote it last
    too; a folder without it (or without the Trainer's state) is torn."""
    return (ckpt / CONFIG_FILE).is_file() and (ckpt / TRAINER_STATE).is_file()


def list_checkpoints(ckdir: Path) -> list[tuple[int, Path, bool]]:
    """(step, folder, complete?) of every `checkpoint-N` in `ckdir`, oldest first."""
    if not ckdir.is_dir():
        return []
    found = [(checkpoint_step(p), p) for p in ckdir.iterdir()]
    return sorted((n, p, is_complete(p)) for n, p in found if n is not None)


def prune_checkpoints(ckdir: Path, keep: int | None, current: Path | None = None) -> None:
    """Delete torn checkpoints (except `current`) and, with `keep`, all but the newest `keep`
    complete ones. A complete checkpoint is never deleted in favour of a torn one."""
    found = list_checkpoints(ckdir)
    complete = [p for _, p, ok in found if ok]
    drop = [p for _, p, ok in found if not ok and p != current]
    if keep is not None and len(complete) > keep:
        drop += complete[:-keep]
    for p in drop:
        shutil.rmtree(p, ignore_errors=True)


def check_resume(cfg: FinetuneConfig, out: Path, digest: str, revision: str | None = None, rank: int = 0) -> Path | None:
    """The checkpoint to resume from (None: start fresh): the newest COMPLETE one; torn ones (a
    crash or full disk mid-save) are skipped with a note and deleted (by rank 0). Refuses a
    checkpoint made with another model or configuration (or training set), naming both, and one
    made on other base weights than `revision` (the weights at the model path changed)."""
    ckdir = out / CHECKPOINTS
    found = list_checkpoints(ckdir)
    if not found:
        return None
    if not cfg.resume:
        if rank == 0:
            shutil.rmtree(ckdir)
        return None
    complete = [p for _, p, ok in found if ok]
    last = complete[-1] if complete else None
    for _, p, ok in found:
        if not ok and rank == 0:
            _note(
                f"skipping the torn checkpoint {p} (a crash or a full disk while it was written; deleted); "
                + (f"resuming from {last.name}" if last else "no complete checkpoint: training starts over")
            )
            shutil.rmtree(p, ignore_errors=True)
    if last is None:
        return None
    saved = json.loads((last / CONFIG_FILE).read_text(encoding="utf-8"))
    # finetune_config.json stores credentials inside URLs masked (issue 18): compare both sides masked
    old, new = redact_values(saved.get("fingerprint", {})), redact_values({**cfg.fingerprint(), "train_set_digest": digest})
    old = {**old, "train_set_digest": saved.get("train_set_digest")}
    diff = {k: (old.get(k), new.get(k)) for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)}
    if diff:
        what = "; ".join(f"{k}: checkpoint {a!r}, this run {b!r}" for k, (a, b) in diff.items())
        raise ConfigError(
            f"{last} was made by model {old.get('model')!r} with another configuration than this run "
            f"(model {cfg.model!r}): {what}; refusing to resume (use another --out, or --no-resume "
            "to delete the checkpoints and start over)"
        )
    if revision is not None:
        check_base_revision(cfg, last, revision, rank)
    return last


def check_base_revision(cfg: FinetuneConfig, ckpt: Path, revision: str, rank: int = 0) -> None:
    """Refuse to resume `ckpt` when it was trained on other base weights than `revision` (the
    files at the model path changed), naming both revisions. A checkpoint of an older version that
    did not record the revision is resumed with a note."""
    had = json.loads((ckpt / CONFIG_FILE).read_text(encoding="utf-8")).get("model_revision")
    if had is not None and had != revision:
        raise ConfigError(
            f"{ckpt}: the base weights of {cfg.model!r} changed since this checkpoint was written "
            f"(checkpoint {had}, this run {revision}); refusing to resume an adapter on two different "
            "bases (restore the weights, use another --out, or --no-resume to start over)"
        )
    if had is None and rank == 0:
        _note(
            f"{ckpt} was written by an older factprobe that did not record the base weights' revision; "
            "resuming without that check"
        )


def carried_tokens(resume_from: Path | None) -> tuple[int, int] | None:
    """(real, fed) tokens trained before `resume_from` (its stamp); (0, 0) for a fresh run; None
    when a checkpoint of an older version did not record them."""
    if resume_from is None:
        return 0, 0
    t = json.loads((resume_from / CONFIG_FILE).read_text(encoding="utf-8")).get("tokens")
    return (int(t["real"]), int(t["fed"])) if isinstance(t, dict) else None
