"""Position study benchmark: one forward of the whole sequence vs one forward per position's prefix.

Workload: the `icl-sequence` study's clean sequence (wu2024 Figure 2a) of LAMA T-REx relation P36
(capital of), `--length` 200 examples (seeded draw, `factprobe.studies.sequence_data`), on
`smollm2-135m-instruct`, fp32 on CPU. The texts are exactly what the study scores: position i's
`prefix` (the text before its object) and the object.

Two methods on the same positions, in one process, interleaved (so outside load on this shared
2-core machine hits both alike):
- ours:  `factprobe.studies.icl_sequence.score_sequence`: ONE forward of the whole sequence,
         the object's log-prob at every position read from it (what the study runs);
- naive: `factprobe.lm.naive.naive_logprob(prefix_i, object_i)`: one full forward of
         prefix + object per position, i.e. 200 prefix recomputations (what "anyone can
         recompute" means, and what a per-example loop costs).
Naive runs in chunks of `--chunk` positions; after every chunk ours runs one pass. The ratio is
naive's total seconds over all positions / the median seconds of one ours pass. On a busy machine
`--naive-positions K` times naive on K evenly spaced positions only (the last one included) and
scales its seconds up to all positions by tokens (naive cost grows with the prefix; the JSON then
says `extrapolated: true`). Also: max |log-prob difference| ours vs naive over every naive-scored
position (target <= 1e-4), tokens forwarded by each, the load average. Writes
`benchmarks/results/icl_sequence.json` atomically.

Run: `.venv/bin/python benchmarks/bench_icl_sequence.py` (~2-4 min on a quiet 2-core machine;
`--length 50` for a quick check).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for p in (str(REPO), str(HERE)):
    if p not in sys.path:  # run as a script from anywhere
        sys.path.insert(0, p)

import torch
from tqdm.auto import tqdm

TARGETS = {"max_abs_logprob_diff_vs_naive": ("<=", 1e-4)}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--relation", default="P36")
    p.add_argument("--length", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--chunk", type=int, default=20, help="naive positions between two ours passes")
    p.add_argument(
        "--naive-positions",
        type=int,
        default=None,
        help="time naive on this many evenly spaced positions and scale up by tokens (default: all)",
    )
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's default)")
    p.add_argument("--out", default=str(HERE / "results" / "icl_sequence.json"))
    p.add_argument("--no-progress", action="store_true")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from factprobe.io import atomic_write_json
    from factprobe.lm.naive import naive_logprob
    from factprobe.lm.scorer import Scorer
    from factprobe.models import load_model
    from factprobe.sources import load_facts
    from factprobe.studies.icl_sequence import score_sequence
    from factprobe.studies.sequence_data import build_sequence, sequence_texts

    facts = load_facts("lama").select([args.relation])
    seq = build_sequence(facts.facts, args.relation, args.length, 0, "none", "random", args.seed)
    prefixes, objects = sequence_texts(seq, " "), [e.object for e in seq]
    loaded = load_model(args.model, device=args.device, dtype="float32")
    scorer = Scorer(loaded.model, loaded.tokenizer, device=loaded.device, max_length=loaded.max_length)
    tok = loaded.tokenizer
    lengths = [len(tok(p + o)["input_ids"]) for p, o in zip(prefixes, objects)]
    naive_tokens = sum(lengths)
    n = len(prefixes)
    k = min(args.naive_positions or n, n)
    timed = sorted({round(j * (n - 1) / max(k - 1, 1)) for j in range(k)})

    def sync() -> None:
        if loaded.device.type == "cuda":
            torch.cuda.synchronize()

    # warm-up: page in the weights, first-call overheads
    score_sequence(scorer, prefixes, objects, args.relation)
    naive_logprob(loaded.model, tok, prefixes[0], objects[0])

    ours_seconds: list[float] = []
    ours_lp: list[float] = []
    naive_lp: list[float] = []
    naive_seconds = 0.0
    bar = tqdm(total=len(timed), desc="naive positions", disable=args.no_progress)
    for start in range(0, len(timed), args.chunk):
        part = timed[start : start + args.chunk]
        sync()
        t = time.perf_counter()
        for i in part:
            naive_lp.append(naive_logprob(loaded.model, tok, prefixes[i], objects[i]))
        sync()
        naive_seconds += time.perf_counter() - t
        bar.update(len(part))
        t = time.perf_counter()
        scores = score_sequence(scorer, prefixes, objects, args.relation)
        sync()
        ours_seconds.append(time.perf_counter() - t)
        ours_lp = scores.logprobs
    bar.close()
    ours = statistics.median(ours_seconds)
    diff = max(abs(ours_lp[i] - b) for i, b in zip(timed, naive_lp))
    timed_tokens = sum(lengths[i] for i in timed)
    naive_timed_seconds = naive_seconds
    naive_seconds = naive_timed_seconds * naive_tokens / timed_tokens
    result = {
        "workload": {
            "model": args.model,
            "revision": loaded.revision,
            "source": "lama",
            "relation": args.relation,
            "length": args.length,
            "seed": args.seed,
            "device": str(loaded.device),
            "dtype": "float32",
            "sequence_tokens": scores.tokens,
            "tokenization_fallbacks": scores.fallbacks,
            "torch_threads": torch.get_num_threads(),
        },
        "ours_seconds_per_sequence": ours,
        "ours_seconds_all_passes": ours_seconds,
        "naive_seconds_all_positions": naive_seconds,
        "naive_positions_timed": len(timed),
        "naive_seconds_timed": naive_timed_seconds,
        "naive_tokens_timed": timed_tokens,
        "extrapolated": len(timed) < n,
        "speedup_vs_naive": naive_seconds / ours,
        "tokens_forwarded_ours": scores.tokens,
        "tokens_forwarded_naive": naive_tokens,
        "token_ratio": naive_tokens / scores.tokens,
        "max_abs_logprob_diff_vs_naive": diff,
        "loadavg": os.getloadavg(),
        "targets": {k: {"op": op, "value": v} for k, (op, v) in TARGETS.items()},
    }
    result["targets_met"] = {k: (result[k] <= v if op == "<=" else result[k] >= v) for k, (op, v) in TARGETS.items()}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(Path(args.out), result)
    print(
        f"icl-sequence {args.relation}, {args.length} positions, {scores.tokens} tokens, {loaded.device}: "
        f"ours {ours:.3f} s (one forward), naive {naive_seconds:.1f} s ({args.length} prefix forwards, "
        f"{naive_tokens} tokens{f', {len(timed)} timed, scaled by tokens' if len(timed) < n else ''}): {result['speedup_vs_naive']:.1f}x faster, max |diff| {diff:.2e}"
    )
    print(f"written {args.out}")
    return 0 if all(result["targets_met"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
