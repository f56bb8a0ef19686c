"""Make `import components` find the real package, not this test folder.

This folder has no `__init__.py` on purpose: `tests/` is on `sys.path` while pytest collects
(root conftest), so a `tests/components` *package* would shadow the real `components` package.
Without it, `tests/components` can still be picked up as a namespace package when the repository
root is not on `sys.path` (pytest run as `.venv/bin/pytest`), so the root goes on `sys.path` here.
"""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

for _name in ("pipelines", "components"):
    _mod = sys.modules.get(_name)
    if _mod is not None and getattr(_mod, "__file__", None) is None:  # namespace package = tests/<name>
        for _key in [k for k in sys.modules if k == _name or k.startswith(_name + ".")]:
            del sys.modules[_key]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
