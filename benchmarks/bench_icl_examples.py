"""Examples-curve benchmark (issue 20 "Speed"): time per n of `factprobe study icl-examples` with the
examples' prefix reused across n against recomputing it for every n, side by side in one run.

Workload: `smollm2-135m-instruct`, fp32 on the CPU; LAMA T-REx `--relation` (P36) test facts
(`--facts`, 10), `--choices` (20) options each, examples from the LPAQA T-REx training facts; the
n list of the study's default (0,1,2,5,10,20,30,50), one example draw (the run's seed). The data,
plan, prompts and scoring are the study's own (`factprobe.studies.icl_examples`: `plan_relation`,
`PrefixChain`, `score_items`), so this times exactly what the study runs per n:

- reused:     one `PrefixChain(reuse=True)`: the cache of n extends the cache of the previous n by
              the new examples' tokens (`Scorer.extend`);
- recomputed: `PrefixChain(reuse=False)`: every n runs its whole examples prefix from scratch (what
              separate `ic-lke --examples n` runs do).

Both then score the same items after the prefix. The two modes alternate n by n within each of
`--reps` repetitions (each mode keeps its own chain; which goes first alternates with n and with the
repetition), so outside load hits both alike; per n the median
over reps of (prefix seconds) and (prefix + items seconds) is reported, with the ratios
recomputed/reused: for the prefix alone, and for the whole step (what a user waits for). The
prefix tokens forwarded per mode are counted from the tokenizer, and max |delta log-prob| between
the modes checks that reuse changes no number (target 1e-4). n = 0 has no prefix (the same code in
both modes) and is not timed.

Run: `.venv/bin/python benchmarks/bench_icl_examples.py --threads 1` (~3-5 min on 2 busy cores);
writes `benchmarks/results/icl_examples.json` atomically and prints the table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from portable_paths import portable  # benchmarks/ is sys.path[0] when a bench runs

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for p in (str(REPO), str(HERE)):
    if p not in sys.path:  # run as a script from anywhere
        sys.path.insert(0, p)

import numpy as np
import torch
from bench_generate import loadavg, machine_info

DEFAULT_N = "0,1,2,5,10,20,30,50"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--relation", default="P36")
    p.add_argument("--facts", type=int, default=10)
    p.add_argument("--choices", type=int, default=20)
    p.add_argument("--n", default=DEFAULT_N)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's default)")
    p.add_argument("--out", default=str(HERE / "results" / "icl_examples.json"))
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from factprobe.datasets.mc_dataset import prepare_mc
    from factprobe.framework.config import BaseConfig
    from factprobe.io import atomic_write_json
    from factprobe.lm.scorer import Scorer
    from factprobe.models import load_model
    from factprobe.paths import data_root
    from factprobe.probes.ic_lke import relation_prefix
    from factprobe.studies.icl_examples import ICLExamplesConfig, PrefixChain, plan_relation, score_items

    root = data_root()
    base = BaseConfig(
        model=args.model,
        source="lama",
        data=str(root / "lama"),
        train_data=str(root / "lpaqa" / "trex_train"),
        relations=[args.relation],
        max_facts_per_relation=args.facts,
        seed=args.seed,
        device="cpu",
        dtype="float32",
    )
    cfg = ICLExamplesConfig(n=args.n, draws=1, choices=args.choices)
    load_start = loadavg()
    prepared = prepare_mc(base, choices=cfg.choices)
    loaded = load_model(base.model, device="cpu", dtype="float32")
    scorer = Scorer(loaded.model, loaded.tokenizer, device=loaded.device, max_length=loaded.max_length)
    rel = args.relation
    items = prepared.items[rel]
    notes: list[str] = []
    plan = plan_relation(
        scorer, rel, items, prepared.train, [f for f in prepared.test if f.relation == rel], cfg, base.seed, notes.append
    )
    examples = plan.draws[0]
    ks = sorted({plan.used(n) for n in cfg.n if plan.used(n) > 0})
    texts = {k: relation_prefix(examples[:k]).rstrip() for k in ks}
    prefix_tokens = {k: len(scorer.encode_context(t)) for k, t in texts.items()}

    # warm-up (page in the weights; first-call overheads), not timed
    score_items(scorer, items[:2], examples[:1], PrefixChain(scorer).get(texts[ks[0]]), cfg)

    modes = ("reused", "recomputed")
    prefix_s = {m: {k: [] for k in ks} for m in modes}
    total_s = {m: {k: [] for k in ks} for m in modes}
    logprobs: dict[str, dict[int, list]] = {m: {} for m in modes}
    for rep in range(args.reps):
        chains = {m: PrefixChain(scorer, reuse=(m == "reused")) for m in modes}
        for i, k in enumerate(ks):
            for mode in modes if (rep + i) % 2 == 0 else modes[::-1]:
                t0 = time.perf_counter()
                cache = chains[mode].get(texts[k])
                t1 = time.perf_counter()
                rows = score_items(scorer, items, examples[:k], cache, cfg, keep_logprobs=(rep == 0))
                t2 = time.perf_counter()
                prefix_s[mode][k].append(t1 - t0)
                total_s[mode][k].append(t2 - t0)
                if rep == 0:
                    logprobs[mode][k] = [r["logprobs"] for r in rows]
        print(
            f"rep {rep + 1}/{args.reps}: " + ", ".join(f"{m} {sum(v[-1] for v in total_s[m].values()):.1f} s" for m in modes),
            flush=True,
        )
        assert chains["reused"].extended == len(ks) - 1 and chains["recomputed"].extended == 0

    med = statistics.median
    per_n = []
    for k in ks:
        row = {
            "n": k,
            "prefix_tokens": prefix_tokens[k],
            "prefix_tokens_forwarded": {
                "reused": prefix_tokens[k] - (prefix_tokens[ks[ks.index(k) - 1]] if k != ks[0] else 0),
                "recomputed": prefix_tokens[k],
            },
        }
        for mode in modes:
            row[f"prefix_seconds_{mode}"] = med(prefix_s[mode][k])
            row[f"seconds_{mode}"] = med(total_s[mode][k])
        row["prefix_ratio"] = row["prefix_seconds_recomputed"] / row["prefix_seconds_reused"]
        row["ratio"] = row["seconds_recomputed"] / row["seconds_reused"]
        per_n.append(row)
    sums = {f"{what}_{mode}": sum(r[f"{what}_{mode}"] for r in per_n) for what in ("prefix_seconds", "seconds") for mode in modes}
    diff = max(
        float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
        for k in ks
        for a, b in zip(logprobs["reused"][k], logprobs["recomputed"][k])
    )
    result = {
        "workload": {
            "model": args.model,
            "relation": rel,
            "facts": len(items),
            "choices": cfg.choices,
            "n": cfg.n,
            "n_used": ks,
            "examples_available": plan.cap,
            "notes": notes,
            "reps": args.reps,
            "prefix_tokens_at_largest_n": prefix_tokens[ks[-1]],
        },
        "per_n": per_n,
        "prefix_tokens_forwarded": {"reused": prefix_tokens[ks[-1]], "recomputed": sum(prefix_tokens.values())},
        **sums,
        "prefix_speedup": sums["prefix_seconds_recomputed"] / sums["prefix_seconds_reused"],
        "speedup": sums["seconds_recomputed"] / sums["seconds_reused"],
        "max_abs_logprob_diff": diff,
        "passed": {"exact_1e-4": diff <= 1e-4},
        "machine": machine_info(),
        "loadavg_start": load_start,
        "loadavg_end": loadavg(),
    }
    atomic_write_json(args.out, portable(result))
    print(
        f"{'n':>4} {'prefix tok':>10} {'prefix reused':>14} {'recomputed':>11} {'ratio':>6} {'step reused':>12} "
        f"{'recomputed':>11} {'ratio':>6}"
    )
    for r in per_n:
        print(
            f"{r['n']:>4} {r['prefix_tokens']:>10} {r['prefix_seconds_reused']:>13.3f}s {r['prefix_seconds_recomputed']:>10.3f}s "
            f"{r['prefix_ratio']:>6.2f} {r['seconds_reused']:>11.2f}s {r['seconds_recomputed']:>10.2f}s {r['ratio']:>6.2f}"
        )
    print(
        f"all n: prefix {sums['prefix_seconds_reused']:.2f}s vs {sums['prefix_seconds_recomputed']:.2f}s "
        f"({result['prefix_speedup']:.2f}x; tokens {result['prefix_tokens_forwarded']['reused']} vs "
        f"{result['prefix_tokens_forwarded']['recomputed']}), whole curve {sums['seconds_reused']:.1f}s vs "
        f"{sums['seconds_recomputed']:.1f}s ({result['speedup']:.2f}x); max |dlogprob| {diff:.1e}; "
        f"load {load_start} -> {result['loadavg_end']}"
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
