"""The knowledge map at scale (issue 39 item 5): 10 probes x 20 models x 100,000 facts, time and peak memory.

Synthetic per-fact tables, one finished run folder per (probe, model) as `factprobe probe` leaves one
after MLflow logging: `per_fact.parquet` (fact_id, relation, correct, gold_prob; the columns of the
per-fact table a multiple-choice run logs) and `metrics.json` (probe, model, model revision, data
digest). The probes are plug-ins registered by this script (`synthetic-0` ... `synthetic-9`:
multiple-choice probes whose verdict is `correct`), so nothing is scored: the numbers are a seeded
draw (a latent "knows" per model and fact, each probe agreeing with it 85% of the time), never a
result. The map is built in a child process by the command users run (`factprobe map DATA/*/* --out
OUT`, in-process `factprobe.cli.main`), so the time covers finding and checking the runs, hashing
their tables for the map's identity, reading them, the statistics, the tables, the figures and the page.
Peak memory is the child's `ru_maxrss` (Linux: KiB; every import included); the wall and CPU times
(user + system) are the child's, measured around the command: on a shared machine the CPU time says
what the map costs, the wall time what the load left of it (the load average is recorded).

Usage:
    python benchmarks/bench_knowledge_map.py                             # 10 x 20 x 100,000; writes results
    python benchmarks/bench_knowledge_map.py --probes 3 --models 2 --facts 1000 --no-write   # a quick look

Results: benchmarks/results/knowledge_map.json (atomically). The target: under a minute and within 2 GB
on the 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "knowledge_map.json"
RELATIONS = 40


def register_probes(n: int) -> list[str]:
    """Register `synthetic-<i>` for i < n (multiple-choice probes: verdict `correct`); their names."""
    from factprobe.framework.registry import load_probes, register
    from factprobe.probes.mc import MCProbe

    load_probes()
    names = [f"synthetic-{i}" for i in range(n)]
    for name in names:
        register(type(f"Synthetic{name.split('-')[1]}", (MCProbe,), {"name": name, "description": "synthetic (benchmark)"})())
    return names


def make_data(root: Path, n_probes: int, n_models: int, n_facts: int, seed: int = 0) -> None:
    """One run folder per (model, probe) under `root/<model>/<probe>/` (module docstring)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    relation = np.arange(n_facts) % RELATIONS
    fact_id = pa.array([f"P{100 + r}|S{i:07d}|O{i:07d}" for i, r in enumerate(relation)])
    rel = pa.array([f"P{100 + r}" for r in relation])
    ease = rng.uniform(0.1, 0.9, RELATIONS)[relation]  # some relations are easier
    for m in range(n_models):
        knows = rng.random(n_facts) < ease
        for p in range(n_probes):
            folder = root / f"model-{m:02d}" / f"synthetic-{p}"
            folder.mkdir(parents=True, exist_ok=True)
            correct = np.where(rng.random(n_facts) < 0.85, knows, ~knows)
            gold = np.where(correct, rng.uniform(0.3, 1.0, n_facts), rng.uniform(0.0, 0.3, n_facts))
            table = pa.table({"fact_id": fact_id, "relation": rel, "correct": correct, "gold_prob": gold})
            pq.write_table(table, folder / "per_fact.parquet")
            metrics = {
                "probe": f"synthetic-{p}",
                "model": f"model-{m:02d}",
                "model_revision": f"local-sha256:{m:064x}",
                "data_digest": f"sha256:{p:064x}",
                "n": n_facts,
            }
            (folder / "metrics.json").write_text(json.dumps(metrics))


def child(args: argparse.Namespace) -> None:
    """In the child: register the probes, run `factprobe map`, print {"wall_s", "peak_rss_mb", "rc"} as JSON."""
    register_probes(args.probes)
    from factprobe.cli import main

    runs = sorted(str(p) for p in Path(args.data).glob("*/*") if p.is_dir())
    use = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = use.ru_utime + use.ru_stime
    t0 = time.perf_counter()
    rc = main(["map", *runs, "--out", args.out, "--json"]) if not args.quiet else _quiet(runs, args.out)
    wall = time.perf_counter() - t0
    use = resource.getrusage(resource.RUSAGE_SELF)
    cpu = use.ru_utime + use.ru_stime - cpu0
    print(json.dumps({"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": use.ru_maxrss / 1024, "rc": rc}), file=sys.stderr)


def _quiet(runs: list[str], out: str) -> int:
    import contextlib
    import io

    from factprobe.cli import main

    with contextlib.redirect_stdout(io.StringIO()):
        return main(["map", *runs, "--out", out])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--probes", type=int, default=10)
    ap.add_argument("--models", type=int, default=20)
    ap.add_argument("--facts", type=int, default=100_000)
    ap.add_argument("--no-write", action="store_true", help="print only; do not write benchmarks/results/knowledge_map.json")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--quiet", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-kmap-") as tmp:
        data, out = Path(tmp) / "runs", Path(tmp) / "map"
        t0 = time.perf_counter()
        make_data(data, args.probes, args.models, args.facts)
        made = time.perf_counter() - t0
        print(f"synthetic per-fact tables: {args.probes} probes x {args.models} models x {args.facts:,} facts in {made:.1f} s")
        env = {**os.environ, "FACTPROBE_CACHE": str(Path(tmp) / "cache"), "PYTHONPATH": str(HERE.parent)}
        cmd = [
            sys.executable,
            __file__,
            "--child",
            "--quiet",
            "--probes",
            str(args.probes),
            "--data",
            str(data),
            "--out",
            str(out),
        ]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        process_s = time.perf_counter() - t0
        if proc.returncode != 0:
            print(proc.stdout[-3000:], proc.stderr[-3000:])
            return 1
        got = json.loads(proc.stderr.strip().splitlines()[-1])
        if got["rc"] != 0:
            print(proc.stderr[-3000:])
            return 1
        summary = json.loads((out / "knowledge_map.json").read_text())
        size_mb = sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) / 2**20
    result = {
        "probes": args.probes,
        "models": args.models,
        "facts": args.facts,
        "runs": args.probes * args.models,
        "map_wall_s": round(got["wall_s"], 2),
        "map_cpu_s": round(got["cpu_s"], 2),
        "process_wall_s": round(process_s, 2),
        "peak_rss_mb": round(got["peak_rss_mb"], 1),
        "map_folder_mb": round(size_mb, 1),
        "n_facts_joined": summary["n_facts"],
        "cpus": os.cpu_count(),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "python": sys.version.split()[0],
        "when": time.strftime("%Y-%m-%d %H:%M"),
        "targets": {"wall_s": 60, "peak_rss_mb": 2048},
    }
    print(
        f"factprobe map over {result['runs']} runs ({args.probes} probes x {args.models} models x {args.facts:,} facts): "
        f"{result['map_wall_s']:.1f} s wall, {result['map_cpu_s']:.1f} s CPU (process with imports {result['process_wall_s']:.1f} s), peak RSS "
        f"{result['peak_rss_mb']:.0f} MB, map folder {result['map_folder_mb']:.0f} MB; load average {result['load_average_1min']}"
    )
    if not args.no_write:
        from factprobe.io import atomic_write_json

        atomic_write_json(RESULTS, result)
        print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
