"""Fine-tuning benchmark: SmolLM2-135M LoRA under DeepSpeed ZeRO-2 on the CPU (gloo), packed vs unpacked,
and the LoRA adapter's size and trainable-parameter share against its rank.

1. Packed vs unpacked (`factprobe.finetune.run_finetune`, the code `factprobe finetune` runs):
   `smollm2-135m-instruct`, the regular countryinfo QA set (`--train-size` facts, seed 0), LoRA rank 16 on
   the default targets, ZeRO-2, fp32, `--max-steps` optimizer steps of `--batch-size` x `--grad-accum`
   sequences, `--max-seq-len` 256. Unpacked, a sequence is one example padded to the longest of its
   batch; packed, a sequence holds as many whole examples as fit in 256 tokens (no cross-attention).
   Each run is a fresh subprocess (so its peak RSS is its own); the two settings alternate
   `--repeats` times (packed first, then unpacked, ...) so outside load hits them alike, and the
   median is reported. Reported per run: tokens/s (non-padding tokens trained per second of the
   training loop, from the trainer's train-begin to train-end: DeepSpeed engine set-up excluded, it
   is `setup_seconds`), peak memory (the process's peak RSS: model,
   data and DeepSpeed buffers), non-padding fraction, loss first/last. The ratio packed/unpacked of
   the medians is the headline. Target: non-padding fraction >= 0.9 with packing.
2. LoRA rank sweep (`--ranks`): the adapter `get_peft_model` builds for SmolLM2 with the default
   targets (q,k,v,o,gate,up,down_proj), saved with `save_pretrained`: its size on disk and its
   trainable share of all parameters. No training (the size does not depend on the weights).

Writes `benchmarks/results/finetune_cpu.json`. Run: `.venv/bin/python benchmarks/bench_finetune.py`
(~5 min on 2 busy cores; the first DeepSpeed run of a machine also compiles a small op, ~40 s).
A GPU run (gemma-3-270m tokens/s and MFU) needs a GPU machine; none was available for this run.
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
sys.path.insert(0, str(REPO))

MODEL = "smollm2-135m-instruct"


def child(spec: dict) -> None:
    """One training run in this (fresh) process; prints its metrics as one JSON line."""
    from factprobe.finetune import FinetuneConfig, run_finetune

    m = run_finetune(FinetuneConfig(**spec), progress=False)
    print("METRICS " + json.dumps(m))


def run_child(spec: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)], check=False, capture_output=True, text=True, env=env, cwd=REPO
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("METRICS ")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"child failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return json.loads(line[len("METRICS ") :])


def packing_runs(args: argparse.Namespace, work: Path) -> dict:
    runs: dict[str, list[dict]] = {"packed": [], "unpacked": []}
    for rep in range(args.repeats):
        for setting in ("packed", "unpacked"):
            spec = {
                "model": MODEL,
                "train_set": "regular",
                "train_size": args.train_size,
                "packing": setting == "packed",
                "batch_size": args.batch_size,
                "grad_accum": args.grad_accum,
                "max_steps": args.max_steps,
                "max_seq_len": 256,
                "lora_r": 16,
                "zero_stage": 2,
                "device": "cpu",
                "dtype": "float32",
                "save_steps": 10_000,
                "resume": False,
                "out": str(work / f"{setting}-{rep}"),
            }
            t0 = time.perf_counter()
            m = run_child(spec)
            keep = (
                "tokens_per_second",
                "peak_memory_bytes",
                "non_padding_fraction",
                "first_loss",
                "final_loss",
                "train_seconds",
                "setup_seconds",
                "tokens_trained",
                "n_sequences",
                "examples_per_sequence",
                "steps",
            )
            runs[setting].append({**{k: m[k] for k in keep}, "wall_seconds": time.perf_counter() - t0})
            print(
                f"{setting:8s} rep {rep}: {m['tokens_per_second']:.0f} tokens/s, peak {m['peak_memory_bytes'] / 2**20:.0f} MiB, "
                f"non-padding {m['non_padding_fraction']:.3f}",
                flush=True,
            )
    med = {
        s: {k: statistics.median(r[k] for r in rs) for k in ("tokens_per_second", "peak_memory_bytes", "non_padding_fraction")}
        for s, rs in runs.items()
    }
    return {
        "runs": runs,
        "median": med,
        "tokens_per_second_ratio_packed_over_unpacked": med["packed"]["tokens_per_second"] / med["unpacked"]["tokens_per_second"],
        "peak_memory_ratio_packed_over_unpacked": med["packed"]["peak_memory_bytes"] / med["unpacked"]["peak_memory_bytes"],
        "packed_non_padding_fraction_target_0_9_met": med["packed"]["non_padding_fraction"] >= 0.9,
    }


def rank_sweep(ranks: list[int], work: Path) -> list[dict]:
    import torch

    from factprobe.finetune import FinetuneConfig
    from factprobe.finetune.model_setup import count_params, load_base, wrap_lora

    out = []
    for r in ranks:
        cfg = FinetuneConfig(model=MODEL, lora_r=r, device="cpu")
        model, _, _ = load_base(cfg)
        torch.manual_seed(0)
        peft_model = wrap_lora(cfg, model)
        trainable, total = count_params(peft_model)
        folder = work / f"adapter-r{r}"
        peft_model.save_pretrained(folder)
        size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        out.append(
            {
                "rank": r,
                "alpha": cfg.alpha,
                "trainable_params": trainable,
                "total_params": total,
                "trainable_fraction": trainable / total,
                "adapter_bytes": size,
            }
        )
        print(
            f"rank {r:3d}: {trainable:,} trainable of {total:,} ({trainable / total:.3%}), adapter {size / 2**20:.2f} MiB",
            flush=True,
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--train-size", type=int, default=48)
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--ranks", default="4,8,16,32,64")
    ap.add_argument("--out", default=str(HERE / "results" / "finetune_cpu.json"))
    args = ap.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    import torch

    from factprobe.io import atomic_write_json
    from factprobe.lm._util import versions

    with tempfile.TemporaryDirectory(prefix="bench-finetune-") as tmp:
        work = Path(tmp)
        packing = packing_runs(args, work)
        sweep = rank_sweep([int(r) for r in args.ranks.split(",")], work)
    result = {
        "benchmark": "bench_finetune.py",
        "model": MODEL,
        "device": "cpu",
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "note": "2 CPU cores shared with other work: absolute numbers are noisy; "
        "the packed/unpacked ratio comes from alternating runs",
        "settings": {
            "train_set": "regular countryinfo",
            "train_size": args.train_size,
            "batch_size": args.batch_size,
            "grad_accum": args.grad_accum,
            "max_steps": args.max_steps,
            "max_seq_len": 256,
            "lora_r": 16,
            "zero_stage": 2,
            "dtype": "float32",
            "repeats": args.repeats,
        },
        "packing": packing,
        "lora_rank_sweep": sweep,
        "gpu": "not run: no GPU machine for this task",
        "versions": versions(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out, portable(result))
    print(
        f"packed/unpacked tokens/s: {packing['tokens_per_second_ratio_packed_over_unpacked']:.2f}x; "
        f"packed non-padding {packing['median']['packed']['non_padding_fraction']:.3f}; wrote {args.out}"
    )


if __name__ == "__main__":
    main()
