"""Issue 31 item 5: `make lint` (ruff's rules and its format check, ruff.toml) has 0 findings, and CI runs it
before the tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUFF = [sys.executable, "-m", "ruff"]


def test_ruff_check_and_format_find_nothing():
    for args in (["check", "--no-cache", "."], ["format", "--check", "--no-cache", "."]):
        p = subprocess.run([*RUFF, *args], cwd=REPO, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, (
            f"ruff {' '.join(args)} (make lint; make format fixes most):\n{p.stdout[-3000:]}{p.stderr[-1000:]}"
        )


def test_ci_runs_make_lint_before_the_tests():
    lines = [s.strip() for s in (REPO / ".ci" / "run").read_text().splitlines() if s.strip() and not s.startswith("#")]
    lint = next(i for i, s in enumerate(lines) if s.startswith("make lint"))
    test = next(i for i, s in enumerate(lines) if s == "make test")
    assert lint < test and "exit 1" in lines[lint]
    makefile = (REPO / "Makefile").read_text()
    recipe = makefile.split("\nlint:", 1)[1].split("\n\n", 1)[0]
    assert "ruff check ." in recipe and "ruff format --check ." in recipe
