"""Thread policy on the README's tour and `make run` (issue 30 item 5, speed): each command with the policy
(factprobe/threads.py, what every command does now) against today's (no policy: `FACTPROBE_THREAD_POLICY=off`,
torch's default count, OpenMP's default spin-then-sleep wait), side by side.

Commands, as the README's "A 10-minute tour" runs them (LAMA T-REx P36,P19,P103 with the LPAQA training facts,
smollm2-135m-instruct) but with `--facts` facts per relation (default 2, the tour's is 10) so a round fits minutes:

- `ic-lke`, `hgp`, `compare` (of those two), `qa` (`--shots 0,10`), `counterfactual` (`--shots 10,15`);
- `make-run`: the command `make run` runs (`factprobe pipeline run probe`, both models, IC-LKE on countryinfo,
  `--make-run-facts` facts per relation, 20 as `make run`), into a fresh folder and sqlite MLflow store.

Each command runs in a fresh process with the same arguments in each mode, into its own fresh folder and
MLflow store; modes alternate command by command (today first for even rounds, policy first for odd ones)
so a change of outside load hits both alike. A command's time is its process's wall time (start-up,
model load and work). The ratio is today's over the policy's (> 1: the policy is faster).

`--busy N` starts N CPU-bound background processes (a Python loop each) for the whole run: a shared
machine, where spinning OpenMP threads cost the most (the issue's 2.8x for `make run`, 5x for the QA).

The results of the two modes are compared row by row (`results.jsonl`: text, labels and flags exactly,
numbers within 1e-3): threads never decide results; a difference is reported in the JSON and printed.

Run: `.venv/bin/python benchmarks/bench_threads_tour.py` (~20 min on 2 quiet cores, `--busy 1` about twice
that). Writes `benchmarks/results/threads_tour.json` (or `--out`) atomically. It refuses to start when the
1-minute load average exceeds `--max-load` (2.5, on top of `--busy`) unless `--force`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from portable_paths import portable  # benchmarks/ is sys.path[0] when a bench runs

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULT = HERE / "results" / "threads_tour.json"
MODES = ("today", "policy")
#: variables that decide threading; removed from the environment before a mode sets its own
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "FACTPROBE_STEPS_AT_ONCE", "GOMP_SPINCOUNT")
RELATIONS = "P36,P19,P103"
#: the output folder of each command under a mode's `out` (compare writes none)
OUTPUT = {"ic-lke": "ic", "hgp": "hgp", "qa": "qa", "counterfactual": "cf", "make-run": "kfp"}
#: the time stamp in a local pipeline run's folder name
RUN_STAMP = re.compile(r"\d{4}-\d{2}-\d{2}-\d{2}-\d{2}-\d{2}-\d+")
#: row fields that say how or when, not what: never compared
VOLATILE = ("time", "second", "thread", "run_id", "started", "finished", "elapsed", "host", "pid")


def mode_env(mode: str, work: Path, data: Path) -> dict[str, str]:
    """The environment of a command in `mode`: today's turns the policy off, the policy's is the default."""
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS and k != "FACTPROBE_THREAD_POLICY"}
    env["FACTPROBE_DATA"] = str(data)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["FACTPROBE_WORK"] = str(work / "work")
    env["MLFLOW_TRACKING_URI"] = f"sqlite:///{work / 'mlruns.db'}"
    if mode == "today":
        env["FACTPROBE_THREAD_POLICY"] = "off"
    return env


def tour_commands(args: argparse.Namespace, data: Path) -> dict[str, list[str]]:
    """{name: factprobe arguments} with `{out}` where each command's output folder goes."""
    lama, train = str(data / "lama"), str(data / "lpaqa" / "trex_train")
    common = ["--model", "smollm2-135m-instruct", "--source", "lama", "--train-data", train, "--relations", RELATIONS]
    common += ["--max-facts-per-relation", str(args.facts), "--no-progress"]
    return {
        "ic-lke": ["probe", "ic-lke", *common, "--data", lama, "--out", "{out}/ic"],
        "hgp": ["probe", "hgp", *common, "--data", lama, "--out", "{out}/hgp"],
        "compare": ["compare", "{out}/ic", "{out}/hgp"],
        "qa": ["probe", "qa", *common, "--shots", "0,10", "--out", "{out}/qa"],
        "counterfactual": [
            "probe",
            "counterfactual",
            *common,
            "--qa-train-per-relation",
            "20",
            "--shots",
            "10,15",
            "--out",
            "{out}/cf",
        ],
        "make-run": [
            "pipeline",
            "run",
            "probe",
            "--param",
            'models=["smollm2-135m-instruct","gemma-3-270m"]',
            "--param",
            'probes=["ic-lke"]',
            "--param",
            "source=countryinfo",
            "--param",
            f"max_facts_per_relation={args.make_run_facts}",
            "--pipeline-root",
            "{out}/kfp",
        ],
    }


def run_command(name: str, argv: list[str], mode: str, work: Path, data: Path) -> dict:
    """`factprobe ARGV` in a fresh process of `mode` with cwd `work`; its wall seconds and output folder."""
    out = work / "out"
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "factprobe.cli", *[a.replace("{out}", str(out)) for a in argv]]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=work, env=mode_env(mode, work, data), capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t0
    if p.returncode != 0:
        tail = (p.stdout + p.stderr).strip().splitlines()[-5:]
        raise SystemExit(f"error: {name} ({mode}) failed with exit {p.returncode}: " + " | ".join(tail))
    return {"seconds": seconds, "out": out, "stdout": p.stdout}


def _stable(row: dict) -> dict:
    return {k: v for k, v in row.items() if not any(w in k.lower() for w in VOLATILE)}


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        try:
            fa, fb = float(a), float(b)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False
        return (math.isnan(fa) and math.isnan(fb)) or abs(fa - fb) <= 1e-3
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def result_rows(out: Path) -> dict[str, list[dict]]:
    """{relative path: rows} of every results.jsonl under `out`, rows sorted by their JSON text."""
    found: dict[str, list[dict]] = {}
    for path in sorted(out.rglob("results.jsonl")):
        rows = [_stable(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]
        found[RUN_STAMP.sub("TIME", str(path.relative_to(out)))] = sorted(
            rows, key=lambda r: json.dumps(r, sort_keys=True, default=str)
        )
    return found


def differences(a: Path, b: Path) -> list[str]:
    """What differs between the results under `a` and under `b` (empty: the same)."""
    ra, rb = result_rows(a), result_rows(b)
    if ra.keys() != rb.keys():
        return [f"result files differ: {sorted(ra)} vs {sorted(rb)}"]
    diffs = []
    for name in ra:
        if len(ra[name]) != len(rb[name]):
            diffs.append(f"{name}: {len(ra[name])} vs {len(rb[name])} rows")
            continue
        bad = sum(not _same(x, y) for x, y in zip(ra[name], rb[name]))
        if bad:
            diffs.append(f"{name}: {bad} of {len(ra[name])} rows differ")
    return diffs


def burners(n: int) -> list[subprocess.Popen]:
    """`n` CPU-bound background processes (a busy machine)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--facts", type=int, default=2, help="facts per relation for the tour commands (the tour's: 10)")
    ap.add_argument("--make-run-facts", type=int, default=20, help="facts per relation for make-run (make run's: 20)")
    ap.add_argument("--commands", default="ic-lke,hgp,compare,qa,counterfactual,make-run")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--busy", type=int, default=0, help="CPU-bound background processes during the run")
    ap.add_argument("--data", type=Path, default=Path(os.environ.get("FACTPROBE_DATA", REPO.parent / "shared" / "data")))
    ap.add_argument("--max-load", type=float, default=2.5)
    ap.add_argument("--force", action="store_true", help="run even on a loaded machine (numbers then mean little)")
    ap.add_argument("--out", type=Path, default=RESULT)
    args = ap.parse_args(argv)
    commands = tour_commands(args, args.data.resolve())
    wanted = [c.strip() for c in args.commands.split(",") if c.strip()]
    if unknown := [c for c in wanted if c not in commands]:
        raise SystemExit(f"error: unknown command(s) {unknown}; known: {', '.join(commands)}")
    if "compare" in wanted and not {"ic-lke", "hgp"} <= set(wanted):
        raise SystemExit("error: compare compares the ic-lke and hgp runs: name both")
    load = os.getloadavg()[0]
    if load > args.max_load and not args.force:
        print(
            f"error: load average {load:.1f} > {args.max_load}: the machine is busy; run it on a quiet one (or --force)",
            file=sys.stderr,
        )
        return 2
    seconds: dict[str, dict[str, list[float]]] = {c: {m: [] for m in MODES} for c in wanted}
    diffs: dict[str, list[str]] = {}
    background = burners(args.busy)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-threads-tour-") as tmp:
            for r in range(args.rounds):
                order = MODES if r % 2 == 0 else MODES[::-1]
                works = {m: Path(tmp) / f"{m}-{r}" for m in MODES}
                for m in MODES:
                    works[m].mkdir()
                for name in wanted:
                    outs = {}
                    for m in order:
                        res = run_command(name, commands[name], m, works[m], args.data.resolve())
                        seconds[name][m].append(res["seconds"])
                        outs[m] = res["out"]
                        print(f"round {r} {name:<15} {m:<6} {res['seconds']:7.1f} s", flush=True)
                    sub = OUTPUT.get(name)
                    if sub and (d := differences(outs["today"] / sub, outs["policy"] / sub)):
                        diffs.setdefault(name, []).extend(d)
                        print(f"  results differ: {d}", flush=True)
                for m in MODES:
                    shutil.rmtree(works[m], ignore_errors=True)
    finally:
        for p in background:
            p.kill()
    med = {c: {m: sorted(v)[len(v) // 2] for m, v in seconds[c].items()} for c in wanted}
    doc = {
        "workload": {
            "tour_relations": RELATIONS,
            "tour_facts_per_relation": args.facts,
            "make_run_facts_per_relation": args.make_run_facts,
            "model": "smollm2-135m-instruct (make-run: and gemma-3-270m)",
            "rounds": args.rounds,
            "busy_background_processes": args.busy,
        },
        "machine": {"cpus_affinity": len(os.sched_getaffinity(0)), "load_average_at_start": load},
        "modes": {
            "today": "FACTPROBE_THREAD_POLICY=off: torch's default threads, OpenMP's default wait",
            "policy": "the default: CPUs this process may use / steps at once, OMP_WAIT_POLICY=PASSIVE",
        },
        "seconds": seconds,
        "median_seconds": med,
        "ratio_today_over_policy": {c: med[c]["today"] / med[c]["policy"] for c in wanted},
        "result_differences": diffs,
        "measured": time.strftime("%Y-%m-%d"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = args.out.with_suffix(".json.tmp")
    tmp_out.write_text(json.dumps(portable(doc), indent=2) + "\n")
    tmp_out.replace(args.out)
    for c in wanted:
        print(
            f"{c:<15} today {med[c]['today']:7.1f} s  policy {med[c]['policy']:7.1f} s  today/policy {doc['ratio_today_over_policy'][c]:.2f}x"
        )
    print(args.out)
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
