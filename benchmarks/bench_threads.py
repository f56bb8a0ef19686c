"""Thread policy benchmark (issue 30 item 5): two probe runs at once, as the local pipeline runner runs a
ParallelFor's steps, with today's threads against the policy's (factprobe/threads.py), side by side.

Workload: the real IC-LKE probe (`factprobe.framework.runner.run_probe`, the code path of `factprobe probe
ic-lke` and of a pipeline's probe step) on `countryinfo`, `smollm2-135m-instruct`, fp32 on the CPU,
`--facts` facts per relation of `--relations` (default P36,P37), each run into a fresh folder.

Modes (each round starts TWO worker processes at once in one mode, then two in the other; the order of
the modes alternates round by round, so outside load hits both alike):

- today:  what every command did before the policy: torch's default thread count (a fresh process's
          `torch.get_num_threads()`, the node's cores) and OpenMP's default wait policy (spinning for a
          while before sleeping): `OMP_WAIT_POLICY` and `OMP_NUM_THREADS` unset when torch loads;
- policy: what a local pipeline step gets now: `FACTPROBE_STEPS_AT_ONCE=2` and `OMP_WAIT_POLICY=PASSIVE`
          in its environment (pipelines/local_steps.py), threads left to `factprobe.threads.apply`
          (the CPUs this process may use, divided by 2).

Each worker reports the seconds of its `run_probe` call (model load and scoring; imports excluded); a
pair's time is the slower of its two workers. The ratio is today's median pair time over the policy's
(> 1: the policy is faster). Results that differ between the modes are an error (threads never decide
results). Writes `benchmarks/results/threads.json` atomically.

Run: `.venv/bin/python benchmarks/bench_threads.py` (~2-4 min on 2 quiet cores). Its numbers mean
something only on a machine that nothing else loads: it refuses to start when the 1-minute load
average exceeds `--max-load` (4) unless `--force`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from portable_paths import portable  # benchmarks/ is sys.path[0] when a bench runs

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULT = HERE / "results" / "threads.json"
MODES = ("today", "policy")
#: variables that decide threading; removed from a worker's environment before its mode sets its own
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "FACTPROBE_STEPS_AT_ONCE", "GOMP_SPINCOUNT")


def worker_env(mode: str) -> dict[str, str]:
    """The environment of a worker of `mode` (module docstring)."""
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    if mode == "policy":
        env.update({"FACTPROBE_STEPS_AT_ONCE": "2", "OMP_WAIT_POLICY": "PASSIVE"})
    return env


def run_worker(args: argparse.Namespace) -> None:
    """One probe run in this process (`--worker MODE`); prints one JSON line."""
    import torch  # loads OpenMP with this process's environment, as a command's first torch import does

    from factprobe.framework.config import RunConfig
    from factprobe.framework.runner import run_probe

    default_threads = torch.get_num_threads()
    cfg = RunConfig.from_dict(
        {
            "probe": "ic-lke",
            "model": args.model,
            "source": "countryinfo",
            "device": "cpu",
            "dtype": "float32",
            "relations": args.relations,
            "max_facts_per_relation": args.facts,
            # today: torch's default count, as before any thread policy existed
            "threads": default_threads if args.worker == "today" else None,
        }
    )
    t0 = time.perf_counter()
    out = run_probe(cfg, args.out_dir, progress=False, log=lambda m: None)
    seconds = time.perf_counter() - t0
    rows = sorted((r["key"], r.get("prediction"), r.get("correct")) for r in out.results.to_dict("records"))
    print(
        json.dumps(
            {
                "mode": args.worker,
                "seconds": seconds,
                "threads": out.metrics["threads"],
                "torch_default_threads": default_threads,
                "rows": len(rows),
                "results": json.dumps(rows, default=str),
            }
        ),
        flush=True,
    )


def run_pair(mode: str, args: argparse.Namespace, work: Path, round_: int) -> list[dict]:
    """Two workers of `mode` started at once; their JSON reports."""
    procs = []
    for i in range(2):
        out_dir = work / f"{mode}-{round_}-{i}"
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            mode,
            "--out-dir",
            str(out_dir),
            "--model",
            args.model,
            "--relations",
            args.relations,
            "--facts",
            str(args.facts),
        ]
        procs.append(
            subprocess.Popen(cmd, env=worker_env(mode), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    reports = []
    for p in procs:
        stdout, stderr = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"error: a {mode} worker failed (exit {p.returncode}): {stderr.strip().splitlines()[-1:]}")
        reports.append(json.loads(stdout.strip().splitlines()[-1]))
    return reports


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--relations", default="P36,P37")
    ap.add_argument("--facts", type=int, default=4, help="facts per relation")
    ap.add_argument("--rounds", type=int, default=2, help="rounds; each runs a pair in each mode")
    ap.add_argument("--max-load", type=float, default=4.0, help="refuse to start above this 1-minute load average")
    ap.add_argument("--force", action="store_true", help="run even on a loaded machine (numbers then mean little)")
    ap.add_argument("--out", type=Path, default=RESULT)
    ap.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    ap.add_argument("--out-dir", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        run_worker(args)
        return 0
    load = os.getloadavg()[0]
    if load > args.max_load and not args.force:
        print(
            f"error: load average {load:.1f} > {args.max_load}: the machine is busy, so the timings would measure "
            "the other load; run it on a quiet machine (or --force)",
            file=sys.stderr,
        )
        return 2
    pairs: dict[str, list[float]] = {m: [] for m in MODES}
    workers: dict[str, list[dict]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory(prefix="bench-threads-") as tmp:
        for r in range(args.rounds):
            for mode in MODES if r % 2 == 0 else MODES[::-1]:
                reports = run_pair(mode, args, Path(tmp), r)
                pairs[mode].append(max(x["seconds"] for x in reports))
                workers[mode].extend(reports)
                print(f"round {r} {mode:<6}: pair {pairs[mode][-1]:.1f} s, threads {[x['threads'] for x in reports]}", flush=True)
    results = {x["results"] for m in MODES for x in workers[m]}
    if len(results) != 1:
        raise SystemExit("error: the modes gave different results; threads must never decide results")
    med = {m: statistics.median(pairs[m]) for m in MODES}
    doc = {
        "workload": {
            "probe": "ic-lke",
            "source": "countryinfo",
            "model": args.model,
            "relations": args.relations,
            "facts_per_relation": args.facts,
            "rows": workers["policy"][0]["rows"],
            "dtype": "float32",
            "device": "cpu",
            "processes_at_once": 2,
            "rounds": args.rounds,
        },
        "machine": {
            "cpus_affinity": len(os.sched_getaffinity(0)),
            "load_average_at_start": load,
            "torch_default_threads": workers["today"][0]["torch_default_threads"],
        },
        "threads": {m: workers[m][0]["threads"] for m in MODES},
        "pair_seconds": pairs,
        "median_pair_seconds": med,
        "ratio_today_over_policy": med["today"] / med["policy"],
        "same_results": True,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = args.out.with_suffix(".json.tmp")
    tmp_out.write_text(json.dumps(portable(doc), indent=2) + "\n")
    tmp_out.replace(args.out)
    print(
        f"today {med['today']:.1f} s, policy {med['policy']:.1f} s per pair: today / policy = "
        f"{doc['ratio_today_over_policy']:.2f}x; {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
