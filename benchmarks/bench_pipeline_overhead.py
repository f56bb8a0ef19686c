"""Overhead of the local KFP `probe` pipeline over calling the same library steps directly.

    python benchmarks/bench_pipeline_overhead.py      # writes benchmarks/results/pipeline_overhead.json

Both sides run in a fresh Python process on the same tiny workload (smollm2-135m-instruct,
IC-LKE, relation P36, 3 facts, 10 choices, 10 examples), each with its own empty work folder and
sqlite MLflow store, so both score every fact and log the same runs:

- direct: one process calls the step adapters in order (components/steps: start, data build,
  plan, probe, report, finalize);
- pipeline: `factprobe pipeline run probe` (kfp.local.SubprocessRunner: one process per step);
- for comparison, the same pipeline with FACTPROBE_SERVE_LOCAL_STORE=0 (every step imports
  mlflow and opens the sqlite file itself, as before the loopback server).

overhead_per_component_s = (pipeline - direct) / number of components. Target: <= ~1.5 s.
After one discarded warm-up of each (model files into the page cache), the two are run
alternately, `--repeats` times each, and the medians are compared.

Where the pipeline's per-step cost goes: a fresh interpreter plus kfp's executor (~0.8 s) per
step. Steps log to MLflow over REST (tracking/rest_client.py); the local run serves the sqlite
store on loopback (tracking/local_server.py) so no step process imports mlflow (~1.5 s each).
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

REPO = Path(__file__).resolve().parent.parent
PARAMS = {
    "models": ["smollm2-135m-instruct"],
    "probes": ["ic-lke"],
    "relations": "P36",
    "max_facts_per_relation": 3,
    "choices": 10,
    "examples": 10,
}
N_COMPONENTS = 6  # start-run, plan-matrix, data-build, probe-model, report, finalize-run

DIRECT = r"""
import json, sys, time
t0 = time.perf_counter()
from factprobe_ops.components.steps.start_run import run_start
from factprobe_ops.components.steps.plan import run_plan
from factprobe_ops.components.steps.data_build import run_data_build
from factprobe_ops.components.steps.probe import run_probe_step
from factprobe_ops.components.steps.report import run_report
from factprobe_ops.components.steps.finalize_run import run_finalize
p = json.loads(sys.argv[1]); uri = sys.argv[2]; d = sys.argv[3]
# the same steps with the same one config dict and run context a pipeline passes (pipelines/scaffold.py)
config = {"source": "countryinfo", "relations": p["relations"], "max_facts_per_relation": p["max_facts_per_relation"],
          "examples": p["examples"], "choices": p["choices"], "seed": 0}
context = run_start("probe", "direct", "local", uri, json.dumps(p))
cells = run_plan(p["models"], p["probes"], context, config)
run_data_build(d + "/items", config, p["probes"], context)
outs = []
for i, c in enumerate(cells):
    run_probe_step(d + "/items", d + f"/res{i}", c["model"], c["probe"], config, c["context"], d + "/work")
    outs.append(d + f"/res{i}")
run_report(outs, d + "/r.html", d + "/r.md", context)
run_finalize("probe", "direct", uri, "SUCCEEDED")
print(json.dumps({"seconds": time.perf_counter() - t0}))
"""


def run_direct(tmp: Path) -> float:
    uri = f"sqlite:///{tmp / 'mlruns.db'}"
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", DIRECT, json.dumps(PARAMS), uri, str(tmp)], cwd=REPO, check=True, capture_output=True, text=True
    )
    return time.perf_counter() - start


def run_pipeline(tmp: Path, serve_store: bool = True) -> float:
    env = {**os.environ, "FACTPROBE_WORK": str(tmp / "work"), "FACTPROBE_SERVE_LOCAL_STORE": "1" if serve_store else "0"}
    args = [sys.executable, "-m", "factprobe.cli", "pipeline", "run", "probe"]
    for k, v in PARAMS.items():
        args += ["--param", f"{k}={json.dumps(v) if isinstance(v, list) else v}"]
    start = time.perf_counter()
    p = subprocess.run(
        args + ["--tracking-uri", f"sqlite:///{tmp / 'mlruns.db'}"], check=False, cwd=tmp, env=env, capture_output=True, text=True
    )
    if p.returncode:
        raise SystemExit(p.stdout[-2000:] + p.stderr[-2000:])
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "pipeline_overhead.json"))
    args = ap.parse_args()
    for _ in range(args.warmup):
        for kind, fn in (("direct", run_direct), ("pipeline", run_pipeline)):
            with tempfile.TemporaryDirectory() as d:
                print(f"[warm-up] {kind}: {fn(Path(d)):.1f} s", flush=True)
    direct, pipe, unserved = [], [], []
    for i in range(args.repeats):
        for kind, fn, acc in (
            ("direct", run_direct, direct),
            ("pipeline", run_pipeline, pipe),
            ("pipeline, every step opening sqlite", lambda t: run_pipeline(t, False), unserved),
        ):
            with tempfile.TemporaryDirectory() as d:
                acc.append(fn(Path(d)))
            print(f"[{i + 1}/{args.repeats}] {kind}: {acc[-1]:.1f} s", flush=True)
    d_med, p_med, u_med = statistics.median(direct), statistics.median(pipe), statistics.median(unserved)
    result = {
        "workload": PARAMS,
        "n_components": N_COMPONENTS,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "direct_seconds": direct,
        "pipeline_seconds": pipe,
        "direct_median_s": d_med,
        "pipeline_median_s": p_med,
        "overhead_per_component_s": (p_med - d_med) / N_COMPONENTS,
        "unserved_pipeline_seconds": unserved,
        "unserved_pipeline_median_s": u_med,
        "unserved_overhead_per_component_s": (u_med - d_med) / N_COMPONENTS,
        "target_overhead_per_component_s": 1.5,
        "cpu_count": os.cpu_count(),
    }
    result["meets_target"] = result["overhead_per_component_s"] <= 1.5
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(portable(result), indent=2) + "\n")
    os.replace(tmp, out)
    print(
        f"direct {d_med:.1f} s, pipeline {p_med:.1f} s -> overhead {result['overhead_per_component_s']:.2f} s "
        f"per component (target <= 1.5 s): {'met' if result['meets_target'] else 'NOT met'}; "
        f"with every step opening sqlite itself (FACTPROBE_SERVE_LOCAL_STORE=0): {u_med:.1f} s -> "
        f"{result['unserved_overhead_per_component_s']:.2f} s per component"
    )


if __name__ == "__main__":
    main()
