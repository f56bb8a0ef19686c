"""`--model factprobe` in lm-evaluation-harness (issue 31 item 9): factprobe.lm_eval_model.

Fast tests compare `FactprobeLM` with lm-eval's own `HFLM` (`--model hf`) on tiny random models,
request by request (log-likelihoods, is_greedy, rolling log-likelihoods, greedy generation); the
`real_model` tests run a local-data lm-eval task (4-option LAMA T-REx P36 items after 25 in-context
examples, tests/integrations/lm_eval_task.py) through `lm_eval.simple_evaluate` and lm-eval's CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("lm_eval")

from lm_eval.api.instance import Instance
from lm_eval.models.huggingface import HFLM

import factprobe.lm_eval_model as lem
from factprobe.errors import ConfigError
from tests.integrations.lm_eval_task import TASK, build_task

REPO = Path(__file__).resolve().parents[2]
#: the k-shot block every question of the fast tests shares (long enough to form a run)
SHOTS = "".join(
    f"The capital of {c} is {k}.\n"
    for c, k in [("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Japan", "Tokyo")]
)


def _requests(kind: str, pairs) -> list[Instance]:
    return [Instance(request_type=kind, doc={}, arguments=args, idx=i) for i, args in enumerate(pairs)]


def _pairs() -> list[tuple[str, str]]:
    """Shared-prefix questions with 4 choices each (choices sharing leading tokens, multi-token ones,
    one that starts with the context's trailing space), a context of its own, a context that is a
    prefix of the others, and an empty context (lm-eval's prefix_token_id rule)."""
    questions = ["The capital of Peru is", "The capital of Canada is ", "Marie Curie was born in"]
    choices = ["Lima", "Limassol", " Ottawa", "Warsaw and Paris"]
    pairs = [(SHOTS + q, c if q.endswith(" ") or c.startswith(" ") else " " + c) for q in questions for c in choices]
    pairs += [
        ("Niels Bohr won in", " 1922"),
        ("Niels Bohr won in", " 1921"),
        (SHOTS.rstrip("\n"), "\nThe"),
        ("", "Paris is a city"),
    ]
    return pairs


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def models(request, tiny_model_path):
    """(FactprobeLM, HFLM) on the same tiny random model folder (llama adds BOS, gpt2 does not)."""
    path = str(tiny_model_path(request.param))
    return lem.FactprobeLM(pretrained=path, device="cpu", token_budget=64), HFLM(pretrained=path, device="cpu")


@pytest.mark.slow  # builds HFLM and FactprobeLM on a tiny model: 2-10 s on a busy 2-core machine
def test_loglikelihoods_and_is_greedy_equal_hf(models):
    ours, hf = models
    reqs = _requests("loglikelihood", _pairs())
    got, want = ours.loglikelihood(reqs, disable_tqdm=True), hf.loglikelihood(reqs, disable_tqdm=True)
    np.testing.assert_allclose([g[0] for g in got], [w[0] for w in want], atol=1e-4, rtol=0)
    assert [g[1] for g in got] == [w[1] for w in want]


@pytest.mark.slow  # builds HFLM and FactprobeLM on a tiny model: 2-10 s on a busy 2-core machine
def test_is_greedy_is_true_for_the_models_own_greedy_continuation(models):
    ours, hf = models
    gen = ours.generator.greedy([SHOTS + "The capital of Peru is"], max_new_tokens=3)[0]
    cont = ours.tokenizer.decode(gen.token_ids[:3])
    reqs = _requests("loglikelihood", [(SHOTS + "The capital of Peru is", cont)])
    (lp, greedy), (hf_lp, hf_greedy) = (
        ours.loglikelihood(reqs, disable_tqdm=True)[0],
        hf.loglikelihood(reqs, disable_tqdm=True)[0],
    )
    assert greedy is hf_greedy is True and abs(lp - hf_lp) < 1e-4


@pytest.mark.slow  # builds HFLM and FactprobeLM on a tiny model: 2-10 s on a busy 2-core machine
def test_each_context_is_forwarded_once(models):
    """4 choices x 3 questions after one shared block: the block runs once, each question's own
    tokens once, and the choices' shared first tokens once (not 12 full sequences)."""
    ours, _ = models
    pairs = _pairs()[:12]
    before = ours.scorer.stats.prefix_tokens + ours.scorer.stats.packed_tokens
    ours.loglikelihood(_requests("loglikelihood", pairs), disable_tqdm=True)
    forwarded = ours.scorer.stats.prefix_tokens + ours.scorer.stats.packed_tokens - before
    naive = sum(len(ours.tok_encode(c.rstrip() + (c[len(c.rstrip()) :] + x))) for c, x in pairs)
    block = len(ours.tok_encode(SHOTS))
    assert forwarded < block + 0.25 * (naive - 12 * block) + 12 * 4, (forwarded, naive)


@pytest.mark.slow  # builds HFLM and FactprobeLM on a tiny model: 2-10 s on a busy 2-core machine
def test_a_trie_over_the_token_budget_is_split_and_still_exact(tiny_model_path):
    path = str(tiny_model_path("llama"))
    ours, hf = lem.FactprobeLM(pretrained=path, device="cpu", token_budget=8), HFLM(pretrained=path, device="cpu")
    reqs = _requests("loglikelihood", [(SHOTS + "Q:", f" answer number {i} is long enough") for i in range(4)])
    got, want = ours.loglikelihood(reqs, disable_tqdm=True), hf.loglikelihood(reqs, disable_tqdm=True)
    np.testing.assert_allclose([g[0] for g in got], [w[0] for w in want], atol=1e-4, rtol=0)


@pytest.mark.slow  # builds HFLM and FactprobeLM on a tiny model: 2-10 s on a busy 2-core machine
def test_a_request_longer_than_the_window_is_cut_from_the_left_as_hf_cuts_it(tiny_model_path):
    path = str(tiny_model_path("gpt2"))
    ours, hf = (lem.FactprobeLM(pretrained=path, device="cpu", max_length=24), HFLM(pretrained=path, device="cpu", max_length=24))
    reqs = _requests("loglikelihood", [(SHOTS, " The capital"), (SHOTS, " The end")])
    got, want = ours.loglikelihood(reqs, disable_tqdm=True), hf.loglikelihood(reqs, disable_tqdm=True)
    np.testing.assert_allclose([g[0] for g in got], [w[0] for w in want], atol=1e-4, rtol=0)


@pytest.mark.slow  # builds HFLM and FactprobeLM on a tiny model: 2-10 s on a busy 2-core machine
def test_rolling_loglikelihood_equals_hf(tiny_model_path):
    path = str(tiny_model_path("llama"))
    ours, hf = (lem.FactprobeLM(pretrained=path, device="cpu", max_length=32), HFLM(pretrained=path, device="cpu", max_length=32))
    reqs = _requests("loglikelihood_rolling", [(SHOTS,), ("Marie Curie was born in Warsaw.",)])
    np.testing.assert_allclose(
        ours.loglikelihood_rolling(reqs, disable_tqdm=True), hf.loglikelihood_rolling(reqs, disable_tqdm=True), atol=1e-4, rtol=0
    )


@pytest.mark.slow  # builds HFLM and FactprobeLM on a tiny model: 2-10 s on a busy 2-core machine
def test_greedy_generate_until_equals_hf(models):
    ours, hf = models
    args = {"until": ["\n", "."], "max_gen_toks": 6, "do_sample": False}
    reqs = _requests(
        "generate_until",
        [(SHOTS + q, dict(args)) for q in ["The capital of Peru is", "The capital of Chile is", "Albert Einstein was born in"]]
        + [("Q: What is", {"until": ["?"], "max_gen_toks": 5})],
    )
    before = ours.generator.stats.forwards
    assert ours.generate_until(reqs, disable_tqdm=True) == hf.generate_until(reqs, disable_tqdm=True)
    assert ours.generator.stats.forwards > before  # factprobe's Generator ran them, not HFLM's fallback


@pytest.mark.slow  # builds HFLM and FactprobeLM on a tiny model: 2-10 s on a busy 2-core machine
def test_prompts_the_generator_would_encode_differently_go_to_hflm(tiny_model_path):
    """A prompt that starts with the BOS text (a chat template's) and one too long for the window
    with max_gen_toks: HFLM's own generate_until answers them, as `--model hf` would."""
    path = str(tiny_model_path("llama"))
    ours, hf = (lem.FactprobeLM(pretrained=path, device="cpu", max_length=48), HFLM(pretrained=path, device="cpu", max_length=48))
    args = {"until": ["\n"], "max_gen_toks": 4}
    reqs = _requests(
        "generate_until", [(ours.tokenizer.bos_token + "The capital of Peru is", dict(args)), (SHOTS * 2, dict(args))]
    )
    assert ours.generator.encode(reqs[0].args[0]) != hf.tok_encode(reqs[0].args[0])  # BOS twice: not the same tokens
    before = ours.generator.stats.forwards
    assert ours.generate_until(reqs, disable_tqdm=True) == hf.generate_until(reqs, disable_tqdm=True)
    assert ours.generator.stats.forwards == before


@pytest.mark.slow  # builds HFLM and FactprobeLM on a tiny model: 2-10 s on a busy 2-core machine
def test_sampling_is_seeded_and_stops_at_the_stop_strings(models):
    ours, _ = models
    reqs = _requests("generate_until", [(SHOTS, {"until": ["."], "max_gen_toks": 8, "do_sample": True, "temperature": 1.0})])
    first, again = ours.generate_until(reqs, disable_tqdm=True), ours.generate_until(reqs, disable_tqdm=True)
    assert first == again and "." not in first[0]


def test_bad_model_args_are_one_line_config_errors(tiny_model_path):
    with pytest.raises(ConfigError, match="pretrained="):
        lem.FactprobeLM(device="cpu")
    with pytest.raises(ConfigError, match="peft="):
        lem.FactprobeLM(pretrained=str(tiny_model_path("gpt2")), device="cpu", peft="some/adapter")
    with pytest.raises(ConfigError, match="true or false"):
        lem.FactprobeLM(pretrained=str(tiny_model_path("gpt2")), device="cpu", trust_remote_code="maybe")


def test_shared_runs_group_contexts_by_what_they_share():
    block = tuple(range(100, 140))
    contexts = [block + (1, 2), (7, 8, 9), block + (3,), block[:20] + (5,), block[:20] + (6, 6)]
    runs = lem.shared_runs(contexts, range(5), 0)
    assert sorted(i for _, m in runs for i in m) == [0, 1, 2, 3, 4]
    assert (0, [1]) in runs and (20, [3, 4, 0, 2]) in runs  # the first 20 tokens of the block: once for four
    assert lem.shared_runs(contexts, [3, 4, 0, 2], 20) == [(20, [3]), (20, [4]), (40, [0, 2])]  # then the rest once
    assert lem.shared_runs(contexts, [0, 2], 40) == [(40, [0]), (40, [2])]  # 1-2 more tokens: not worth a prefix


@pytest.mark.slow  # builds HFLM and FactprobeLM on a tiny model: 2-10 s on a busy 2-core machine
def test_a_nested_block_is_forwarded_once_and_scores_stay_exact(models):
    """Two instructions after one k-shot block, two questions after each: block once, each
    instruction once (nested prefix caches), numbers equal to HF."""
    ours, hf = models
    instr = ["Answer with the city name only, as in an atlas of the world.\n", "Answer with the country name, please.\n"]
    pairs = [(SHOTS + i + q, " Lima") for i in instr for q in ["The capital of Peru is", "The capital of Chile is"]]
    reqs = _requests("loglikelihood", pairs)
    before = ours.scorer.stats.prefix_tokens + ours.scorer.stats.packed_tokens
    got = ours.loglikelihood(reqs, disable_tqdm=True)
    forwarded = ours.scorer.stats.prefix_tokens + ours.scorer.stats.packed_tokens - before
    np.testing.assert_allclose([g[0] for g in got], [w[0] for w in hf.loglikelihood(reqs, disable_tqdm=True)], atol=1e-4, rtol=0)
    once = len(ours.tok_encode(SHOTS + instr[0])) + len(ours.tok_encode(SHOTS + instr[1])) - len(ours.tok_encode(SHOTS))
    assert forwarded <= once + 4 * 12, (forwarded, once)


def test_fit_window_follows_hflm():
    assert lem.fit_window([1, 2, 3], [4, 5], 4) == ([1, 2, 3], [4, 5])  # 5 tokens = max_length + 1: fits
    assert lem.fit_window([1, 2, 3, 4], [5, 6], 4) == ([2, 3, 4], [5, 6])
    with pytest.raises(ConfigError, match="max_length"):
        lem.fit_window([1], [2, 3, 4], 2)


@pytest.mark.slow
def test_the_command_line_says_a_bad_model_arg_in_one_line(real_data_root, tmp_path):
    build_task(real_data_root, tmp_path, items=2, shots=1)
    cmd = [
        sys.executable,
        "-m",
        "factprobe.lm_eval_model",
        "--model",
        "factprobe",
        "--model_args",
        "pretrained=smollm2-135m-instruct,dtype=float8",
        "--tasks",
        TASK,
        "--include_path",
        str(tmp_path),
    ]
    done = subprocess.run(cmd, check=False, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].startswith("error: ") and "float8" in done.stderr.strip().splitlines()[-1]


def test_lm_eval_finds_the_model_by_name():
    from lm_eval.api.registry import get_model

    assert get_model("factprobe") is lem.FactprobeLM
    assert get_model("hf") is HFLM  # lm-eval's own models stay registered next to it


# ---------------------------------------------------------------------------- real model, real task
@pytest.fixture(scope="module")
def task_dir(real_data_root, tmp_path_factory) -> Path:
    return build_task(real_data_root, tmp_path_factory.mktemp("lm-eval-task"), items=8, shots=25)


def _evaluate(model: str, path: Path, task_manager) -> dict:
    import lm_eval

    return lm_eval.simple_evaluate(
        model=model,
        model_args=f"pretrained={path},device=cpu,dtype=float32",
        tasks=[TASK],
        task_manager=task_manager,
        log_samples=True,
    )


@pytest.mark.real_model
def test_local_task_loglikelihoods_and_accuracy_equal_hf(real_model_path, task_dir):
    from lm_eval.tasks import TaskManager

    path = real_model_path("smollm2-135m-instruct")
    task_manager = TaskManager(include_path=str(task_dir))  # indexes lm-eval's own task files: once (20-40 s here)
    ours, hf = _evaluate("factprobe", path, task_manager), _evaluate("hf", path, task_manager)
    lls = {
        name: np.array([[r[0] for r in s["filtered_resps"]] for s in run["samples"][TASK]])
        for name, run in (("factprobe", ours), ("hf", hf))
    }
    assert lls["factprobe"].shape == (8, 4)
    np.testing.assert_allclose(lls["factprobe"], lls["hf"], atol=1e-4, rtol=0)
    assert ours["results"][TASK]["acc,none"] == hf["results"][TASK]["acc,none"]
    assert [s["acc"] for s in ours["samples"][TASK]] == [s["acc"] for s in hf["samples"][TASK]]


@pytest.mark.real_model
def test_lm_eval_command_line_runs_the_factprobe_model(real_model_path, task_dir, tmp_path):
    path = real_model_path("smollm2-135m-instruct")
    cmd = [
        sys.executable,
        "-m",
        "factprobe.lm_eval_model",
        "--model",
        "factprobe",
        "--model_args",
        f"pretrained={path},device=cpu",
        "--tasks",
        TASK,
        "--include_path",
        str(task_dir),
        "--limit",
        "2",
        "--output_path",
        str(tmp_path / "out"),
    ]
    done = subprocess.run(
        cmd, check=False, cwd=REPO, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (result,) = (tmp_path / "out").rglob("results_*.json")
    data = json.loads(result.read_text())
    assert data["config"]["model"] == "factprobe" and 0.0 <= data["results"][TASK]["acc,none"] <= 1.0
