"""The version of factprobe: the installed distribution's, or pyproject.toml's in a source checkout.

Imports nothing of factprobe (the bottom layer), so that the package root, the command line's
`--version` and anything else may read it.
"""

from __future__ import annotations


def distribution_version() -> str:
    """The `factprobe` distribution's version; the one in pyproject.toml beside the package when the
    distribution is not installed; "0+unknown" when neither can be read."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("factprobe")
    except PackageNotFoundError:
        pass
    import tomllib
    from pathlib import Path

    try:
        with open(Path(__file__).resolve().parents[1] / "pyproject.toml", "rb") as fh:
            return str(tomllib.load(fh)["project"]["version"])
    except (OSError, KeyError, TypeError, tomllib.TOMLDecodeError):
        return "0+unknown"


__version__ = distribution_version()
