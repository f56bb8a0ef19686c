"""Modules with one job (issue 31 item 4): no non-test module over `MAX_LINES` lines without a reason.

Every `.py` file under `factprobe/`, `factprobe_ops/` and the top-level folders mapped into it (`components/`,
`pipelines/`, `tracking/`: tests/package_map.py) longer than `MAX_LINES` lines must say at its
top why it is one module: its module docstring holds a line that starts with `MARKER` followed by the
reason (at least `MIN_REASON_WORDS` words), e.g.

    Over 500 lines: one class, the generation engine, whose methods share its cache and batch state.

The preferred fix for a long module is to split it along its jobs; the sentence is for a module that
really has one job. Read with `ast` (nothing is imported).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.package_map import module_files

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("factprobe", "factprobe_ops")
MAX_LINES = 500
MARKER = "Over 500 lines:"
MIN_REASON_WORDS = 5


def line_count(path: Path) -> int:
    """Lines of `path` as `wc -l` counts them (a last line without a newline counts too)."""
    return len(path.read_text(encoding="utf-8").splitlines())


def size_reason(text: str) -> str | None:
    """The reason after `MARKER` on a line of the module docstring of source `text`, or None when the
    docstring has no such line or the reason is shorter than `MIN_REASON_WORDS` words."""
    doc = ast.get_docstring(ast.parse(text)) or ""
    for line in doc.splitlines():
        line = line.strip()
        if line.startswith(MARKER):
            reason = line[len(MARKER) :].strip()
            return reason if len(reason.split()) >= MIN_REASON_WORDS else None
    return None


def unexplained_long_modules(root: Path = REPO) -> list[str]:
    """`path: N lines` for every module of `PACKAGES` under `root` over `MAX_LINES` lines without a reason."""
    out = []
    for path in sorted(module_files(root).values()):
        n = line_count(path)
        if n > MAX_LINES and size_reason(path.read_text(encoding="utf-8")) is None:
            out.append(f"{path.relative_to(root)}: {n} lines")
    return out


def test_no_module_over_500_lines_without_a_reason():
    bad = unexplained_long_modules()
    assert not bad, (
        f"modules over {MAX_LINES} lines: split each along its jobs, or put a line starting "
        f"{MARKER!r} and saying why in its module docstring:\n  " + "\n  ".join(bad)
    )


# --- the checker checks ---------------------------------------------------------------------------


def _module(tmp_path: Path, name: str, doc: str, total: int) -> Path:
    """The module `name` (a path under `tmp_path`) of exactly `total` lines: docstring `doc`, then assignments."""
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    head = f'"""{doc}"""\n'
    body = "".join(f"x{i} = {i}\n" for i in range(total - len(head.splitlines())))
    path.write_text(head + body, encoding="utf-8")
    assert line_count(path) == total
    return path


@pytest.mark.parametrize(
    "doc,flagged",
    [
        ("A long module.", True),
        ("A long module.\n\nOver 500 lines: too short.", True),  # a marker without a reason is no reason
        ("A long module.\n\nover 500 lines: one class whose methods share its state.", True),  # the marker is exact
        ("A long module.\n\nOver 500 lines: one class, the engine, whose methods share its cache.", False),
    ],
)
def test_checker_flags_a_long_module_without_a_reason(tmp_path, doc, flagged):
    _module(tmp_path, "factprobe/long.py", doc, MAX_LINES + 1)
    _module(tmp_path, "factprobe/short.py", "A module of exactly 500 lines.", MAX_LINES)
    _module(tmp_path, "factprobe_ops/sub/deep.py", "Deep in the other package.", MAX_LINES + 40)
    found = unexplained_long_modules(tmp_path)
    long = [f"factprobe/long.py: {MAX_LINES + 1} lines"] if flagged else []
    assert found == long + [f"factprobe_ops/sub/deep.py: {MAX_LINES + 40} lines"]


def test_a_reason_outside_the_module_docstring_does_not_count(tmp_path):
    (tmp_path / "factprobe_ops").mkdir()
    path = _module(tmp_path, "factprobe/long.py", "A long module.", MAX_LINES)
    path.write_text(path.read_text() + "# Over 500 lines: one class, the engine, whose methods share its cache.\n")
    assert unexplained_long_modules(tmp_path) == [f"factprobe/long.py: {MAX_LINES + 1} lines"]
