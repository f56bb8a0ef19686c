"""Peak memory of a probe run against its number of rows (issue 40 item 3): nothing may grow with the run.

A run of `mc-synthetic` (below: a plug-in probe with multiple-choice rows of 100 options, the rows of
IC-LKE or HGP, whose scores are drawn from a seeded generator instead of a model) into a fresh folder
through `factprobe.framework.runner.run_probe`, the code path of `factprobe probe`: data, contract,
identity, batches appended to the checkpoint, then results.jsonl, metrics.json (the multiple-choice
metrics with their bootstrap intervals) and the outcome. Each size runs in its own process; the peak
is the process's `ru_maxrss` (the kernel's high-water mark of resident memory, Linux: KiB) read after
the run, and `growth` is that peak less the resident memory measured just before `run_probe` (after
every import and the synthetic data are in memory).

Usage:
    python benchmarks/bench_run_memory.py                                   # this checkout, 1,000 and 50,000 rows
    python benchmarks/bench_run_memory.py --before /tmp/before-mem          # and the code in that folder, side by side
    python benchmarks/bench_run_memory.py --rows 500 5000 --no-write        # other sizes, results not written

`--before DIR` runs the same script with PYTHONPATH=DIR (a `git worktree add DIR <commit>` of the code
before the change: this script's probe uses only the probe interface both have). Results go to
benchmarks/results/run_memory.json (atomically). Rows per fact (`--rows-per-fact`, default 10: the
templates of a BELIEF or HGP run) keep the prepared data small (5,000 facts for 50,000 rows), so what
grows is the rows; each row is about 4 KB of JSON (100 option names, 100 log-probs, a context).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "run_memory.json"
NAME = "mc-synthetic"
OPTIONS = 100
RELATIONS = [f"P{100 + i}" for i in range(10)]
#: the context of every row: a relation's examples, as in an IC-LKE row (about 600 characters)
EXAMPLES = " ".join(f"Subject{i} has the object Object{i} ;" for i in range(20))


def framework(module: str):
    """`factprobe.framework.<module>`, or `factprobe.probes.<module>` in code from before the framework
    moved there (`--before`): chosen by the imported factprobe's own folders, not by trying an import,
    which the editable install could answer from this checkout."""
    import importlib

    import factprobe

    moved = (Path(factprobe.__file__).parent / "framework").is_dir()
    return importlib.import_module(f"factprobe.{'framework' if moved else 'probes'}.{module}")


def option_pool(n: int = 5 * OPTIONS) -> list[str]:
    return [f"Object name {i:05d}" for i in range(n)]


def register_probe() -> None:
    """Register `mc-synthetic` (idempotent): `MCProbe`'s metrics and reporting, synthetic data and scores."""
    from factprobe.config import option
    from factprobe.datasets.prepared import Prepared
    from factprobe.facts import Fact, FactSet, Relation
    from factprobe.metrics import multiple_choice as mc
    from factprobe.probes.mc import MCConfig, MCProbe

    load_probes, register = framework("registry").load_probes, framework("registry").register

    if NAME in load_probes():
        return

    @dataclass
    class SyntheticConfig(MCConfig):
        n_facts: int = option(100, "synthetic test facts")
        rows_per_fact: int = option(10, "rows per fact (templates)")
        n_relations: int = option(10, "relations the facts are spread over (at most 10)")

    class SyntheticRows(MCProbe):
        name = NAME
        description = "synthetic 100-option multiple-choice rows, scores from a seeded generator (a benchmark plug-in)"
        config_class = SyntheticConfig
        dataset = "mc-synthetic"

        def prepare(self, cfg):
            n, rels = cfg.params.n_facts, RELATIONS[: cfg.params.n_relations]
            facts = [Fact(rels[i % len(rels)], f"Subject {i:06d}", f"Object name {i % 500:05d}") for i in range(n)]
            test = FactSet(facts, {r: Relation(r) for r in rels}, "synthetic")
            items: dict = {}
            for f in facts:
                items.setdefault(f.relation, []).append(f)
            return Prepared(kind="facts", items=items, facts={"test": test})

        def item_keys(self, cfg, prepared, item):
            return [f"{item.fact_id}#t{t}" for t in range(cfg.params.rows_per_fact)]

        def score_batch(self, session, state, batch):
            import numpy as np

            pool = option_pool()
            rows = []
            for f in batch:
                for key in self.item_keys(session.cfg, session.prepared, f):
                    rng = np.random.default_rng(zlib.crc32(key.encode()))
                    start = int(rng.integers(len(pool) - OPTIONS))
                    options = pool[start : start + OPTIONS]
                    lp = [float(x) for x in rng.normal(-8.0, 3.0, OPTIONS)]
                    gold_index = int(rng.integers(OPTIONS))
                    pred, probs = mc.predict(lp), mc.option_probs(lp)
                    rows.append(
                        {
                            "key": key,
                            "fact_id": f.fact_id,
                            "probe": self.name,
                            "relation": f.relation,
                            "subject": f.subject,
                            "subject_id": None,
                            "gold": options[gold_index],
                            "gold_index": gold_index,
                            "correct_objects": [options[gold_index]],
                            "options": options,
                            "logprobs": lp,
                            "prediction": None if pred is None else options[pred],
                            "correct": bool(pred == gold_index),
                            "gold_prob": float(probs[gold_index]),
                            "confidence": float(probs.max()),
                            "context": f"{EXAMPLES} {f.subject}",
                            "template": key.rsplit("#", 1)[1],
                        }
                    )
            return rows

    register(SyntheticRows())


def fake_loaded():
    """What the runner needs of a loaded model when nothing is forwarded (no weights are loaded)."""
    return SimpleNamespace(name="synthetic", revision="synthetic-0", device="cpu", dtype="float32", model=None, kind="causal")


def rss_kib() -> int:
    """Resident memory now (KiB), from /proc/self/status."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def child(rows: int, rows_per_fact: int, out: Path, relations: int = 10) -> dict:
    """One run of `rows` rows over `relations` relations into `out` in this process; its peak and growth (MiB)."""
    import factprobe

    RunConfig, run_probe = framework("config").RunConfig, framework("runner").run_probe
    register_probe()
    n_facts = -(-rows // rows_per_fact)
    cfg = RunConfig.from_dict(
        {
            "probe": NAME,
            "model": "synthetic",
            "n_facts": n_facts,
            "rows_per_fact": rows_per_fact,
            "n_relations": relations,
            "choices": OPTIONS,
        }
    )
    before = rss_kib()
    t0 = time.perf_counter()
    outcome = run_probe(cfg, out, loaded=fake_loaded(), progress=False, log=lambda _msg: None)
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    metrics = {k: v for k, v in json.loads((out / "metrics.json").read_text()).items() if k not in ("identity", "threads")}
    return {
        "rows": outcome.metrics["n"],
        "facts": n_facts,
        "peak_rss_mib": round(peak / 1024, 1),
        "rss_before_run_mib": round(before / 1024, 1),
        "growth_mib": round((peak - before) / 1024, 1),
        "results_jsonl_mib": round((out / "results.jsonl").stat().st_size / 2**20, 1),
        "results_sha256": file_sha256(out / "results.jsonl"),
        "metrics_sha256": hashlib.sha256(json.dumps(metrics, sort_keys=True).encode()).hexdigest(),
        "wall_s": round(wall, 1),
        "factprobe": str(Path(factprobe.__file__).parent),
    }


def interrupt(out: Path) -> int:
    """Turn the finished run in `out` into one stopped halfway: the first half of its results as the
    checkpoint (copied a line at a time), no results.jsonl or metrics.json. Returns the rows kept."""
    results = out / "results.jsonl"
    with results.open("rb") as fh:
        n = sum(1 for _ in fh)
    with results.open("rb") as src, (out / "checkpoint.jsonl").open("wb") as dst:
        for _, line in zip(range(n // 2), src):
            dst.write(line)
    results.unlink()
    (out / "metrics.json").unlink()
    return n // 2


def measure(code: Path | None, rows: int, rows_per_fact: int, relations: int = 10, resume: bool = False) -> dict:
    """`child` in a fresh process, with `code` (a checkout's root) first on PYTHONPATH when given. With
    `resume`, the measured run resumes one stopped halfway (a first process runs it whole, `interrupt`
    keeps half): it reads half its rows back from the checkpoint and scores the rest."""
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(code), *filter(None, [env.get("PYTHONPATH")])])
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(rows), "--rows-per-fact", str(rows_per_fact)]
    cmd += ["--relations", str(relations)]
    with tempfile.TemporaryDirectory(prefix="run-memory-") as d:
        out = Path(d) / "out"
        for step in ("fill", "measure") if resume else ("measure",):
            proc = subprocess.run([*cmd, "--out", str(out)], env=env, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise RuntimeError(f"the run of {rows} rows failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
            if step == "fill":
                kept = interrupt(out)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if resume:
        result["resumed_rows"] = kept
    return result


def compare(codes: dict[str, Path | None], sizes: list[int], rows_per_fact: int, relations: int) -> dict:
    """{label: {"runs": [...], "resumed": {...}, "peak_difference_mib", "resumed_peak_difference_mib",
    "growth_difference_mib"}} for each code: a fresh run of each size, and the largest resumed halfway."""
    out = {}
    for label, code in codes.items():
        runs = [measure(code, n, rows_per_fact, relations) for n in sizes]
        resumed = measure(code, sizes[-1], rows_per_fact, relations, resume=True)
        for r in [*runs, resumed]:
            how = f"resumed ({r['resumed_rows']} from the checkpoint)" if "resumed_rows" in r else "fresh"
            print(
                f"{label:>7} {r['rows']:>7} rows {how}: peak {r['peak_rss_mib']:8.1f} MiB, "
                f"growth {r['growth_mib']:8.1f} MiB, {r['wall_s']} s",
                flush=True,
            )
        out[label] = {
            "runs": runs,
            "resumed": resumed,
            "peak_difference_mib": round(runs[-1]["peak_rss_mib"] - runs[0]["peak_rss_mib"], 1),
            "resumed_peak_difference_mib": round(resumed["peak_rss_mib"] - runs[0]["peak_rss_mib"], 1),
            "growth_difference_mib": round(runs[-1]["growth_mib"] - runs[0]["growth_mib"], 1),
        }
    return out


def commit_of(root: Path) -> str:
    """The git commit of the checkout at `root` ("" when it is not one), with `+changes` when its files differ."""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "factprobe"], capture_output=True, text=True
        )
    except (OSError, subprocess.CalledProcessError):
        return ""
    return head.stdout.strip()[:12] + ("+changes" if dirty.stdout.strip() else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1000, 50000], help="run sizes (rows), smallest first")
    ap.add_argument("--rows-per-fact", type=int, default=10)
    ap.add_argument("--relations", type=int, default=10, choices=range(1, len(RELATIONS) + 1), metavar="1-10")
    ap.add_argument("--before", type=Path, help="a checkout of the code before the change (run with PYTHONPATH=it)")
    ap.add_argument("--after", type=Path, help="a checkout of the code after it (default: this checkout's code)")
    ap.add_argument("--no-write", action="store_true", help="print only; do not write benchmarks/results/run_memory.json")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(args.child, args.rows_per_fact, args.out, args.relations)))
        return 0
    codes: dict[str, Path | None] = {}
    if args.before:
        codes["before"] = args.before.resolve()
    codes["after"] = args.after.resolve() if args.after else None
    result = compare(codes, sorted(args.rows), args.rows_per_fact, args.relations)
    summary = {
        "what": "peak RSS of a probe run (mc-synthetic: 100-option rows, synthetic scores) against its rows",
        "rows": sorted(args.rows),
        "rows_per_fact": args.rows_per_fact,
        "relations": args.relations,
        "cpus": os.cpu_count(),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "commits": {label: commit_of(code or HERE.parent) for label, code in codes.items()},
        **result,
    }
    if len(result) == 2:  # the same rows and metrics from both codes, size by size
        a, b = result.values()
        summary["same_results_and_metrics"] = [
            (x["results_sha256"], x["metrics_sha256"]) == (y["results_sha256"], y["metrics_sha256"])
            for x, y in zip([*a["runs"], a["resumed"]], [*b["runs"], b["resumed"]])
        ]
    print(json.dumps({k: [v["peak_difference_mib"], v["resumed_peak_difference_mib"]] for k, v in result.items()}))
    print("same results.jsonl and metrics.json:", summary.get("same_results_and_metrics"))
    if not args.no_write:
        from factprobe.io import atomic_write_json

        atomic_write_json(RESULTS, summary)
        print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
