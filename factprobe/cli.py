"""`factprobe` command line.

    factprobe probe <probe> [options]      one subcommand per registered probe (factprobe/framework/registry.py)
    factprobe models list | path ALIAS
    factprobe study <study> [options]      one subcommand per study (factprobe/studies/registry.py)
    factprobe map RUN... --out DIR         the knowledge map of finished runs (factprobe/knowledge_maps/)
    ... plus the commands that other installed packages contribute (entry-point group
    `factprobe.commands`): `pipeline`, `schedule` (pipelines/), `compare`, `regress` (tracking/).

The science package imports neither the pipelines nor the tracking layer. Those layers plug in
through entry points declared in pyproject.toml:

- `factprobe.commands`: `register(subparsers)` adds whole subcommands;
- `factprobe.probe_hooks`: an object with `add_arguments(parser)` and `wrap(args, cfg, out)`, a
  context manager around one probe run that yields `after(outcome) -> list[str]` (tracking
  uses it to log the run to MLflow and to mark it FAILED/KILLED when the run dies). A rerun into
  a folder that already holds the finished run starts the hooks only if one of them answers the
  optional `needs_logging(args, cfg, out) -> bool` with True (tracking: MLflow has no FINISHED run
  of the folder, e.g. the server died before the results were logged); otherwise the optional
  `already_finished(args, cfg, out) -> list[str]` says where the earlier run is.

Help: every parser of the tree (plug-ins' subcommands included) is a `HelpSafeParser`, so a help
text, description or epilog may say "95% CI" without escaping its `%`: argparse %-formats every help
string, and a bare `%` was a traceback on `--help`. A `%` that is not `%%` and not a `%(name)s`
placeholder is shown as written (`HelpSafeFormatter`); a plug-in's own `formatter_class` keeps working.

Errors: every expected failure prints one line `error: ...` and exits non-zero (2 for bad input,
1 for tracking and operating-system errors such as an unwritable --out or a full disk, 130 on
Ctrl-C, 143 on SIGTERM). `--debug` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from .errors import FactprobeError

COMMAND_GROUP = "factprobe.commands"
PROBE_HOOK_GROUP = "factprobe.probe_hooks"


# ------------------------------------------------------------------ help that may say "95% CI"
#: `%%`, a `%(name)s`-style placeholder (flags, width, precision, conversion), or a bare `%`
_PERCENT = re.compile(r"%%|%\([^)]*\)[#0 +-]*\d*(?:\.\d+)?[diouxXeEfFgGcrsa]|%")


def escape_percent(text: str) -> str:
    """`text` with every bare `%` doubled, so that `text % params` shows it as written; `%%` and
    `%(name)s` placeholders (argparse's `%(default)s`, `%(prog)s`) are left as they are."""
    return _PERCENT.sub(lambda m: "%%" if m.group(0) == "%" else m.group(0), text)


class HelpSafeFormatter(argparse.HelpFormatter):
    """A help formatter whose help strings, descriptions, epilogs and usages may hold a bare `%`."""

    def _get_help_string(self, action: argparse.Action) -> str:
        return escape_percent(super()._get_help_string(action) or "")

    def _format_text(self, text: str) -> str:
        if "%(prog)" in text:  # argparse formats such a text with `% {"prog": ...}` only then
            text = escape_percent(text)
        return super()._format_text(text)

    def _format_usage(self, usage: str | None, actions: Any, groups: Any, prefix: str | None) -> str:
        return super()._format_usage(None if usage is None else escape_percent(usage), actions, groups, prefix)


def help_safe(formatter_class: type[argparse.HelpFormatter]) -> type[argparse.HelpFormatter]:
    """`formatter_class` with `HelpSafeFormatter`'s escaping (itself when it already has it)."""
    if issubclass(formatter_class, HelpSafeFormatter):
        return formatter_class
    return type(f"HelpSafe{formatter_class.__name__}", (HelpSafeFormatter, formatter_class), {})


class HelpSafeParser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` whose help may hold a bare `%` (module docstring). Its
    `add_subparsers` makes parsers of this class, so the whole command tree is covered."""

    def __init__(self, *args: Any, formatter_class: type[argparse.HelpFormatter] = HelpSafeFormatter, **kwargs: Any):
        super().__init__(*args, formatter_class=help_safe(formatter_class), **kwargs)

    def add_subparsers(self, **kwargs: Any):
        kwargs.setdefault("parser_class", HelpSafeParser)
        if not issubclass(kwargs["parser_class"], HelpSafeParser):
            kwargs["parser_class"] = type(
                f"HelpSafe{kwargs['parser_class'].__name__}", (HelpSafeParser, kwargs["parser_class"]), {}
            )
        return super().add_subparsers(**kwargs)


def _entry_points(group: str) -> list[Any]:
    """The group's loaded entry points; those of an extra that is not installed are left out (factprobe/plugins.py)."""
    from .plugins import load_entry_points

    return load_entry_points(group)


def _probe_hooks() -> list[Any]:
    return [h() if isinstance(h, type) else h for h in _entry_points(PROBE_HOOK_GROUP)]


def default_out(cfg) -> Path:
    """runs/<probe>-<model>-<source> (the model's folder name for paths; a served model `openai:MODEL@URL` by
    `served-MODEL-HOST_PORT`, characters other than letters, digits, `.`, `_` and `-` as `_`)."""
    model = cfg.base.model
    if model.startswith("openai:") and "@" in model:
        from urllib.parse import urlsplit

        body = model[len("openai:") :]
        at = max(body.rfind("@http://"), body.rfind("@https://"))
        name, url = (body[:at], body[at + 1 :]) if at > 0 else body.rpartition("@")[::2]
        slug = f"served-{name}-{urlsplit(url).netloc.rpartition('@')[2] or url}"  # never user:password@
    else:
        slug = Path(model).name if Path(model).exists() else model
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", slug).strip("_.") or "model"
    return Path(f"runs/{cfg.probe}-{slug}-{cfg.base.source}")


def cmd_probe(args: argparse.Namespace) -> int:
    from .config_files import with_config_file
    from .framework.config import BaseConfig, RunConfig, namespace_to_dict
    from .framework.registry import get_probe
    from .framework.runner import run_probe
    from .signals import sigterm_as_interrupt

    probe = get_probe(args.probe)
    classes = (BaseConfig, probe.config_class)
    known = [*RunConfig.IGNORED, *(n for c in classes for n in c.field_names())]
    given = with_config_file(args, "probe", probe.name, known, namespace_to_dict(args, classes))  # flags over --config
    cfg = RunConfig.from_dict({**given, "probe": probe.name})
    out = Path(cfg.base.out) if cfg.base.out else default_out(cfg)
    lines: list[str] = []
    with sigterm_as_interrupt(), ExitStack() as stack:
        afters: list[Any] = []

        def start() -> None:  # the hooks (MLflow) begin once the folder is claimed and the run validated
            afters.extend(stack.enter_context(h.wrap(args, cfg, out)) for h in args.hooks)

        def log_finished_folder() -> bool:  # a finished folder is logged again only if no hook holds its run
            return any(getattr(h, "needs_logging", lambda *_: False)(args, cfg, out) for h in args.hooks)

        outcome = run_probe(cfg, out, progress=not args.no_progress, on_start=start, start_when_finished=log_finished_folder)
        for after in afters:
            lines += after(outcome) or []
    if outcome.already_finished and not afters:  # no hook was started: say so, and where the earlier run went
        lines.append(f"{out} already holds this finished run; nothing was scored and no new run was logged")
        for h in args.hooks:
            lines += getattr(h, "already_finished", lambda *_: [])(args, cfg, out) or []
    m = outcome.metrics
    table = probe.relation_text(m)
    if table:
        print(table)
    head = probe.headline(m)
    print(
        f"\n{cfg.probe} {cfg.base.model}: "
        + (f"{head} " if head else "")
        + f"({outcome.n_scored_now} scored now, {outcome.n_resumed} resumed); results in {out}"
    )
    if m.get("naive_tokens"):
        print(
            f"tokens forwarded {m['tokens_forwarded']:,} vs {m['naive_tokens']:,} for one full forward per option "
            f"({m['token_savings']:.1%} saved)"
        )
    for line in lines:
        print(line)
    return 0


def _add_probe_commands(sub: argparse._SubParsersAction, hooks: list[Any]) -> None:
    from .config import add_config_arguments
    from .config_files import add_config_option
    from .framework.config import BaseConfig
    from .framework.registry import load_probes

    p = sub.add_parser("probe", help="run a knowledge probe on one model")
    probes = p.add_subparsers(dest="probe", required=True, metavar="PROBE")
    for name, probe in load_probes().items():
        pp = probes.add_parser(name, help=probe.description, description=probe.description)
        add_config_arguments(pp.add_argument_group("model and data"), BaseConfig)
        add_config_arguments(pp.add_argument_group(f"{name} options"), probe.config_class)
        pp.add_argument("--no-progress", action="store_true", help="no progress bar")
        add_config_option(pp)
        for h in hooks:
            h.add_arguments(pp)
        pp.set_defaults(func=cmd_probe, hooks=hooks)


def _top_parser() -> argparse.ArgumentParser:
    """The `factprobe` parser with its own options (`--debug`, `--version`) and no subcommand yet:
    all that `factprobe --version` needs (no probe, study or plug-in module is imported for it)."""
    # every subparser (studies, fine-tuning, plug-ins' commands) is made from this one: help may say "95% CI"
    parser = HelpSafeParser(prog="factprobe", description="Measure what language models know about facts.")
    parser.add_argument(
        "--debug", action="store_true", help="show tracebacks instead of one-line errors (also accepted after the subcommand)"
    )
    from .version import __version__

    parser.add_argument("--version", action="version", version=f"factprobe {__version__}")
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree: every probe, study and plug-in command with its options. Building it
    imports the probe and study modules and the plug-ins' command modules, never torch,
    transformers or mlflow: those are imported by the command that runs (tests/test_cli_startup.py)."""
    parser = _top_parser()
    sub = parser.add_subparsers(dest="command", required=True)
    _add_probe_commands(sub, _probe_hooks())

    m = sub.add_parser("models", help="list model aliases or print a cached model folder", add_help=False)
    m.add_argument("rest", nargs=argparse.REMAINDER)
    m.set_defaults(func=lambda a: __import__("factprobe.models.cli", fromlist=["models_cli"]).models_cli(a.rest))
    from .finetune.cli import register as register_finetune

    register_finetune(sub)
    from .studies.cli import register as register_studies

    register_studies(sub)
    from .knowledge_maps.cli import register as register_map

    register_map(sub)  # factprobe map: the knowledge map of finished runs
    for register in _entry_points(COMMAND_GROUP):
        register(sub)
    for name in THREADED_COMMANDS:
        _add_threads_option(sub.choices[name])
    return parser


#: the commands that compute: each takes `--threads` (factprobe/threads.py), a probe's and a study's from BaseConfig
THREADED_COMMANDS = ("probe", "study", "finetune")


def _add_threads_option(parser: argparse.ArgumentParser) -> None:
    """`--threads N` on `parser` and on every leaf parser under it that does not have one yet."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for action in subs:
        for child in dict.fromkeys(action.choices.values()):
            _add_threads_option(child)
    if not subs and "--threads" not in parser._option_string_actions:
        parser.add_argument(
            "--threads",
            type=int,
            default=argparse.SUPPRESS,
            metavar="THREADS",
            help="CPU threads (default: the CPUs this process may use, cgroup quota and affinity)",
        )


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def _take_debug(argv: list[str]) -> tuple[list[str], bool]:
    """`argv` without its `--debug` switches (anywhere before a `--`: before or after the
    subcommand, also for the commands whose own parsers get the rest), and whether there was one."""
    end = argv.index("--") if "--" in argv else len(argv)
    kept = [a for a in argv[:end] if a != "--debug"] + argv[end:]
    return kept, len(kept) != len(argv)


def main(argv: Sequence[str] | None = None) -> int:
    argv, debug = _take_debug(list(sys.argv[1:] if argv is None else argv))
    try:
        # before anything imports torch: OpenMP reads it once, when it loads (factprobe/threads.py)
        from .threads import set_wait_policy

        set_wait_policy()
        # the commands that need no command tree are answered without building it (start-up: issue 31 item 10)
        if argv[:1] == ["--version"]:
            _top_parser().parse_args(argv[:1])  # prints the version and exits 0, as argparse does
        if argv[:1] == ["models"]:  # its own parser takes everything after its name
            from .models.cli import models_cli

            return int(models_cli(argv[1:]) or 0)
        parser = build_parser()
        # `pipeline`, `schedule` and `models` hand everything after their name to their own parsers
        # (a REMAINDER positional). argparse does not give a REMAINDER the options that come first
        # (`factprobe pipeline --help`), so those come back as extras and go in front of `rest`.
        args, extra = parser.parse_known_args(argv)
        if extra:
            if getattr(args, "rest", None) is None:
                parser.error(f"unrecognized arguments: {' '.join(extra)}")
            args.rest = extra + args.rest
        if args.command in THREADED_COMMANDS:
            from .threads import apply as apply_threads

            apply_threads(getattr(args, "threads", None))  # before the command imports torch
            from .lm import quiet_libraries

            quiet_libraries(progress=not getattr(args, "no_progress", False))  # the output is the command's own
        return int(args.func(args) or 0)
    except FactprobeError as e:
        if debug:
            raise
        print(f"error: {_one_line(e)}", file=sys.stderr)
        return int(getattr(e, "exit_code", 2))
    except ModuleNotFoundError as e:  # a command of an extra that is not installed: name the extra (factprobe/plugins.py)
        from .plugins import missing_extra

        line = None if debug else missing_extra(e, next((a for a in argv if not a.startswith("-")), None))
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        return 2
    except OSError as e:  # unwritable --out, full disk, read-only folder, ...
        if debug:
            raise
        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        print(f"error: {where}{e.strerror or _one_line(e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        print("interrupted; finished items are kept in the output folder's checkpoint", file=sys.stderr)
        return int(getattr(e, "exit_code", 130))


if __name__ == "__main__":
    sys.exit(main())
