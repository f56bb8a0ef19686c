"""Start-up cost of a pipeline step's MLflow tracking: factprobe's REST client vs `mlflow-skinny`.

    python benchmarks/bench_tracking_startup.py [--repeats 7] [--skinny-python /path/to/venv/bin/python]
    # writes benchmarks/results/tracking_startup.json

Issue 13 (item 8): keep tracking/rest_client.py only if the MLflow client costs more than 0.5 s
per step. Each variant is a fresh Python process (as a KFP step is) that does what a step's
tracking does against the same MLflow server (tracking/local_server.py on a sqlite store):
find the experiment, create a run with tags, log 10 params and 20 metrics in one batch, log one
small artifact and end the run. Measured: the process's wall time from `python -c` to exit.

- `baseline`: the same interpreter doing nothing but `import requests` (the floor of any client);
- `rest`: `factprobe_ops.tracking.rest_client.RestTrackingClient` (requests only; what the steps use);
- `skinny`: `mlflow.tracking.MlflowClient` from a virtualenv holding only `mlflow-skinny`
  (`--skinny-python`; created with `python -m venv V && V/bin/pip install mlflow-skinny==<version>`);
- `mlflow_full`: the same MlflowClient code in the project's environment (full `mlflow`, where
  optional imports find pandas, sqlalchemy, ... installed).

The variants run interleaved (one warm-up round discarded) and the medians are compared.
`extra_s_per_step` = median(skinny) - median(rest): what a step would pay more with mlflow-skinny.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from portable_paths import portable  # benchmarks/ is sys.path[0] when a bench runs

REPO = Path(__file__).resolve().parent.parent
DECISION_THRESHOLD_S = 0.5  # issue 13: keep the REST client only if skinny costs more than this per step

COMMON = r"""
import os, sys, tempfile
uri = os.environ["BENCH_URI"]
params = {f"p{i}": str(i) for i in range(10)}
metrics = {f"acc/P{i}": i / 20 for i in range(20)}
art = os.path.join(tempfile.mkdtemp(), "metrics.json")
open(art, "w").write("{}")
"""

REST = (
    COMMON
    + r"""
from factprobe_ops.tracking.rest_client import RestTrackingClient
c = RestTrackingClient(uri)
c.check()
exp = c.experiment_id("bench/tracking_startup")
run = c.create_run(exp, "rest", {"factprobe.step": "bench", "mlflow.user": "bench"})
c.log_batch(run, params, metrics, 0, int(__import__("time").time() * 1000))
c.log_artifact(run, art, "results")
c.set_terminated(run, "FINISHED")
"""
)

MLFLOW = (
    COMMON
    + r"""
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient
import time
c = MlflowClient(uri)
exp = c.get_experiment_by_name("bench/tracking_startup")
exp_id = exp.experiment_id if exp else c.create_experiment("bench/tracking_startup")
run = c.create_run(exp_id, run_name="skinny", tags={"factprobe.step": "bench", "mlflow.user": "bench"}).info.run_id
now = int(time.time() * 1000)
c.log_batch(run, metrics=[Metric(k, v, now, 0) for k, v in metrics.items()], params=[Param(k, v) for k, v in params.items()])
c.log_artifact(run, art, "results")
c.set_terminated(run, "FINISHED")
"""
)

BASELINE = "import requests"


def timed(python: str, code: str, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    p = subprocess.run([python, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{python} failed:\n{p.stderr[-2000:]}")
    return dt


def package_version(python: str, name: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({name!r}))"
    p = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
    return p.stdout.strip() or "not installed"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument(
        "--skinny-python",
        default=os.environ.get("SKINNY_PYTHON", ""),
        help="python of a virtualenv with only mlflow-skinny installed",
    )
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "tracking_startup.json"))
    args = ap.parse_args()
    if not args.skinny_python or not Path(args.skinny_python).exists():
        raise SystemExit(
            "--skinny-python: create it with `python3.11 -m venv /tmp/skinny && "
            "/tmp/skinny/bin/pip install mlflow-skinny==$(.venv/bin/python -c 'import mlflow; print(mlflow.__version__)')`"
        )
    skinny_version = package_version(args.skinny_python, "mlflow-skinny")
    if package_version(args.skinny_python, "mlflow") != "not installed":
        raise SystemExit(f"{args.skinny_python}: full mlflow is installed there; the skinny variant needs mlflow-skinny alone")

    from factprobe_ops.tracking.local_server import LocalTrackingServer

    variants = {
        "baseline": (sys.executable, BASELINE),
        "rest": (sys.executable, REST),
        "skinny": (args.skinny_python, MLFLOW),
        "mlflow_full": (sys.executable, MLFLOW),
    }
    times: dict[str, list[float]] = {k: [] for k in variants}
    with tempfile.TemporaryDirectory() as d, LocalTrackingServer(f"sqlite:///{d}/mlruns.db") as url:
        # the server's token is in the env now. MLflow's usage telemetry is off for every variant: its
        # background thread races the client on os.environ (KeyError '_MLFLOW_TELEMETRY_SESSION_ID'
        # in a log_batch here), and a cluster step has no route to it anyway.
        env = {
            **os.environ,
            "BENCH_URI": url,
            "PYTHONPATH": str(REPO),
            "MLFLOW_DISABLE_TELEMETRY": "true",
            "DO_NOT_TRACK": "true",
        }
        for py, code in variants.values():  # warm-up round: page cache, .pyc files, the experiment
            timed(py, code, env)
        for _ in range(args.repeats):
            for name, (py, code) in variants.items():
                times[name].append(timed(py, code, env))
    med = {k: statistics.median(v) for k, v in times.items()}
    extra = med["skinny"] - med["rest"]
    result = {
        "benchmark": "tracking start-up cost of one pipeline step (fresh process, one run with params, metrics, artifact)",
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_average_1_5_15_min_at_end": [round(x, 1) for x in os.getloadavg()],
        },
        "versions": {"mlflow-skinny": skinny_version, "mlflow (project env)": package_version(sys.executable, "mlflow")},
        "repeats": args.repeats,
        "median_s": {k: round(v, 3) for k, v in med.items()},
        "all_s": {k: [round(x, 3) for x in v] for k, v in times.items()},
        "tracking_cost_s": {
            "rest": round(med["rest"] - med["baseline"], 3),
            "skinny": round(med["skinny"] - med["baseline"], 3),
            "mlflow_full": round(med["mlflow_full"] - med["baseline"], 3),
        },
        "ratio_skinny_over_rest": round(med["skinny"] / med["rest"], 2),
        "extra_s_per_step": round(extra, 3),
        "threshold_s": DECISION_THRESHOLD_S,
        "decision": (f"keep the REST client: mlflow-skinny costs {extra:.2f} s more per step (> {DECISION_THRESHOLD_S} s)")
        if extra > DECISION_THRESHOLD_S
        else (f"switch to mlflow-skinny: it costs only {extra:.2f} s more per step (<= {DECISION_THRESHOLD_S} s)"),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(portable(result), indent=1) + "\n")
    print(
        json.dumps(
            {k: result[k] for k in ("median_s", "tracking_cost_s", "ratio_skinny_over_rest", "extra_s_per_step", "decision")},
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
