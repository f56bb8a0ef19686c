"""`--model factprobe` checks what the probes check, and `factprobe-lm-eval` runs as factprobe's commands run.

- Issue 41 item 5: a bidirectional model saved under a causal-LM class (RoBERTa as `RobertaForCausalLM`,
  BERT as `BertLMHeadModel`, both without `is_decoder`) is refused as every probe refuses it
  (`factprobe.lm.causality.check_causal`), and a masked LM is one line, not a TypeError traceback.
- Issue 42 item 5: the console script without the `lm-eval` extra is one line naming the extra.
- Issue 40 item 5: the console script applies the thread policy before torch loads (OpenMP's wait
  policy, the count; `--threads N` as on `factprobe`).

Tiny RANDOM models: numbers are never results.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from factprobe.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def console_script(name: str = "factprobe-lm-eval") -> tuple[str, str]:
    """(module, function) that pyproject.toml's console script `name` runs."""
    target = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"][name]
    module, _, func = target.partition(":")
    return module.strip(), func.strip()


def run_script(prelude: str, args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    """The console script's entry point in a fresh process, after `prelude` (Python), with `args`."""
    module, func = console_script()
    code = f"{prelude}\nimport sys\nfrom {module} import {func} as entry\nrc = entry({args!r})\n"
    return subprocess.run(
        [sys.executable, "-c", code + "print('rc', rc)\n"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=240,
        check=False,
        env=env if env is not None else dict(os.environ),
    )


# ------------------------------------------------------------------ the console script
@pytest.mark.slow  # a fresh process
def test_without_the_extra_the_console_script_is_one_line_naming_it():
    done = run_script("import sys; sys.modules['lm_eval'] = None  # lm-eval not installed", ["--model", "factprobe"])
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr and len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith("error: factprobe-lm-eval needs lm-evaluation-harness") and "'factprobe[lm-eval]'" in lines[0]
    assert "rc 2" in done.stdout


@pytest.mark.slow  # a fresh process that imports torch and lm-eval
def test_the_console_script_applies_the_thread_policy_before_torch_loads():
    pytest.importorskip("lm_eval")
    prelude = (
        "import builtins, os, sys\n"
        "seen = {}\n"
        "real_import = builtins.__import__\n"
        "def spy(name, *a, **k):\n"
        "    if name.split('.')[0] == 'torch' and 'torch' not in sys.modules:\n"
        "        seen.setdefault('policy', os.environ.get('OMP_WAIT_POLICY'))\n"
        "        seen.setdefault('count', os.environ.get('OMP_NUM_THREADS'))\n"
        "    return real_import(name, *a, **k)\n"
        "builtins.__import__ = spy\n"
        "import atexit\n"
        "def report():\n"
        "    import torch\n"
        "    from factprobe import threads\n"
        "    print('at torch import', seen.get('policy'), seen.get('count'), 'now', torch.get_num_threads(), threads.current())\n"
        "atexit.register(report)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    done = run_script(prelude, ["--threads", "1", "--help"], env=env)  # lm-eval prints its help and exits 0
    assert "at torch import PASSIVE 1 now 1 1" in done.stdout, (done.stdout[-1500:], done.stderr[-1500:])
    assert "--threads" not in done.stderr  # taken out before lm-eval's parser sees it
    from factprobe.threads import available_cpus

    n = available_cpus()  # without --threads: the policy's count, set before torch loads too
    done = run_script(prelude, ["--help"], env=env)
    assert f"at torch import PASSIVE {n} now {n} {n}" in done.stdout, (done.stdout[-1500:], done.stderr[-1500:])
    done = run_script("", ["--threads", "none", "--help"], env=env)
    assert done.stderr.strip().splitlines() == [
        "error: threads='none': must be a whole number >= 1 (or leave it unset for the CPUs this process may use)"
    ]


# ------------------------------------------------------------------ what the model must be
def _bidirectional(kind: str, bert: Path, out: Path) -> Path:
    """A tiny RANDOM two-way model saved under a causal-LM class, `is_decoder` false, with the BERT tokenizer."""
    import torch
    from transformers import BertConfig, BertLMHeadModel, RobertaConfig, RobertaForCausalLM

    torch.manual_seed(0)
    bert_cfg = BertConfig.from_pretrained(bert)
    if kind == "roberta":
        cfg = RobertaConfig(
            vocab_size=bert_cfg.vocab_size,
            hidden_size=bert_cfg.hidden_size,
            num_hidden_layers=bert_cfg.num_hidden_layers,
            num_attention_heads=bert_cfg.num_attention_heads,
            intermediate_size=bert_cfg.intermediate_size,
            max_position_embeddings=bert_cfg.max_position_embeddings + 2,
            is_decoder=False,
        )
        model = RobertaForCausalLM(cfg)
    else:
        bert_cfg.is_decoder = False
        model = BertLMHeadModel.from_pretrained(bert, config=bert_cfg)
    model.save_pretrained(out)
    for f in bert.iterdir():
        if f.is_file() and f.name not in ("config.json", "model.safetensors"):
            shutil.copy2(f, out / f.name)
    return out


@pytest.mark.slow  # loads lm-eval and a model
@pytest.mark.parametrize("kind", ["roberta", "bert"])
def test_a_bidirectional_model_under_a_causal_class_is_refused(tiny_model_path, tmp_path, kind):
    import factprobe.lm_eval_model as lem
    from factprobe.models import load_model

    path = _bidirectional(kind, tiny_model_path("bert"), tmp_path / kind)
    assert load_model(str(path), device="cpu").kind == "causal"  # the premise: its class says causal
    with pytest.raises(ConfigError, match=rf"^model {path} is not causal: .*is_decoder") as caught:
        lem.FactprobeLM(pretrained=str(path), device="cpu", dtype="float32")
    assert "\n" not in str(caught.value)


@pytest.mark.slow  # loads lm-eval and a model
def test_a_masked_lm_is_one_line(tiny_model_path):
    import factprobe.lm_eval_model as lem

    path = tiny_model_path("bert")
    with pytest.raises(ConfigError, match=rf"^model {path} is a masked LM; --model factprobe scores causal LMs only"):
        lem.FactprobeLM(pretrained=str(path), device="cpu", dtype="float32")


@pytest.mark.slow  # loads lm-eval and a model
def test_a_causal_model_still_loads(tiny_model_path):
    import factprobe.lm_eval_model as lem

    lm = lem.FactprobeLM(pretrained=str(tiny_model_path("llama")), device="cpu", dtype="float32")
    assert lm.loaded.kind == "causal"
