"""lm-evaluation-harness: factprobe against lm-eval's `--model hf`, the whole command, `simple_evaluate` and scoring alone.

Targets: issue 31 item 9 (`simple_evaluate` with the shared few-shot block at least 10x `hf`, per-item
log-likelihoods within 1e-4, the same accuracy); issue 40 item 5 (report the whole-command ratio too, and
every ratio with both few-shot samplers, side by side in one run).

Workload: a local-data lm-eval task (tests/integrations/lm_eval_task.py, written into a temporary folder):
`--items` 4-option questions "The capital of <subject> is" from LAMA T-REx P36, each after `--shots` solved
examples from the LPAQA T-REx training facts, `output_type: multiple_choice`, metric `acc`, built twice:
- `first_n`: every question gets the same k-shot block (as MMLU-style tasks do; task `factprobe_capitals`);
- `default`: lm-eval's default sampler, each question draws its own examples from a pool of 4 x `--shots`
  (task `factprobe_capitals_default`): only a question's own choices share its context.
The model is `--model` (default `smollm2-135m-instruct` from the factprobe cache, or a folder), float32 on
the CPU, `--threads` (1) for both sides. Per sampler, three levels, each as the ratio hf / factprobe:

1. *whole command* (`command`): `factprobe-lm-eval --model factprobe ... --threads N` against
   `lm_eval --model hf ...` with `OMP_NUM_THREADS=N` (lm-eval has no thread flag), both as subprocesses
   with the same task, model folder, `--device cpu`, `dtype=float32`, `--log_samples`: wall seconds from
   start to exit, so Python start-up, lm-eval's task index (it reads thousands of task files: 20-50 s here,
   the same for both), the model load and the evaluation all count, as a user sees them;
2. *`simple_evaluate`* (`evaluate`): both models built once in this process (loads reported as `load_s`, the
   task index once as `task_index_s`), then `lm_eval.simple_evaluate(model=<object>, ...)`: request
   building, few-shot contexts, scoring and metrics;
3. *scoring alone* (`scoring`): the `loglikelihood` calls inside those `simple_evaluate` runs (timed around
   `lm.loglikelihood`).

factprobe runs `--reps` (3) times and `hf` `--hf-reps` (1) times per level (hf is most of the run time),
interleaved (factprobe, hf, factprobe, factprobe) so outside load hits both alike; medians. Each level has
its wall-seconds ratio (`ratio`, the headline) and its CPU-seconds ratio (`cpu_ratio`: the process's CPU time
in process, the child's for a command), which a busy machine moves much less than wall time. Also per
sampler: tokens each side forwarded in process (hf: counted around `HFLM._model_call`, padding included;
factprobe: the scorer's prefix + packed tokens), the largest per-item log-likelihood difference (in process
and between the two commands' logged samples) and both accuracies. The load average before and after is
recorded and printed (this machine is shared; absolute seconds are inflated, the interleaving keeps the
ratios fair).

Writes `--out` (`benchmarks/results/lm_eval.json`) atomically and prints a summary; `benchmarks/README.md`,
"lm-evaluation-harness", has the numbers. Run: `.venv/bin/python benchmarks/bench_lm_eval.py` (about
15-20 min on the busy 2-core machine; `hf` is most of it); smallest: `--items 2 --shots 2 --reps 1`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from portable_paths import portable  # benchmarks/ is sys.path[0] when a bench runs

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.integrations.lm_eval_task import SAMPLERS, build_task, task_name

#: issue 31 item 9: simple_evaluate with the shared block; exactness for every sampler and level
TARGET = ("evaluate_ratio_first_n", ">=", 10.0)
MAX_LL_DIFF = 1e-4
ALIAS = "smollm2-135m-instruct"
LEVELS = ("command", "evaluate", "scoring")
#: variables a run's thread count or policy is read from: cleared so each side gets only what is set here
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "FACTPROBE_THREAD_POLICY")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--items", type=int, default=10, help="test questions (4 options each)")
    p.add_argument("--shots", type=int, default=25, help="in-context examples before every question")
    p.add_argument("--reps", type=int, default=3, help="factprobe runs per level and sampler (median)")
    p.add_argument("--hf-reps", type=int, default=1, help="hf runs per level and sampler (median; at most --reps)")
    p.add_argument("--threads", type=int, default=1, help="torch threads for both sides")
    p.add_argument("--hf-batch-size", type=int, default=1, help="HFLM batch_size (lm-eval's default is 1)")
    p.add_argument("--samplers", default=",".join(SAMPLERS), help="few-shot samplers, comma-separated")
    p.add_argument("--parts", default="command,evaluate", help="command (subprocesses) and/or evaluate (in process)")
    p.add_argument("--model", default=ALIAS, help="a factprobe alias or a local model folder")
    p.add_argument("--out", default=str(HERE / "results" / "lm_eval.json"))
    args = p.parse_args(argv)
    args.samplers = [s for s in args.samplers.split(",") if s]
    args.parts = [s for s in args.parts.split(",") if s]
    if not set(args.samplers) <= set(SAMPLERS) or not set(args.parts) <= {"command", "evaluate"} or not args.parts:
        p.error(f"--samplers takes {', '.join(SAMPLERS)}; --parts takes command, evaluate")
    if not 1 <= args.hf_reps <= args.reps:
        p.error("--hf-reps must be between 1 and --reps")
    return args


def loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def schedule(reps: int, hf_reps: int) -> list[str]:
    """The order of runs: (factprobe, hf) `hf_reps` times, then factprobe until it has `reps` runs."""
    return ["factprobe", "hf"] * hf_reps + ["factprobe"] * (reps - hf_reps)


def ratio(seconds: dict[str, list[float]]) -> float:
    """median(hf) / median(factprobe)."""
    return round(statistics.median(seconds["hf"]) / statistics.median(seconds["factprobe"]), 2)


def level_summary(samples: dict[str, list[tuple[float, float]]]) -> dict:
    """One level's (wall, CPU) seconds per side: medians, every sample, and the ratios hf / factprobe
    (`ratio` of wall seconds, the headline; `cpu_ratio` of CPU seconds, which outside load moves less)."""
    wall = {n: [w for w, _ in v] for n, v in samples.items()}
    cpu = {n: [c for _, c in v] for n, v in samples.items()}
    return {
        "wall_s": {n: round(statistics.median(v), 3) for n, v in wall.items()},
        "wall_s_all": {n: [round(x, 3) for x in v] for n, v in wall.items()},
        "ratio": ratio(wall),
        "cpu_s": {n: round(statistics.median(v), 3) for n, v in cpu.items()},
        "cpu_s_all": {n: [round(x, 3) for x in v] for n, v in cpu.items()},
        "cpu_ratio": ratio(cpu),
    }


def children_cpu() -> float:
    """User + system CPU seconds of this process's waited-for children so far."""
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def max_diff(a: dict[int, list[float]], b: dict[int, list[float]]) -> float:
    """Largest |difference| of per-choice log-likelihoods over the documents of both (same docs and choices)."""
    if sorted(a) != sorted(b) or any(len(a[d]) != len(b[d]) for d in a):
        raise ValueError("the two runs scored different documents or choices")
    return max((abs(x - y) for d in a for x, y in zip(a[d], b[d])), default=0.0)


# ------------------------------------------------------------------ the whole command
def command(side: str, model: str, task_dir: Path, task: str, args, out_dir: Path) -> tuple[list[str], dict[str, str]]:
    """(argv, environment overrides) of one side's command line on `task`."""
    common = ["--model_args", f"pretrained={model},dtype=float32", "--device", "cpu", "--tasks", task]
    common += ["--include_path", str(task_dir), "--output_path", str(out_dir), "--log_samples"]
    if side == "factprobe":
        return [_script("factprobe-lm-eval"), "--model", "factprobe", *common, "--threads", str(args.threads)], {}
    threads = str(args.threads)
    argv = [_script("lm_eval"), "--model", "hf", *common, "--batch_size", str(args.hf_batch_size)]
    return argv, {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}


def _script(name: str) -> str:
    """The console script `name` next to this Python, else on PATH."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if not found:
        raise SystemExit(f"error: {name} not found next to {sys.executable} or on PATH")
    return found


def run_command(
    argv: list[str], env: dict[str, str], out_dir: Path, task: str
) -> tuple[tuple[float, float], dict[int, list[float]], float]:
    """Run one command line; ((wall, CPU seconds), {doc_id: per-choice log-likelihoods}, acc), the last two
    from its logged samples."""
    full_env = {k: v for k, v in os.environ.items() if k not in THREAD_ENV}
    full_env.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **env})
    t, c = time.perf_counter(), children_cpu()
    done = subprocess.run(argv, env=full_env, cwd=REPO, capture_output=True, text=True, check=False)
    wall, cpu = time.perf_counter() - t, children_cpu() - c
    if done.returncode != 0:
        raise SystemExit(f"error: {Path(argv[0]).name} exited {done.returncode}:\n{done.stderr[-3000:]}")
    (samples,) = out_dir.rglob(f"samples_{task}_*.jsonl")
    rows = [json.loads(line) for line in samples.read_text().splitlines() if line.strip()]
    lls = {r["doc_id"]: [float(resp[0]) for resp in r["filtered_resps"]] for r in rows}
    return (wall, cpu), lls, statistics.fmean(float(r["acc"]) for r in rows)


def run_commands(model: str, task_dir: Path, task: str, args, tmp: Path) -> dict:
    """The `command` level of one sampler: both commands by `schedule`, medians, ratio, log-likelihoods compared."""
    seconds: dict[str, list[tuple[float, float]]] = {"factprobe": [], "hf": []}
    lls, acc, argvs = {}, {}, {}
    for i, side in enumerate(schedule(args.reps, args.hf_reps)):
        out_dir = tmp / f"{task}-{side}-{i}"
        argv, env = command(side, model, task_dir, task, args, out_dir)
        timing, lls[side], acc[side] = run_command(argv, env, out_dir, task)
        seconds[side].append(timing)
        argvs[side] = {"argv": [Path(argv[0]).name, *argv[1:]], "env": env}
        print(f"  command {side}: {timing[0]:.1f} s ({timing[1]:.1f} s CPU)", flush=True)
    return {
        **level_summary(seconds),
        "max_abs_loglikelihood_diff": max_diff(lls["factprobe"], lls["hf"]),
        "accuracy": acc,
        "commands": argvs,
    }


# ------------------------------------------------------------------ in process
def _timed_loglikelihood(lm, spent: list[tuple[float, float]]) -> None:
    """Wrap `lm.loglikelihood` so that each call's (wall, process CPU) seconds are appended to `spent`."""
    inner = lm.loglikelihood

    def timed(requests, *a, **kw):
        t, c = time.perf_counter(), time.process_time()
        try:
            return inner(requests, *a, **kw)
        finally:
            spent.append((time.perf_counter() - t, time.process_time() - c))

    lm.loglikelihood = timed


def _counted_model_call(lm, counter: list[int]) -> None:
    """Count the token positions HFLM forwards (batch x length of every `_model_call`)."""
    inner = lm._model_call

    def counted(inps, *a, **kw):
        counter[0] += int(inps.numel())
        return inner(inps, *a, **kw)

    lm._model_call = counted


class InProcess:
    """Both models built once, the task index once; `run(task)` gives the `evaluate` and `scoring` levels."""

    def __init__(self, model: str, task_dir: Path, args) -> None:
        from lm_eval.models.huggingface import HFLM
        from lm_eval.tasks import TaskManager

        from factprobe.lm_eval_model import FactprobeLM

        self.args = args
        t = time.perf_counter()
        self.task_manager = TaskManager(include_path=str(task_dir))
        self.task_index_s = time.perf_counter() - t
        t = time.perf_counter()
        self.models = {"hf": HFLM(pretrained=model, device="cpu", dtype="float32", batch_size=args.hf_batch_size)}
        self.load_s = {"hf": time.perf_counter() - t}
        t = time.perf_counter()
        self.models["factprobe"] = FactprobeLM(pretrained=model, device="cpu", dtype="float32")
        self.load_s["factprobe"] = time.perf_counter() - t
        self.ll_spent: dict[str, list[tuple[float, float]]] = {"factprobe": [], "hf": []}
        for side, lm in self.models.items():
            _timed_loglikelihood(lm, self.ll_spent[side])
        self.hf_tokens = [0]
        _counted_model_call(self.models["hf"], self.hf_tokens)

    def _tokens(self, side: str) -> int:
        stats = self.models["factprobe"].scorer.stats
        return stats.prefix_tokens + stats.packed_tokens if side == "factprobe" else self.hf_tokens[0]

    def run(self, task: str) -> dict:
        import lm_eval

        seconds: dict[str, list[tuple[float, float]]] = {"factprobe": [], "hf": []}
        scoring: dict[str, list[tuple[float, float]]] = {"factprobe": [], "hf": []}
        outs, tokens = {}, {}
        for side in schedule(self.args.reps, self.args.hf_reps):
            before, n_calls = self._tokens(side), len(self.ll_spent[side])
            t, c = time.perf_counter(), time.process_time()
            outs[side] = lm_eval.simple_evaluate(
                model=self.models[side], tasks=[task], task_manager=self.task_manager, log_samples=True, verbosity="ERROR"
            )
            seconds[side].append((time.perf_counter() - t, time.process_time() - c))
            calls = self.ll_spent[side][n_calls:]
            scoring[side].append((sum(w for w, _ in calls), sum(c for _, c in calls)))
            tokens[side] = self._tokens(side) - before
            print(f"  simple_evaluate {side}: {seconds[side][-1][0]:.1f} s, scoring {scoring[side][-1][0]:.1f} s", flush=True)
        samples = {s: outs[s]["samples"][task] for s in outs}
        lls = {s: {r["doc_id"]: [float(x[0]) for x in r["filtered_resps"]] for r in samples[s]} for s in samples}
        acc = {s: outs[s]["results"][task]["acc,none"] for s in outs}
        same = [r["acc"] for r in samples["factprobe"]] == [r["acc"] for r in samples["hf"]]
        return {
            "evaluate": level_summary(seconds),
            "scoring": level_summary(scoring),
            "tokens_forwarded": tokens,
            "max_abs_loglikelihood_diff": max_diff(lls["factprobe"], lls["hf"]),
            "accuracy": acc,
            "accuracy_identical": bool(same and acc["factprobe"] == acc["hf"]),
        }


# ------------------------------------------------------------------ the run
def judge(by_sampler: dict) -> dict:
    """Targets: the first_n simple_evaluate ratio (when measured), and every measured log-likelihood within
    `MAX_LL_DIFF` with identical accuracies."""
    diffs = [lv["max_abs_loglikelihood_diff"] for s in by_sampler.values() for lv in (s, s.get("command", {})) if lv]
    exact = all(d <= MAX_LL_DIFF for d in diffs) and all(s.get("accuracy_identical", True) for s in by_sampler.values())
    evaluate = by_sampler.get("first_n", {}).get("evaluate")
    return {
        "target": f"{TARGET[0]} {TARGET[1]} {TARGET[2]:g}; every max |ll diff| <= {MAX_LL_DIFF:g}; same accuracy",
        "passed": bool(exact and (evaluate is None or evaluate["ratio"] >= TARGET[2])),
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    from factprobe.io import atomic_write_json
    from factprobe.models import prepare_alias
    from factprobe.paths import data_root

    load_start = loadavg()
    cpus = os.cpu_count() or 1
    model = args.model if Path(args.model).is_dir() else str(prepare_alias(args.model))
    by_sampler: dict[str, dict] = {}
    res: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        task_dir = Path(tmp) / "task"
        for sampler in args.samplers:
            build_task(data_root(), task_dir, items=args.items, shots=args.shots, sampler=sampler)
        inproc = InProcess(model, task_dir, args) if "evaluate" in args.parts else None
        if inproc:
            res["task_index_s"] = round(inproc.task_index_s, 2)
            res["load_s"] = {n: round(v, 2) for n, v in inproc.load_s.items()}
        for sampler in args.samplers:
            task = task_name(sampler)
            print(f"{sampler} ({task}):", flush=True)
            entry = {"task": task}
            if inproc:
                entry.update(inproc.run(task))
            if "command" in args.parts:
                entry["command"] = run_commands(model, task_dir, task, args, Path(tmp))
            by_sampler[sampler] = entry
    res = {
        "benchmark": "lm_eval",
        "workload": {
            "items": args.items,
            "options": 4,
            "shots": args.shots,
            "relation": "P36",
            "model": args.model,
            "dtype": "float32",
            "device": "cpu",
            "threads": args.threads,
            "hf_batch_size": args.hf_batch_size,
            "reps": {"factprobe": args.reps, "hf": args.hf_reps},
            "samplers": args.samplers,
        },
        "ratios": {lv: {s: e[lv]["ratio"] for s, e in by_sampler.items() if lv in e} for lv in LEVELS},
        "by_sampler": by_sampler,
        **res,
        **judge(by_sampler),
        "loadavg_start": load_start,
        "loadavg_end": loadavg(),
        "machine": {
            "cpu_count": cpus,
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "python": platform.python_version(),
        },
    }
    res["machine_loaded"] = max((res["loadavg_start"] or [0])[0], (res["loadavg_end"] or [0])[0]) > cpus
    atomic_write_json(args.out, portable(res))
    report(res, args)
    return 0


def report(res: dict, args) -> None:
    """Print the summary: per sampler, each level's seconds and ratio, then exactness and load."""
    print(f"lm-eval: {args.items} items x 4 options after {args.shots} shots, {args.model} fp32 CPU, {args.threads} thread(s)")
    names = {"command": "whole command", "evaluate": "simple_evaluate", "scoring": "scoring alone"}
    for sampler, e in res["by_sampler"].items():
        print(f"  {sampler}:")
        for lv in LEVELS:
            if lv in e:
                w = e[lv]["wall_s"]
                cpu = f"(CPU time {e[lv]['cpu_ratio']}x)"
                print(f"    {names[lv]:16s} hf {w['hf']:8.2f} s  factprobe {w['factprobe']:7.2f} s  -> {e[lv]['ratio']}x {cpu}")
        diffs = [
            f"{k} {v['max_abs_loglikelihood_diff']:.1e}" for k, v in (("in process", e), ("commands", e.get("command"))) if v
        ]
        print(f"    max |ll diff| {', '.join(diffs)}; accuracy {e.get('accuracy') or e['command']['accuracy']}")
    load = f"load average {res['loadavg_start']} -> {res['loadavg_end']} on {res['machine']['cpu_count']} CPUs"
    if res["machine_loaded"]:
        load = f"the machine was loaded ({load}): seconds are inflated; runs interleaved, so the ratios hold"
    print(f"  {res['target']}: {'passed' if res['passed'] else 'NOT passed'}; {load}")
    print(f"  wrote {os.path.relpath(args.out, REPO)}")


if __name__ == "__main__":
    sys.exit(main())
