"""Batch-to-batch noise of a real llama.cpp server's log-probs: how far the same prompt's log-probs move between
requests, which sets the step the served fingerprint rounds them to (factprobe/lm/served_fingerprint.py,
docs/served-models.md).

llama-cpp-python[server] 0.3.36 on the CPU (`--n_threads 1`) serves each model twice: with its default prompt
batch (`--n_batch 512`) and with `--n_batch 4`, so that a prompt is evaluated in other matrix shapes (what "in
another batch" means for this server: it takes one request at a time and no list of prompts). Each prompt (the
fingerprint's texts and probe-like sentences) is asked as the fingerprint asks it (echo, 8 greedy tokens,
`logprobs` 1) under these conditions:

- `alone`: after an unrelated prompt (the server's prefix cache holds nothing of it);
- `repeated`: right after itself (the server reuses the cached prefix);
- `after_prefix`: after a prompt sharing its first words (the prefix's log-probs come from another evaluation);
- `after_probe`: after a probe-like prompt that shares none of its words (what happens in a run);
- `concurrent`: 4 requests in flight at once (the server queues them);
- `n_batch_4`: alone, on the server evaluating prompts 4 tokens at a time.

For each condition against `alone`: the largest |difference| of one token's log-prob, of a text's summed log-prob
(what the fingerprint rounds), whether any greedy text differed, and whether the fingerprint changed. For scale,
`quantization`: how far another quantization moves a text's sum (float32 in-process against the server's Q4_K_M,
Gemma-3, whose echo log-probs this server gets right). Writes
benchmarks/results/served_noise.json. Run: `.venv/bin/python benchmarks/bench_served_noise.py` (needs
`make .venv/.llama-server` and `make models`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench_served import start_server  # one way to start llama.cpp's server (benchmarks/ is sys.path[0])
from portable_paths import portable  # benchmarks/ is sys.path[0] when a bench runs

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

PROBE_PROMPTS = (
    "The capital of Germany is Berlin",
    "Water is made of hydrogen and oxygen",
    "The Eiffel Tower is in Paris, France",
    "Q: What is the capital of Italy?\nA:",
)


def ask(client, model: str, text: str) -> dict:
    """The fingerprint's request for `text`: per-token log-probs (prompt after its first token, then generated),
    their sum, and the greedy continuation."""
    from factprobe.lm.served_answers import echo_parts
    from factprobe.lm.served_client import logprob_completion
    from factprobe.lm.served_fingerprint import FINGERPRINT_TOKENS

    choice, lp = logprob_completion(client, model, text, max_tokens=FINGERPRINT_TOKENS, echo=True, temperature=0.0)
    prompt, generated = echo_parts(lp, text, client.where)
    values = [float(v) for _, _, _, v in prompt[1:]] + [float(v) for _, v in generated]
    return {"values": values, "sum": sum(values), "greedy": str(choice.get("text", ""))[len(text) :]}


def compare(base: dict[str, dict], other: dict[str, dict]) -> dict:
    from factprobe.lm.served_fingerprint import rounded_nats

    token, total, texts_differ, rounding_changed = 0.0, 0.0, 0, 0
    for text, a in base.items():
        b = other[text]
        if a["greedy"] != b["greedy"] or len(a["values"]) != len(b["values"]):
            texts_differ += 1
            continue
        token = max(token, max(abs(x - y) for x, y in zip(a["values"], b["values"])))
        total = max(total, abs(a["sum"] - b["sum"]))
        rounding_changed += rounded_nats(a["sum"]) != rounded_nats(b["sum"])
    return {
        "max_abs_token_logprob_diff": token,
        "max_abs_text_sum_diff": total,
        "greedy_texts_differ": texts_differ,
        "rounded_sums_changed": rounding_changed,
    }


def quantization_shift(alias: str, served: dict[str, dict]) -> dict:
    """How far another quantization moves what the fingerprint hashes: the same texts and greedy continuations
    scored in-process in float32 (weights dequantised from the same GGUF) against the server's quantized weights.
    Only for a server whose echo log-probs are aligned (the sum then means the same thing on both sides)."""
    import torch

    from factprobe.models import load_model

    if alias != "gemma-3-270m":
        return {"skipped": "the server's echo log-probs are misaligned for this model"}
    loaded = load_model(alias, device="cpu", dtype="float32")
    tok, model = loaded.tokenizer, loaded.model
    diffs = {}
    for text, got in served.items():
        ids = tok(text + got["greedy"], return_tensors="pt")["input_ids"]
        with torch.no_grad():
            logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
        per = logp.gather(1, ids[0, 1:, None])[:, 0].tolist()  # token i+1 given the ones before (BOS first)
        local = sum(per[1:])  # as the fingerprint: the text's first token has no log-prob
        diffs[text] = abs(local - got["sum"]) if len(per) - 1 == len(got["values"]) else None
    known = [d for d in diffs.values() if d is not None]
    return {
        "what": "float32 in-process vs the server's Q4_K_M, same texts and continuations",
        "abs_text_sum_diff_min": min(known) if known else None,
        "abs_text_sum_diff_max": max(known) if known else None,
        "texts_compared": len(known),
    }


def measure(alias: str) -> dict:
    from factprobe.lm import served
    from factprobe.lm.served_fingerprint import FINGERPRINT_TEXTS

    texts = list(FINGERPRINT_TEXTS) + list(PROBE_PROMPTS)
    flush = "Zebras graze quietly near the river at dawn"
    out: dict = {"model": alias, "texts": len(texts)}
    runs: dict[str, dict[str, dict]] = {}
    revisions: dict[str, str] = {}
    proc, url = start_server(alias)
    try:
        client = served.Client(url, concurrency=4)
        alone, repeated, after_prefix, after_probe = {}, {}, {}, {}
        for text in texts:
            ask(client, alias, flush)
            alone[text] = ask(client, alias, text)
            repeated[text] = ask(client, alias, text)
            ask(client, alias, " ".join(text.split()[:3]) + " something else entirely")
            after_prefix[text] = ask(client, alias, text)
            ask(client, alias, PROBE_PROMPTS[0] if text != PROBE_PROMPTS[0] else PROBE_PROMPTS[1])
            after_probe[text] = ask(client, alias, text)
        with ThreadPoolExecutor(4) as pool:
            concurrent = dict(zip(texts, pool.map(lambda t: ask(client, alias, t), texts)))
        runs.update(alone=alone, repeated=repeated, after_prefix=after_prefix, after_probe=after_probe, concurrent=concurrent)
        revisions["n_batch_512"] = served.served_revision(f"openai:{alias}@{url}")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
    proc, url = start_server(alias, "--n_batch", "4")
    try:
        client = served.Client(url)
        small = {}
        for text in texts:
            ask(client, alias, flush)
            small[text] = ask(client, alias, text)
        runs["n_batch_4"] = small
        revisions["n_batch_4"] = served.served_revision(f"openai:{alias}@{url}")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
    out["against_alone"] = {name: compare(runs["alone"], run) for name, run in runs.items() if name != "alone"}
    out["quantization"] = quantization_shift(alias, runs["alone"])
    out["fingerprint_same_across_n_batch"] = revisions["n_batch_512"].split("#")[1] == revisions["n_batch_4"].split("#")[1]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gemma-3-270m,smollm2-135m-instruct")
    ap.add_argument("--out", default=str(HERE / "results" / "served_noise.json"))
    args = ap.parse_args()
    from factprobe.lm.served_fingerprint import FINGERPRINT_LOGPROB_STEP

    result = {
        "server": "llama-cpp-python[server] 0.3.36 (CPU, --n_threads 1)",
        "fingerprint_step_nats": FINGERPRINT_LOGPROB_STEP,
        "machine": f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start",
        "models": [measure(m) for m in args.models.split(",")],
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(portable(result), indent=2) + "\n", encoding="utf-8")
    tmp.replace(out)
    for m in result["models"]:
        for name, c in m["against_alone"].items():
            print(
                f"{m['model']:24s} {name:13s} token {c['max_abs_token_logprob_diff']:.2e}  text sum "
                f"{c['max_abs_text_sum_diff']:.2e}  greedy differs {c['greedy_texts_differ']}  "
                f"rounded sums changed {c['rounded_sums_changed']}"
            )
        print(f"{m['model']:24s} fingerprint same across n_batch: {m['fingerprint_same_across_n_batch']}")


if __name__ == "__main__":
    main()
