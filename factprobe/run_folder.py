"""One writer, and one kind of run, per output folder: the claim every command that writes a folder makes.

`claim(out, kind, name)` is used by `factprobe probe` (`framework/checkpoint.py::RunFolder`), by
`factprobe finetune` (`factprobe.finetune.run_finetune`), by `factprobe study`
(`factprobe.studies.cli.run_study`), by `compare --out` (kind "compare"), `regress --out` (kind
"regress") and `factprobe map` (kinds "map" and "map-diff", `factprobe.knowledge_maps`), and so
by the pipeline steps that run them (`KINDS`). Inside the block:

1. `out` is a folder: an existing file is refused (`--out runs/x is a file, not a folder`).
2. The folder's lock `LOCK` is held (`factprobe.file_lock.lock_file`: an O_EXCL file with a
   heartbeat, so it excludes processes on different hosts sharing a PersistentVolumeClaim). It
   is taken at once or not at all: a folder another live run writes is refused, naming that
   run's kind, host and pid. A killed run's lock is taken over (at once when it ran on this host
   and its pid is gone, else after `file_lock.STALE_AFTER_S`).
3. A folder that holds another kind of run is refused in one line naming what it holds, e.g.
   `runs/ft holds a fine-tuning run (finetune_config.json, metrics.json); a probe run cannot
   write into it; use another --out`. What it holds is read from the marker `MARKER`
   ({"kind", "name"}, written atomically by the claim) or, for folders of older versions without
   one, from the files each kind writes (`EVIDENCE`). A marker alone, in a folder holding no
   outputs (a run refused on bad input), does not refuse a corrected run of another kind.
4. The marker names this run's kind; the block runs; the lock is removed on exit.

The two steps are one critical section: of two runs of different kinds started at once into one
folder, exactly one proceeds and the other is refused in one line.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from .errors import ConfigError
from .file_lock import holder, lock_file
from .io import atomic_write_json

LOCK = ".factprobe.lock"
MARKER = ".factprobe-run.json"
#: the kinds of folder a command claims
KINDS = ("probe", "finetune", "study", "compare", "regress", "map", "map-diff")
#: what a run of each kind is called in messages: "<folder> holds a probe run (qa)"
HOLDS = {
    "probe": "a probe run",
    "finetune": "a fine-tuning run",
    "study": "a study",
    "compare": "a comparison",
    "regress": "a regression gate",
    "map": "a knowledge map",
    "map-diff": "a knowledge map diff",
}
#: who is refused: "...; finetune cannot write into it"
WRITER = {
    "probe": "a probe run",
    "finetune": "finetune",
    "study": "a study",
    "compare": "compare --out",
    "regress": "regress --out",
    "map": "map --out",
    "map-diff": "map --diff --out",
}
#: files (or folders) that only one kind writes: how a folder without a marker (an older version, or
#: a marker lost) is recognised, and what tells a claimed folder from one whose run wrote nothing
EVIDENCE = {
    "finetune": ("finetune_config.json", "adapter", "trainer_state.json", "checkpoints", "loss_history.json"),
    "probe": ("run_config.json", "results.jsonl", "checkpoint.jsonl", "model_revision.txt"),
    "study": ("study_config.json",),  # written first by factprobe.studies.cli.run_study, then its tables and metrics.json
    "compare": ("cross_model.json", "heatmap.png", "pearson.png"),  # tracking/compare.py --out
    "regress": (
        "gate_report.txt",
        "gate.json",
        "candidate",
    ),  # tracking/regress.py --out: the report, the candidate's probe
    "map": ("map_inputs.json", "knowledge_map.json", "knowledge_map.html"),  # factprobe map --out (factprobe.knowledge_maps)
    "map-diff": ("diff.json",),  # factprobe map --diff A B --out
}
SHARED_OUTPUTS = ("metrics.json",)


class FolderBusyError(ConfigError):
    """Another live process is writing into the same output folder."""


class FolderKindError(ConfigError):
    """The output folder holds another kind of run."""


def _who(token: str | None) -> str:
    host, pid, _ = holder(token)
    return f"host {host} pid {pid}" if pid is not None else "another process"


def _marker(out: Path) -> dict:
    try:
        d = json.loads((out / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return d if isinstance(d, dict) and d.get("kind") else {}


def _evidence(out: Path, kind: str) -> list[str]:
    return [n for n in EVIDENCE.get(kind, ()) if (out / n).exists()]


def holds(out: str | Path) -> tuple[str, str] | None:
    """(kind, what) of the run `out` holds, e.g. ("finetune", "finetune_config.json, metrics.json")
    or ("probe", "qa"); None when it holds no run's outputs (an empty folder, or only a marker)."""
    out = Path(out)
    mark = _marker(out)
    kinds = [mark["kind"]] if mark else []
    kinds += [k for k in EVIDENCE if k not in kinds and _evidence(out, k)]
    for kind in kinds:
        found = _evidence(out, kind)
        if not found:
            continue  # a marker alone: a run that was refused before it wrote anything
        if kind == "probe":
            what = _probe_name(out) or mark.get("name") or ", ".join(found[:2])
        elif kind == "study":
            what = _config_value(out / "study_config.json", "study") or mark.get("name") or ", ".join(found[:2])
        else:
            shown = [f"{n}/" if (out / n).is_dir() else n for n in found[:2]]
            what = ", ".join(shown + [n for n in SHARED_OUTPUTS if (out / n).exists()])
        return kind, what
    return None


def _config_value(path: Path, *keys: str) -> str:
    """The value at `keys` in JSON file `path` as text; "" when unreadable or missing."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
        for k in keys:
            value = value[k]
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    return str(value) if value else ""


def _probe_name(out: Path) -> str:
    return _config_value(out / "run_config.json", "config", "probe")


def check_folder(out: str | Path) -> Path:
    """`out` as a Path; ConfigError when it exists and is not a folder (`--out` given a file)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file, not a folder; give a folder (it is created if missing)")
    return out


def refuse_other_kind(out: str | Path, kind: str) -> None:
    """ConfigError (one line) when `out` holds a run of another kind than `kind` (read-only)."""
    found = holds(out)
    if found and found[0] != kind:
        other, what = found
        raise FolderKindError(
            f"{out} holds {HOLDS.get(other, other)} ({what}); {WRITER.get(kind, kind)} cannot write into it; use another --out"
        )


@contextmanager
def claim(out: str | Path, kind: str, name: str = "") -> Iterator[Path]:
    """Hold `out` for one run of `kind` (one of `KINDS`: "probe", "finetune", "study", "compare",
    "regress", "map", "map-diff") named `name` (the probe, the training set, the study) inside the block; see the
    module docstring. Yields `out` as a Path. Raises ConfigError (one line) for a file, an
    uncreatable folder, a busy folder (`FolderBusyError`) or a folder of another kind
    (`FolderKindError`). ValueError for a `kind` not in `KINDS` (a programming error).

    `compare --out` and `regress --out` write their files inside `with claim(out, "compare"):`
    (or "regress"); a probe run the block starts goes into a subfolder (the lock of `out` is held)."""
    if kind not in KINDS:
        raise ValueError(f"unknown folder kind {kind!r}; one of {', '.join(KINDS)}")
    out = check_folder(out)
    if out.is_dir():
        refuse_other_kind(out, kind)  # before touching anything
    try:
        out.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        check_folder(out)
        raise
    except OSError as e:
        raise ConfigError(f"cannot create output folder {out}: {e.strerror or e}") from None
    with ExitStack() as stack:
        try:
            stack.enter_context(lock_file(out / LOCK, timeout=0, label=f"{kind} {name}".strip()))
        except TimeoutError:
            raise _busy(out, kind) from None
        except OSError as e:
            raise ConfigError(f"cannot write into output folder {out}: {e.strerror or e}") from None
        refuse_other_kind(out, kind)
        mark = _marker(out)
        if mark.get("kind") != kind or (name and mark.get("name") != name and holds(out) is None):
            atomic_write_json(out / MARKER, {"kind": kind, "name": name})
        yield out


def _busy(out: Path, kind: str) -> ConfigError:
    """The refusal of a folder whose lock another live run holds (its kind read from the lock)."""
    token = None
    for _ in range(20):  # the holder writes its token right after creating the file
        try:
            token = (out / LOCK).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            token = None
        if token:
            break
        time.sleep(0.05)
    other = holder(token)[2].partition(" ")
    if other[0] and other[0] != kind:
        what = f"{other[2]}, " if other[2] else ""
        return FolderKindError(
            f"{out} holds {HOLDS.get(other[0], other[0])} ({what}in progress, {_who(token)}); "
            f"{WRITER.get(kind, kind)} cannot write into it; use another --out"
        )
    return FolderBusyError(
        f"output folder {out} is in use by {_who(token)}"
        f"{f' ({HOLDS.get(other[0], other[0])})' if other[0] else ''}; wait for it or use another --out"
    )


__all__ = ["KINDS", "LOCK", "MARKER", "FolderBusyError", "FolderKindError", "check_folder", "claim", "holds", "refuse_other_kind"]
