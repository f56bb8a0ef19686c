"""Issue 30 item 6 in one call on a lent GPU: exactness (TF32 ruled in or out), the GPU default dtype's
evidence, 7B-shaped speed with model FLOPs utilisation, and the split model on GPU + CPU offload. Since
issue 40 item 6 the speed is what a user gets: the probe's own run, repeated, with utilisation, memory and
the CPU/GPU split.

Prepared so that a session that is lent a device runs ONE command (the device's budget is 15 minutes,
starts included):

    HF_HUB_OFFLINE=1 python scripts/gpu_item6.py --models <smollm2 folder> <gemma folder> --out $OUT/item6.json

Here, first: `make gpu-inputs` copies each model's config and tokenizer files (36 MiB, no weights) into
`build/gpu-models/` (ignored by git); the device call carries `build/gpu-models` and runs
`HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 python3 scripts/gpu_item6.py --models build/gpu-models/* --out $OUT/item6.json`
with a `timeout_s` of about 540 (the device's KINDS.md lists the packages there; lm-eval may have to travel as
a wheel, else the HFLM comparison is recorded as an error and the rest still runs).
Each model folder needs config.json and the tokenizer files only (weights never travel: every model here
has RANDOM weights, so no number is a result about a model; exactness and speed do not depend on them).
Sections, each written to the JSON as soon as it ends (a timeout keeps what ran), each skipped with
`--skip NAME`:

- `exactness`: `scripts/gpu_check.py`'s scorer and greedy checks per architecture, in float32 with the
  default SDPA kernels, again with the math backend forced (`sdpa_kernel(SDPBackend.MATH)`) and TF32 off
  (`torch.backends.cuda.matmul.allow_tf32 = False`, cuDNN likewise): if the math run holds 1e-4 where the
  default does not, the kernels' TF32 is the cause; and in bfloat16 against a naive forward IN bfloat16 (the
  right reference for a bf16 scorer), with float32 as a second reference for the size of bf16's own error.
- `speed7b`: a Llama-2-7B-shaped model (hidden 4096, 32 layers, 32 heads, MLP 11008; the vocabulary of the
  first model folder's tokenizer, since requests are text) with random bf16 weights built on the GPU (float32
  on the CPU), probed as a user's `factprobe probe ic-lke --source triples --data FILE --max-facts-per-relation
  F --examples E --choices C` probes it: `factprobe.framework.runner.run_probe` with the model in memory
  (`scripts/gpu_probe_run.py`), on a synthetic 1-1 relation (`--facts` test facts, 20; `--prefix-examples`
  in-context examples, 50; `--options` options, 100), so the timed region is the runner's whole run: data
  preparation, the relation's shared prefix, the probe's own batching (one `score_batch` per batch, the
  scorer's packed forwards within its token budget), result rows written per batch, metrics and files. One
  untimed warm-up run, then `--repeats` (at least 3) timed runs into fresh folders; every timing is reported
  as its median and all its samples. Per run: wall seconds (CUDA-synchronised), GPU utilisation (NVML's
  `utilization.gpu` sampled every 50 ms on a background thread, through pynvml, else `nvidia-smi -lms`; "n/a
  on CPU" on the CPU), peak memory (`torch.cuda.max_memory_allocated` since the run began; on the CPU the
  process's peak RSS), the forwards (calls into the decoder body, which is what the scorer runs: never
  `model.forward`) and their tokens, each batch's facts and forwards, and the CPU/GPU split: wall and process
  CPU seconds inside the body's and head's calls (synchronised before and after on CUDA) against the rest
  of the run, with the outside-forward CPU per fact in ms (`scripts/gpu_measure.py`). Reported: request
  tokens per second (the tokens of every context + option, as a per-option evaluator would forward them),
  forwarded tokens per second, and MFU = 2 * parameters * forwarded tokens / the run's median seconds / the
  card's dense bf16 peak (by its name: H100/H200 989e12, A100 312e12; `--peak-tflops` overrides; "n/a on
  CPU"), with the same inside the forwards alone. Beside it, on the same (context, option) pairs of the
  first `--naive-facts` facts of the run's results, `--repeats` times each: a naive forward per option
  (its log-probs against the run's: `max_abs_diff_factprobe_vs_naive`) and lm-evaluation-harness's `HFLM`
  (`loglikelihood`, `--hflm-batch` batch size), each per fact. `--work DIR` keeps the data and run folders.
- `sharded`: the first architecture, random float32 weights saved to a temporary folder and loaded twice
  with factprobe's loader: whole on the GPU, and split by accelerate over the GPU and CPU
  (`device_map="auto"`, `max_memory` of `--gpu-budget` for the GPU: the rest offloaded to CPU). Log-probs
  must agree within 1e-4 and greedy tokens must be identical; the seconds of each are reported.

`--device cpu` runs everything small on the CPU (to try the script; `--tiny` shrinks speed7b to 2 layers of
width 256). Exits 1 when a float32 check fails.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
for p in (REPO, REPO / "scripts"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import gpu_check  # scripts/gpu_check.py: the scorer and greedy checks
import numpy as np
import torch
from gpu_measure import NA_CPU, mfu, peak_bf16_flops, samples  # scripts/gpu_measure.py

LLAMA2_7B = {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32}
TINY = {"hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 2, "num_attention_heads": 4}


def _write(res: dict, out: Path) -> None:
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(res, indent=2, default=str) + "\n")
    tmp.replace(out)


@contextlib.contextmanager
def math_sdpa_no_tf32():
    """SDPA's math backend and no TF32 in matmuls or cuDNN, restored after."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        with sdpa_kernel(SDPBackend.MATH):
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def exactness(folders: list[Path], args, failed: list[str]) -> dict:
    out: dict = {
        "tf32_default": {
            "matmul": torch.backends.cuda.matmul.allow_tf32,
            "cudnn": torch.backends.cudnn.allow_tf32,
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
        }
    }
    for folder in folders:
        for label, dtype, ctx in (
            ("float32 default kernels", torch.float32, contextlib.nullcontext),
            ("float32 math SDPA, no TF32", torch.float32, math_sdpa_no_tf32),
            ("bfloat16 vs naive bfloat16", torch.bfloat16, contextlib.nullcontext),
        ):
            name = f"{folder.name} {label}"
            model, tok = gpu_check.random_model(folder, dtype)
            with ctx():
                r = {"scorer": gpu_check.check_scorer(model, tok, args), "generator": gpu_check.check_generator(model, tok, args)}
            if dtype == torch.bfloat16:  # bf16's own error: the bf16 naive forward against the fp32 one
                r["bf16_naive_vs_fp32_naive"] = bf16_own_error(model, tok, folder, args)
            out[name] = r
            for k, s in r["scorer"].items():
                print(
                    f"{name} scorer {k}: max |d| {s['max_abs_diff_vs_naive']:.2e}, {s['speedup_vs_naive']:.1f}x naive", flush=True
                )
                if dtype == torch.float32 and s["max_abs_diff_vs_naive"] > 1e-4:
                    failed.append(f"{name} scorer {k}")
            for k, g in r["generator"].items():
                print(f"{name} greedy {k}: {g['token_identical']}/{g['prompts']} identical", flush=True)
                if dtype == torch.float32 and g["token_identical"] != g["prompts"]:
                    failed.append(f"{name} greedy {k}")
            del model
            if gpu_check.DEVICE.startswith("cuda"):
                torch.cuda.empty_cache()
    return out


def bf16_own_error(model_bf16, tok, folder: Path, args) -> float:
    """max |naive bf16 - naive fp32| over a few (question, option) pairs of the same random weights."""
    from factprobe.lm.naive import naive_logprob

    fp32, _ = gpu_check.random_model(folder, torch.float32)
    pairs = [(f"The capital of {s} is", " " + c) for s, c in zip(gpu_check.SUBJECTS[:5], gpu_check.CITIES[:5])]
    with torch.no_grad():
        d = max(abs(naive_logprob(model_bf16, tok, c, o) - naive_logprob(fp32, tok, c, o)) for c, o in pairs)
    del fp32
    return d


def random_llama(tok, shape: dict, dtype: torch.dtype):
    """A Llama model of `shape` with the tokenizer's vocabulary, random weights drawn on the device in `dtype`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=len(tok),
        max_position_embeddings=4096,
        num_key_value_heads=shape["num_attention_heads"],
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        **shape,
    )
    saved = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # built in `dtype` on the device: a 7B model never exists in float32
    try:
        with torch.device(gpu_check.DEVICE):
            model = LlamaForCausalLM(cfg)  # transformers' own init (normal, std 0.02) on the device
    finally:
        torch.set_default_dtype(saved)
    return model.eval()


def speed7b(folders: list[Path], args) -> dict:
    """IC-LKE's run as a user gets it (`gpu_probe_run`), timed `--repeats` times, beside a naive forward
    per option and lm-eval's HFLM on the same (context, option) pairs (module docstring)."""
    from gpu_probe_run import probe_runs, random_loaded, user_options, write_user_facts
    from transformers import AutoTokenizer

    from factprobe.api import load_results
    from factprobe.lm.naive import naive_logprob

    tok = AutoTokenizer.from_pretrained(folders[0])
    shape = TINY if args.tiny else LLAMA2_7B
    cuda = gpu_check.DEVICE.startswith("cuda")
    t0 = time.perf_counter()
    torch.manual_seed(0)
    model = random_llama(tok, shape, torch.bfloat16 if cuda else torch.float32)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"speed7b: {n_params / 1e9:.2f} B parameters built in {time.perf_counter() - t0:.1f} s", flush=True)
    loaded = random_loaded(model, tok)
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu-item6-"))
    try:
        data = write_user_facts(work / "facts.jsonl", args.facts, args.prefix_examples, args.options)
        options = user_options(loaded.name, data, args.facts, args.prefix_examples, args.options)
        runs = probe_runs(loaded, options, work, args.repeats)
        rows_of = [load_results(r["folder"]).to_dict("records") for r in runs]  # each run's results.jsonl
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    rows = rows_of[-1]
    res = probe_summary(runs, rows, tok, n_params, args)
    res.update(shape=shape, parameters=n_params, dtype=str(next(model.parameters()).dtype), options_cli=options)
    lps = [np.array([r["logprobs"] for r in rr]) for rr in rows_of]
    res["max_abs_diff_between_runs"] = float(max(np.abs(a - lps[0]).max() for a in lps))
    pairs = [[(r["context"], " " + o) for o in r["options"]] for r in rows[: args.naive_facts]]
    with torch.no_grad():
        naive_s, naive = repeat_timed(
            lambda: [[naive_logprob(model, tok, c, o) for c, o in fact] for fact in pairs], args.repeats
        )
    res["max_abs_diff_factprobe_vs_naive"] = max(abs(a - b) for r, n in zip(rows, naive) for a, b in zip(r["logprobs"], n))
    per_fact = [s / len(pairs) for s in naive_s]
    res["naive_per_option"] = {
        "facts_timed": len(pairs),
        "seconds_per_fact": statistics.median(per_fact),
        "samples_per_fact": per_fact,
    }
    request_tokens_per_fact = res["request_tokens"] / res["facts"]
    res["naive_per_option"]["mfu"] = mfu(n_params, request_tokens_per_fact, statistics.median(per_fact), res["peak_flops"])
    res["speedup_vs_naive"] = res["naive_per_option"]["seconds_per_fact"] / res["factprobe"]["seconds_per_fact"]
    fp = res["factprobe"]
    print(
        f"speed7b: factprobe's run {fp['seconds_per_fact']:.3f} s/fact (median of {args.repeats}; MFU {_pct(fp['mfu'])}, "
        f"{fp['request_tokens_per_s']:.0f} request tok/s, {res['forwards']} forwards in {len(res['batches'])} batches, "
        f"outside-forward CPU {fp['cpu_gpu_split']['cpu_outside_forward_ms_per_fact']:.1f} ms/fact), "
        f"naive {res['naive_per_option']['seconds_per_fact']:.3f} s/fact: {res['speedup_vs_naive']:.1f}x; "
        f"max |d| {res['max_abs_diff_factprobe_vs_naive']:.2e}",
        flush=True,
    )
    try:
        res["hflm"] = hflm_speed(model, tok, pairs, args)
        res["speedup_vs_hflm"] = res["hflm"]["seconds_per_fact"] / fp["seconds_per_fact"]
        print(f"speed7b: HFLM {res['hflm']['seconds_per_fact']:.3f} s/fact: {res['speedup_vs_hflm']:.1f}x", flush=True)
    except Exception as err:  # noqa: BLE001  (lm-eval missing or its API moved: the rest still counts)
        res["hflm"] = {"error": f"{type(err).__name__}: {err}"}
    return res


def _pct(x) -> str:
    return f"{x:.1%}" if isinstance(x, float) else str(x)


def repeat_timed(fn, repeats: int) -> tuple[list[float], object]:
    """`fn` timed `repeats` times (synchronised wall seconds each) and its last result."""
    seconds, out = [], None
    for _ in range(repeats):
        s, out = gpu_check.sync_time(fn)
        seconds.append(s)
    return seconds, out


def probe_summary(runs: list[dict], rows: list[dict], tok, n_params: int, args) -> dict:
    """speed7b's numbers from `gpu_probe_run.probe_runs`' records: the timed runs' medians and samples
    (module docstring); the warm-up's seconds are reported apart."""
    cuda = gpu_check.DEVICE.startswith("cuda")
    timed = [r for r in runs if not r["warmup"]]
    last = timed[-1]
    facts = len(rows)
    secs = [r["seconds"] for r in timed]
    med = statistics.median(secs)
    peak = (args.peak_tflops * 1e12 if args.peak_tflops else peak_bf16_flops(torch.cuda.get_device_name(0))) if cuda else NA_CPU
    peak = peak or "n/a (unknown GPU: give --peak-tflops)"
    tokens = last["forwarded_tokens"]
    request_tokens = sum(len(tok(r["context"] + " " + o).input_ids) for r in rows for o in r["options"])
    fwd = [r["forward_wall_s"] for r in timed]
    cpu_out = [r["process_cpu_s"] - r["forward_cpu_s"] for r in timed]
    return {
        "path": "factprobe.framework.runner.run_probe (factprobe probe ic-lke's code path) with the model in memory",
        "repeats": len(timed),
        "facts": facts,
        "options": len(rows[0]["options"]),
        "prefix_examples": args.prefix_examples,
        "request_tokens": request_tokens,
        "peak_flops": peak,
        "batches": last["batches"],
        "forwards": last["forwards"],
        "forwards_outside_batches": last["forwards"] - sum(b["forwards"] for b in last["batches"]),
        "forwards_reported_by_run": last["metrics_forwards"],
        "tokens_reported_by_run": last["metrics_tokens_forwarded"],
        "forwards_per_run": [r["forwards"] for r in timed],
        "warmup_seconds": runs[0]["seconds"],
        "factprobe": {
            "seconds": samples(secs),
            "seconds_per_fact": med / facts,
            "forwarded_tokens": tokens,
            "forwarded_tokens_per_s": tokens / med,
            "request_tokens_per_s": request_tokens / med,
            "mfu": mfu(n_params, tokens, med, peak),
            "mfu_inside_forwards": mfu(n_params, tokens, statistics.median(fwd), peak),
            "gpu_utilisation": [r["gpu_utilisation"] for r in timed] if cuda else NA_CPU,
            "peak_memory": [r["peak_memory"] for r in timed],
            "cpu_gpu_split": {
                "forward": "the decoder body's and LM head's calls, synchronised before and after on CUDA",
                "forward_wall_s": samples(fwd),
                "outside_forward_wall_s": samples([s - f for s, f in zip(secs, fwd)]),
                "outside_forward_share_of_wall": statistics.median([1 - f / s for s, f in zip(secs, fwd)]),
                "process_cpu_s": samples([r["process_cpu_s"] for r in timed]),
                "cpu_inside_forward_s": samples([r["forward_cpu_s"] for r in timed]),
                "cpu_outside_forward_s": samples(cpu_out),
                "cpu_outside_forward_ms_per_fact": statistics.median(cpu_out) * 1000 / facts,
            },
        },
    }


def hflm_speed(model, tok, pairs: list[list[tuple[str, str]]], args) -> dict:
    """lm-eval's HFLM `loglikelihood` on `pairs` (per fact, its (context, continuation) pairs), timed `--repeats` times."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=model, tokenizer=tok, batch_size=args.hflm_batch, device=gpu_check.DEVICE)
    inst = [
        Instance(request_type="loglikelihood", doc={}, arguments=(c, o), idx=i) for fact in pairs for i, (c, o) in enumerate(fact)
    ]
    seconds, _ = repeat_timed(lambda: lm.loglikelihood(inst, disable_tqdm=True), args.repeats)
    per_fact = [s / len(pairs) for s in seconds]
    return {
        "batch_size": args.hflm_batch,
        "facts_timed": len(pairs),
        "seconds_per_fact": statistics.median(per_fact),
        "samples_per_fact": per_fact,
    }


def sharded(folders: list[Path], args, failed: list[str]) -> dict:
    from factprobe.lm.generate import Generator
    from factprobe.lm.scorer import ChoiceRequest, Scorer
    from factprobe.models.loading import load_model

    model, tok = gpu_check.random_model(folders[0], torch.float32)
    prefix = "".join(f"The capital of {s} is {c}.\n" for s, c in zip(gpu_check.SUBJECTS[10:], gpu_check.CITIES[10:]))
    reqs = [ChoiceRequest(f"The capital of {s} is", [" " + c for c in gpu_check.CITIES]) for s in gpu_check.SUBJECTS[:8]]
    prompts = [prefix + f"The capital of {s} is" for s in gpu_check.SUBJECTS[:8]]
    with tempfile.TemporaryDirectory() as tmp:
        model.to("cpu").save_pretrained(tmp)
        tok.save_pretrained(tmp)
        del model
        runs = {}
        for label, kw in (
            ("whole", {"device": gpu_check.DEVICE}),
            ("split", {"device_map": "auto", "max_memory": f"0={args.gpu_budget},cpu=64GiB"}),
        ):
            if label == "split" and not gpu_check.DEVICE.startswith("cuda"):
                kw = {"device_map": "auto", "max_memory": "cpu=120MiB", "offload_folder": str(Path(tmp) / "offload")}
            loaded = load_model(tmp, dtype="float32", **kw)
            placed = sorted({str(v) for v in (getattr(loaded.model, "hf_device_map", None) or {}).values()})
            sc = Scorer(loaded.model, loaded.tokenizer, device=loaded.device)
            s_sec, lps = gpu_check.sync_time(lambda: sc.score_choices(reqs, shared_prefix=prefix))
            gen = Generator(loaded.model, loaded.tokenizer, device=loaded.device)
            g_sec, outs = gpu_check.sync_time(lambda: gen.greedy(prompts, max_new_tokens=12))
            runs[label] = {
                "placed_on": placed,
                "score_seconds": s_sec,
                "greedy_seconds": g_sec,
                "lps": lps,
                "tokens": [o.token_ids for o in outs],
            }
            loaded = sc = gen = None  # free the model before the next load
            if gpu_check.DEVICE.startswith("cuda"):
                torch.cuda.empty_cache()
    diff = max(abs(float(a) - float(b)) for ra, rb in zip(runs["whole"]["lps"], runs["split"]["lps"]) for a, b in zip(ra, rb))
    same = sum(a == b for a, b in zip(runs["whole"]["tokens"], runs["split"]["tokens"]))
    res = {
        "placed_on": runs["split"]["placed_on"],
        "max_abs_logprob_diff": diff,
        "greedy_identical": f"{same}/{len(prompts)}",
        "seconds": {k: {"score": v["score_seconds"], "greedy": v["greedy_seconds"]} for k, v in runs.items()},
        "split_over_whole_score": runs["split"]["score_seconds"] / runs["whole"]["score_seconds"],
    }
    print(
        f"sharded: on {res['placed_on']}, max |d| {diff:.2e}, greedy {same}/{len(prompts)} identical, split/whole {res['split_over_whole_score']:.1f}x",
        flush=True,
    )
    if diff > 1e-4 or same != len(prompts):
        failed.append("sharded")
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--device", default="cuda")
    p.add_argument("--skip", default="", help="comma-separated sections to skip: exactness, speed7b, sharded")
    p.add_argument("--tiny", action="store_true", help="speed7b at 2 layers of width 256 (to try the script)")
    # gpu_check's checks
    p.add_argument("--facts", type=int, default=20)
    p.add_argument("--options", type=int, default=100)
    p.add_argument("--examples", type=int, default=20)
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=16)
    p.add_argument("--rounds", type=int, default=2)
    # speed7b
    p.add_argument("--prefix-examples", type=int, default=50)
    p.add_argument("--naive-facts", type=int, default=2)
    p.add_argument("--hflm-batch", type=int, default=32)
    p.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help="the card's dense bf16 peak (default: by its name, H100/H200 989, A100 312)",
    )
    p.add_argument("--repeats", type=int, default=3, help="timed runs of each measurement (at least 3; the median is reported)")
    p.add_argument(
        "--work", type=Path, default=None, help="keep speed7b's data and run folders here (default: a temporary folder)"
    )
    # sharded
    p.add_argument("--gpu-budget", default="150MiB", help="max_memory for the GPU in the split load")
    args = p.parse_args(argv)
    if args.repeats < 3:
        p.error(f"--repeats {args.repeats}: at least 3 (a median of fewer is no measurement)")
    gpu_check.DEVICE = args.device
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device: nothing to check", file=sys.stderr)
        return 2
    import transformers

    res: dict = {
        "device": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else args.device,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "weights": "RANDOM: never a result about a model",
        "failed": [],
    }
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    exact_args = argparse.Namespace(**{**vars(args), "options": min(args.options, len(gpu_check.CITIES))})
    for name, fn in (
        ("exactness", lambda: exactness(args.models, exact_args, res["failed"])),
        ("sharded", lambda: sharded(args.models, exact_args, res["failed"])),
        ("speed7b", lambda: speed7b(args.models, args)),
    ):
        if name in skip:
            continue
        t0 = time.perf_counter()
        try:
            res[name] = fn()
        except Exception as err:  # noqa: BLE001  (one section's failure must not lose the others)
            traceback.print_exc()
            res[name] = {"error": f"{type(err).__name__}: {err}"}
            res["failed"].append(f"{name} (error)")
        res.setdefault("section_seconds", {})[name] = time.perf_counter() - t0
        _write(res, args.out)
    print("failed: " + (", ".join(res["failed"]) or "none"))
    return 1 if res["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
