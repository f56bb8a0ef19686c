"""Components stay thin, documented and typed; the science package stays free of kfp and mlflow.

Read with `ast` (no imports) where the rule is about source code:
- components/<step>.py: a module docstring; module-level imports only from kfp and `.config`
  (the component function's source is shipped into the container on its own, so anything
  imported at module level would not exist there anyway); every `@dsl.component` has a
  docstring, annotated parameters and, when it returns a value, a return annotation; its body
  imports the logic from `factprobe_ops.components.steps.<module>` and calls it with matching arguments.
- components/steps/*.py: never import kfp (inside a container KFP exposes only its runtime part).
- factprobe/**: never imports kfp or mlflow, at any depth.
Imported where the rule is about what KFP builds: the ComponentSpec description is the docstring.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


COMPONENT_MODULES = sorted(p for p in (REPO / "components").glob("*.py") if p.name not in ("__init__.py", "config.py"))
STEP_MODULES = sorted((REPO / "components" / "steps").glob("*.py"))
SCIENCE_MODULES = sorted((REPO / "factprobe").rglob("*.py"))
#: what a component module may import at its top: kfp, its config, and `typing` (kfp 2.17 reads `Optional[X]` for
#: an optional parameter, not `X | None`: components/pack_config.py)
ALLOWED_MODULE_IMPORTS = {"__future__", "typing", "kfp", "kfp.dsl", ".config", "factprobe_ops.components.config"}


def _ids(paths):
    return [str(p.relative_to(REPO)) for p in paths]


def _is_component(fn: ast.FunctionDef) -> bool:
    for dec in fn.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if ast.unparse(target) in ("dsl.component", "component", "kfp.dsl.component"):
            return True
    return False


def component_functions(path: Path) -> list[ast.FunctionDef]:
    return [n for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef) and _is_component(n)]


def imported_modules(node: ast.AST) -> list[tuple[str, int]]:
    """(module, line) for every import below `node`, relative imports as '.name', plus
    __import__("x") / importlib.import_module("x") calls with a literal name."""
    out = []
    for n in ast.walk(node):
        if isinstance(n, ast.Import):
            out += [(a.name, n.lineno) for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            out.append(("." * n.level + (n.module or ""), n.lineno))
        elif (
            isinstance(n, ast.Call)
            and ast.unparse(n.func) in ("__import__", "importlib.import_module")
            and n.args
            and isinstance(n.args[0], ast.Constant)
            and isinstance(n.args[0].value, str)
        ):
            out.append((n.args[0].value, n.lineno))
    return out


def _root(module: str) -> str:
    return module.lstrip(".").split(".")[0] if not module.startswith(".") else module


def test_every_component_module_defines_components():
    assert COMPONENT_MODULES, "no component modules found"
    for path in COMPONENT_MODULES:
        assert component_functions(path), f"{path.name} defines no @dsl.component"


@pytest.mark.parametrize("path", COMPONENT_MODULES, ids=_ids(COMPONENT_MODULES))
def test_component_module_is_thin(path):
    tree = ast.parse(path.read_text())
    assert ast.get_docstring(tree), f"{path.name} has no module docstring"
    top_level = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    bad = [(m, line) for n in top_level for m, line in imported_modules(n) if m not in ALLOWED_MODULE_IMPORTS]
    assert not bad, f"{path.name}: module-level imports {bad}; import factprobe/steps inside the component body"
    assert not [n for n in tree.body if isinstance(n, (ast.If, ast.Try, ast.With)) and imported_modules(n)], (
        f"{path.name}: conditional module-level imports"
    )


@pytest.mark.parametrize("path", COMPONENT_MODULES, ids=_ids(COMPONENT_MODULES))
def test_components_are_documented_and_typed(path):
    for fn in component_functions(path):
        where = f"{path.name}:{fn.name}"
        assert ast.get_docstring(fn), f"{where} has no docstring (it is the component's description)"
        args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        assert not fn.args.vararg and not fn.args.kwarg, f"{where}: *args/**kwargs cannot be typed"
        untyped = [a.arg for a in args if a.annotation is None]
        assert not untyped, f"{where}: untyped parameters {untyped}"
        returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None]
        if returns:
            assert fn.returns is not None, f"{where} returns a value without a return annotation"
        outputs = [a.arg for a in args if ast.unparse(a.annotation).startswith(("Output[", "dsl.Output[", "dsl.OutputPath("))]
        assert returns or outputs or fn.name == "fail_run", f"{where} has no output"


@pytest.mark.parametrize("path", COMPONENT_MODULES, ids=_ids(COMPONENT_MODULES))
def test_component_decorator_pins_the_image(path):
    for fn in component_functions(path):
        dec = next(d for d in fn.decorator_list if isinstance(d, ast.Call))
        kw = {k.arg: ast.unparse(k.value) for k in dec.keywords}
        assert kw.get("base_image") in ("CPU_IMAGE", "GPU_IMAGE", "TRAIN_IMAGE"), (
            f"{fn.name}: base_image from factprobe_ops.components.config"
        )
        assert kw.get("install_kfp_package") == "False", f"{fn.name}: the image ships kfp (no pip at start-up)"


@pytest.mark.parametrize("path", COMPONENT_MODULES, ids=_ids(COMPONENT_MODULES))
def test_component_body_calls_its_step_with_matching_arguments(path):
    """`from factprobe_ops.components.steps.x import run_x` inside the body, and the call binds to run_x's signature."""
    for fn in component_functions(path):
        steps = {}
        for n in ast.walk(fn):
            if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("factprobe_ops.components"):
                assert n.module.startswith("factprobe_ops.components.steps."), f"{fn.name} imports {n.module}"
                module = importlib.import_module(n.module)
                for alias in n.names:
                    assert hasattr(module, alias.name), f"{fn.name}: {n.module} has no {alias.name}"
                    steps[alias.asname or alias.name] = getattr(module, alias.name)
        if fn.name == "fail_run":
            continue
        assert steps, f"{fn.name} does not delegate to factprobe_ops.components.steps"
        calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in steps]
        assert calls, f"{fn.name} imports {list(steps)} but never calls it"
        for call in calls:
            sig = inspect.signature(steps[call.func.id])
            try:
                sig.bind(*[None] * len(call.args), **{k.arg: None for k in call.keywords})
            except TypeError as e:
                pytest.fail(f"{path.name}:{fn.name} calls {call.func.id}{sig} wrongly: {e}")


def _component_objects():
    from kfp.dsl.base_component import BaseComponent

    found = []
    for path in COMPONENT_MODULES:
        module = importlib.import_module(f"factprobe_ops.components.{path.stem}")
        for fn in component_functions(path):
            comp = getattr(module, fn.name)
            assert isinstance(comp, BaseComponent), f"{fn.name} is not a KFP component"
            found.append((path, fn, comp))
    return found


def test_component_spec_description_is_the_docstring(tmp_path):
    from kfp import compiler

    for _path, fn, comp in _component_objects():
        doc = ast.get_docstring(fn)
        assert comp.component_spec.description == doc, fn.name
        assert comp.description == doc
        # kfp 2.17's IR has no per-component description field; the docstring ships inside the
        # component's embedded source, which is what the UI shows for a step.
        out = tmp_path / f"{fn.name}.yaml"
        compiler.Compiler().compile(comp, str(out))
        spec = next(yaml.safe_load_all(out.read_text()))
        source = "".join(ex["container"]["command"][-1] for ex in spec["deploymentSpec"]["executors"].values())
        assert doc in source, fn.name


def test_component_spec_inputs_and_outputs_are_typed():
    for _, fn, comp in _component_objects():
        spec = comp.component_spec
        for name, inp in (spec.inputs or {}).items():
            assert inp.type and inp.type != "Any", f"{fn.name}.{name} is untyped"
        for name, out in (spec.outputs or {}).items():
            assert out.type and out.type != "Any", f"{fn.name} output {name} is untyped"
        params = set(inspect.signature(comp.python_func).parameters)
        declared = set(spec.inputs or {}) | set(spec.outputs or {})
        assert params <= declared, f"{fn.name}: parameters missing from the spec: {params - declared}"


def test_run_config_travels_as_one_dict():
    """start_run, plan_matrix, data_build and probe_model take the run config as ONE `config: dict`
    (RunConfig.to_dict()); no config field is a loose component parameter (`model` of probe_model is
    the one model of its task, set from the matrix)."""
    from factprobe.framework.config import option_classes

    fields = {n for c in option_classes() for n in c.field_names()}
    takes_config = {"start_run": "start_run", "plan": "plan_matrix", "data_build": "data_build", "probe": "probe_model"}
    for module, name in takes_config.items():
        (fn,) = [f for f in component_functions(REPO / "components" / f"{module}.py") if f.name == name]
        args = {a.arg: ast.unparse(a.annotation) for a in fn.args.args + fn.args.kwonlyargs}
        assert args.get("config") == "dict", f"{name} has no `config: dict` parameter"
        loose = (set(args) & fields) - ({"model"} if name == "probe_model" else set())
        assert not loose, f"{name}: config fields as loose parameters {sorted(loose)}"


# --- import hygiene -----------------------------------------------------------------------------


@pytest.mark.parametrize("path", STEP_MODULES, ids=_ids(STEP_MODULES))
def test_steps_never_import_kfp(path):
    bad = [(m, line) for m, line in imported_modules(ast.parse(path.read_text())) if _root(m) == "kfp"]
    assert not bad, f"{path.relative_to(REPO)} imports kfp at {bad}"


def test_science_package_never_imports_kfp_or_mlflow():
    """Nowhere, not even lazily. The orchestration packages (tracking, components, pipelines) may
    be imported lazily by the `factprobe` CLI's dispatch functions, never at module level, so
    `import factprobe.<anything>` never pulls them in."""
    assert len(SCIENCE_MODULES) > 10
    bad = []
    for path in SCIENCE_MODULES:
        tree = ast.parse(path.read_text())
        for m, line in imported_modules(tree):
            if _root(m) in ("kfp", "mlflow"):
                bad.append(f"{path.relative_to(REPO)}:{line} imports {m}")
        top_level = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        for node in top_level:
            for m, line in imported_modules(node):
                if _root(m) == "factprobe_ops":
                    bad.append(f"{path.relative_to(REPO)}:{line} imports {m} at module level")
    assert not bad, "factprobe/ must stay free of kfp and mlflow:\n" + "\n".join(bad)


def test_no_step_enters_a_run_by_hand():
    """Every step logs into a run through `with` (a parent run attached that way is not ended; issue 31 item 5):
    a bare `run.__enter__()` has no matching exit. The start step, whose run the finalize step ends, says so with
    `TrackedRun.open()`."""
    bad = []
    for path in sorted((REPO / "components").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "__enter__":
                bad.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not bad, "call __enter__ through `with` (or TrackedRun.open for a run another step ends): " + ", ".join(bad)
