"""BELIEF-ICL confidence sampling: 100 samples sharing the prompt's KV vs 100 independent `generate` calls.

The confidence of a BELIEF-ICL prompt (zhao2024 section 3.2) is the share of 100 multinomial samples
that match the greedy answer. On real belief-icl prompts (LAMA T-REx, the multi-prompt templates,
4-template MP setting: instruction + 4 demonstrations + the probed template, built by the probe's
own code) with `smollm2-135m-instruct`, fp32 on the CPU, measured side by side in ONE run:

- ours:     `Generator.sample(prompt, n=100, max_new_tokens=10, stop=("\\n", "Q:"))`, what the probe
            calls: the prompt is forwarded once and the 100 samples decode together from its KV cache;
- separate: `model.generate(do_sample=True, max_new_tokens=10)` called once per sample (each call
            forwards the whole prompt again), stopping at the same strings; `--separate-calls` of
            the 100 calls are timed per prompt and the total extrapolated per call (flagged);
- nrs:      one `model.generate(do_sample=True, num_return_sequences=100)` (HF expands the prompt
            before the prefill: 100 prefills in one batch), for reference.
Prompts take turns (ours, separate, nrs, rotating who goes first) so outside load hits all alike.
Temperature 1, no top-k/top-p (multinomial over the whole vocabulary). The confidence each method
gives (share of its samples matching the greedy answer, `belief_match.consistency_match`) is
reported next to the times (for separate calls, over the timed calls' samples only): it is a sampling
estimate, so the methods agree only up to sampling noise.

Writes `benchmarks/results/belief_sampling.json` atomically and prints the ratio (target >= 10x vs
separate calls). Run: `.venv/bin/python benchmarks/bench_belief_sampling.py` (about 5-10 min on 2
quiet cores); quick check: `... --prompts 1 --separate-calls 3 --out /tmp/bs.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from portable_paths import portable  # benchmarks/ is sys.path[0] when a bench runs

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import torch
from bench_generate import Timer, _StopAt, first_stop, loadavg, machine_info

TARGET = 10.0


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--relations", default="P36,P19,P103")
    p.add_argument("--prompts", type=int, default=3, help="belief-icl prompts measured (one per relation first)")
    p.add_argument("--samples", type=int, default=100)
    p.add_argument("--max-new-tokens", type=int, default=10)
    p.add_argument("--separate-calls", type=int, default=10, help="separate generate calls actually timed per prompt")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--no-nrs", action="store_true", help="skip the num_return_sequences reference")
    p.add_argument("--out", default=str(HERE / "results" / "belief_sampling.json"))
    return p.parse_args(argv)


def belief_prompts(relations: list[str], n: int, seed: int) -> list[dict]:
    """Real belief-icl prompts (4-template, MP) built by the probe's own code, one relation after another."""
    from factprobe.datasets.multiprompt import prepare_multiprompt
    from factprobe.framework.config import BaseConfig
    from factprobe.probes.belief_icl import Demo, DemoPool, choose_templates, demo_block, icl_prompt, render_query

    base = BaseConfig(source="lama", relations=relations, max_facts_per_relation=3, seed=seed)
    prepared = prepare_multiprompt(base)
    templates, _ = choose_templates(prepared, "mp", 5, seed)
    pool = DemoPool.build(prepared, templates)
    out = []
    for k in range(n):
        rel = relations[k % len(relations)]
        item = prepared.items[rel][k // len(relations)]
        t = templates[rel][0]
        demos = pool.draw(item, "4-template", "mp", seed)
        block = demo_block("mp", [Demo(f, t["template_id"], t["template"]) for f, _ in demos])
        out.append(
            {
                "fact_id": item.fact_id,
                "template_id": t["template_id"],
                "gold": list(item.gold),
                "prompt": icl_prompt(block, render_query(t["template"], item.subject, "mp")),
            }
        )
    return out


def hf_samples(model, tok, prompt: str, n_return: int, seed: int, args) -> list[str]:
    """`model.generate(do_sample=True)` (temperature 1, whole vocabulary) stopping at a newline or "Q:"."""
    from transformers import StoppingCriteriaList

    enc = tok(prompt, return_tensors="pt")
    width = enc["input_ids"].shape[1]
    torch.manual_seed(seed)
    with torch.inference_mode():
        out = model.generate(
            **enc,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=args.max_new_tokens,
            num_return_sequences=n_return,
            pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
            stopping_criteria=StoppingCriteriaList([_StopAt(tok, width, ("\n", "Q:"))]),
        )
    texts = []
    for row in out[:, width:].tolist():
        text = tok.decode(row, skip_special_tokens=True)
        cut = first_stop(text, ("\n", "Q:"))
        texts.append((text if cut < 0 else text[:cut]).strip())
    return texts


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    import warnings

    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    from factprobe.lm.generate import Generator
    from factprobe.metrics.belief_match import consistency_match
    from factprobe.models import load_model
    from factprobe.probes.belief_icl import STOP

    started = time.strftime("%Y-%m-%d %H:%M:%S")
    load_start = loadavg()
    lm = load_model(args.model, device="cpu", dtype="float32")
    model, tok = lm.model, lm.tokenizer
    prompts = belief_prompts(args.relations.split(","), args.prompts, args.seed)
    longest = max(len(tok(p["prompt"])["input_ids"]) for p in prompts)
    gen = Generator(model, tok, token_budget=args.samples * (longest + args.max_new_tokens))
    # warm-up (page weights in, first-call overheads), not timed
    gen.sample(prompts[0]["prompt"], n=2, max_new_tokens=2, seed=1)
    hf_samples(model, tok, prompts[0]["prompt"], 1, 1, args)

    per_prompt = []
    totals = {"ours": 0.0, "separate": 0.0, "nrs": 0.0}
    cpu = {"ours": 0.0, "separate": 0.0, "nrs": 0.0}
    methods = ["ours", "separate"] + ([] if args.no_nrs else ["nrs"])
    for k, p in enumerate(prompts):
        text = p["prompt"]
        greedy = gen.greedy([text], max_new_tokens=args.max_new_tokens, stop=STOP)[0].text.strip()
        row = {
            "fact_id": p["fact_id"],
            "template_id": p["template_id"],
            "prompt_tokens": len(tok(text)["input_ids"]),
            "greedy": greedy,
            "loadavg": loadavg(),
            "order": methods[k % len(methods) :] + methods[: k % len(methods)],
        }
        for m in row["order"]:
            if m == "ours":
                before = gen.stats.prompt_tokens
                with Timer() as t:
                    outs = gen.sample(
                        text,
                        n=args.samples,
                        max_new_tokens=args.max_new_tokens,
                        temperature=1.0,
                        top_p=1.0,
                        top_k=0,
                        seed=args.seed + k,
                        stop=STOP,
                    )
                samples = [o.text.strip() for o in outs]
                row["ours_prompt_tokens_forwarded"] = gen.stats.prompt_tokens - before
                wall, c = t.wall, t.cpu
            elif m == "separate":
                calls = min(args.separate_calls, args.samples)
                with Timer() as t:
                    samples = [hf_samples(model, tok, text, 1, 1000 * k + j, args)[0] for j in range(calls)]
                wall, c = t.wall / calls * args.samples, t.cpu / calls * args.samples
                row["separate_calls_timed"] = calls
                row["separate_timed_seconds"] = round(t.wall, 2)
            else:
                with Timer() as t:
                    samples = hf_samples(model, tok, text, args.samples, 7 + k, args)
                wall, c = t.wall, t.cpu
            totals[m] += wall
            cpu[m] += c
            row[f"{m}_seconds"] = round(wall, 2)
            row[f"{m}_confidence"] = round(sum(consistency_match(greedy, s) for s in samples) / len(samples), 3)
        per_prompt.append(row)
        print(
            f"prompt {k + 1} ({row['prompt_tokens']} tokens): "
            + ", ".join(f"{m} {row[f'{m}_seconds']}s" for m in methods)
            + "; confidence "
            + ", ".join(f"{m} {row[f'{m}_confidence']}" for m in methods)
            + f" (load {row['loadavg']})",
            flush=True,
        )
    speedup = totals["separate"] / totals["ours"]
    result = {
        "benchmark": "belief_sampling",
        "started": started,
        "model": args.model,
        "dtype": "float32",
        "device": "cpu",
        "args": vars(args),
        "workload": {
            "setting": "4-template",
            "instruction": "mp",
            "prompts": len(prompts),
            "samples": args.samples,
            "max_new_tokens": args.max_new_tokens,
            "stop": ["\\n", "Q:"],
            "temperature": 1.0,
            "prompt_tokens": [r["prompt_tokens"] for r in per_prompt],
        },
        "seconds": {m: round(totals[m], 2) for m in methods},
        "cpu_seconds": {m: round(cpu[m], 2) for m in methods},
        "speedup_vs_separate_generate_calls": round(speedup, 2),
        "cpu_speedup_vs_separate_generate_calls": round(cpu["separate"] / cpu["ours"], 2),
        "speedup_vs_hf_num_return_sequences": None if args.no_nrs else round(totals["nrs"] / totals["ours"], 2),
        "separate_calls_extrapolated": args.separate_calls < args.samples,
        "per_prompt": per_prompt,
        "target": f"speedup_vs_separate_generate_calls >= {TARGET}",
        "passed": speedup >= TARGET,
        "machine": machine_info(),
        "loadavg_start": load_start,
        "loadavg_end": loadavg(),
        "note": "times of one run, side by side; the machine's load is in loadavg (other jobs share its cores)",
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=out.parent, delete=False, suffix=".tmp") as fh:
        json.dump(portable(result), fh, indent=2)
        fh.write("\n")
    os.replace(fh.name, out)
    extra = "" if args.no_nrs else f", nrs {totals['nrs']:.1f}s (speedup {result['speedup_vs_hf_num_return_sequences']}x)"
    print(
        f"ours {totals['ours']:.1f}s, separate calls {totals['separate']:.1f}s"
        f"{' (extrapolated)' if result['separate_calls_extrapolated'] else ''}{extra}; speedup vs separate "
        f"{speedup:.1f}x (target {TARGET}x: {'ok' if result['passed'] else 'MISSED'}); wrote {out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
