"""Start-up of a CLI probe (issue 31 item 10): time to the first forward with the MLflow run opened
before scoring (eager, as it was) against opened on a background thread while the probe scores (now),
side by side in one run; and the start-up of the commands that load no model.

Each sample is a fresh Python process (as a user's command is) running `factprobe.cli.main` on

    factprobe probe ic-lke --model smollm2-135m-instruct --source countryinfo --relations P36
        --max-facts-per-relation 2 --out <fresh folder> --tracking-uri sqlite:///<one store> --no-progress

with `factprobe_ops.tracking.cli.ProbeTracking.background` set to False (eager) or True (background).
The process notes, in seconds from its start (the parent's clock just before it spawns it): the
command line imported, the model load started and ended, the hook entered (`on_start`), the MLflow
run open (parameters logged), the first forward of the model after its load (ic-lke: its relation
prefix), the first scoring batch started, and the end. The store is created by a warm-up run of
each mode first (a store's first creation is a one-time cost), then the modes alternate (which goes
first alternates) for `--repeats` rounds; medians are reported, and `first_forward_saved_s` =
median(eager) - median(background). Outside load shifts whole processes (the marks before the hook
differ between modes by chance), so `median_spans_s` also gives spans inside a process: hook entered
-> first forward (what opening tracking costs before scoring), load end -> first forward, first
forward -> end.

`commands`: `factprobe --version`, `--help` and `models list`, each a fresh process timed from
spawn to exit (median of `--repeats`), with the heavy modules each imported (none of torch,
transformers, mlflow is expected: tests/test_cli_startup.py).

Run: `.venv/bin/python benchmarks/bench_startup.py` (~15-20 min on 2 busy cores); writes
`benchmarks/results/startup.json` atomically and prints a summary.
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

DRIVER = r"""
import json, os, sys, time
T0 = float(os.environ["BENCH_T0"])
marks = {}
def mark(k):
    marks.setdefault(k, round(time.time() - T0, 3))
from factprobe.cli import main
mark("cli_imported")
import factprobe.framework.runner as runner
import factprobe_ops.tracking.cli as tracking_cli
from contextlib import contextmanager
tracking_cli.ProbeTracking.background = os.environ["BENCH_MODE"] == "background"
real_load, real_score, real_wrap = runner.load_for_probe, runner.score_naming_long_items, tracking_cli.ProbeTracking.wrap
import factprobe_ops.tracking.probe_run as probe_run_module
real_probe_run = probe_run_module.probe_run
def load(cfg):
    import torch
    mark("load_start"); out = real_load(cfg); mark("load_end")
    # the first forward of any module once the model is loaded (ic-lke: its relation prefix's)
    torch.nn.modules.module.register_module_forward_pre_hook(lambda *_: mark("first_forward"))
    return out
def score(*a, **k):
    mark("first_batch"); return real_score(*a, **k)
@contextmanager
def wrap(self, *a):
    mark("hook_entered")
    with real_wrap(self, *a) as after:
        yield after
@contextmanager
def probe_run(*a, **k):
    with real_probe_run(*a, **k) as run:
        mark("mlflow_run_open")
        yield run
runner.load_for_probe, runner.score_naming_long_items, tracking_cli.ProbeTracking.wrap = load, score, wrap
probe_run_module.probe_run = probe_run
rc = main(sys.argv[1:])
mark("end")
print("BENCH " + json.dumps({"rc": rc, **marks}), file=sys.stderr)
"""

COMMAND = r"""
import sys
from factprobe.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("BENCH " + " ".join(m for m in ("torch", "transformers", "mlflow", "pandas") if m in sys.modules), file=sys.stderr)
"""


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--relations", default="P36")
    p.add_argument("--facts", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", default=str(HERE / "results" / "startup.json"))
    return p.parse_args(argv)


def env() -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    e["PYTHONPATH"] = os.pathsep.join([str(REPO), e.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return e


def probe_sample(mode: str, args, work: Path, n: int) -> dict:
    """One fresh process of the probe command in `mode`; its marks (seconds from spawn)."""
    argv = [
        "probe",
        "ic-lke",
        "--model",
        args.model,
        "--source",
        "countryinfo",
        "--relations",
        args.relations,
        "--max-facts-per-relation",
        str(args.facts),
        "--out",
        str(work / f"{mode}-{n}"),
        "--tracking-uri",
        f"sqlite:///{work / 'mlruns.db'}",
        "--no-progress",
    ]
    t0 = time.time()
    p = subprocess.run(
        [sys.executable, "-c", DRIVER, *argv],
        cwd=work,
        env={**env(), "BENCH_T0": repr(t0), "BENCH_MODE": mode},
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("BENCH ")]
    if p.returncode != 0 or not lines:
        raise SystemExit(f"{mode} run failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(lines[-1][6:])


def command_sample(argv: list[str]) -> tuple[float, list[str]]:
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-c", COMMAND, *argv], cwd=REPO, env=env(), capture_output=True, text=True, timeout=300, check=False
    )
    dt = time.perf_counter() - t0
    heavy = [ln for ln in p.stderr.splitlines() if ln.startswith("BENCH")][-1][6:].split()
    return dt, heavy


def gaps(samples: dict[str, list[dict]]) -> dict:
    """Per mode, medians of the spans inside one process (outside load shifts a whole process, so
    these compare better than the marks): the hook entered to the first forward (what tracking
    costs before scoring), the load end to the first forward, and the first forward to the end."""
    spans = {
        "hook_to_first_forward": ("hook_entered", "first_forward"),
        "load_end_to_first_forward": ("load_end", "first_forward"),
        "first_forward_to_end": ("first_forward", "end"),
    }
    return {
        m: {name: round(statistics.median(s[b] - s[a] for s in runs), 3) for name, (a, b) in spans.items()}
        for m, runs in samples.items()
    }


def main(argv=None) -> dict:
    args = parse_args(argv)
    sys.path.insert(0, str(REPO))
    from factprobe.io import atomic_write_json

    modes = ("eager", "background")
    samples: dict[str, list[dict]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as d:
        work = Path(d)
        for m in modes:  # warm-up: creates the store, pages the weights in
            warm = probe_sample(m, args, work, -1)
            print(f"warm-up {m}: first forward at {warm['first_forward']:.1f} s, end {warm['end']:.1f} s")
        for r in range(args.repeats):
            for m in modes if r % 2 == 0 else tuple(reversed(modes)):
                s = probe_sample(m, args, work, r)
                samples[m].append(s)
                print(f"round {r} {m}: {s}")
    keys = [k for k in samples["eager"][0] if k != "rc"]
    medians = {m: {k: round(statistics.median(s[k] for s in samples[m] if k in s), 3) for k in keys} for m in modes}
    commands = {}
    for argv_ in (["--version"], ["--help"], ["models", "list"]):
        runs = [command_sample(argv_) for _ in range(args.repeats)]
        commands[" ".join(argv_)] = {
            "median_s": round(statistics.median(r[0] for r in runs), 3),
            "all_s": [round(r[0], 3) for r in runs],
            "heavy_modules_imported": runs[-1][1],
        }
    result = {
        "benchmark": "CLI probe start-up: time to the first forward, MLflow run opened eagerly vs in the background",
        "workload": {
            "command": "factprobe probe ic-lke",
            "model": args.model,
            "source": "countryinfo",
            "relations": args.relations,
            "facts_per_relation": args.facts,
            "tracking": "sqlite store, warm",
            "repeats": args.repeats,
        },
        "marks": "seconds from process spawn: cli_imported, load_start, load_end, hook_entered, mlflow_run_open, "
        "first_forward (the model's first forward after its load), first_batch (first scoring batch), end",
        "median_s": medians,
        "median_spans_s": gaps(samples),
        "all": samples,
        "first_forward_saved_s": round(medians["eager"]["first_forward"] - medians["background"]["first_forward"], 3),
        "first_batch_saved_s": round(medians["eager"]["first_batch"] - medians["background"]["first_batch"], 3),
        "end_saved_s": round(medians["eager"]["end"] - medians["background"]["end"], 3),
        "commands": commands,
        "machine": {
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
            "load_average_1_5_15_min_at_end": [round(x, 2) for x in os.getloadavg()],
        },
    }
    atomic_write_json(args.out, portable(result))
    print(
        json.dumps(
            {k: result[k] for k in ("median_s", "median_spans_s", "first_forward_saved_s", "end_saved_s", "commands")}, indent=1
        )
    )
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
