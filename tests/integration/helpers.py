"""Small helpers shared by the integration tests (running the CLI, reading its output)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def factprobe_cmd(*args: str) -> list[str]:
    """The `factprobe` CLI in this Python (works from any cwd)."""
    return [sys.executable, "-m", "factprobe.cli", *args]


def run_factprobe(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(factprobe_cmd(*args), env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)


def last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def explain(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n--- stdout (tail)\n{proc.stdout[-3000:]}\n--- stderr (tail)\n{proc.stderr[-3000:]}"


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
