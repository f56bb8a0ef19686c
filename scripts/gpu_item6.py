"""Issue 30 item 6 in one call on a lent GPU: exactness (TF32 ruled in or out), the GPU default dtype's
evidence, 7B-shaped speed with model FLOPs utilisation, and the split model on GPU + CPU offload.

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
  first model folder's tokenizer, since requests are text) with random bf16 weights built on the GPU,
  IC-LKE-shaped work: a shared prefix of `--prefix-examples` examples (50), `--facts` questions with
  `--options` options (100) each. Timed side by side: factprobe's `Scorer.score_choices`, a naive forward
  per option (timed on `--naive-facts` facts and reported per fact), and lm-evaluation-harness's `HFLM`
  (`loglikelihood` on the same (context, option) pairs, `--hflm-batch` batch size, on `--naive-facts` facts).
  Reported: request tokens scored per second (the tokens of every context + option, as a per-option
  evaluator would forward them), tokens actually forwarded, and MFU = 2 * parameters * forwarded tokens /
  seconds / the card's dense bf16 peak (`--peak-tflops`, 989 for H100/H200 SXM).
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
import torch

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
    from transformers import AutoTokenizer

    from factprobe.lm.naive import naive_logprob
    from factprobe.lm.scorer import ChoiceRequest, Scorer

    tok = AutoTokenizer.from_pretrained(folders[0])
    shape = TINY if args.tiny else LLAMA2_7B
    t0 = time.perf_counter()
    model = random_llama(tok, shape, torch.bfloat16 if gpu_check.DEVICE.startswith("cuda") else torch.float32)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"speed7b: {n_params / 1e9:.2f} B parameters built in {time.perf_counter() - t0:.1f} s", flush=True)
    subjects = gpu_check.SUBJECTS * 4
    cities = (gpu_check.CITIES * 6)[: args.options]
    options = [" " + c + ("" if i < len(gpu_check.CITIES) else f" {i}") for i, c in enumerate(cities)]
    prefix = "".join(f"{s} has the capital {c}.\n" for s, c in zip(subjects, gpu_check.CITIES * 5))
    prefix = "".join(prefix.splitlines(keepends=True)[: args.prefix_examples])
    reqs = [ChoiceRequest(prefix + f"{s} has the capital", options) for s in subjects[: args.facts]]
    forwarded: list[int] = []

    def count(_module, args, kwargs):  # on the decoder: the scorer runs it without the LM head (head-only scoring)
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None:
            forwarded.append(int(ids.numel()))

    hook = model.model.register_forward_pre_hook(count, with_kwargs=True)
    scorer = Scorer(model, tok, device=gpu_check.DEVICE)
    scorer.score_choices(reqs[:2], shared_prefix=prefix)  # warm-up
    forwarded.clear()
    ours_s, ours = gpu_check.sync_time(
        lambda: Scorer(model, tok, device=gpu_check.DEVICE).score_choices(reqs, shared_prefix=prefix)
    )
    ours_tokens = sum(forwarded)
    hook.remove()
    request_tokens = sum(len(tok(r.context + o).input_ids) for r in reqs for o in r.options)
    sub = reqs[: args.naive_facts]
    with torch.no_grad():
        naive_s, naive = gpu_check.sync_time(lambda: [[naive_logprob(model, tok, r.context, o) for o in r.options] for r in sub])
    diff = max(abs(float(a) - b) for ra, rb in zip(ours, naive) for a, b in zip(ra, rb))
    res = {
        "shape": shape,
        "parameters": n_params,
        "dtype": str(next(model.parameters()).dtype),
        "facts": len(reqs),
        "options": len(options),
        "prefix_examples": args.prefix_examples,
        "prefix_tokens": len(tok(prefix).input_ids),
        "request_tokens": request_tokens,
        "factprobe": {
            "seconds": ours_s,
            "seconds_per_fact": ours_s / len(reqs),
            "forwarded_tokens": ours_tokens,
            "request_tokens_per_s": request_tokens / ours_s,
            "mfu": 2 * n_params * ours_tokens / ours_s / (args.peak_tflops * 1e12),
        },
        "naive_per_option": {"facts_timed": len(sub), "seconds_per_fact": naive_s / len(sub)},
        "max_abs_diff_factprobe_vs_naive": diff,
    }
    res["naive_per_option"]["mfu"] = 2 * n_params * (request_tokens / len(reqs)) * len(sub) / naive_s / (args.peak_tflops * 1e12)
    res["speedup_vs_naive"] = res["naive_per_option"]["seconds_per_fact"] / res["factprobe"]["seconds_per_fact"]
    print(
        f"speed7b: factprobe {res['factprobe']['seconds_per_fact']:.3f} s/fact "
        f"(MFU {res['factprobe']['mfu']:.1%}, {res['factprobe']['request_tokens_per_s']:.0f} request tok/s), "
        f"naive {res['naive_per_option']['seconds_per_fact']:.3f} s/fact: {res['speedup_vs_naive']:.1f}x; max |d| {diff:.2e}",
        flush=True,
    )
    try:
        res["hflm"] = hflm_speed(model, tok, sub, args)
        res["speedup_vs_hflm"] = res["hflm"]["seconds_per_fact"] / res["factprobe"]["seconds_per_fact"]
        print(f"speed7b: HFLM {res['hflm']['seconds_per_fact']:.3f} s/fact: {res['speedup_vs_hflm']:.1f}x", flush=True)
    except Exception as err:  # noqa: BLE001  (lm-eval missing or its API moved: the rest still counts)
        res["hflm"] = {"error": f"{type(err).__name__}: {err}"}
    return res


def hflm_speed(model, tok, reqs, args) -> dict:
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=model, tokenizer=tok, batch_size=args.hflm_batch, device=gpu_check.DEVICE)
    inst = [
        Instance(request_type="loglikelihood", doc={}, arguments=(r.context, o), idx=i)
        for r in reqs
        for i, o in enumerate(r.options)
    ]
    seconds, _ = gpu_check.sync_time(lambda: lm.loglikelihood(inst, disable_tqdm=True))
    return {"batch_size": args.hflm_batch, "facts_timed": len(reqs), "seconds_per_fact": seconds / len(reqs)}


def sharded(folders: list[Path], args, failed: list[str]) -> dict:
    from factprobe.lm.generate import Generator
    from factprobe.lm.loading import load_model
    from factprobe.lm.scorer import ChoiceRequest, Scorer

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
    p.add_argument("--peak-tflops", type=float, default=989.0, help="the card's dense bf16 peak (H100/H200 SXM: 989)")
    # sharded
    p.add_argument("--gpu-budget", default="150MiB", help="max_memory for the GPU in the split load")
    args = p.parse_args(argv)
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
