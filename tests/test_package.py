"""The package fits its ecosystem (issue 31 item 8).

- `pip install factprobe` is the science and the command line; kfp/kubeflow, MLflow, spaCy and DeepSpeed are
  extras (`kubeflow`, `tracking`, `belief`, `train`, `all`); torch is pinned only in constraints.txt.
- constraints.txt is a full lock: every distribution that factprobe[dev,all] needs, transitively, is pinned.
- Without an extra, its hooks are left out (factprobe/plugins.py) and its commands say in one line which extra
  to install; BELIEF-ICL without spaCy names `factprobe[belief]`.
- The DeepSpeed configs are package data.
- The package states its license as setuptools wants it (an SPDX `license` string and `license-files`, the Apache-2.0
  text in LICENSE) with trove classifiers, and its wheel builds without a setuptools deprecation warning (issue 42
  item 5): `test_the_wheel_builds_without_warnings_and_carries_the_license`.
- `test_wheel_installs_into_a_fresh_virtualenv` (slow: 224-252 s on 2 shared, busy cores on 2026-11-27, nearly all
  of it pip installing the base requirements, torch from the local wheel): the built wheel, installed with no extra into a new
  virtualenv, answers `--version`, runs a probe on a tiny random model, and `factprobe pipeline` names the extra.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import factprobe
from factprobe import plugins
from factprobe.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
#: a top-level module of each extra, and the extra a missing one must name
EXTRA_MODULES = {
    "kfp": "kubeflow",
    "kubeflow": "kubeflow",
    "mlflow": "tracking",
    "spacy": "belief",
    "spacy_lookups_data": "belief",
    "deepspeed": "train",
}


def constraints() -> dict[str, str]:
    """constraints.txt as canonical name -> pinned version."""
    pins = {}
    for line in (REPO / "constraints.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and version, f"constraints.txt: {line!r} is not a `name==version` pin"
            pins[canonicalize_name(name)] = version
    return pins


# ------------------------------------------------------------------ pyproject.toml and constraints.txt
def test_the_base_requirements_are_the_science_and_torch_is_pinned_only_in_constraints():
    base = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]
    names = {canonicalize_name(r.name) for r in base}
    for heavy in ("kfp", "kfp-kubernetes", "kubeflow", "mlflow", "spacy", "spacy-lookups-data", "deepspeed", "peft"):
        assert heavy not in names, f"{heavy} is a base requirement; it belongs in an extra"
    torch = next(r for r in base if r.name == "torch")
    assert not any(s.operator in ("==", "===") for s in torch.specifier), f"pyproject pins torch: {torch}"
    assert constraints()["torch"] == "2.13.0"


def test_extras_and_dev_gathers_them():
    extras = PYPROJECT["project"]["optional-dependencies"]
    for extra, needs in {
        "kubeflow": "kfp",
        "tracking": "mlflow",
        "belief": "spacy",
        "train": "deepspeed",
        "adapters": "peft",
    }.items():
        assert any(Requirement(r).name == needs for r in extras[extra]), (extra, extras[extra])
    gathered = {e for r in extras["all"] for e in Requirement(r).extras if Requirement(r).name == "factprobe"}
    assert gathered >= {"kubeflow", "tracking", "belief", "train", "adapters"}, gathered
    assert any(Requirement(r).name == "factprobe" and "all" in Requirement(r).extras for r in extras["dev"])


def _closure(roots: list[tuple[str, set[str]]]) -> set[str]:
    """Every installed distribution that `roots` (name, extras) need, following their metadata."""
    env = default_environment()
    seen: set[tuple[str, frozenset[str]]] = set()
    names: set[str] = set()
    todo = list(roots)
    while todo:
        name, extras = todo.pop()
        key = (canonicalize_name(name), frozenset(extras))
        if key in seen:
            continue
        seen.add(key)
        names.add(key[0])
        for line in metadata.distribution(name).requires or []:
            req = Requirement(line)
            wanted = req.marker is None or any(req.marker.evaluate({**env, "extra": e}) for e in (extras or {""}))
            if wanted:
                todo.append((req.name, set(req.extras)))
    return names


def test_constraints_pin_every_dependency_of_the_installed_environment():
    """The lock: a fresh `make` gets what the suite passed with, transitive dependencies included."""
    pins = constraints()
    needed = _closure([("factprobe", {"dev", "all"})]) - {"factprobe"}
    assert len(needed) > 100, needed  # the whole tree, not the top level
    assert sorted(needed - set(pins)) == [], "constraints.txt lacks these; run `make constraints`"
    for name in needed - {"torch"}:  # the lock is what .venv holds (torch: the bare version, CPU or CUDA build)
        assert metadata.version(name) == pins[name], f"{name}: .venv has {metadata.version(name)}, constraints.txt {pins[name]}"


# ------------------------------------------------------------------ missing extras
def test_a_missing_module_names_the_extra_that_installs_it():
    for module, extra in EXTRA_MODULES.items():
        assert plugins.extras_for(module) == (extra,), module
    assert plugins.extras_for("kfp.kubernetes") == ("kubeflow",)
    assert plugins.extras_for("peft") == ("adapters", "train")
    assert plugins.extras_for("torch") == () and plugins.extras_for("accelerate") == ()  # base requirements
    line = plugins.missing_extra(ModuleNotFoundError("No module named 'kfp'", name="kfp"), "pipeline")
    assert line == "factprobe pipeline needs kfp, which is not installed: pip install 'factprobe[kubeflow]'"
    assert plugins.missing_extra(ModuleNotFoundError("x", name="no_such_module_at_all")) is None
    assert plugins.missing_extra(ImportError("x", name="mlflow")) is None  # a broken install, not a missing extra


def test_entry_points_of_a_missing_extra_are_left_out_and_others_are_not_hidden(tmp_path, monkeypatch):
    (tmp_path / "fp_ok_plugin.py").write_text("HOOK = 'ok'\n")
    (tmp_path / "fp_tracking_plugin.py").write_text("import mlflow\nHOOK = 'tracking'\n")
    (tmp_path / "fp_broken_plugin.py").write_text("import fp_no_such_dependency\nHOOK = 'broken'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "mlflow", None)  # `import mlflow` fails: the tracking extra is missing
    points = {name: metadata.EntryPoint(name, f"fp_{name}_plugin:HOOK", "factprobe.test") for name in ("ok", "tracking")}
    monkeypatch.setattr(metadata, "entry_points", lambda group: list(points.values()) if group == "factprobe.test" else [])
    assert plugins.load_entry_points("factprobe.test") == ["ok"]
    points["broken"] = metadata.EntryPoint("broken", "fp_broken_plugin:HOOK", "factprobe.test")
    with pytest.raises(ModuleNotFoundError, match="fp_no_such_dependency"):
        plugins.load_entry_points("factprobe.test")


#: runs `factprobe ARGS` for each ARGS in one fresh interpreter where the blocked modules cannot be imported
_CLI_SCRIPT = """
import contextlib, io, json, sys
for m in sys.argv[1].split(","):
    sys.modules[m] = None  # `import m` fails as it does without the extra
from factprobe.cli import main
results = []
for args in json.loads(sys.argv[2]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(args)
        except SystemExit as e:
            rc = e.code
    results.append([rc, out.getvalue(), err.getvalue()])
print(json.dumps(results))
"""


def _cli(commands: list[list[str]], block: tuple[str, ...]) -> list[tuple[int, str, str]]:
    """(exit code, stdout, stderr) of `factprobe ARGS` for each of `commands`, as without the extras of `block`."""
    r = subprocess.run(
        [sys.executable, "-c", _CLI_SCRIPT, ",".join(block), json.dumps(commands)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return [tuple(x) for x in json.loads(r.stdout.strip().splitlines()[-1])]


@pytest.mark.slow  # a fresh interpreter: ~6 s of CPU
def test_without_the_extras_commands_name_them_in_one_line_and_probes_lose_only_tracking(capsys):
    commands = {
        "kubeflow": ["pipeline", "--help"],
        "tracking": ["compare", "a", "b"],
        "train": ["finetune", "--model", "x", "--out", "/nonexistent/fp"],
    }
    *named, probe_help = _cli(
        [*commands.values(), ["probe", "ic-lke", "--help"]], ("kfp", "kubeflow", "mlflow", "spacy", "deepspeed")
    )
    for (extra, args), (rc, _out, err) in zip(commands.items(), named):
        assert rc == 2, (args, err[-2000:])
        assert err.startswith(f"error: factprobe {args[0]} needs") and err.count("\n") == 1, err[-2000:]  # one line
        assert err.strip().endswith(f"pip install 'factprobe[{extra}]'"), err
    rc, out, err = probe_help
    assert rc == 0 and "--max-facts-per-relation" in out, err[-2000:]
    assert "--tracking-uri" not in out and err == ""  # the MLflow hook is left out, silently
    from factprobe.cli import main

    with pytest.raises(SystemExit):
        main(["probe", "ic-lke", "--help"])
    assert "--tracking-uri" in capsys.readouterr().out  # with the extra it is there


def test_belief_matching_without_spacy_names_the_belief_extra(monkeypatch):
    from factprobe.metrics import belief_match

    monkeypatch.setitem(sys.modules, "spacy", None)
    with pytest.raises(ConfigError) as err:
        belief_match.nlp.__wrapped__()
    assert "pip install 'factprobe[belief]'" in str(err.value) and "\n" not in str(err.value)


# ------------------------------------------------------------------ DeepSpeed configs are package data
def test_deepspeed_configs_are_package_data(monkeypatch, tmp_path):
    from factprobe.finetune import deepspeed_config

    monkeypatch.delenv(deepspeed_config.ENV, raising=False)
    folder = deepspeed_config.config_dir()
    assert folder == Path(deepspeed_config.__file__).resolve().parent / "deepspeed_configs"
    assert sorted(p.name for p in folder.glob("zero*.json")) == [f"zero{n}.json" for n in range(4)]
    assert deepspeed_config.config_path(3) == folder / "zero3.json"
    assert not (REPO / "configs" / "deepspeed").exists(), "one copy of the configs: the package's"
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["factprobe.finetune.deepspeed_configs"]
    assert "*.json" in patterns
    monkeypatch.setenv(deepspeed_config.ENV, str(tmp_path))  # a variable naming a folder without them is an error
    with pytest.raises(ConfigError, match=deepspeed_config.ENV):
        deepspeed_config.config_dir()


# ------------------------------------------------------------------ license, classifiers, a clean build
def test_the_license_is_an_spdx_expression_with_its_text_and_the_package_has_classifiers():
    project = PYPROJECT["project"]
    # a TOML table (`{ text = ... }`) is deprecated by setuptools >= 77, which wants the SPDX string and the files
    assert project["license"] == "Apache-2.0", project["license"]
    assert project["license-files"] == ["LICENSE"]
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    for part in ("Apache License", "Version 2.0, January 2004", "TERMS AND CONDITIONS FOR USE", "END OF TERMS AND CONDITIONS"):
        assert part in text, f"LICENSE lacks {part!r}: not the Apache-2.0 text"
    assert len(text.splitlines()) > 150, "LICENSE is not the whole license text"
    requires = [Requirement(r) for r in PYPROJECT["build-system"]["requires"]]
    setuptools_req = next(r for r in requires if r.name == "setuptools")
    assert not setuptools_req.specifier.contains("76.9"), f"{setuptools_req}: the SPDX license needs setuptools>=77"
    classifiers = project["classifiers"]
    assert classifiers == sorted(set(classifiers)) and all(" :: " in c for c in classifiers), classifiers
    # a license classifier beside an SPDX expression is refused by setuptools; the Python ones follow requires-python
    assert not [c for c in classifiers if c.startswith("License ::")], classifiers
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert {"Intended Audience :: Science/Research", "Topic :: Scientific/Engineering :: Artificial Intelligence"} <= set(
        classifiers
    )


def test_the_image_builds_copy_the_license_files_with_pyproject():
    """An image installs the package from pyproject.toml: without its license files in the build context setuptools
    warns (`Pattern 'LICENSE' did not match any files`, an error from 2027) and the wheel carries no license."""
    allowed = (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
    for name in PYPROJECT["project"]["license-files"]:
        assert f"!{name}" in allowed, f".dockerignore keeps {name} out of the image build context"
    for image in ("cpu", "gpu", "train"):
        dockerfile = REPO / "containers" / f"Dockerfile.{image}"
        copies = [line.split()[1:-1] for line in dockerfile.read_text(encoding="utf-8").splitlines() if line.startswith("COPY ")]
        with_pyproject = [c for c in copies if "pyproject.toml" in c]
        assert with_pyproject, f"{dockerfile.name} copies no pyproject.toml"
        for files in with_pyproject:
            assert set(PYPROJECT["project"]["license-files"]) <= set(files), f"{dockerfile.name}: COPY {' '.join(files)}"


def _source_copy(dest: Path) -> Path:
    """`dest` holding what the wheel is built from (the checkout gets no build/ or egg-info)."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, dest / name)
    for pkg in ("factprobe", "factprobe_ops", "components", "pipelines", "tracking"):  # the wheel's folders (package-dir)
        shutil.copytree(REPO / pkg, dest / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


@pytest.mark.slow  # a setuptools build: ~5 s
def test_the_wheel_builds_without_warnings_and_carries_the_license(tmp_path):
    src = _source_copy(tmp_path / "src")
    # the backend itself (pip -q would hide its warnings); no network: classifiers are not checked against PyPI's list
    build = "import sys, setuptools.build_meta as b; print(b.build_wheel(sys.argv[1]))"
    env = {**os.environ, "VALIDATE_PYPROJECT_NO_NETWORK": "1", "PYTHONWARNINGS": "default"}
    r = subprocess.run(
        [sys.executable, "-c", build, str(tmp_path / "dist")],
        cwd=src,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    # Python warnings (`SetuptoolsDeprecationWarning: ...`, `UserWarning: ...`) and deprecation notices; distutils'
    # "warning: build_py: byte-compiling is disabled" (PYTHONDONTWRITEBYTECODE) is neither
    warnings = [line for line in (r.stdout + r.stderr).splitlines() if re.search(r"[A-Za-z]Warning:|[Dd]eprecat", line)]
    assert warnings == [], "\n".join(warnings)
    wheel = tmp_path / "dist" / r.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        license_file = next(n for n in names if n.endswith(".dist-info/licenses/LICENSE"))
        assert z.read(license_file).decode() == (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "License-Expression: Apache-2.0" in meta.splitlines() and "License-File: LICENSE" in meta.splitlines()
    assert {f"Classifier: {c}" for c in PYPROJECT["project"]["classifiers"]} <= set(meta.splitlines())


# ------------------------------------------------------------------ the wheel in a fresh virtualenv
def _local_torch_wheels() -> list[str]:
    """Folders holding a torch wheel of the installed version: pip's find-links and its wheel cache."""
    version = metadata.version("torch")
    folders = {f for f in os.environ.get("PIP_FIND_LINKS", "").split() if f}
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False).stdout
    folders |= {f for m in re.finditer(r"find-links='([^']*)'", out) for f in m.group(1).split()}
    cached = subprocess.run(
        [sys.executable, "-m", "pip", "cache", "list", "torch", "--format", "abspath"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    folders |= {str(Path(p).parent) for p in cached}
    return sorted(f for f in folders if any(Path(f).glob(f"torch-{version}-*.whl")))


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_wheel_installs_into_a_fresh_virtualenv(tmp_path):
    from factprobe.models.testing import make_tiny_random_model

    src = _source_copy(tmp_path / "src")  # the wheel, built from a copy of the sources
    isolation = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []  # no download when it can
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, "-w", str(tmp_path / "dist"), str(src)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    wheel = next((tmp_path / "dist").glob("factprobe-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert {f"factprobe/finetune/deepspeed_configs/zero{n}.json" for n in range(4)} <= names
    assert (
        "factprobe/datasets/data/" in " ".join(names)
        and "factprobe_ops/tracking/hooks.py" in names
        and not any(n.startswith(("tracking/", "components/", "pipelines/")) for n in names)
    )
    assert not {n.split("/")[0] for n in names} & {"components", "pipelines", "tracking", "configs"}
    base = [
        line.split(":", 1)[1].strip()
        for line in meta.splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    ]
    assert any(r.startswith("torch") and "==" not in r for r in base), base

    # a fresh virtualenv with the base requirements only, at the lock's versions; torch from the local wheel
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    links = [a for f in _local_torch_wheels() for a in ("--find-links", f)]
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-compile",
            "-c",
            str(REPO / "constraints.txt"),
            *links,
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=1000,
        check=False,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "list", "--format", "freeze"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    have = {canonicalize_name(line.split("==")[0]) for line in installed.splitlines() if "==" in line}
    assert not have & {"mlflow", "kfp", "kubeflow", "spacy", "deepspeed", "peft"}, have
    assert "torch" in have and "factprobe" in have

    exe = str(venv / "bin" / "factprobe")
    env = {**os.environ, "FACTPROBE_CACHE": str(tmp_path / "cache"), "MLFLOW_TRACKING_URI": ""}
    env.pop("PYTHONPATH", None)

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([exe, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False)

    r = run("--version")
    assert (r.returncode, r.stdout.strip()) == (0, f"factprobe {factprobe.__version__}"), r.stderr[-2000:]

    model = make_tiny_random_model("llama", tmp_path / "models")
    r = run(
        "probe",
        "ic-lke",
        "--model",
        str(model),
        "--source",
        "countryinfo",
        "--max-facts-per-relation",
        "2",
        "--out",
        str(tmp_path / "run"),
        "--no-progress",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"results in {tmp_path / 'run'}" in r.stdout and "Traceback" not in r.stderr + r.stdout
    assert "mlflow" not in (r.stdout + r.stderr).lower()  # no tracking hook, no warning about it
    assert (tmp_path / "run" / "metrics.json").is_file() and not (tmp_path / "mlruns.db").exists()

    r = run("pipeline", "--help")
    assert r.returncode == 2 and r.stdout == "", r.stderr[-2000:]
    assert r.stderr.strip() == "error: factprobe pipeline needs kfp, which is not installed: pip install 'factprobe[kubeflow]'"


def test_the_wheel_lists_every_package_and_maps_the_top_level_folders():
    """pyproject.toml lists every package folder (a new subpackage must be added), and the user's top-level
    components/, pipelines/ and tracking/ install as factprobe_ops.components/.pipelines/.tracking (issue 38 item 6)."""
    from tests.package_map import package_roots

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"] == {
        "factprobe_ops.components": "components",
        "factprobe_ops.pipelines": "pipelines",
        "factprobe_ops.tracking": "tracking",
    }
    folders = {
        ".".join([name, *init.parent.relative_to(root).parts])
        for name, root in package_roots().items()
        for init in root.rglob("__init__.py")
    }
    data_only = {"factprobe.datasets.data", "factprobe.finetune.deepspeed_configs"}  # package data, no __init__
    assert set(config["packages"]) == folders | data_only, set(config["packages"]) ^ (folders | data_only)
    for name in ("components", "pipelines", "tracking"):
        assert (REPO / name / "__init__.py").exists() and not (REPO / "factprobe_ops" / name).exists()
