"""The scorer's and the generator's CUDA paths, checked and timed on a GPU (run where one is lent).

What it checks, per architecture (SmolLM2-135M and Gemma-3-270M: their real config.json and
tokenizer, with RANDOM weights drawn from seed 0 at std 3/sqrt(n), since the weights do not travel
to the GPU machine; exactness and speed do not depend on them, and no number here is a result):

- scorer: `Scorer.score_choices` log-probs (each of `--facts` questions with `--options` options, with
  and without a shared in-context prefix of `--examples` examples) against a naive full forward per
  option (`factprobe.lm.naive.naive_logprob`), max |difference|, in float32 and bfloat16;
- generator: `Generator.greedy` (with and without a shared prefix) token-identical to
  `model.generate(do_sample=False)` on each prompt alone, in float32; in bfloat16 the share of identical
  prompts is reported (batched bf16 kernels may round differently; the CPU tests assert float32);
- speed, as ratios measured side by side: the scorer against the naive forward per option, and batched
  greedy against `generate` per prompt (CUDA-synchronised wall clock, median of `--rounds`).

Run: `HF_HUB_OFFLINE=1 python scripts/gpu_check.py --models DIR [DIR ...] --out results.json`, each DIR
a model folder (config.json and tokenizer files; weights are not read). Prints one line per check and
rewrites the JSON after each model and dtype; exits 1 when a float32 check fails. Measured once, on an
H100 (SmolLM2 only: the lease ended during Gemma): benchmarks/results/gpu_check_h100.txt and
benchmarks/README.md ("GPU paths").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch

SUBJECTS = [
    "France",
    "Japan",
    "Peru",
    "Kenya",
    "Italy",
    "Spain",
    "Canada",
    "Chile",
    "Egypt",
    "Norway",
    "India",
    "Brazil",
    "Greece",
    "Poland",
    "Mexico",
    "Ghana",
    "Nepal",
    "Cuba",
    "Iran",
    "Mali",
    "Laos",
    "Fiji",
    "Oman",
    "Chad",
    "Togo",
    "Iraq",
    "Peru",
    "Niger",
]
CITIES = [
    "Paris",
    "Tokyo",
    "Lima",
    "Nairobi",
    "Rome",
    "Madrid",
    "Ottawa",
    "Santiago",
    "Cairo",
    "Oslo",
    "New Delhi",
    "Brasilia",
    "Athens",
    "Warsaw",
    "Mexico City",
    "Accra",
    "Kathmandu",
    "Havana",
    "Tehran",
    "Bamako",
]


def random_model(folder: Path, dtype: torch.dtype):
    """The folder's architecture with RANDOM weights (seed 0, std 3/sqrt(n)) on CUDA, and its tokenizer."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from factprobe.models.testing import redraw_weights

    cfg = AutoConfig.from_pretrained(folder)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    redraw_weights(model)
    return model.to(device=DEVICE, dtype=dtype).eval(), AutoTokenizer.from_pretrained(folder)


DEVICE = "cuda"


def _sync() -> None:
    if DEVICE.startswith("cuda"):
        torch.cuda.synchronize()


def sync_time(fn):
    _sync()
    t = time.perf_counter()
    out = fn()
    _sync()
    return time.perf_counter() - t, out


def check_scorer(model, tok, args) -> dict:
    from factprobe.lm.naive import naive_logprob
    from factprobe.lm.scorer import ChoiceRequest, Scorer

    prefix = "\n".join(f"The capital of {s} is {c}." for s, c in zip(SUBJECTS[10:], CITIES[10:] * 3))
    prefix = "\n".join(prefix.split("\n")[: args.examples]) + "\n"
    options = [" " + c for c in CITIES[: args.options]]
    out = {}
    for shared in (False, True):
        reqs = [ChoiceRequest((prefix if shared else "") + f"The capital of {s} is", options) for s in SUBJECTS[: args.facts]]
        scorer = Scorer(model, tok, device=DEVICE)
        ours = [scorer.score_choices(reqs, shared_prefix=prefix if shared else None) for _ in range(2)][-1]
        with torch.no_grad():
            naive = [[naive_logprob(model, tok, r.context, o) for o in r.options] for r in reqs]
        diff = max(abs(float(a) - b) for row_a, row_b in zip(ours, naive) for a, b in zip(row_a, row_b))
        times_ours, times_naive = [], []
        for _ in range(args.rounds):
            times_ours.append(
                sync_time(
                    lambda: Scorer(model, tok, device=DEVICE).score_choices(reqs, shared_prefix=prefix if shared else None)
                )[0]
            )
            with torch.no_grad():
                times_naive.append(
                    sync_time(lambda: [naive_logprob(model, tok, r.context, o) for r in reqs for o in r.options])[0]
                )
        key = "shared_prefix" if shared else "no_prefix"
        out[key] = {
            "max_abs_diff_vs_naive": diff,
            "max_abs_logprob": max(abs(b) for row in naive for b in row),
            "ours_seconds": statistics.median(times_ours),
            "naive_seconds": statistics.median(times_naive),
            "speedup_vs_naive": statistics.median(times_naive) / statistics.median(times_ours),
            "questions": len(reqs),
            "options": len(options),
        }
    return out


def check_generator(model, tok, args) -> dict:
    from factprobe.lm.generate import Generator

    prefix = "".join(f"Q: What is the capital of {s}?\nA: {c}\n" for s, c in zip(SUBJECTS[10:], CITIES[10:]))
    prompts = [prefix + f"Q: What is the capital of {s}?\nA:" for s in SUBJECTS[: args.prompts]]
    out = {}
    for shared in (False, True):
        gen = Generator(model, tok, device=DEVICE)
        eos = sorted(gen.eos_token_ids)

        def hf(p):
            enc = tok(p, return_tensors="pt").to(DEVICE)
            o = model.generate(
                **enc,
                do_sample=False,
                max_new_tokens=args.new_tokens,
                eos_token_id=eos,
                pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else eos[0],
            )
            new = o[0, enc["input_ids"].shape[1] :].tolist()
            for k, t in enumerate(new):
                if t in eos:
                    return new[: k + 1]
            return new

        with torch.no_grad():
            ours = gen.greedy(prompts, max_new_tokens=args.new_tokens, shared_prefix=prefix if shared else None)
            ref = [hf(p) for p in prompts]
            same = [o.token_ids == r for o, r in zip(ours, ref)]
            times_ours, times_hf = [], []
            for _ in range(args.rounds):
                times_ours.append(
                    sync_time(
                        lambda: Generator(model, tok, device=DEVICE).greedy(
                            prompts, max_new_tokens=args.new_tokens, shared_prefix=prefix if shared else None
                        )
                    )[0]
                )
                times_hf.append(sync_time(lambda: [hf(p) for p in prompts])[0])
        key = "shared_prefix" if shared else "no_prefix"
        out[key] = {
            "token_identical": sum(same),
            "prompts": len(prompts),
            "ours_seconds": statistics.median(times_ours),
            "hf_seconds": statistics.median(times_hf),
            "speedup_vs_hf_generate_per_prompt": statistics.median(times_hf) / statistics.median(times_ours),
        }
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", required=True)
    p.add_argument("--facts", type=int, default=20)
    p.add_argument("--options", type=int, default=20)
    p.add_argument("--examples", type=int, default=20)
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", required=True)
    p.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated: float32, bfloat16")
    p.add_argument("--device", default="cuda", help="cuda (the point); cpu only to try the script")
    args = p.parse_args(argv)
    global DEVICE
    DEVICE = args.device
    if DEVICE.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device: nothing to check", file=sys.stderr)
        return 2
    import transformers

    res = {
        "device": torch.cuda.get_device_name(0) if DEVICE.startswith("cuda") else DEVICE,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "weights": "RANDOM (seed 0): never a result",
        "models": {},
    }
    failed = []
    for folder in map(Path, args.models):
        for dtype in (getattr(torch, d) for d in args.dtypes.split(",")):
            name = f"{folder.name} {str(dtype).removeprefix('torch.')}"
            t0 = time.perf_counter()
            model, tok = random_model(folder, dtype)
            print(f"{name}: random model built in {time.perf_counter() - t0:.1f} s", flush=True)
            r = {"scorer": check_scorer(model, tok, args), "generator": check_generator(model, tok, args)}
            res["models"][name] = r
            for k, s in r["scorer"].items():
                print(
                    f"{name} scorer {k}: max |d| vs naive {s['max_abs_diff_vs_naive']:.2e}, "
                    f"(largest |log-prob| {s['max_abs_logprob']:.1f}), {s['speedup_vs_naive']:.1f}x naive",
                    flush=True,
                )
                if dtype == torch.float32 and s["max_abs_diff_vs_naive"] > 1e-4:
                    failed.append(f"{name} scorer {k}")
            for k, g in r["generator"].items():
                print(
                    f"{name} greedy {k}: {g['token_identical']}/{g['prompts']} token-identical to generate, "
                    f"{g['speedup_vs_hf_generate_per_prompt']:.1f}x generate per prompt",
                    flush=True,
                )
                if dtype == torch.float32 and g["token_identical"] != g["prompts"]:
                    failed.append(f"{name} greedy {k}")
            res["failed"] = failed
            Path(args.out).write_text(json.dumps(res, indent=2) + "\n")  # after each model: a timeout keeps what ran
            del model
            if DEVICE.startswith("cuda"):
                torch.cuda.empty_cache()
    res["failed"] = failed
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    print("failed: " + (", ".join(failed) or "none"))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
