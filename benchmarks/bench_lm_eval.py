"""lm-evaluation-harness with `--model factprobe` against `--model hf`, side by side in one process.

Target (issue 31 item 9): the factprobe model evaluates the task at least 10x faster than `hf`, with
per-item log-likelihoods equal within 1e-4 and the same accuracy.

Workload: a local-data lm-eval task (tests/integrations/lm_eval_task.py, written into a temporary
folder): `--items` (20) 4-option questions "The capital of <subject> is" from LAMA T-REx P36, each
after the same `--shots` (25) solved examples from the LPAQA T-REx training facts (lm-eval's
`first_n` few-shot sampler), `output_type: multiple_choice`, metric `acc`. `smollm2-135m-instruct`,
fp32 on CPU, `--threads` (1) torch threads for both models.

What is timed: both models are built first (loading is left out of the ratio and reported on its
own): `HFLM(pretrained=<cached folder>, device="cpu", dtype="float32", batch_size=--hf-batch-size)`
and `FactprobeLM(pretrained=<same folder>, device="cpu", dtype="float32")`, and one lm-eval
`TaskManager` (it indexes lm-eval's thousands of task files: 20-50 s here, the same for every model,
so it is left out and reported as `task_index_s`). Then
`lm_eval.simple_evaluate(model=<the object>, tasks=[task], log_samples=True)` is run for each in
turn: factprobe, hf, factprobe, ... (`--reps` rounds, so outside load on this shared machine hits
both alike). Reported per model: the median wall seconds of the whole `simple_evaluate` call
(`evaluate_s`, task building and metrics included) and of its `loglikelihood` call alone
(`loglikelihood_s`, the part the model answers). The headline ratio is hf / factprobe of `evaluate_s`;
`loglikelihood_ratio` is the same for the scoring alone. Also: tokens each forwarded (hf: counted
around `HFLM._model_call`, padding included; factprobe: the scorer's prefix + packed tokens), the
largest per-item log-likelihood difference and both accuracies.

Writes `benchmarks/results/lm_eval.json` atomically and prints a summary.
Measured 2026-11-27 on this 2-core machine at load ~13-16: hf 364 s, factprobe 9.1 s per evaluation (39.9x; the
`loglikelihood` calls alone 362 s vs 5.5 s, 65.7x), 22,039 vs 509 tokens forwarded, largest difference 3.3e-5.
That is with the `first_n` sampler (one k-shot block shared by every question); with lm-eval's default sampler each
question has its own examples and the gain is 2.9x (measured for issue 42).
The end-to-end ratio is below the scoring ratio because factprobe's remaining seconds are mostly lm-eval's
own work (building requests and few-shot contexts, metrics: ~4 s of the 9), the same for both models; and
lm-eval's `hf` already forwards a question's one-token choices together (its `logits_cache`).
Run: `.venv/bin/python benchmarks/bench_lm_eval.py` (~7-9 min on a busy 2-core machine: `hf` is most of it).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

TARGET = ("evaluate_ratio", ">=", 10.0)
ALIAS = "smollm2-135m-instruct"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--items", type=int, default=20, help="test questions (4 options each)")
    p.add_argument("--shots", type=int, default=25, help="in-context examples before every question")
    p.add_argument("--reps", type=int, default=1, help="rounds of (factprobe, hf); factprobe also runs once more at the end")
    p.add_argument("--threads", type=int, default=1, help="torch threads for both models")
    p.add_argument("--hf-batch-size", type=int, default=1, help="HFLM batch_size (lm-eval's default is 1)")
    p.add_argument("--out", default=str(HERE / "results" / "lm_eval.json"))
    return p.parse_args(argv)


def loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _timed_loglikelihood(lm, spent: list[float]) -> None:
    """Wrap `lm.loglikelihood` so that each call's wall seconds are appended to `spent`."""
    inner = lm.loglikelihood

    def timed(requests, *args, **kwargs):
        t = time.perf_counter()
        try:
            return inner(requests, *args, **kwargs)
        finally:
            spent.append(time.perf_counter() - t)

    lm.loglikelihood = timed


def _counted_model_call(lm, counter: list[int]) -> None:
    """Count the token positions HFLM forwards (batch x length of every `_model_call`)."""
    inner = lm._model_call

    def counted(inps, *args, **kwargs):
        counter[0] += int(inps.numel())
        return inner(inps, *args, **kwargs)

    lm._model_call = counted


def evaluate(lm, task_manager, task: str) -> tuple[float, dict]:
    """Wall seconds of one `lm_eval.simple_evaluate` of `task` on the model object `lm`, and its output."""
    import lm_eval

    t = time.perf_counter()
    out = lm_eval.simple_evaluate(model=lm, tasks=[task], task_manager=task_manager, log_samples=True, verbosity="ERROR")
    return time.perf_counter() - t, out


def main(argv=None) -> int:
    args = parse_args(argv)
    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from factprobe.io import atomic_write_json
    from factprobe.lm.models import prepare_alias
    from factprobe.lm_eval_model import FactprobeLM
    from factprobe.paths import data_root
    from tests.integrations.lm_eval_task import TASK, build_task

    load_start = loadavg()
    path = str(prepare_alias(ALIAS))
    with tempfile.TemporaryDirectory() as tmp:
        task_dir = build_task(data_root(), Path(tmp) / "task", items=args.items, shots=args.shots)
        t = time.perf_counter()
        task_manager = TaskManager(include_path=str(task_dir))  # indexes lm-eval's own task folders: once, untimed
        index_s = time.perf_counter() - t
        t = time.perf_counter()
        hf = HFLM(pretrained=path, device="cpu", dtype="float32", batch_size=args.hf_batch_size)
        load_hf = time.perf_counter() - t
        t = time.perf_counter()
        ours = FactprobeLM(pretrained=path, device="cpu", dtype="float32")
        load_ours = time.perf_counter() - t
        ll_time = {"factprobe": [], "hf": []}
        _timed_loglikelihood(ours, ll_time["factprobe"])
        _timed_loglikelihood(hf, ll_time["hf"])
        hf_tokens = [0]
        _counted_model_call(hf, hf_tokens)
        wall = {"factprobe": [], "hf": []}
        runs = {}
        order = [("factprobe", ours), ("hf", hf)] * args.reps + [("factprobe", ours)]
        for name, lm in order:
            stats_before = ours.scorer.stats.prefix_tokens + ours.scorer.stats.packed_tokens
            hf_before = hf_tokens[0]
            seconds, runs[name] = evaluate(lm, task_manager, TASK)
            wall[name].append(seconds)
            tokens = (
                ours.scorer.stats.prefix_tokens + ours.scorer.stats.packed_tokens - stats_before
                if name == "factprobe"
                else hf_tokens[0] - hf_before
            )
            print(
                f"{name}: {seconds:.2f} s evaluate, {ll_time[name][-1]:.2f} s loglikelihood, {tokens} tokens forwarded",
                flush=True,
            )
            runs[name + "_tokens"] = tokens
        lls = {n: np.array([[r[0] for r in s["filtered_resps"]] for s in runs[n]["samples"][TASK]]) for n in ("factprobe", "hf")}
        acc = {n: runs[n]["results"][TASK]["acc,none"] for n in ("factprobe", "hf")}
        per_item_same = [s["acc"] for s in runs["factprobe"]["samples"][TASK]] == [s["acc"] for s in runs["hf"]["samples"][TASK]]

    med = {n: statistics.median(wall[n]) for n in wall}
    med_ll = {n: statistics.median(ll_time[n]) for n in ll_time}
    res = {
        "benchmark": "lm_eval",
        "workload": {
            "task": TASK,
            "items": args.items,
            "options": 4,
            "shots": args.shots,
            "model": ALIAS,
            "dtype": "float32",
            "device": "cpu",
            "relation": "P36",
            "fewshot_sampler": "first_n",
            "hf_batch_size": args.hf_batch_size,
        },
        "evaluate_s": {n: round(v, 3) for n, v in med.items()},
        "evaluate_s_all": {n: [round(v, 3) for v in wall[n]] for n in wall},
        "loglikelihood_s": {n: round(v, 3) for n, v in med_ll.items()},
        "load_s": {"factprobe": round(load_ours, 2), "hf": round(load_hf, 2)},
        "task_index_s": round(index_s, 2),
        "evaluate_ratio": round(med["hf"] / med["factprobe"], 2),
        "loglikelihood_ratio": round(med_ll["hf"] / med_ll["factprobe"], 2),
        "tokens_forwarded": {"factprobe": runs["factprobe_tokens"], "hf": runs["hf_tokens"]},
        "max_abs_loglikelihood_diff": float(np.abs(lls["factprobe"] - lls["hf"]).max()),
        "accuracy": acc,
        "accuracy_identical": acc["factprobe"] == acc["hf"] and per_item_same,
        "target": f"{TARGET[0]} {TARGET[1]} {TARGET[2]:g}",
        "loadavg_start": load_start,
        "loadavg_end": loadavg(),
        "machine": {
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "python": platform.python_version(),
        },
    }
    res["passed"] = bool(
        res["evaluate_ratio"] >= TARGET[2] and res["max_abs_loglikelihood_diff"] <= 1e-4 and res["accuracy_identical"]
    )
    atomic_write_json(args.out, res)
    print(f"lm-eval {TASK}: {args.items} items x 4 options after {args.shots} shots, {ALIAS} fp32 CPU, {args.threads} thread(s)")
    print(
        f"  evaluate: hf {med['hf']:.2f} s, factprobe {med['factprobe']:.2f} s -> {res['evaluate_ratio']}x "
        f"(loglikelihood alone: {res['loglikelihood_ratio']}x; tokens {res['tokens_forwarded']['hf']} vs "
        f"{res['tokens_forwarded']['factprobe']})"
    )
    print(
        f"  max |ll diff| {res['max_abs_loglikelihood_diff']:.2e}, acc hf {acc['hf']} factprobe {acc['factprobe']}, "
        f"target {res['target']}: {'passed' if res['passed'] else 'NOT passed'}; load {load_start} -> {res['loadavg_end']}"
    )
    print(f"  wrote {os.path.relpath(args.out, REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
