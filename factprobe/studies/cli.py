"""`factprobe study NAME [flags]`: run one registered study (registry.py: built-in or plug-in) into an output folder.

    factprobe study icl-examples --model smollm2-135m-instruct --source lama --relations P36 --n 0,1,5 --draws 3
    factprobe study icl-sequence --length 200 --replace 40 --kind incorrect --placement block

The folder is claimed for one study (`factprobe.run_folder.claim(out, "study", name)`): a second
run into it while the first is live is refused, and so is a folder of a probe or fine-tuning run.
The study's data is read and checked first (`Study.prepare`): a study refused on its data writes
nothing and opens no MLflow run. Then `study_config.json` records the configuration; `metrics.json`
is written atomically last, so a folder holding `metrics.json` holds a finished study:
- rerunning the same configuration into it prints the finished summary and computes nothing;
- another configuration into it is refused in one line naming the differing options.

Hooks from the entry-point group `factprobe.study_hooks` (tracking: the MLflow run) work like
the probe hooks of `factprobe/cli.py`: `add_arguments(parser)` and `wrap(args, study, config, out)`,
a context manager yielding `after(metrics) -> list[str]`; a SIGTERM or Ctrl-C inside it ends
the run KILLED and exits 143/130 with one line saying what is kept (`interrupted_message`): the
steps a study ran as claimed folders of their own (the findings study's probe and study folders)
are, and a rerun resumes them; a study without such steps keeps nothing (a rerun computes it again).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from ..config import add_config_arguments, namespace_to_dict
from ..config_files import add_config_option, with_config_file
from ..errors import ConfigError
from ..framework.config import BaseConfig
from ..io import atomic_write_json
from ..metrics.json_safe import json_safe
from ..redact import redact_values
from ..run_folder import MARKER, claim, holds
from ..signals import sigterm_as_interrupt
from . import registry
from .base import Study, StudyContext
from .registry import get_study
from .study_identity import StudyIdentity, study_identity

STUDY_HOOK_GROUP = "factprobe.study_hooks"
CONFIG_FILE = "study_config.json"
METRICS_FILE = "metrics.json"
#: the BaseConfig fields that choose and place a model: not options of a study that loads none (`Study.loads_model`)
MODEL_FIELDS = ("model", "base_model", "device", "dtype", "token_budget", "device_map", "max_memory")


def _hooks() -> list[Any]:
    from ..plugins import load_entry_points  # a hook of an extra that is not installed is left out

    return [h() if isinstance(h, type) else h for h in load_entry_points(STUDY_HOOK_GROUP)]


def base_fields(study: Study) -> list[str]:
    """The `BaseConfig` fields that are options of `study`: none unless it uses the base flags, and
    not the model's (`MODEL_FIELDS`) when it loads no model."""
    if not study.uses_base:
        return []
    return [n for n in BaseConfig.field_names() if study.loads_model or n not in MODEL_FIELDS]


def study_config(study: Study, given: dict[str, Any]) -> dict[str, Any]:
    """The study's whole configuration as one JSON-able dict `{"study", "base"?, "params"}`,
    validated (ConfigError names the bad option). `given` holds the options the user set. A study
    that loads no model has no model in its configuration (`base_fields`)."""
    own = study.config_class.from_dict({k: v for k, v in given.items() if k in study.config_class.field_names()})
    config: dict[str, Any] = {"study": study.name, "params": own.to_dict()}
    if study.uses_base:
        keep = set(base_fields(study))
        base = BaseConfig.from_dict({k: v for k, v in given.items() if k in keep})
        config["base"] = {k: v for k, v in base.to_dict().items() if k != "out" and k in keep}
    return config


def default_out(study: Study, config: dict[str, Any]) -> Path:
    """runs/study-<name>[-<model folder name>]"""
    model = (config.get("base") or {}).get("model")
    return Path(f"runs/study-{study.name}" + (f"-{Path(model).name}" if model else ""))


def _differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    out = []
    for part in ("base", "params"):
        a, b = old.get(part) or {}, new.get(part) or {}
        out += [f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    return out


def run_study(
    study: Study,
    config: dict[str, Any],
    out: Path,
    *,
    progress: bool = True,
    hooks: list[Any] = (),
    args: argparse.Namespace | None = None,
    step: Callable[[str], None] | None = None,
    batch_progress: Callable[[str], Callable[[int, int], None] | None] | None = None,
) -> tuple[dict[str, Any], list[str], bool]:
    """Run `study` with `config` (from `study_config`) into `out`. `step` and `batch_progress`:
    the progress lines of a run without a terminal (`StudyContext`).

    Returns (metrics, lines from the hooks, already_finished). A folder already holding this
    finished configuration returns its metrics with already_finished=True and runs nothing."""
    base = BaseConfig.from_dict({**config["base"], "out": str(out)}) if config.get("base") is not None else None
    cfg = study.config_class.from_dict(config["params"])
    notes: list[str] = []

    def note(msg: str) -> None:
        notes.append(msg)
        print(f"note: {msg}", file=sys.stderr)

    with sigterm_as_interrupt(), claim(out, "study", study.name), ExitStack() as stack:
        if (out / METRICS_FILE).exists() and (out / CONFIG_FILE).exists():
            old = json.loads((out / CONFIG_FILE).read_text(encoding="utf-8"))
            diff = _differences(old, config) if old.get("study") == study.name else [f"study: {old.get('study')!r}"]
            if diff:
                raise ConfigError(f"{out} holds a finished study of another configuration ({'; '.join(diff)}); use another --out")
            finished = json.loads((out / METRICS_FILE).read_text(encoding="utf-8"))
            ident = study_identity(config)  # weights, input bytes, config, numerics
            was = finished.get("identity")
            if not isinstance(was, dict):
                raise ConfigError(
                    f"{out} holds a finished study that records no measurement identity (made by an older "
                    f"factprobe); use another --out, or remove {out} to start afresh"
                )
            changed = ident.changes_from(StudyIdentity.from_dict(was))
            if changed:
                raise ConfigError(
                    f"{out} holds a finished study of other {'; other '.join(changed)}; use another --out, "
                    f"or remove {out} to start afresh"
                )
            return finished, [], True
        ctx = StudyContext(base=base, cfg=cfg, out=out, progress=progress, note=note)
        if step is not None:
            ctx.step = step
        if batch_progress is not None:
            ctx.batch_progress = batch_progress
        ctx.prepared = study.prepare(ctx)  # bad data is refused here: no study_config.json, no MLflow run
        ident = study_identity(config)  # weights, input bytes, config, numerics: before anything is computed
        print(ident.line(), flush=True)
        atomic_write_json(out / CONFIG_FILE, config)
        afters = [stack.enter_context(h.wrap(args, study, config, out)) for h in hooks]
        metrics = study.run(ctx)
        if notes:
            metrics = {**metrics, "notes": notes}
        metrics = {**metrics, "identity": redact_values(ident.to_dict())}
        metrics = json_safe(metrics)
        atomic_write_json(out / METRICS_FILE, metrics)
        lines: list[str] = []
        for after in afters:
            lines += after(metrics) or []
    return metrics, lines, False


def kept_steps(out: Path) -> list[Path]:
    """The folders under `out` (not `out` itself) that hold a claimed run's outputs (a probe's
    checkpoint, a finished sub-study): what an interrupted study leaves that a rerun resumes."""
    if not out.is_dir():
        return []
    return [m.parent for m in sorted(out.rglob(MARKER)) if m.parent != out and holds(m.parent) is not None]


def interrupted_message(out: Path) -> str:
    """The one line an interrupted study prints: it did not finish, and what of it is kept."""
    kept = kept_steps(out)
    if not kept:
        return (
            f"interrupted; the study did not finish and nothing of it is kept for a rerun: rerunning it into {out} "
            "computes it all again"
        )
    return (
        f"interrupted; the study did not finish; its {len(kept)} step folder(s) under {out} (e.g. "
        f"{kept[0].relative_to(out)}) are kept, and rerunning it into {out} resumes them"
    )


def cmd_study(args: argparse.Namespace) -> int:
    study = get_study(args.study)
    classes = (BaseConfig, study.config_class) if study.uses_base else (study.config_class,)
    known = [*base_fields(study), *study.config_class.field_names(), "out"]
    given = with_config_file(args, "study", study.name, known, namespace_to_dict(args, classes))  # flags over --config
    config = study_config(study, given)
    out_given = getattr(args, "out", None) or given.get("out")
    out = Path(out_given) if out_given else default_out(study, config)
    try:
        metrics, lines, finished = run_study(study, config, out, progress=not args.no_progress, hooks=args.hooks, args=args)
    except KeyboardInterrupt as e:  # the hooks have ended their runs KILLED; say what is true of the folder
        print(interrupted_message(out), file=sys.stderr)
        return int(getattr(e, "exit_code", 130))
    for line in study.summary(metrics):
        print(line)
    if finished:
        print(f"{out} already holds this finished study; nothing was computed and no new run was logged")
    print(f"results in {out}")
    for line in lines:
        print(line)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add `factprobe study NAME` with one subcommand per available study."""
    hooks = _hooks()
    p = sub.add_parser("study", help="run a study (the experiments behind the papers' figures)")
    studies = p.add_subparsers(dest="study", required=True, metavar="STUDY")
    for name in registry.available():
        study = get_study(name)
        sp = studies.add_parser(name, help=study.description, description=study.description)
        if study.uses_base:
            skip = tuple(n for n in BaseConfig.field_names() if n not in base_fields(study))
            add_config_arguments(sp.add_argument_group("model and data" if study.loads_model else "data"), BaseConfig, skip=skip)
        else:
            sp.add_argument("--out", default=None, help="output folder (default runs/study-<name>)")
        add_config_arguments(sp.add_argument_group(f"{name} options"), study.config_class)
        sp.add_argument("--no-progress", action="store_true", help="no progress bar")
        add_config_option(sp, CONFIG_FILE)
        for h in hooks:
            h.add_arguments(sp)
        sp.set_defaults(func=cmd_study, hooks=hooks)
