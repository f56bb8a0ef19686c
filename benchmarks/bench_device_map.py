"""The cost of a split model on CPU (issue 30, Speed): the same IC-LKE-shaped scoring on the whole model and on
the model split by accelerate (`--device-map auto --max-memory cpu=...`: the embedding and a few decoder layers
in memory, the rest offloaded to disk), side by side in one run.

What is timed: `Scorer.score_choices` over a shared 10-example prefix with 8 questions x 10 options, on a real
model (smollm2-135m-instruct from `make models`), float32, 1 thread, `--rounds` alternating rounds. Printed and
written to benchmarks/results/device_map.json: seconds per round for each, the ratio split / whole, and the
largest log-prob difference (the split must agree within 1e-4).

    .venv/bin/python benchmarks/bench_device_map.py [--model smollm2-135m-instruct] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from portable_paths import portable  # benchmarks/ is sys.path[0] when a bench runs

REPO = Path(__file__).resolve().parents[1]
CAPITALS = [
    ("France", "Paris"),
    ("Italy", "Rome"),
    ("Spain", "Madrid"),
    ("Germany", "Berlin"),
    ("Portugal", "Lisbon"),
    ("Austria", "Vienna"),
    ("Poland", "Warsaw"),
    ("Greece", "Athens"),
    ("Norway", "Oslo"),
    ("Sweden", "Stockholm"),
    ("Finland", "Helsinki"),
    ("Denmark", "Copenhagen"),
    ("Ireland", "Dublin"),
    ("Hungary", "Budapest"),
    ("Belgium", "Brussels"),
    ("Romania", "Bucharest"),
    ("Bulgaria", "Sofia"),
    ("Croatia", "Zagreb"),
]


def requests():
    """(prefix, [ChoiceRequest]): 10 examples, then 8 questions with the 10 capitals of the test countries as options."""
    from factprobe.lm.scorer import ChoiceRequest

    examples, tests = CAPITALS[:10], CAPITALS[10:]
    prefix = "".join(f"The capital of {c} is {a}.\n" for c, a in examples)
    options = [f" {a}" for _, a in tests] + [" Paris", " Rome"]
    return prefix, [ChoiceRequest(f"The capital of {c} is", options) for c, _ in tests]


def score(loaded, prefix, reqs):
    from factprobe.lm.scorer import Scorer

    scorer = Scorer(loaded.model, loaded.tokenizer, device=loaded.device)
    return scorer.score_choices(reqs, shared_prefix=scorer.prefix(prefix))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "device_map.json"))
    args = ap.parse_args()

    import numpy as np
    import torch
    from accelerate.utils import compute_module_sizes

    from factprobe.models.loading import load_model

    torch.set_num_threads(1)
    whole = load_model(args.model, device="cpu", dtype="float32")
    sizes = compute_module_sizes(whole.model)
    layers = sum(1 for k in sizes if k.startswith("model.layers.") and k.count(".") == 2)
    budget = sizes["model.embed_tokens"] + 4 * sizes["model.layers.0"]  # the embedding and ~3 layers; the rest on disk
    with tempfile.TemporaryDirectory(prefix="bench-offload-") as offload:
        split = load_model(
            args.model, device="cpu", dtype="float32", device_map="auto", max_memory=f"cpu={budget}", offload_folder=offload
        )
        placed = list(split.model.hf_device_map.values())
        prefix, reqs = requests()
        times = {"whole": [], "split": []}
        results = {}
        score(whole, prefix, reqs[:1])  # warm-up of both
        score(split, prefix, reqs[:1])
        for _ in range(args.rounds):
            for name, loaded in (("whole", whole), ("split", split)):
                t0 = time.perf_counter()
                results[name] = score(loaded, prefix, reqs)
                times[name].append(time.perf_counter() - t0)
    diff = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(results["whole"], results["split"]))
    med = {k: statistics.median(v) for k, v in times.items()}
    out = {
        "benchmark": "device_map",
        "model": args.model,
        "dtype": "float32",
        "threads": 1,
        "work": f"shared prefix of 10 examples, {len(reqs)} questions x {len(reqs[0].options)} options",
        "decoder_layers": layers,
        "placement": {d: placed.count(d) for d in sorted(set(map(str, placed)))},
        "cpu_budget_bytes": budget,
        "round_seconds": times,
        "median_seconds": med,
        "ratio_split_over_whole": med["split"] / med["whole"],
        "max_abs_logprob_diff": diff,
        "loadavg": os.getloadavg(),
    }
    Path(args.out).write_text(json.dumps(portable(out), indent=1) + "\n")
    print(json.dumps({k: out[k] for k in ("placement", "median_seconds", "ratio_split_over_whole", "max_abs_logprob_diff")}))


if __name__ == "__main__":
    main()
