"""The fine-tuning pipeline's steps are one module each (issue 31 item 4).

Each component of `components/finetune.py` calls its step (`run_*`) from a module of
`components/steps/` of that step's own: two different steps never share a module, and
`steps/finetune.py` holds only what the steps share (no `run_*` step). Read with `ast` where the rule is
about source code.
"""

from __future__ import annotations

import ast
import importlib
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COMPONENTS = REPO / "components" / "finetune.py"
SHARED = "factprobe_ops.components.steps.finetune"


def step_imports(path: Path) -> dict[str, set[str]]:
    """{steps module: the `run_*` functions the components of `path` import from it}."""
    out: dict[str, set[str]] = defaultdict(set)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("factprobe_ops.components.steps."):
            out[node.module] |= {a.name for a in node.names if a.name.startswith("run_")}
    return out


def shared_modules(imports: dict[str, set[str]]) -> dict[str, set[str]]:
    """The steps modules of `imports` that hold more than one step."""
    return {m: steps for m, steps in imports.items() if len(steps) > 1}


def test_each_finetune_step_has_a_module_of_its_own():
    imports = step_imports(COMPONENTS)
    assert len(imports) >= 6, imports  # base table, sets, train, trainjob, evaluate, report
    assert not shared_modules(imports), f"steps sharing one module: {shared_modules(imports)}"
    assert SHARED not in imports, f"{SHARED} holds what the steps share, not a step"
    shared = importlib.import_module(SHARED)
    assert not [n for n in vars(shared) if n.startswith("run_")], f"{SHARED} defines a step"


def test_the_rule_sees_two_steps_in_one_module(tmp_path):
    path = tmp_path / "finetune.py"
    path.write_text(
        "def a():\n    from factprobe_ops.components.steps.finetune import run_sets_step\n"
        "def b():\n    from factprobe_ops.components.steps.finetune import run_train_step\n"
        "def c():\n    from factprobe_ops.components.steps.finetune_report import run_finetune_report\n"
    )
    assert shared_modules(step_imports(path)) == {SHARED: {"run_sets_step", "run_train_step"}}
