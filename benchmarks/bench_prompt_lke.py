"""HGP / MMP scoring (issue 31 item 10): several (fact, template) rows packed into one forward
against two tiny forwards per row, side by side in one run, at each `--threads` count.

Workload: `smollm2-135m-instruct`, fp32 on the CPU; the HGP probe's own data and templates
(`get_probe("hgp").prepare` + `validate`: `--source` lama, `--relations` P36,P19,P27, `--facts`
3 per relation, the probe's default 3 templates per relation: 27 rows), in the probe's own batches (`probe.batches`), so the rows
are exactly those `factprobe probe hgp` scores:

- per_row: what `PromptProbe.score_batch` did before: per template, `score_choices(requests)` without a
           shared prefix, i.e. per row one forward of its context and one of its options' trie;
- packed:  `score_batch` now: the batch's rows of every template in one
           `score_choices(requests, pack_contexts=True)` call, rows packed into forwards of at most
           `token_budget` tokens (the scorer's default).

The two alternate within each of `--reps` repetitions (which goes first alternates), each on its
own `Scorer`, after one warm-up pass of each; reported per thread count: the median seconds of a
whole pass over the rows, forwards and tokens per pass, the ratio per_row / packed, and max |delta
log-prob| between the two (target 1e-4).

Run: `.venv/bin/python benchmarks/bench_prompt_lke.py --threads 1,2` (~2-5 min on 2 busy cores);
writes `benchmarks/results/prompt_lke.json` atomically and prints the table.
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


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--probe", default="hgp", choices=["hgp", "mmp"])
    p.add_argument("--source", default="lama")
    p.add_argument("--relations", default="P36,P19,P27", help="relations with LPAQA prompts of the probe's kind")
    p.add_argument("--facts", type=int, default=3, help="facts per relation (--max-facts-per-relation)")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", default="1,2", help="comma-separated torch thread counts")
    p.add_argument("--out", default=str(HERE / "results" / "prompt_lke.json"))
    return p.parse_args(argv)


def workload(args):
    """(the probe, its config, [(templates, batch)] in the runner's order) for the probe's own data."""
    from factprobe.framework.config import RunConfig
    from factprobe.framework.registry import get_probe

    probe = get_probe(args.probe)
    cfg = RunConfig.from_dict(
        {
            "probe": args.probe,
            "model": args.model,
            "source": args.source,
            "relations": args.relations,
            "max_facts_per_relation": args.facts,
        }
    )
    prepared = probe.prepare(cfg)
    probe.validate(cfg, prepared)
    work = []
    for rel, items in probe.groups(cfg, prepared).items():
        templates = prepared.info[f"{probe.name}_templates"][rel]
        work += [(templates, batch) for batch in probe.batches(cfg, items)]
    return probe, cfg, work


def requests_of(templates, batch):
    from factprobe.lm.scorer import ChoiceRequest
    from factprobe.probes.prompt_lke import fill_template

    out = []
    for template in templates:
        for it in batch:
            pairs = [fill_template(template, it.subject, o) for o in it.options]
            out.append(ChoiceRequest(pairs[0][0], [c for _, c in pairs]))
    return out


def per_row(scorer, work) -> list[np.ndarray]:
    """The old `score_batch`: template by template, no packing (two forwards per row)."""
    out = []
    for templates, batch in work:
        for template in templates:
            out += scorer.score_choices(requests_of([template], batch))
    return out


def packed(scorer, work) -> list[np.ndarray]:
    """The new `score_batch`: the batch's rows of every template in one packed call."""
    out = []
    for templates, batch in work:
        out += scorer.score_choices(requests_of(templates, batch), pack_contexts=True)
    return out


def timed_pass(fn, scorer, work) -> tuple[float, list[np.ndarray], int, int]:
    f0, t0 = scorer.stats.forwards, scorer.stats.total_tokens
    start = time.perf_counter()
    scores = fn(scorer, work)
    return time.perf_counter() - start, scores, scorer.stats.forwards - f0, scorer.stats.total_tokens - t0


def main(argv=None) -> dict:
    args = parse_args(argv)
    from factprobe.io import atomic_write_json
    from factprobe.lm.scorer import Scorer
    from factprobe.models import load_model

    _, _, work = workload(args)
    loaded = load_model(args.model, device="cpu", dtype="float32")
    methods = {"per_row": per_row, "packed": packed}
    results = {}
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        scorers = {m: Scorer(loaded.model, loaded.tokenizer, device="cpu") for m in methods}
        seconds: dict[str, list[float]] = {m: [] for m in methods}
        counts, scores = {}, {}
        for m, fn in methods.items():  # warm-up
            _, scores[m], f, t = timed_pass(fn, scorers[m], work)
            counts[m] = {"forwards_per_pass": f, "tokens_per_pass": t}
        for rep in range(args.reps):
            order = list(methods) if rep % 2 == 0 else list(reversed(methods))
            for m in order:
                dt, _, _, _ = timed_pass(methods[m], scorers[m], work)
                seconds[m].append(round(dt, 4))
        diff = max(float(np.max(np.abs(a - b))) for a, b in zip(scores["per_row"], scores["packed"]))
        med = {m: statistics.median(v) for m, v in seconds.items()}
        results[str(threads)] = {
            "median_s": {m: round(v, 4) for m, v in med.items()},
            "all_s": seconds,
            **{m: counts[m] for m in methods},
            "speedup_per_row_over_packed": round(med["per_row"] / med["packed"], 2),
            "max_abs_logprob_diff": diff,
            "load_average_1_5_15_min_at_end": loadavg(),
        }
        print(
            f"threads {threads}: per_row {med['per_row']:.3f} s ({counts['per_row']['forwards_per_pass']} forwards), "
            f"packed {med['packed']:.3f} s ({counts['packed']['forwards_per_pass']} forwards): "
            f"{med['per_row'] / med['packed']:.2f}x, max |delta| {diff:.2e}"
        )
    n_rows = sum(len(t) * len(b) for t, b in work)
    result = {
        "benchmark": f"{args.probe} scoring: rows packed into forwards vs two forwards per (fact, template) row",
        "workload": {
            "model": args.model,
            "probe": args.probe,
            "source": args.source,
            "relations": args.relations,
            "facts_per_relation": args.facts,
            "rows": n_rows,
            "batches": len(work),
            "token_budget": Scorer(loaded.model, loaded.tokenizer).token_budget,
            "reps": args.reps,
        },
        "machine": machine_info(),
        "threads": results,
    }
    atomic_write_json(args.out, portable(result))
    print(f"{n_rows} rows in {len(work)} batches; wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
