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
    capsys.readouterr()  # what building the tiny model printed (DeepSpeed's import line) is not the example's
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


# ------------------------------------------------------------------ issue 42 item 4: the caller's process is the caller's
def _items(tmp_path: Path, n: int = 2) -> Path:
    recs = (ROOT / "examples" / "mc_items" / "cloze.jsonl").read_text().splitlines()[:n]
    data = tmp_path / "items.jsonl"
    data.write_text("".join(line + "\n" for line in recs))
    return data


def _settings() -> dict:
    """What a library user of factprobe.probe may have set in their process."""
    import logging
    import os
    import warnings

    import huggingface_hub.utils as hub_utils
    import torch
    import transformers

    return {
        "torch threads": torch.get_num_threads(),
        "transformers verbosity": transformers.logging.get_verbosity(),
        "transformers bars": transformers.utils.logging.is_progress_bar_enabled(),
        "hub bars disabled": hub_utils.are_progress_bars_disabled(),
        "warning filters": list(warnings.filters),
        "logger levels": {n: logging.getLogger(n).level for n in ("transformers", "accelerate", "huggingface_hub")},
        "logger filters": {n: list(logging.getLogger(n).filters) for n in ("transformers", "accelerate", "huggingface_hub")},
        "env": {
            k: os.environ.get(k)
            for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TRANSFORMERS_VERBOSITY", "HF_HUB_DISABLE_PROGRESS_BARS")
        },
    }


@pytest.fixture
def caller_settings(monkeypatch):
    """A library user's own settings, undone after the test whatever it did."""
    import warnings

    import huggingface_hub.utils as hub_utils
    import torch
    import transformers

    saved = (torch.get_num_threads(), transformers.logging.get_verbosity(), list(warnings.filters))
    for var in (
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "TRANSFORMERS_VERBOSITY",
        "HF_HUB_DISABLE_PROGRESS_BARS",
        "OMP_WAIT_POLICY",
    ):
        monkeypatch.delenv(var, raising=False)
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_info()
    transformers.logging.enable_progress_bar()
    hub_utils.enable_progress_bars()
    warnings.simplefilter("always", FutureWarning)  # a caller who wants to see every FutureWarning
    yield
    torch.set_num_threads(saved[0])
    transformers.logging.set_verbosity(saved[1])
    warnings.filters[:] = saved[2]


@pytest.mark.slow  # a probe run on a tiny model
def test_probe_restores_the_callers_settings_and_honours_their_thread_count(tiny_model_path, tmp_path, caller_settings):
    model = str(tiny_model_path("llama"))  # built (imports and all) before the settings are read
    before = _settings()
    out = factprobe.probe("mc-items", model, tmp_path / "run", data=str(_items(tmp_path)), device="cpu")
    assert out.metrics["threads"] == 1  # the caller's torch.set_num_threads(1)
    assert _settings() == before


@pytest.mark.slow
def test_probe_with_its_own_count_and_a_users_variable_restores_both(tiny_model_path, tmp_path, caller_settings, monkeypatch):
    import os

    import torch

    model = str(tiny_model_path("llama"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    torch.set_num_threads(2)
    before = _settings()
    out = factprobe.probe("mc-items", model, tmp_path / "run", data=str(_items(tmp_path)), device="cpu", threads=1)
    assert out.metrics["threads"] == 1 and _settings() == before
    assert os.environ["OMP_NUM_THREADS"] == "1" and "MKL_NUM_THREADS" not in os.environ


# ------------------------------------------------------------------ a model already in memory
@pytest.fixture
def in_memory(tiny_model_path):
    """The tiny RANDOM llama loaded by the caller with transformers (model, tokenizer), and its folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = tiny_model_path("llama")
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path), path


@pytest.mark.slow
def test_a_model_in_memory_is_probed_and_identified_by_its_content(in_memory, tmp_path):
    import numpy as np
    import torch

    model, tok, path = in_memory
    model.train()  # the caller's mode: put back after the call
    pad = tok.pad_token
    data = str(_items(tmp_path, 3))
    mem = factprobe.probe("mc-items", model=model, tokenizer=tok, out=tmp_path / "mem", data=data)
    by_name = factprobe.probe("mc-items", str(path), tmp_path / "name", data=data, device="cpu")
    revision = mem.metrics["model_revision"]
    assert re.fullmatch(r"memory-sha256:[0-9a-f]{64}", revision), revision
    assert mem.metrics["identity"]["model_revision"] == revision and mem.metrics["model"] == "memory:tiny-random-llama"
    assert factprobe.load_config(tmp_path / "mem")["model"] == "memory:tiny-random-llama"
    for a, b in zip(mem.results.to_dict("records"), by_name.results.to_dict("records"), strict=True):
        assert a["prediction"] == b["prediction"]
        np.testing.assert_allclose(a["logprobs"], b["logprobs"], atol=1e-5, rtol=0)
    assert model.training and all(m.training for m in model.modules()) and tok.pad_token == pad  # not changed
    # the same content (another load, a pair, a tokenizer used in between) is the same run: resumed
    from transformers import AutoModelForCausalLM, AutoTokenizer

    again_tok = AutoTokenizer.from_pretrained(path)
    again_tok("some text", truncation=True, max_length=4, padding="max_length")
    again = factprobe.probe(
        "mc-items", model=(AutoModelForCausalLM.from_pretrained(path), again_tok), out=tmp_path / "mem", data=data
    )
    assert again.n_resumed == 3 and again.n_scored_now == 0 and again.metrics["model_revision"] == revision
    # one weight changed: another revision, and the folder of the first is refused in one line
    with torch.no_grad():
        model.model.norm.weight[0] += 1.0
    with pytest.raises(ConfigError, match="memory-sha256:"):
        factprobe.probe("mc-items", model=model, tokenizer=tok, out=tmp_path / "mem", data=data)
    other = factprobe.probe("mc-items", model=model, tokenizer=tok, out=tmp_path / "mem2", data=data)
    assert other.metrics["model_revision"] != revision


def test_content_revision_covers_weights_config_and_tokenizer(in_memory):
    import torch

    from factprobe.models.in_memory import content_revision

    model, tok, path = in_memory
    from transformers import AutoModelForCausalLM, AutoTokenizer

    first = content_revision(model, tok)
    assert first == content_revision(AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path))
    changed_tok = AutoTokenizer.from_pretrained(path)
    changed_tok.add_tokens(["zzqx"])
    assert content_revision(model, changed_tok) != first
    model.config.rope_theta = 1234.0
    assert content_revision(model, tok) != first
    model = AutoModelForCausalLM.from_pretrained(path)
    with torch.no_grad():
        model.lm_head.weight[3, 2] = model.lm_head.weight[3, 2] * 1.001
    assert content_revision(model, tok) != first


def test_a_model_in_memory_is_checked_as_a_loaded_one(tiny_model_path, in_memory, tmp_path):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    model, tok, _ = in_memory
    data = str(_items(tmp_path))
    bert = tiny_model_path("bert")
    with pytest.raises(ConfigError, match=r"^model memory:tiny-random-bert is a masked LM; probe mc-items accepts causal"):
        factprobe.probe(
            "mc-items",
            model=AutoModelForMaskedLM.from_pretrained(bert),
            tokenizer=AutoTokenizer.from_pretrained(bert),
            data=data,
            out=tmp_path / "b",
        )
    with pytest.raises(ConfigError, match=r"needs its tokenizer"):
        factprobe.probe("mc-items", model=model, data=data, out=tmp_path / "c")
    with pytest.raises(ConfigError, match=r"^device, dtype do\(es\) not apply to a model given in memory"):
        factprobe.probe("mc-items", model=model, tokenizer=tok, data=data, device="cpu", dtype="float32", out=tmp_path / "d")
    with pytest.raises(ConfigError, match=r"tokenizer= goes with a model object"):
        factprobe.probe("mc-items", str(tiny_model_path("llama")), tokenizer=tok, data=data, out=tmp_path / "e")


# ------------------------------------------------------------------ issue 41 item 8: four threads at once
@pytest.mark.slow  # a fresh process: the first imports of transformers are what raced
def test_concurrent_probe_calls_all_succeed_and_leave_the_process_working(tiny_model_path, tmp_path):
    data = _items(tmp_path)
    code = f"""
import threading, factprobe
model, data, root = {str(tiny_model_path("llama"))!r}, {str(data)!r}, {str(tmp_path)!r}
results = {{}}
def go(i):
    try:
        out = factprobe.probe("mc-items", model, f"{{root}}/t{{i}}", data=data, device="cpu")
        results[i] = "ok %d" % len(out.results)
    except Exception as e:
        results[i] = "FAIL %s: %s" % (type(e).__name__, str(e)[:300])
threads = [threading.Thread(target=go, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
go(9)  # the process still loads a model afterwards
print(sorted(results.items()))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str([(i, "ok 2") for i in (0, 1, 2, 3, 9)]), (done.stdout, done.stderr[-2000:])
