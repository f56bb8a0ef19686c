"""The commands the documentation shows parse with the real command line (issue 42 item 5).

Every `factprobe ...` command in README.md, docs/*.md, k8s/README.md and containers/README.md, in fenced code
blocks and in inline code, is parsed by `factprobe.cli.build_parser()` (every probe, study and plug-in command,
`pipeline`, `schedule`, `compare`, `regress`, `baseline` included) without being run. `pipeline`, `schedule` and
`models` hand their arguments to their own parsers (built when the command runs): their function is called with
`ArgumentParser.parse_args` stopped right after it parsed, so nothing is compiled, submitted or downloaded.
A pipeline command's `--param K=V` pairs are checked as the command checks them before it runs or submits
(`catalogue.parse_params`: known names, typed values). docs/extending.md's commands are parsed with the plug-ins it
says it shows registered (`PLUGIN_DOCS`). `factprobe-lm-eval ...` / `python -m factprobe.lm_eval_model ...` commands
are parsed by lm-eval's own parser, and their `--model` must be in lm-eval's registry.

What counts as a command:
- fenced code: a shell line (backslash continuations joined, `# comments` dropped) split at `&&`, `||`, `;`, `|`;
  a part whose program is `factprobe` (any path to it, e.g. `.venv/bin/factprobe`), or `... -m factprobe.cli`, after
  `VAR=value` assignments; redirections (`> file`, `2>&1`) are dropped;
- inline code: a span that starts with such a program. A span may name a command without its required arguments
  (`factprobe compare`, `factprobe probe`): only there, "the following arguments are required" is no error.

Substitution rules for the placeholders the prose uses (`substitute`):
- `a|b|c` (and `a | b | c`) in inline code are alternatives: each is checked;
- `...` / `…`: right after an option it is that option's value (`x`); anywhere else it stands for more arguments
  and is dropped; a word ending in it (`RUN...`) loses the dots;
- `<name>` (also inside a word: `https://<kfp-host>`) is read as the placeholder `NAME` in capitals (`KFP_HOST`),
  which the shell reading would otherwise take for a redirection;
- where a subcommand is expected, a placeholder in capitals (`NAME`, `PROBE`, `STUDY`, `<probe>`) is the first
  registered choice of that level (`factprobe probe NAME --help` checks `factprobe probe <first probe> --help`);
- `pipeline run NAME --param X=Y` (a placeholder pipeline or parameter name) is the form of a command: its `--param`
  pairs are not checked.
Everything else (`RUN_A`, `DIR`, `FILE.yaml`, `KFP_HOST`) is taken as written: such words are values argparse accepts.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import io
import itertools
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest

REPO = Path(__file__).resolve().parents[1]
#: the files whose commands are checked
DOCS = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "k8s" / "README.md", REPO / "containers" / "README.md")
#: the programs whose arguments are checked: factprobe's parser, or lm-eval's (with `--model factprobe`)
FACTPROBE, LM_EVAL = "factprobe", "lm-eval"
ELLIPSES = ("...", "…")
SHELL_OPERATORS = {"&&", "||", ";", "|", "&", "(", ")"}
REQUIRED = "the following arguments are required"


@dataclass(frozen=True)
class DocCommand:
    """One command as a document shows it: where, the program kind, its words after the program, and whether it
    is in a fenced block (a whole command) or inline code (a mention, which may leave out required arguments)."""

    doc: str
    line: int
    program: str
    words: tuple[str, ...]
    fenced: bool

    def __str__(self) -> str:
        program = "factprobe-lm-eval" if self.program == LM_EVAL else "factprobe"
        return f"{self.doc}:{self.line}: {program} {shlex.join(self.words)}"


# ------------------------------------------------------------------ finding the commands
def _program(words: list[str]) -> tuple[str, list[str]] | None:
    """(program kind, its arguments) when `words` (one shell command) runs factprobe or factprobe-lm-eval."""
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):  # VAR=value before the command
        words = words[1:]
    for i, word in enumerate(words):
        if word == "-m" and i + 1 < len(words) and words[i + 1] in ("factprobe.cli", "factprobe.lm_eval_model"):
            return (FACTPROBE if words[i + 1] == "factprobe.cli" else LM_EVAL), words[i + 2 :]
    if not words:
        return None
    name = words[0].rsplit("/", 1)[-1]
    if name == "factprobe":
        return FACTPROBE, words[1:]
    if name == "factprobe-lm-eval":
        return LM_EVAL, words[1:]
    return None


def _angles(text: str) -> str:
    """`<kfp-host>` as `KFP_HOST`: a placeholder in capitals, which the shell does not read as a redirection."""
    return re.sub(r"<([A-Za-z][\w.-]*)>", lambda m: re.sub(r"\W", "_", m.group(1)).upper(), text)


#: a redirection with its target: `> log.txt`, `2>&1`, `>> out`, `< in` (the digit only when written against it)
_REDIRECTION = re.compile(r"(?<!\S)\d*(?:&>|>>|>|<)(?:&\d+|\s*[^\s|;&]+)")


def _shell_commands(line: str) -> list[list[str]]:
    """The simple commands of one shell line: split at operators, without comments and redirections."""
    lex = shlex.shlex(_REDIRECTION.sub(" ", _angles(line)), posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    try:
        tokens = list(lex)
    except ValueError:  # unbalanced quotes: not a shell line
        return []
    commands: list[list[str]] = [[]]
    for token in tokens:
        if token in SHELL_OPERATORS:
            commands.append([])
        else:
            commands[-1].append(token)
    return [c for c in commands if c]


def _alternatives(span: str) -> list[str]:
    """An inline span with `a|b` (or `a | b`) alternatives as one span per combination."""
    words = re.sub(r"\s+\|\s+", "|", span).split()
    choices = [w.split("|") if "|" in w and not w.startswith(("'", '"')) else [w] for w in words]
    return [" ".join(combo) for combo in itertools.product(*choices)]


def commands_in(path: Path) -> list[DocCommand]:
    """Every factprobe / factprobe-lm-eval command of a Markdown file, in fenced code and in inline code."""
    lines = path.read_text(encoding="utf-8").splitlines()
    name = str(path.relative_to(REPO) if path.is_relative_to(REPO) else path)
    found: list[DocCommand] = []
    fence: str | None = None
    paragraph: list[tuple[int, str]] = []

    def inline() -> None:
        text = "\n".join(t for _, t in paragraph)
        starts = list(itertools.accumulate(len(t) + 1 for _, t in paragraph))
        for m in re.finditer(r"(`+)(.+?)\1", text, re.DOTALL):
            number = paragraph[sum(1 for s in starts if s <= m.start())][0]
            for span in _alternatives(" ".join(m.group(2).split())):
                for words in _shell_commands(span)[:1]:  # a span is one command (`a | b` were alternatives)
                    hit = _program(words)
                    if hit and hit[1]:  # `factprobe` alone names the package
                        found.append(DocCommand(name, number, hit[0], tuple(hit[1]), fenced=False))
        paragraph.clear()

    logical, first = "", 0
    for number, raw in enumerate(lines, 1):
        stripped = raw.strip()
        if fence is None and stripped.startswith(("```", "~~~")):
            inline()
            fence = stripped[:3]
            continue
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
                continue
            if not logical:
                first = number
            if stripped.endswith("\\"):
                logical += stripped[:-1] + " "
                continue
            logical += stripped
            for words in _shell_commands(re.sub(r"^\$\s+", "", logical)):
                hit = _program(words)
                if hit:
                    found.append(DocCommand(name, first, hit[0], tuple(hit[1]), fenced=True))
            logical = ""
            continue
        if stripped:
            paragraph.append((number, raw))
        else:
            inline()
    inline()
    return found


# ------------------------------------------------------------------ placeholders
def _is_placeholder(word: str) -> bool:
    """`NAME`, `RUN_ID`, `PROBE` (after `_angles`, `<probe>` too)."""
    return bool(re.fullmatch(r"[A-Z][A-Z0-9_]*", word))


def substitute(words: tuple[str, ...], parser: argparse.ArgumentParser | None) -> list[str]:
    """`words` with the module docstring's substitution rules applied (subcommand placeholders need `parser`)."""
    out: list[str] = []
    for word in map(_angles, words):
        if word in ELLIPSES:
            if out and out[-1].startswith("-") and "=" not in out[-1]:
                out.append("x")  # the value of the option before it
            continue
        out.append(next((word[: -len(d)] for d in ELLIPSES if word.endswith(d)), word))
    level, i = parser, 0
    while level is not None and i < len(out):  # the subcommand levels: a placeholder there is the first choice
        subs = [a for a in level._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            break
        if out[i].startswith("-"):  # an option of this level (`--debug`)
            i += 1
            continue
        choices = subs[0].choices
        if out[i] not in choices and _is_placeholder(out[i]):
            out[i] = next(iter(choices))
        if out[i] not in choices:
            break
        level, i = choices[out[i]], i + 1
    return out


# ------------------------------------------------------------------ parsing without running
class _Parsed(Exception):
    """Raised by the stopped `parse_args`: the command's own parser accepted its arguments."""


@functools.cache
def factprobe_parser() -> argparse.ArgumentParser:
    from factprobe.cli import build_parser

    return build_parser()


def _stop_after_parse(original):
    def parse_args(self, args=None, namespace=None):
        raise _Parsed(original(self, args, namespace))

    return parse_args


def _argparse_error(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "argparse exited without a message"


@functools.cache
def _pipeline(name: str):
    """The pipeline `name` (kfp builds its graph: ~1-2 s, once per name)."""
    from factprobe_ops.pipelines.catalogue import get_pipeline

    return get_pipeline(name)


def _pipeline_params_error(command: str, args: argparse.Namespace) -> str | None:
    """A pipeline command's `--param K=V` checked as the command checks them before it runs or submits anything
    (`catalogue.parse_params`: known names, typed values, valid configs); None when they pass or none are given."""
    if command not in ("pipeline", "schedule") or getattr(args, "list_params", False) or not hasattr(args, "param"):
        return None
    if _is_placeholder(args.name) or any(_is_placeholder(pair.split("=", 1)[0]) for pair in args.param):
        return None  # `pipeline run NAME --param X=Y`: the form of the command, not a command
    from factprobe.errors import FactprobeError
    from factprobe_ops.pipelines.catalogue import parse_params

    try:
        parse_params(_pipeline(args.name), args.param, args.name)
    except FactprobeError as e:
        return f"error: {e}"
    return None


def factprobe_error(argv: list[str]) -> str | None:
    """None when `factprobe ARGV` parses (the command's own parser included), else argparse's message. Runs nothing."""
    from factprobe.cli import _take_debug

    argv, _ = _take_debug(argv)
    parser = factprobe_parser()
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            args, extra = parser.parse_known_args(argv)
            if getattr(args, "rest", None) is None:  # a command parsed by the tree itself
                return f"unrecognized arguments: {' '.join(extra)}" if extra else None
            args.rest = extra + args.rest  # as factprobe.cli.main does for `pipeline`, `schedule`, `models`
            with mock.patch.object(argparse.ArgumentParser, "parse_args", _stop_after_parse(argparse.ArgumentParser.parse_args)):
                rc = args.func(args)
        except _Parsed as parsed:
            return _pipeline_params_error(args.command, parsed.args[0])
        except SystemExit as e:
            return None if e.code in (0, None) else _argparse_error(err.getvalue())
    # `models` turns argparse's exit into its return code; 0 is its --help
    return None if rc == 0 else _argparse_error(err.getvalue())


def lm_eval_error(argv: list[str]) -> str | None:
    """None when lm-eval's own parser takes `factprobe-lm-eval ARGV`, else its message. Runs nothing."""
    from lm_eval._cli.harness import HarnessCLI

    err = io.StringIO()
    with mock.patch.object(sys, "argv", ["factprobe-lm-eval", *argv]), contextlib.redirect_stderr(err):
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                HarnessCLI().parse_args()
            except SystemExit as e:
                return None if e.code in (0, None) else _argparse_error(err.getvalue())
    return None


def problem(command: DocCommand) -> str | None:
    """Why `command` does not parse (None when it does); inline mentions may leave out required arguments."""
    if command.program == LM_EVAL:
        return lm_eval_error(substitute(command.words, None))
    error = factprobe_error(substitute(command.words, factprobe_parser()))
    if error and REQUIRED in error and not command.fenced:
        return None
    return error


# ------------------------------------------------------------------ the tests
#: docs/extending.md shows the plug-ins the tests run (it says so): its commands are parsed with them registered, in
#: a fresh interpreter (a registry loads its plug-ins once per process)
PLUGIN_DOCS = {
    "docs/extending.md": {
        "FACTPROBE_PROBE_MODULES": "tests.probes.plugin_probe",
        "FACTPROBE_STUDY_MODULES": "tests.studies.plugin_study",
    }
}
_PROBLEMS_SCRIPT = """
import json, sys
from tests.test_docs_commands import DocCommand, problem
commands = [DocCommand(**{**c, "words": tuple(c["words"])}) for c in json.load(sys.stdin)]
print(json.dumps([[str(c), problem(c)] for c in commands]))
"""


def all_commands() -> list[DocCommand]:
    return [c for path in DOCS for c in commands_in(path)]


def problems_with_plugins(commands: list[DocCommand], env: dict[str, str]) -> list[tuple[str, str | None]]:
    """(command, problem) for each of `commands`, parsed in a fresh interpreter with the plug-in variables `env`."""
    r = subprocess.run(
        [sys.executable, "-c", _PROBLEMS_SCRIPT],
        input=json.dumps([dataclasses.asdict(c) for c in commands]),
        cwd=REPO,
        env={**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return [tuple(x) for x in json.loads(r.stdout.strip().splitlines()[-1])]


@pytest.mark.slow  # the command tree twice and each documented pipeline (kfp builds it): 20 s idle, 80 s at load 12
def test_every_documented_command_parses_with_the_real_command_line():
    commands = [c for c in all_commands() if c.program == FACTPROBE]
    assert len(commands) > 60, "the documents' commands were not found"
    results = [(str(c), problem(c)) for c in commands if c.doc not in PLUGIN_DOCS]
    for doc, env in PLUGIN_DOCS.items():
        guide = (REPO / doc).read_text(encoding="utf-8")
        assert all(f"`{m.replace('.', '/')}.py`" in guide for m in env.values()), f"{doc} no longer names {env}"
        results += problems_with_plugins([c for c in commands if c.doc == doc], env)
    broken = [f"{c}\n    -> {e}" for c, e in results if e]
    assert broken == [], "documented commands that do not parse:\n" + "\n".join(broken)


@pytest.mark.slow  # builds the command tree: ~2-6 s
def test_the_parser_has_the_plug_in_commands():
    """The commands of the operations layer (entry points) are in the tree the documents are checked against."""
    choices = next(a for a in factprobe_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert {"probe", "study", "finetune", "models", "pipeline", "schedule", "compare", "regress", "baseline"} <= set(choices)


@pytest.mark.slow  # imports kfp: ~2-5 s
def test_the_documented_pipeline_lists_are_what_pipeline_compile_writes():
    """README's and k8s/README's "`factprobe pipeline compile` writes N files (names)" name every pipeline it
    compiles (one YAML file per catalogue entry: `compile_all`)."""
    from factprobe_ops.pipelines.catalogue import PIPELINES

    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    m = re.search(r"`factprobe pipeline compile` writes (\d+) YAML files to `build/pipelines/` \(([^)]*)\)", readme)
    assert m, "README.md no longer says what `factprobe pipeline compile` writes"
    assert (int(m.group(1)), m.group(2).split(", ")) == (len(PIPELINES), list(PIPELINES)), m.group(0)
    k8s = (REPO / "k8s" / "README.md").read_text(encoding="utf-8")
    m = re.search(r"factprobe pipeline compile +# build/pipelines/<name>\.yaml, (\d+) files:\n((?:# .*\n)+)", k8s)
    assert m, "k8s/README.md no longer says what `factprobe pipeline compile` writes"
    listed = re.findall(r"[a-z_]+", re.sub(r"\([^)]*\)", "", m.group(2).replace("#", "")))  # without the (notes)
    assert (int(m.group(1)), listed) == (len(PIPELINES), list(PIPELINES)), m.group(0)


def test_the_tour_announces_as_many_steps_as_it_lists():
    """ "Five steps a researcher takes first": the number the tour announces is the number of `# N.` steps of its
    command block."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    tour = text[text.index("\n## A 10-minute tour") :]
    intro = re.search(r"\n\n(\w+) (?:steps|questions)\b", tour)
    assert intro, "the tour no longer says how many steps it takes"
    block = re.search(r"```bash\n(.*?)```", tour, re.S).group(1)
    steps = [int(n) for n in re.findall(r"^# (\d+)\.", block, re.M)]
    assert steps == list(range(1, len(steps) + 1)), steps
    words = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
    assert words.index(intro.group(1).lower()) == len(steps), f"the tour announces {intro.group(1)!r} and lists {len(steps)}"


@pytest.mark.slow  # imports lm-eval and torch: 9 s idle, 18 s at load 12
def test_the_documented_lm_eval_commands_parse_and_name_a_registered_model():
    from lm_eval.api.registry import get_model

    import factprobe.lm_eval_model  # noqa: F401  (registers --model factprobe)

    commands = [c for c in all_commands() if c.program == LM_EVAL]
    assert commands, "the documents show no factprobe-lm-eval command"
    broken = [f"{c}\n    -> {e}" for c in commands if (e := problem(c))]
    assert broken == [], "\n".join(broken)
    for c in commands:
        if "--model" in c.words:
            get_model(c.words[c.words.index("--model") + 1])  # raises for a model lm-eval does not know


@pytest.mark.slow  # builds the command tree, a pipeline and lm-eval's parser: ~6 s
def test_a_broken_documented_command_is_found(tmp_path):
    """The check fails on a deliberately broken document: a flag that does not exist, a probe that does not, a
    pipeline action that does not, a fenced command that leaves out a required argument, an lm-eval typo, a
    pipeline parameter that does not exist."""
    doc = tmp_path / "broken.md"
    doc.write_text(
        "Run `factprobe probe ic-lke --max-facts-per-relaton 3` first, then\n"
        "`factprobe pipeline compiel` and `factprobe compare` (a mention: fine).\n\n"
        "```bash\n"
        ".venv/bin/factprobe probe no-such-probe --out runs/x   # comment\n"
        "factprobe compare --json | jq .\n"
        "FOO=1 .venv/bin/factprobe probe ic-lke \\\n    --relations P36 --max-facts-per-relation 10 > log.txt 2>&1\n"
        "factprobe-lm-eval --model factprobe --no-such-lm-eval-flag\n"
        "factprobe pipeline run probe --param no_such_param=1   # a key the pipeline does not have\n"
        "```\n",
        encoding="utf-8",
    )
    commands = commands_in(doc)
    verdicts = {str(c).split(": ", 1)[1]: problem(c) for c in commands}
    assert list(verdicts) == [
        "factprobe probe ic-lke --max-facts-per-relaton 3",
        "factprobe pipeline compiel",
        "factprobe compare",
        "factprobe probe no-such-probe --out runs/x",
        "factprobe compare --json",
        "factprobe probe ic-lke --relations P36 --max-facts-per-relation 10",
        "factprobe-lm-eval --model factprobe --no-such-lm-eval-flag",
        "factprobe pipeline run probe --param no_such_param=1",
    ], verdicts
    assert "unrecognized arguments: --max-facts-per-relaton 3" in verdicts["factprobe probe ic-lke --max-facts-per-relaton 3"]
    assert "invalid choice: 'compiel'" in verdicts["factprobe pipeline compiel"]
    assert verdicts["factprobe compare"] is None  # inline: a mention of the command
    assert "invalid choice: 'no-such-probe'" in verdicts["factprobe probe no-such-probe --out runs/x"]
    assert REQUIRED in verdicts["factprobe compare --json"]  # fenced: a whole command
    assert verdicts["factprobe probe ic-lke --relations P36 --max-facts-per-relation 10"] is None
    assert "--no-such-lm-eval-flag" in verdicts["factprobe-lm-eval --model factprobe --no-such-lm-eval-flag"]
    assert "pipeline probe has no parameter 'no_such_param'" in verdicts["factprobe pipeline run probe --param no_such_param=1"]


def test_placeholders_follow_the_substitution_rules():
    parser = argparse.ArgumentParser(prog="factprobe")  # the shape of factprobe's tree, small
    sub = parser.add_subparsers(dest="command")
    first_probe = "ic-lke"
    sub.add_parser("probe").add_subparsers(dest="probe").add_parser(first_probe)
    sub.add_parser("compare")
    sub.add_parser("pipeline")
    sub.add_parser("models").add_argument("rest", nargs=argparse.REMAINDER)
    assert substitute(("probe", "NAME", "--help"), parser) == ["probe", first_probe, "--help"]
    assert substitute(("probe", "<probe>", "--out", "..."), parser) == ["probe", first_probe, "--out", "x"]
    assert substitute(("compare", "RUN...", "..."), parser) == ["compare", "RUN"]
    assert substitute(("pipeline", "submit", "probe", "--host", "https://<kfp-host>", "…"), parser) == [
        "pipeline",
        "submit",
        "probe",
        "--host",
        "https://KFP_HOST",
    ]
    assert substitute(("models", "path", "ALIAS"), parser) == ["models", "path", "ALIAS"]  # a value, not a subcommand
    assert _alternatives("factprobe pipeline run|compile|submit") == [
        f"factprobe pipeline {a}" for a in ("run", "compile", "submit")
    ]
    assert _alternatives("factprobe study icl-examples | findings") == [
        "factprobe study icl-examples",
        "factprobe study findings",
    ]
