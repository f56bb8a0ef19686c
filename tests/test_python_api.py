"""The Python API and the version (issue 31 item 6).

- `import factprobe` gives `__version__` (the installed distribution's, pyproject.toml's for a source
  checkout) and imports neither torch, transformers nor pandas; the API functions load on first use.
- `factprobe --version` prints it.
- docs/python-api.md's example runs as written: its ```python block under "## Example" is executed with
  a TINY RANDOM model in place of `MODEL` and this machine's data folder in place of `DATA` (no number
  here is a result), and its comparison equals `factprobe compare --json`'s.
- `factprobe.compare` reads each run's declared verdict and headline metric; bad input is one line.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import factprobe
from factprobe.errors import ConfigError, DataError

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "python-api.md"


def _pyproject_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


# ------------------------------------------------------------------ version and a light import
def test_version_is_the_distributions():
    from importlib.metadata import version

    assert factprobe.__version__ == version("factprobe") == _pyproject_version()


def test_version_of_a_source_checkout_comes_from_pyproject(monkeypatch):
    import importlib.metadata

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    from factprobe.version import distribution_version

    assert distribution_version() == _pyproject_version()


def test_import_is_light_and_the_api_loads_on_first_use():
    code = (
        "import sys, factprobe\n"
        "heavy = [m for m in ('torch', 'transformers', 'pandas', 'mlflow') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "print(factprobe.__version__, callable(factprobe.probe), callable(factprobe.compare))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [_pyproject_version(), "True", "True"]
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        factprobe.nothing_here  # noqa: B018


def test_cli_version(capsys):
    from factprobe.cli import main

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"factprobe {_pyproject_version()}"


# ------------------------------------------------------------------ compare and loading, on hand-made run folders
def _run_folder(path: Path, probe: str, correct: dict[str, bool], template: bool = False) -> Path:
    """A finished-looking run folder: results.jsonl rows (fact_id, relation, correct) and run_config.json."""
    path.mkdir(parents=True)
    rows = []
    for fact, ok in correct.items():
        for t in ["t1", "t2", "t3"] if template else [None]:
            rows.append({"fact_id": fact, "relation": fact.split("-")[0], "correct": ok, **({"template": t} if template else {})})
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "run_config.json").write_text(json.dumps({"results_key": "k", "config": {"probe": probe, "model": "m"}}))
    (path / "metrics.json").write_text(json.dumps({"accuracy": sum(correct.values()) / len(correct)}))
    return path


def test_compare_pairs_facts_with_the_probes_verdict_and_metric(tmp_path):
    a = _run_folder(tmp_path / "a", "ic-lke", {"P36-1": True, "P36-2": True, "P19-1": False, "P19-2": False})
    b = _run_folder(
        tmp_path / "b", "hgp", {"P36-1": True, "P36-2": False, "P19-1": True, "P19-2": False, "P19-3": True}, template=True
    )
    res = factprobe.compare(a, b, n_boot=200)
    assert (res["accuracy_a"], res["accuracy_b"], res["n_joined"], res["n_only_b"]) == (0.5, 0.5, 4, 1)
    assert res["eta_pooled_a_given_b"] == 0.5 and res["metric"] == "accuracy"
    assert "reduced to 5 facts" in res["templates"]
    assert factprobe.load_results(b).shape[0] == 15 and factprobe.load_metrics(a)["accuracy"] == 0.5
    assert factprobe.load_config(b) == {"probe": "hgp", "model": "m"}


def test_compare_refuses_a_probe_without_a_verdict(tmp_path):
    a = _run_folder(tmp_path / "a", "ic-lke", {"P36-1": True})
    qa = _run_folder(tmp_path / "qa", "qa", {"P36-1": True})
    with pytest.raises(ConfigError, match=r"^run b \(.*qa\) is a qa run \(closed-book QA.*\), with no verdict per fact"):
        factprobe.compare(a, qa)
    with pytest.raises(ConfigError, match=r"^templates='most': choose one of majority, any, all$"):
        factprobe.compare(a, a, templates="most")


def test_loading_bad_folders_is_one_line(tmp_path):
    with pytest.raises(DataError, match=r"no results\.jsonl here"):
        factprobe.load_results(tmp_path)
    with pytest.raises(DataError, match=r"no metrics\.json here"):
        factprobe.load_metrics(tmp_path)
    (tmp_path / "results.jsonl").write_text('{"fact_id": "P36-1"}\n{"fact_id": "P3\n')
    with pytest.raises(DataError, match=r"results\.jsonl:2: malformed JSON line"):
        factprobe.load_results(tmp_path)


def test_probe_refuses_an_unknown_option_in_one_line():
    with pytest.raises(ConfigError, match=r"^probe ic-lke: unknown option\(s\) relatons$"):
        factprobe.probe("ic-lke", "smollm2-135m-instruct", relatons="P36")


# ------------------------------------------------------------------ the documented example runs
def doc_example(text: str) -> str:
    """The first ```python block under docs/python-api.md's "## Example" heading."""
    start = text.find("\n## Example")
    assert start >= 0, "docs/python-api.md has no '## Example' section"
    m = re.search(r"```python\n(.*?)```", text[start:], re.DOTALL)
    assert m, "docs/python-api.md's Example section has no ```python block"
    return m.group(1)


def _substituted(code: str, model: Path, data: Path) -> str:
    """`code` with its `MODEL = ...` and `DATA = ...` lines pointing at `model` and `data`."""
    for name, value in (("MODEL", model), ("DATA", data)):
        code, n = re.subn(rf"^{name} = .*$", f"{name} = {str(value)!r}", code, count=1, flags=re.MULTILINE)
        assert n == 1, f"the example has no `{name} = ...` line to substitute"
    return code


@pytest.mark.slow  # two probes on a tiny model
def test_the_documented_example_runs(tiny_model_path, real_data_root, tmp_path, monkeypatch, capsys):
    code = _substituted(doc_example(DOC.read_text()), tiny_model_path("llama"), real_data_root)
    monkeypatch.chdir(tmp_path)  # its runs/... folders land here
    scope: dict = {"__name__": "__doc_example__"}
    exec(compile(code, str(DOC), "exec"), scope)
    printed = capsys.readouterr().out
    assert printed.startswith(f"factprobe {factprobe.__version__}\n") and "IC-LKE accuracy" in printed, printed
    res = scope["res"]
    from factprobe.cli import main
    from factprobe.metrics.json_safe import json_safe

    assert main(["compare", "runs/api-ic", "runs/api-hgp", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    ours = json_safe(res)  # NaN (no fact known by a random model) is null in both
    for key in ("accuracy_a", "accuracy_b", "diff", "diff_ci", "n_joined", "eta_pooled_a_given_b", "mcnemar", "per_relation"):
        assert ours[key] == (cli[key] if cli[key] is None or isinstance(cli[key], (dict, int)) else pytest.approx(cli[key])), key
    # the run repeats from its own run_config.json (item 7): same facts, same verdicts
    again = factprobe.probe("ic-lke", out="runs/again", config="runs/api-ic/run_config.json")
    assert again.results[["fact_id", "correct"]].equals(factprobe.load_results("runs/api-ic")[["fact_id", "correct"]])
