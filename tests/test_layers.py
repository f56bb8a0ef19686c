"""The layers of the repository and the direction of its imports (issue 19 item 4).

`LAYERS` below is the one place the layering is written down; docs/design.md ("Layers") shows the
same table and `test_design_doc_shows_the_layer_table` keeps the two equal.

Rules, checked over every module of `factprobe/`, `tracking/`, `components/` and `pipelines/`,
parsed with `ast` (nothing is imported):

- Every first-party import counts: module level, inside functions and classes, and
  `__import__("x")` / `importlib.import_module("x")` with a literal name.
- A module belongs to the longest unit of `LAYERS` that prefixes its dotted name. It may import its
  own unit and units of LOWER layers. Importing a unit of a higher layer is an upward import; importing
  another unit of the SAME layer is a sideways import (units of one layer are independent). Both fail.
- No import cycle between modules, function-local imports included (a function-local import only
  postpones a cycle, it does not remove it).
- Imports under `if TYPE_CHECKING:` count as well, in both checks: they never run, but they name a
  dependency, and a circle of names is a circle of design (issue 42 item 6 removed the last one, the probe
  framework's base -> config -> registry -> base, by moving the framework apart from the probes).

A module's implicit import of its parent package's `__init__` is not an edge (that is how Python
loads packages, not a dependency the module chose). `from pkg import name` is an edge to
`pkg.name` where that is a module, else to `pkg` itself.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import pytest

from tests.package_map import module_files as package_files  # a dependency of torch, always installed with factprobe

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("factprobe", "factprobe_ops")

#: Bottom to top. A unit (a package or module, dotted) may import its own unit and the units of
#: lower layers, never a unit of its own layer or above. The science package ends at `factprobe.cli`;
#: the operations packages sit above it. Renaming a package is a one-word change here.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("factprobe.version",),  # imports nothing of factprobe
    ("factprobe.redact",),
    ("factprobe.errors",),
    (
        "factprobe.paths",
        "factprobe.io",
        "factprobe.facts",
        "factprobe.refs",
        "factprobe.signals",
        "factprobe.seeding",
        "factprobe.threads",
        "factprobe.plugins",  # entry points, the extra of a missing module; the plug-in modules of the registries
        "factprobe.volume_hashes",  # file hashes kept on the volume next to the files (identity asks it)
        "factprobe.file_lock",  # a lock file across hosts sharing a volume (was factprobe.lm.file_lock)
    ),
    (
        "factprobe.identity",
        "factprobe.config_files",
        "factprobe.config",
    ),  # what a result measured; --config files; the config machinery
    ("factprobe.sources", "factprobe.lm", "factprobe.metrics"),  # lm: the engines only (issue 42 item 7)
    ("factprobe.models",),  # the model store: names, GGUF cache, hub, adapters, placement, loading
    ("factprobe.datasets", "factprobe.run_folder", "factprobe.report"),
    ("factprobe.framework",),  # the probe framework: contract, config, registry, runner (issue 42 item 6)
    ("factprobe.probes",),  # the built-in probes, instances of the framework
    (
        "factprobe.finetune",
        "factprobe.studies",
        "factprobe.lm_eval_model",  # --model factprobe in lm-eval
        "factprobe.knowledge_maps",  # the knowledge map: finished runs joined fact by fact
    ),
    ("factprobe.cli", "factprobe.lm_eval_cli"),  # lm_eval_cli: the factprobe-lm-eval console script
    ("factprobe.api",),  # the Python API: the command line's pieces as functions
    ("factprobe",),  # the package root's __init__ only (see ROOT_ONLY): the version and the API, loaded lazily
    ("factprobe_ops.tracking",),
    ("factprobe_ops.components.config",),
    ("factprobe_ops.components.trainjob_manifest",),  # plain builders the steps call (no kfp)
    ("factprobe_ops.components.steps",),
    ("factprobe_ops.components",),
    ("factprobe_ops.pipelines",),
    ("factprobe_ops",),  # the namespace's __init__ only (ROOT_ONLY): a docstring
)

#: units that are only their package's `__init__`, not its submodules: a new `factprobe/x.py` must be
#: given a row of its own instead of landing silently in the bottom layer
ROOT_ONLY = frozenset({"factprobe", "factprobe_ops"})


@dataclass(frozen=True)
class Import:
    """One first-party import: `importer` (module) imports `imported` (module) at `path:line`."""

    importer: str
    imported: str
    path: str
    line: int
    type_checking: bool

    def where(self) -> str:
        return f"{self.path}:{self.line}"


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of PACKAGES and of the top-level folders pyproject.toml
    maps into `factprobe_ops` (tests/package_map.py; packages as their __init__)."""
    return package_files(REPO)


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The deepest first-party module `name` denotes (an attribute of a module denotes the module)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, type_checking: bool = False):
    """Yield (node, under_type_checking) for every node below `node`."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for sub in child.body:
                yield sub, True
                yield from _walk(sub, True)
            for sub in child.orelse:
                yield sub, type_checking
                yield from _walk(sub, type_checking)
            continue
        yield child, type_checking
        yield from _walk(child, type_checking)


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """Every first-party import in `path` (see the module docstring for what counts)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    rel = str(path.relative_to(REPO))
    out = []

    def add(name: str, line: int, tc: bool) -> None:
        target = _resolve(name, modules)
        imp = Import(module, target or "", rel, line, tc)
        if target and target != module and imp not in out:
            out.append(imp)

    for node, tc in _walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno, tc)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, module, path.name == "__init__.py")
            for alias in node.names:
                add(f"{base}.{alias.name}" if alias.name != "*" else base, node.lineno, tc)
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            f = node.func
            if (isinstance(f, ast.Name) and f.id == "__import__") or (
                isinstance(f, ast.Attribute)
                and f.attr == "import_module"
                and isinstance(f.value, ast.Name)
                and f.value.id == "importlib"
            ):
                add(node.args[0].value, node.lineno, tc)
    return out


def all_imports() -> list[Import]:
    modules = module_files()
    return [imp for mod, path in modules.items() for imp in imports_of(mod, path, modules)]


def unit_of(module: str) -> tuple[int, str]:
    """(layer index, unit) of a module: the longest unit prefixing its dotted name."""
    best: tuple[int, str] | None = None
    for index, units in enumerate(LAYERS):
        for unit in units:
            inside = module == unit or (unit not in ROOT_ONLY and module.startswith(unit + "."))
            if inside and (best is None or len(unit) > len(best[1])):
                best = (index, unit)
    if best is None:
        raise AssertionError(f"{module} is in no unit of LAYERS; add it to the layer it belongs to")
    return best


def direction_violations(imports: list[Import]) -> list[tuple[Import, str]]:
    """Imports that go up or sideways, each with a one-line reason."""
    out = []
    for imp in imports:
        (li, lu), (ti, tu) = unit_of(imp.importer), unit_of(imp.imported)
        if lu == tu or ti < li:
            continue
        kind = "up" if ti > li else "sideways"
        reason = f"{imp.where()}: {imp.importer} imports {imp.imported} ({kind}: {tu!r} is layer {ti}, {lu!r} is layer {li})"
        out.append((imp, reason))
    return out


def cycles(imports: list[Import]) -> list[list[Import]]:
    """The import edges inside each circle of modules (a strongly connected component), `TYPE_CHECKING`
    imports included."""
    graph = nx.DiGraph()
    for imp in imports:
        graph.add_edge(imp.importer, imp.imported)
    out = []
    for component in nx.strongly_connected_components(graph):
        if len(component) > 1:
            out.append(
                sorted(
                    (i for i in imports if i.importer in component and i.imported in component),
                    key=lambda i: (i.path, i.line),
                )
            )
    return sorted(out, key=lambda c: c[0].path)


def test_every_module_has_a_layer():
    for module in module_files():
        unit_of(module)
    with pytest.raises(AssertionError, match="factprobe.new_module is in no unit of LAYERS"):
        unit_of("factprobe.new_module")
    assert unit_of("factprobe.lm.engine") == (
        LAYERS.index(("factprobe.sources", "factprobe.lm", "factprobe.metrics")),
        "factprobe.lm",
    )


def test_no_import_goes_up_or_sideways():
    bad = [reason for _, reason in direction_violations(all_imports())]
    assert not bad, "imports against the layers (docs/design.md, Layers):\n" + "\n".join(bad)


def test_no_import_cycles():
    found = cycles(all_imports())
    text = "\n".join(
        "circle "
        + " <-> ".join(sorted({i.importer for i in c}))
        + ":\n"
        + "\n".join(f"  {i.where()}: {i.importer} imports {i.imported}" for i in c)
        for c in found
    )
    assert not found, "import circles (a function-local import does not break one):\n" + text


def render_layer_table() -> str:
    """The Layers table as docs/design.md shows it, top layer first."""
    lines = ["| layer | units (may import their own unit and any lower layer) |", "|---|---|"]
    for index in range(len(LAYERS) - 1, -1, -1):
        lines.append(f"| {index} | " + ", ".join(f"`{u}`" for u in LAYERS[index]) + " |")
    return "\n".join(lines)


def test_design_doc_shows_the_layer_table():
    doc = (REPO / "docs" / "design.md").read_text()
    assert render_layer_table() in doc, (
        "docs/design.md's layer table differs from tests/test_layers.py LAYERS; put this in its "
        "Layers section:\n" + render_layer_table()
    )


# --- the checker checks: each rule fails on a made-up violation --------------------------------


def _fake(tmp_path: Path, files: dict[str, str]) -> dict[str, Path]:
    modules = {}
    for name, text in files.items():
        path = tmp_path / (name.replace(".", "/") + ".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        modules[name] = path
    return modules


@pytest.fixture
def fake_repo(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    return tmp_path


def test_checker_finds_upward_function_local_and_dynamic_imports(fake_repo):
    modules = _fake(
        fake_repo,
        {
            "factprobe.sources.a": "def f():\n    from factprobe.datasets.b import x\n",
            "factprobe.metrics.m": "import importlib\nimportlib.import_module('factprobe.probes.p')\n",
            "factprobe.lm.l": "from ..metrics import m\n",
            "factprobe.datasets.b": "from factprobe.sources import a\nx = 1\n",
            "factprobe.probes.p": "",
        },
    )
    imports = [i for mod, p in modules.items() for i in imports_of(mod, p, modules)]
    reasons = [r for _, r in direction_violations(imports)]
    assert any("factprobe/sources/a.py:2" in r and "(up:" in r for r in reasons), reasons
    assert any("factprobe/metrics/m.py:2" in r and "factprobe.probes.p" in r for r in reasons), reasons
    assert any("factprobe/lm/l.py:1" in r and "(sideways:" in r for r in reasons), reasons
    assert not any(r.startswith("factprobe/datasets/b.py") for r in reasons), reasons


def test_checker_finds_cycles_type_checking_ones_included(fake_repo):
    modules = _fake(
        fake_repo,
        {
            "factprobe.lm.a": "from factprobe.lm import b\n",
            "factprobe.lm.b": "def f():\n    from factprobe.lm.a import g\n",
            "factprobe.lm.c": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from factprobe.lm.d import T\n",
            "factprobe.lm.d": "from factprobe.lm.c import U\n",
        },
    )
    imports = [i for mod, p in modules.items() for i in imports_of(mod, p, modules)]
    found = cycles(imports)
    assert [sorted({i.importer for i in c}) for c in found] == [
        ["factprobe.lm.a", "factprobe.lm.b"],
        ["factprobe.lm.c", "factprobe.lm.d"],
    ]
    assert {i.where() for i in found[0]} == {"factprobe/lm/a.py:1", "factprobe/lm/b.py:2"}
    assert {i.where() for i in found[1]} == {"factprobe/lm/c.py:3", "factprobe/lm/d.py:1"}
