"""Committed benchmark results hold no absolute path of the machine they ran on.

`portable(obj)` rewrites every string that names a local path: under this repository -> relative to it, under the
data root -> `$FACTPROBE_DATA/...`, under the model cache -> `$FACTPROBE_CACHE/...`, under the temporary folder ->
`$TMPDIR/...`. Every `benchmarks/bench_*.py` passes its result through it before writing
(tests/benchmarks/test_results_portable.py reads every committed result file).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _roots() -> list[tuple[str, str]]:
    from factprobe.paths import cache_root, data_root

    out = [
        (str(REPO) + "/", ""),
        (str(REPO.parent / "shared" / "data"), "$FACTPROBE_DATA"),
        (str(Path(str(data_root())).resolve()), "$FACTPROBE_DATA"),
        (str(Path(str(cache_root())).resolve()), "$FACTPROBE_CACHE"),
        (str(Path(tempfile.gettempdir()).resolve()), "$TMPDIR"),
        (os.path.expanduser("~"), "~"),
    ]
    return sorted(out, key=lambda r: -len(r[0]))


def portable_text(text: str, roots: list[tuple[str, str]] | None = None) -> str:
    """`text` with every local root replaced (longest first); `../shared/data` spelled through the repo too."""
    for root, name in roots or _roots():
        text = text.replace(root, name)
    return text.replace(str(REPO) + "/../shared/data", "$FACTPROBE_DATA").replace(str(REPO), ".")


def portable(obj: Any) -> Any:
    """A copy of `obj` (JSON-like) whose strings name no absolute local path."""
    roots = _roots()

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return portable_text(v, roots)
        if isinstance(v, dict):
            return {walk(k): walk(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [walk(x) for x in v]
        return v

    return walk(obj)
