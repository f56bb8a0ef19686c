"""CPU per fact outside the forward (issue 40 items 1-2): before and after, side by side in one run.

What a probe spends around each `model.forward` decides whether a GPU waits for the CPU. This benchmark
scores each workload the way the runner does (`open_relation`, then `score_batch` over the probe's own
batches: `batches_for(session, state, items)` where the revision has it, else `batches(cfg, items)`), on a
fresh `Session` per pass, and splits the process CPU time (`time.process_time`: every thread of the
process, the tokenizer's Rust threads included) into exclusive buckets:

- `body`: inside the model body's forward (`decoder_parts(model).body.forward`): "the forward";
- `head`: inside `Scorer._query_logprobs` (LM head rows, log-softmax, gather; device work on a GPU);
- `tokenize`: inside the tokenizer's `__call__`;
- `masks`: inside `Scorer._masks` (positions and the 4D mask of each packed forward);
- `rows`: inside `item_row` (result rows);
- `other`: the rest of the pass (option trees, queries, batching, bookkeeping).

`outside` = pass CPU - body - head, per fact; its share of the pass; and `outside / body` per fact, the
issue's target (at most 0.2 with SmolLM2 at 1 thread). Forwards and packed tokens per pass give the batch
fill (tokens per forward against the token budget). A `mask` job times `Scorer._masks` alone for one
packed chunk of IC-LKE-shaped trees filling the 8,192-token GPU budget after a 363-token prefix.

"Before" is a checkout of an earlier revision (`--before DIR`, or `--before-rev REV` checked out with
`git worktree add` into a temporary folder and removed at the end); "after" is this checkout. Each is a
long-lived worker process (same venv, `PYTHONPATH` = its checkout, 1 torch thread, the model loaded
once) that takes one job at a time; the parent alternates which goes first in each repetition, so load
from other processes hits both alike. Medians over `--reps` repetitions.

Workloads (SmolLM2-135M-Instruct, fp32 on CPU; LAMA P36 from the data root):
- ic-lke: 20 facts x 100 options, 50 examples (wu2024's setting);
- ic-lke-0: the same facts, `--examples 0`;
- hgp: 10 facts x 3 templates x 100 options;
- mc-items: 20 four-option items built from LAMA P36 (`bench_mc_items.lama_items`), 50 examples;
each at the CPU default budget (1024) and at the GPU default (8192).

Run: `.venv/bin/python benchmarks/bench_cpu_per_fact.py` (about 15 min on 2 busy cores); writes
`benchmarks/results/cpu_per_fact.json` atomically and prints the tables. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
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
DEFAULT_BEFORE = "4324a0f"  # the last revision before issue 40 items 1-2
BUCKETS = ("body", "head", "tokenize", "masks", "rows")
TARGET_OUTSIDE_OVER_BODY = 0.2

WORKLOADS = {
    "ic-lke": {"probe": "ic-lke", "relations": "P36", "max_facts_per_relation": 20},
    "ic-lke-0": {"probe": "ic-lke", "relations": "P36", "max_facts_per_relation": 20, "examples": 0},
    "hgp": {"probe": "hgp", "relations": "P36", "max_facts_per_relation": 10},
    "mc-items": {"probe": "mc-items", "examples": 50},
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated, of {', '.join(WORKLOADS)}")
    p.add_argument("--budgets", default="1024,8192", help="token budgets (1024: the CPU default, 8192: the GPU default)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--before", default=None, help="a checkout of the revision to compare against")
    p.add_argument(
        "--before-rev", default=DEFAULT_BEFORE, help="checked out into a temporary worktree when --before is not given"
    )
    p.add_argument("--out", default=str(HERE / "results" / "cpu_per_fact.json"))
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # internal: the checkout a worker imports
    p.add_argument("--mc-data", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


# ------------------------------------------------------------------------------------------ worker
class Buckets:
    """Exclusive process-CPU time per bucket: time in a nested bucket is not counted in the outer one."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(BUCKETS, 0.0)
        self._stack: list[list] = []
        self.packed_forwards = 0  # Scorer._forward_hidden calls: the packed forwards (prefix forwards not among them)

    def wrap(self, name: str, fn):
        def timed(*a, **kw):
            frame = [name, time.process_time(), 0.0]  # bucket, start, time in nested buckets
            self._stack.append(frame)
            try:
                return fn(*a, **kw)
            finally:
                self._stack.pop()
                spent = time.process_time() - frame[1]
                self.seconds[name] += spent - frame[2]
                if self._stack:
                    self._stack[-1][2] += spent

        return timed

    def reset(self) -> None:
        self.seconds = dict.fromkeys(BUCKETS, 0.0)
        self.packed_forwards = 0

    def count(self, fn):
        def counted(*a, **kw):
            self.packed_forwards += 1
            return fn(*a, **kw)

        return counted


def _install(loaded, buckets: Buckets) -> None:
    """Wrap the model body, the scorer's head and masks, the tokenizer and the probes' `item_row`."""
    from factprobe.lm import scorer as scorer_mod
    from factprobe.lm.body import decoder_parts
    from factprobe.probes import ic_lke, mc_items, prompt_lke

    body = decoder_parts(loaded.model).body
    body.forward = buckets.wrap("body", body.forward)
    scorer_mod.Scorer._query_logprobs = buckets.wrap("head", scorer_mod.Scorer._query_logprobs)
    scorer_mod.Scorer._masks = buckets.wrap("masks", scorer_mod.Scorer._masks)
    scorer_mod.Scorer._forward_hidden = buckets.count(scorer_mod.Scorer._forward_hidden)
    tok_cls = type(loaded.tokenizer)
    tok_cls.__call__ = buckets.wrap("tokenize", tok_cls.__call__)
    for mod in (ic_lke, mc_items, prompt_lke):
        mod.item_row = buckets.wrap("rows", mod.item_row)


def _mask_job(loaded, tokens: int, prefix_len: int, reps: int = 3) -> dict:
    """Process CPU of `Scorer._masks` for one chunk of IC-LKE-shaped trees (a 3-token fact context, 60
    option segments of 1-3 tokens) filling `tokens`, median of `reps`."""
    import random

    from factprobe.lm.scorer import Scorer, Segment

    rng = random.Random(0)
    segs: list = []
    while sum(len(s.token_ids) for s in segs) < tokens - 200:
        root = len(segs)
        segs.append(Segment([5] * 3, -1, spans=[]))
        segs += [Segment([7] * rng.randint(1, 3), root, spans=[]) for _ in range(60)]
    scorer = Scorer(loaded.model, loaded.tokenizer, device="cpu", token_budget=tokens)
    times = []
    for _ in range(reps):
        t = time.process_time()
        scorer._masks(prefix_len, segs)
        times.append(time.process_time() - t)
    return {"seconds": times, "median_s": statistics.median(times), "tokens": sum(len(s.token_ids) for s in segs)}


def _module(*names: str):
    """The first of `names` (dotted `factprobe.` modules, newest layout first) whose file is in this worker's
    checkout, imported. Decided by the checkout's files, not by trying the import: the venv's editable install
    would find a module the checkout lacks in the other checkout (the framework, the model store moved)."""
    import importlib

    import factprobe

    root = Path(factprobe.__file__).parent
    for name in names:
        rel = Path(*name.split(".")[1:])
        if (root / rel).is_dir() or (root / rel).with_suffix(".py").is_file():
            mod = importlib.import_module(name)
            if root not in Path(mod.__file__).resolve().parents:
                raise SystemExit(f"{name} came from {mod.__file__}, outside {root}")
            return mod
    raise SystemExit(f"none of {names} in {root}")


def _framework(module: str):
    """`factprobe.framework.<module>`, or `factprobe.probes.<module>` from before the framework's own package."""
    return _module(f"factprobe.framework.{module}", f"factprobe.probes.{module}")


def _pass(loaded, probe, cfg, prepared, buckets: Buckets) -> dict:
    """One scoring pass as the runner makes it, on a fresh Session; CPU by bucket."""
    Session = _framework("base").Session

    session = Session(cfg, loaded, prepared, lambda m: None)
    buckets.reset()
    n_items = n_rows = n_batches = 0
    w0, c0 = time.perf_counter(), time.process_time()
    for rel, items in probe.groups(cfg, prepared).items():
        state = probe.open_relation(session, rel)
        by_budget = getattr(probe, "batches_for", None)
        for batch in by_budget(session, state, items) if by_budget else probe.batches(cfg, items):
            n_rows += len(probe.score_batch(session, state, batch))
            n_items += len(batch)
            n_batches += 1
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    stats = session.scorer.stats
    return {
        "facts": n_items,
        "rows": n_rows,
        "batches": n_batches,
        "cpu_s": cpu,
        "wall_s": wall,
        "buckets_s": dict(buckets.seconds),
        "forwards": stats.forwards,
        "packed_forwards": buckets.packed_forwards,
        "prefix_tokens": stats.prefix_tokens,
        "packed_tokens": stats.packed_tokens,
        "fallback_tokens": stats.fallback_tokens,
        "token_budget": session.scorer.token_budget,
    }


def worker(args) -> None:
    """Serve jobs (one JSON line each on stdin, one JSON line back) with the checkout `args.worker`."""
    sys.path.insert(0, str(Path(args.worker).resolve()))
    import torch

    torch.set_num_threads(1)
    import factprobe

    load_model = _module("factprobe.models", "factprobe.lm.models").load_model  # the model store moved out of lm
    RunConfig, get_probe = _framework("config").RunConfig, _framework("registry").get_probe

    if not Path(factprobe.__file__).resolve().is_relative_to(Path(args.worker).resolve()):
        raise SystemExit(f"factprobe came from {factprobe.__file__}, not {args.worker}")
    loaded = load_model(args.model, device="cpu", dtype="float32")
    buckets = Buckets()
    _install(loaded, buckets)
    prepared_cache: dict[str, tuple] = {}
    print(json.dumps({"ready": True, "factprobe": factprobe.__file__}), flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        if job.get("kind") == "mask":
            print(json.dumps(_mask_job(loaded, job["tokens"], job["prefix"])), flush=True)
            continue
        spec = dict(WORKLOADS[job["workload"]], model=args.model, token_budget=job["budget"], threads=1)
        if spec["probe"] == "mc-items":
            spec.update(data=str(Path(args.mc_data) / "items.jsonl"), train_data=str(Path(args.mc_data) / "train.jsonl"))
        key = json.dumps(spec, sort_keys=True)
        if key not in prepared_cache:
            probe = get_probe(spec["probe"])
            cfg = RunConfig.from_dict(spec)
            prepared = probe.prepare(cfg)
            probe.validate(cfg, prepared)
            prepared_cache[key] = (probe, cfg, prepared)
        probe, cfg, prepared = prepared_cache[key]
        print(json.dumps(_pass(loaded, probe, cfg, prepared, buckets)), flush=True)


# ------------------------------------------------------------------------------------------ parent
class Worker:
    def __init__(self, code: Path, args, mc_data: Path) -> None:
        env = dict(os.environ, PYTHONPATH=str(code), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        from factprobe.paths import data_root

        env.setdefault("FACTPROBE_DATA", str(data_root()))  # the data root of this checkout, for both
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(code), "--model", args.model]
        self.proc = subprocess.Popen(
            cmd + ["--mc-data", str(mc_data)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=str(code)
        )
        self.hello = self._read()

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"a worker stopped (exit code {self.proc.wait()})")
        return json.loads(line)

    def run(self, job: dict) -> dict:
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


@contextlib.contextmanager
def before_checkout(args):
    """The "before" checkout: `--before`, or `--before-rev` in a temporary git worktree (removed after)."""
    if args.before:
        yield Path(args.before).resolve()
        return
    tmp = Path(tempfile.mkdtemp(prefix="factprobe-before-")) / "tree"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tmp), args.before_rev], check=True)
    try:
        yield tmp
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tmp)], check=False)


def _rev(path: Path) -> str:
    out = subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip()


def summarize(passes: list[dict]) -> dict:
    """Medians over passes, per fact (ms) and as shares."""
    facts = passes[0]["facts"]

    def med(fn) -> float:
        return statistics.median(fn(p) for p in passes)

    per_fact = {b: med(lambda p, b=b: p["buckets_s"][b]) * 1000 / facts for b in BUCKETS}
    per_fact["total"] = med(lambda p: p["cpu_s"]) * 1000 / facts
    per_fact["outside"] = med(lambda p: p["cpu_s"] - p["buckets_s"]["body"] - p["buckets_s"]["head"]) * 1000 / facts
    per_fact["other"] = med(lambda p: p["cpu_s"] - sum(p["buckets_s"].values())) * 1000 / facts
    first = passes[0]
    forwards = first["forwards"]
    return {
        "facts": facts,
        "rows": first["rows"],
        "batches": first["batches"],
        "forwards": forwards,
        "token_budget": first["token_budget"],
        "packed_tokens_per_forward": round(first["packed_tokens"] / max(1, forwards), 1),  # prefix forwards counted
        "packed_forwards": first.get("packed_forwards"),
        "tokens_per_packed_forward": round(first["packed_tokens"] / max(1, first.get("packed_forwards") or 1), 1),
        "ms_per_fact": {k: round(v, 3) for k, v in per_fact.items()},
        "outside_share_of_pass": round(per_fact["outside"] / per_fact["total"], 4),
        "outside_over_body": round(per_fact["outside"] / per_fact["body"], 4),
        "wall_s_median": round(med(lambda p: p["wall_s"]), 3),
        "passes": passes,
    }


def _row(name: str, before: dict, after: dict) -> str:
    b, a = before["ms_per_fact"], after["ms_per_fact"]
    ratio = b["outside"] / a["outside"] if a["outside"] else float("inf")
    return (
        f"{name:<18}{b['outside']:>9.2f}{a['outside']:>9.2f}{ratio:>7.1f}x{b['tokenize']:>9.2f}{a['tokenize']:>8.2f}"
        f"{b['masks']:>8.2f}{a['masks']:>7.2f}{a['body']:>9.1f}{after['outside_over_body']:>8.3f}"
        f"{before['forwards']:>6}{after['forwards']:>5}"
    )


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.worker:
        worker(args)
        return {}
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(HERE))
    from bench_generate import loadavg, machine_info
    from bench_mc_items import lama_items

    from factprobe.io import atomic_write_json

    workloads = [w for w in args.workloads.split(",") if w]
    budgets = [int(b) for b in args.budgets.split(",") if b]
    load_start = loadavg()
    with tempfile.TemporaryDirectory() as tmp, before_checkout(args) as before_dir:
        mc_data = Path(tmp) / "mc"
        lama_items(["P36"], 20, mc_data)
        workers = {"before": Worker(before_dir, args, mc_data), "after": Worker(REPO, args, mc_data)}
        revs = {"before": _rev(before_dir), "after": _rev(REPO)}
        results: dict = {}
        try:
            mask = {k: [] for k in workers}
            for rep in range(args.reps):
                for k in workers if rep % 2 == 0 else reversed(list(workers)):
                    mask[k].append(workers[k].run({"kind": "mask", "tokens": 8192, "prefix": 363})["median_s"])
            for wl in workloads:
                for budget in budgets:
                    passes: dict[str, list] = {k: [] for k in workers}
                    for k in workers:  # warm-up: the first pass pages the weights in
                        workers[k].run({"workload": wl, "budget": budget})
                    for rep in range(args.reps):
                        for k in workers if rep % 2 == 0 else reversed(list(workers)):
                            passes[k].append(workers[k].run({"workload": wl, "budget": budget}))
                    name = f"{wl}@{budget}"
                    results[name] = {k: summarize(v) for k, v in passes.items()}
                    print(_row(name, results[name]["before"], results[name]["after"]), flush=True)
        finally:
            for w in workers.values():
                w.close()
    mask_med = {k: statistics.median(v) for k, v in mask.items()}
    targets = {
        name: {
            "outside_over_body": r["after"]["outside_over_body"],
            "passed": r["after"]["outside_over_body"] <= TARGET_OUTSIDE_OVER_BODY,
        }
        for name, r in results.items()
        if name.endswith("@1024")
    }
    result = {
        "benchmark": "CPU per fact outside the model body's forward, before and after issue 40 items 1-2",
        "revisions": revs,
        "workload": {"model": args.model, "dtype": "float32", "device": "cpu", "threads": 1, "reps": args.reps},
        "mask_8192_tokens_s": {"before": mask_med["before"], "after": mask_med["after"], "all": mask},
        "mask_ratio": round(mask_med["before"] / mask_med["after"], 1) if mask_med["after"] else None,
        "results": results,
        "ratios_outside_before_over_after": {
            n: round(r["before"]["ms_per_fact"]["outside"] / r["after"]["ms_per_fact"]["outside"], 2) for n, r in results.items()
        },
        "target": f"outside / body per fact <= {TARGET_OUTSIDE_OVER_BODY} at the CPU default budget, 1 thread",
        "targets": targets,
        "all_passed": all(t["passed"] for t in targets.values()),
        "machine": machine_info(),
        "loadavg_start": load_start,
        "loadavg_end": loadavg(),
    }
    atomic_write_json(args.out, portable(result))
    print(f"mask of one 8,192-token chunk: {mask_med['before']:.3f} s before, {mask_med['after']:.4f} s after")
    print(f"target outside/body <= {TARGET_OUTSIDE_OVER_BODY}: {targets}; wrote {args.out}")
    return result


HEADER = (
    f"{'workload@budget':<18}{'out.bef':>9}{'out.aft':>9}{'ratio':>8}{'tok.bef':>9}{'tok.aft':>8}"
    f"{'msk.bef':>8}{'msk.aft':>7}{'body.aft':>9}{'out/body':>8}{'fw.b':>6}{'fw.a':>5}   (ms per fact)"
)

if __name__ == "__main__":
    if "--worker" not in sys.argv:
        print(HEADER, flush=True)
    main()
