"""Where each first-party package's files lie: the wheel's mapping of pyproject.toml, read, not repeated.

`factprobe/` and `factprobe_ops/` lie under their own names; the user's top-level `components/`, `pipelines/` and
`tracking/` install as `factprobe_ops.components`, `factprobe_ops.pipelines` and `factprobe_ops.tracking`
(`[tool.setuptools.package-dir]`). The layer and module-size tests walk these folders, so a mapped folder is
never left unchecked.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOP = ("factprobe", "factprobe_ops")


def package_roots(repo: Path = REPO) -> dict[str, Path]:
    """Dotted package name -> its folder, for the two top packages and every mapped one (pyproject.toml)."""
    pyproject = repo / "pyproject.toml"
    config = tomllib.loads(pyproject.read_text()) if pyproject.exists() else {}
    mapped = config.get("tool", {}).get("setuptools", {}).get("package-dir", {})
    out = {name: repo / name for name in TOP}
    out.update({name: repo / folder for name, folder in mapped.items() if name})
    return out


def module_files(repo: Path = REPO) -> dict[str, Path]:
    """Dotted module name -> file for every .py file of the packages (packages as their __init__)."""
    out: dict[str, Path] = {}
    for name, folder in package_roots(repo).items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([name, *parts])] = path
    return out
