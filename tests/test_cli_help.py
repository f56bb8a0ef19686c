"""Issue 28 item 7: `--help` of every command and subcommand works, whatever `%` its help texts hold
("95% CI" in a study's description was a traceback: argparse %-formats help), plug-ins' included."""

from __future__ import annotations

import argparse
import re
from contextlib import contextmanager

import pytest

import factprobe.studies.cli as study_cli
from factprobe import cli
from factprobe.cli import build_parser, main

#: commands that hand everything after their name to their own parser
PASSTHROUGH = ("pipeline", "schedule", "models")


class PercentHook:
    """A probe/study hook plug-in whose option help holds bare `%` signs."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--plugin-share", default=0.5, help="keep 50% of the rows (95% CI shown; default %(default)s)")


def register_percent_command(sub: argparse._SubParsersAction) -> None:
    """A `factprobe.commands` plug-in with `%` in its command help, description, options and subcommands."""
    p = sub.add_parser("pct-plugin", help="a plug-in: 100% of its help has % signs", description="95% CI, 5% alpha")
    p.add_argument("--alpha", type=float, default=0.05, help="significance (5% by default, %(default)s)")
    inner = p.add_subparsers(dest="inner", required=True)
    q = inner.add_parser(
        "deep",
        help="a sub-subcommand at 99% confidence",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="raw text: 42%\n  kept as written",
    )
    q.add_argument("--width", help="interval width, 95%")
    p.set_defaults(func=lambda a: 0)


@pytest.fixture
def plugins(monkeypatch):
    real = cli._entry_points

    def with_plugins(group: str):
        found = list(real(group))
        if group == cli.COMMAND_GROUP:
            found.append(register_percent_command)
        if group == cli.PROBE_HOOK_GROUP:
            found.append(PercentHook)
        return found

    monkeypatch.setattr(cli, "_entry_points", with_plugins)
    monkeypatch.setattr(study_cli, "_hooks", lambda: [PercentHook()])


def walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(command path, parser) of `parser` and every subparser below it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from walk(sub, (*path, name))


@contextmanager
def exits_zero():
    with pytest.raises(SystemExit) as e:
        yield
    assert e.value.code in (0, None)


def help_of(argv: list[str], capsys) -> str:
    """stdout of `factprobe <argv> --help` (argparse exits 0, or the command returns 0)."""
    try:
        rc = main([*argv, "--help"])
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    assert rc in (0, None), (argv, out.err[-2000:])
    assert "Traceback" not in out.err
    return out.out


def test_escape_percent_keeps_placeholders_and_doubled_signs():
    from factprobe.cli import escape_percent

    assert escape_percent("95% CI") == "95%% CI"
    assert escape_percent("(default: %(default)s) 50%%, %(prog)s at 5%") == "(default: %(default)s) 50%%, %(prog)s at 5%%"
    assert escape_percent("%(default).2f%") == "%(default).2f%%"
    assert escape_percent("100%") % {} == "100%"


def test_study_help_is_no_traceback(capsys):
    """`factprobe study --help` printed argparse's ValueError (the findings study's "95% CI")."""
    out = help_of(["study"], capsys)
    assert "95% CI" in out and "findings" in out


@pytest.mark.slow
def test_every_command_and_subcommand_has_help(plugins, capsys):
    parser = build_parser()
    paths = []
    for path, sub in walk(parser):
        sub.format_help()  # every parser of the tree, the plug-ins' too
        paths.append(path)
    assert ("study", "findings") in paths and ("probe", "mc-items") in paths and ("pct-plugin", "deep") in paths
    for path in paths:
        if path and path[0] in PASSTHROUGH and len(path) > 1:
            continue
        out = help_of(list(path), capsys)
        assert out.startswith("usage: factprobe")
        if path and path[0] in PASSTHROUGH:  # their own parsers: every subcommand of theirs too
            m = re.search(r"\{([\w,-]+)\} \.\.\.", out)
            for inner in m.group(1).split(",") if m else []:
                assert help_of([path[0], inner], capsys).startswith(f"usage: factprobe {path[0]} {inner}")


def test_plugin_help_shows_percent_signs_as_written(plugins, capsys):
    top = help_of([], capsys)
    assert "a plug-in: 100% of its help has % signs" in top
    out = help_of(["pct-plugin"], capsys)
    assert "95% CI, 5% alpha" in out and "significance (5% by default, 0.05)" in out and "at 99% confidence" in out
    deep = help_of(["pct-plugin", "deep"], capsys)
    assert "raw text: 42%\n  kept as written" in deep and "interval width, 95%" in deep
    probe = help_of(["probe", "mc-items"], capsys)
    assert "keep 50% of the rows (95% CI shown; default 0.5)" in " ".join(probe.split())
    study = help_of(["study", "findings"], capsys)
    assert "keep 50% of the rows" in " ".join(study.split())
