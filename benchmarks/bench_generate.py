"""Generation benchmark: factprobe's Generator vs. Hugging Face `generate` vs. lm-evaluation-harness.

Two workloads on `smollm2-135m-instruct`, fp32 on the CPU (DESIGN.md section 4b), measured side by
side in ONE run:

1. Greedy QA behind a shared k-shot block. 32 exemplars ("Topic: capital\\nQuestion: What is the
   name of the capital city of X?\\nAnswer: Y") built from LAMA T-REx facts of 12 relations
   (`<data root>/lama/trex/P*.jsonl`) after a two-sentence instruction form one block of ~816
   tokens, followed by each of 200 further questions; 16 new tokens at most, stop at "\\n".
   - ours:    `Generator(...).greedy(prompts, 16, stop="\\n", shared_prefix=block)`, with a
              token budget that holds `--batch-size` rows per batch.
   - hf:      `model.generate(do_sample=False)` per batch of `--batch-size` prompts, left padding,
              no prefix sharing, a stopping criterion that ends a row at "\\n" (like lm-eval's).
   - lm-eval: `HFLM(pretrained=<model folder>, batch_size=--batch-size).generate_until(...)` on the
              same (context, {"until": ["\\n"], "max_gen_toks": 16, "do_sample": False}) requests.
   The questions are cut into `--chunks` chunks and the three methods take turns chunk by chunk
   (rotating who goes first), so load from other processes hits them alike. Ours pays the shared
   block once per chunk (i.e. `--chunks` times, not once): conservative. The answers (text) are
   compared; ours' token ids are compared with hf's.
2. Sampling: `--samples` (100) samples of `--sample-tokens` (30) tokens from one ~300-token prompt,
   temperature 1, no top-k/top-p.
   - ours:  `Generator.sample(prompt, n=100, ...)`: the prompt is forwarded once.
   - hf separate: 100 calls of `model.generate(do_sample=True)` (`--separate-calls` of them timed,
              the rest extrapolated per call and flagged in the JSON).
   - hf num_return_sequences: one `model.generate(do_sample=True, num_return_sequences=100)`.
   Rounds (ours, hf nrs, part of the separate calls) are repeated `--rounds` times; ours and nrs
   report the median round. The log-probs of 5 of ours' samples are checked against a full forward.

Peak memory: each variant runs again in a fresh subprocess on a reduced workload that reaches the
same peak (greedy: one batch of `--batch-size` questions; sampling: the full sample set, or one
separate call), and reports its peak-RSS growth above the RSS after loading (VmHWM reset with
/proc/self/clear_refs; a 5 ms sampler where that is not allowed).

Writes `benchmarks/results/generate.json` atomically and prints the ratios. See benchmarks/README.md.
Run: `.venv/bin/python benchmarks/bench_generate.py` (full sizes: ~26 min on 2 cores, mostly the baselines);
quick check: `.venv/bin/python benchmarks/bench_generate.py --questions 32 --separate-calls 4 --no-memory --out /tmp/g.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Self

from portable_paths import portable  # benchmarks/ is sys.path[0] when a bench runs

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

import torch

# Questions per LAMA relation; [X] is the subject, the object is the answer.
QUESTIONS = {
    "P36": ("capital", "What is the name of the capital city of {}?"),
    "P19": ("place of birth", "In which city or town was {} born?"),
    "P20": ("place of death", "In which city or town did {} die?"),
    "P37": ("official language", "Which language is an official language of {}?"),
    "P103": ("native language", "What is the native language of {}?"),
    "P30": ("continent", "On which continent is {} located?"),
    "P17": ("country", "In which country is {} located?"),
    "P140": ("religion", "Which religion is {} affiliated with?"),
    "P106": ("occupation", "What is the occupation of {}?"),
    "P27": ("country of citizenship", "Of which country is {} a citizen?"),
    "P176": ("manufacturer", "Which company manufactures or produces {}?"),
    "P159": ("headquarters location", "In which city are the headquarters of {}?"),
}
HEADER = (
    "The following are questions about people, places, organisations and products, with their answers. "
    "Answer each question with a short answer: a name, a place or a single word, and nothing else.\n\n"
)
SAMPLING_QUESTION = "Topic: capital\nQuestion: What is the name of the capital city of Peru?\nAnswer:"
TARGETS = {
    "greedy_speedup_vs_lm_eval": (">=", 5.0),
    "greedy_answers_identical_fraction_vs_lm_eval": (">=", 1.0),
    "sampling_speedup_vs_hf_separate_calls": (">=", 10.0),
    "sampling_speedup_vs_hf_num_return_sequences": (">=", 3.0),
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--questions", type=int, default=200)
    p.add_argument("--shots", type=int, default=32)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=32, help="rows per batch for all three greedy methods")
    p.add_argument("--chunks", type=int, default=4, help="greedy questions are cut into this many turns")
    p.add_argument("--samples", type=int, default=100)
    p.add_argument("--sample-tokens", type=int, default=30)
    p.add_argument("--sample-prompt-tokens", type=int, default=300)
    p.add_argument("--separate-calls", type=int, default=100, help="separate HF sampling calls actually timed")
    p.add_argument("--rounds", type=int, default=2, help="sampling rounds (ours and nrs once per round)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's default)")
    p.add_argument("--no-lm-eval", action="store_true")
    p.add_argument("--no-memory", action="store_true", help="skip the per-variant peak-memory subprocesses")
    p.add_argument("--out", default=str(HERE / "results" / "generate.json"))
    p.add_argument("--memory-variant", default=None, help=argparse.SUPPRESS)  # internal: one memory subprocess
    return p.parse_args(argv)


# ------------------------------------------------------------------------------------ helpers
class PeakRSS:
    """Peak RSS growth (MB) of this process over a block of code."""

    def __init__(self) -> None:
        self.exact = True
        try:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
        except OSError:
            self.exact = False
        self._peak = 0.0
        self._stop = threading.Event()

    @staticmethod
    def status(key: str) -> float:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024.0
        raise KeyError(key)

    def __enter__(self) -> Self:
        self.base = self.status("VmRSS")
        if self.exact:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
        else:
            self._peak = self.base

            def sample() -> None:
                while not self._stop.wait(0.005):
                    self._peak = max(self._peak, self.status("VmRSS"))

            self._thread = threading.Thread(target=sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.exact:
            self.peak = self.status("VmHWM")
        else:
            self._stop.set()
            self._thread.join()
            self.peak = max(self._peak, self.status("VmRSS"))
        self.growth_mb = round(self.peak - self.base, 1)


class Timer:
    """Wall and process-CPU seconds of a block."""

    def __enter__(self) -> Self:
        self.t0, self.c0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        self.wall = time.perf_counter() - self.t0
        self.cpu = time.process_time() - self.c0


def machine_info() -> dict:
    import transformers

    info = {
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    try:
        import lm_eval

        info["lm_eval"] = getattr(lm_eval, "__version__", None)
    except ImportError:
        pass
    try:
        with open("/proc/cpuinfo") as fh:
            info["cpu_model"] = next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return info


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# ------------------------------------------------------------------------------------ workload
def build_questions(shots: int, n_questions: int, seed: int) -> tuple[str, list[str], list[str]]:
    """(exemplar block, prompts = block + question, gold answers) from LAMA T-REx facts."""
    from factprobe.paths import data_root

    root = data_root() / "lama" / "trex"
    pool = []
    for rel, (topic, question) in QUESTIONS.items():
        for line in (root / f"{rel}.jsonl").read_text(encoding="utf-8").splitlines():
            fact = json.loads(line)
            pool.append((f"Topic: {topic}\nQuestion: {question.format(fact['sub_label'])}", fact["obj_label"]))
    random.Random(seed).shuffle(pool)
    if len(pool) < shots + n_questions:
        raise SystemExit(f"only {len(pool)} facts for {shots} shots + {n_questions} questions")
    block = HEADER + "".join(f"{q}\nAnswer: {a}\n\n" for q, a in pool[:shots])
    tests = pool[shots : shots + n_questions]
    return block, [block + q + "\nAnswer:" for q, _ in tests], [a for _, a in tests]


def sampling_prompt(tok, block: str, target_tokens: int) -> str:
    """The header and as many exemplars as fit ~`target_tokens`, then one question."""
    lines = block[len(HEADER) :].split("\n\n")
    prompt = HEADER
    for ex in lines:
        if len(tok(prompt + ex + "\n\n" + SAMPLING_QUESTION)["input_ids"]) > target_tokens:
            break
        prompt += ex + "\n\n"
    return prompt + SAMPLING_QUESTION


# ------------------------------------------------------------------------------------ greedy methods
def ours_greedy(model, tok, prompts, block, args) -> tuple[list[str], list[list[int]], dict]:
    from factprobe.lm.generate import Generator

    longest = max(len(tok(p)["input_ids"]) for p in prompts)
    gen = Generator(model, tok, token_budget=args.batch_size * (longest + args.max_new_tokens))
    outs = gen.greedy(prompts, max_new_tokens=args.max_new_tokens, stop="\n", shared_prefix=block)
    return [o.text for o in outs], [o.token_ids for o in outs], vars(gen.stats) | {"total_tokens": gen.stats.total_tokens}


class _StopAt:
    """Ends a row once its decoded new tokens contain one of `stops` (what lm-eval's criterion does)."""

    def __init__(self, tok, start: int, stops: tuple[str, ...] = ("\n",)) -> None:
        self.tok, self.start, self.stops = tok, start, tuple(stops)

    def __call__(self, input_ids, scores, **kwargs):
        return torch.tensor(
            [
                any(s in self.tok.decode(row[self.start :], skip_special_tokens=True) for s in self.stops)
                for row in input_ids.tolist()
            ],
            dtype=torch.bool,
        )


def first_stop(text: str, stops) -> int:
    """Index of the earliest occurrence of any of `stops` in `text`, or -1."""
    found = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(found) if found else -1


def hf_greedy(model, tok, prompts, args, stops: tuple[str, ...] = ("\n",)) -> tuple[list[str], list[list[int]], int]:
    """`model.generate(do_sample=False)` per batch of `args.batch_size` prompts (longest first, left
    padding); a row ends at EOS or once its decoded new text contains one of `stops`. Returns the
    answers (text before the earliest stop string), the new token ids (up to and including the EOS /
    the token that completed a stop string, the rule ours uses) and the tokens forwarded."""
    from transformers import StoppingCriteriaList

    eos = model.generation_config.eos_token_id
    eos = {eos} if isinstance(eos, int) else set(eos)
    order = sorted(range(len(prompts)), key=lambda i: -len(tok(prompts[i])["input_ids"]))
    texts, ids, forwarded = [None] * len(prompts), [None] * len(prompts), 0
    tok.padding_side = "left"
    for b in range(0, len(order), args.batch_size):
        batch = order[b : b + args.batch_size]
        enc = tok([prompts[i] for i in batch], return_tensors="pt", padding=True)
        width = enc["input_ids"].shape[1]
        with torch.inference_mode():
            out = model.generate(
                **enc,
                do_sample=False,
                max_new_tokens=args.max_new_tokens,
                pad_token_id=tok.pad_token_id,
                stopping_criteria=StoppingCriteriaList([_StopAt(tok, width, stops)]),
            )
        forwarded += enc["input_ids"].numel() + len(batch) * (out.shape[1] - width - 1)
        for r, i in enumerate(batch):
            # a finished row is padded (pad = EOS here): keep its tokens up to the EOS or the
            # token that completed a stop string, the rule ours uses
            new = out[r, width:].tolist()
            k = next(
                (
                    j + 1
                    for j, t in enumerate(new)
                    if t in eos or first_stop(tok.decode(new[: j + 1], skip_special_tokens=True), stops) >= 0
                ),
                len(new),
            )
            new = new[:k]
            text = tok.decode(new, skip_special_tokens=True)
            cut = first_stop(text, stops)
            texts[i] = text if cut < 0 else text[:cut]
            ids[i] = new
    return texts, ids, forwarded


def lm_eval_greedy(lm, prompts, args, until: tuple[str, ...] = ("\n",)) -> list[str]:
    """`HFLM.generate_until` on (prompt, {"until": [...], "max_gen_toks": ..., "do_sample": False})."""
    from lm_eval.api.instance import Instance

    reqs = [
        Instance(
            request_type="generate_until",
            doc={},
            arguments=(p, {"until": list(until), "max_gen_toks": args.max_new_tokens, "do_sample": False}),
            idx=i,
        )
        for i, p in enumerate(prompts)
    ]
    return lm.generate_until(reqs, disable_tqdm=True)


def make_lm_eval(path, args):
    from lm_eval.models.huggingface import HFLM

    return HFLM(pretrained=str(path), device="cpu", batch_size=args.batch_size, dtype="float32")


def interleaved(methods: list[str], n: int, chunks: int, run) -> dict:
    """Run every method on items 0..n-1, cut into `chunks` turns; in each turn the methods run one
    after another on that chunk, rotating who goes first, so outside load hits them alike.

    `run(method, indices) -> (texts, token_ids or None)` does one method's work on one chunk.
    Returns {"wall", "cpu"} (seconds per method, summed), {"answers", "ids"} (per method, in item
    order; ids None where `run` gave none) and "per_chunk" (each turn's times, order, load)."""
    answers = {m: [None] * n for m in methods}
    ids = {m: [None] * n for m in methods}
    wall = {m: 0.0 for m in methods}
    cpu = {m: 0.0 for m in methods}
    per_chunk = []
    size = -(-n // chunks)
    for c, start in enumerate(range(0, n, size)):
        chunk = list(range(start, min(start + size, n)))
        order = methods[c % len(methods) :] + methods[: c % len(methods)]
        row = {"questions": len(chunk), "order": order, "loadavg": loadavg()}
        for m in order:
            with Timer() as t:
                texts, tids = run(m, chunk)
            wall[m] += t.wall
            cpu[m] += t.cpu
            row[m] = round(t.wall, 2)
            for k, i in enumerate(chunk):
                answers[m][i] = texts[k]
                if tids is not None:
                    ids[m][i] = tids[k]
        per_chunk.append(row)
        print(f"  chunk {c + 1}: " + ", ".join(f"{m} {row[m]:.1f}s" for m in methods) + f" (load {row['loadavg']})", flush=True)
    return {"wall": wall, "cpu": cpu, "answers": answers, "ids": ids, "per_chunk": per_chunk}


# ------------------------------------------------------------------------------------ sampling methods
def ours_sample(model, tok, prompt, args):
    from factprobe.lm.generate import Generator

    n_prompt = len(tok(prompt)["input_ids"])
    gen = Generator(model, tok, token_budget=args.samples * (n_prompt + args.sample_tokens))
    outs = gen.sample(
        prompt, n=args.samples, max_new_tokens=args.sample_tokens, temperature=1.0, top_p=1.0, top_k=0, seed=args.seed
    )
    return outs, vars(gen.stats) | {"total_tokens": gen.stats.total_tokens}


def hf_sample(model, tok, prompt, args, n_return: int, seed: int):
    enc = tok(prompt, return_tensors="pt")
    torch.manual_seed(seed)
    with torch.inference_mode():
        return model.generate(
            **enc,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=args.sample_tokens,
            num_return_sequences=n_return,
            pad_token_id=tok.pad_token_id,
        )


# ------------------------------------------------------------------------------------ memory subprocesses
MEMORY_VARIANTS = [
    "greedy_ours",
    "greedy_hf",
    "greedy_lm_eval",
    "sample_ours",
    "sample_hf_separate_call",
    "sample_hf_num_return_sequences",
]


def load(args):
    from factprobe.models import load_model, prepare_alias

    path = prepare_alias(args.model)
    lm = load_model(str(path), device="cpu", dtype="float32")
    return path, lm.model, lm.tokenizer


def run_memory_variant(args) -> None:
    """Subprocess body: load, warm up, then measure one variant's peak-RSS growth; prints JSON."""
    path, model, tok = load(args)
    block, prompts, _ = build_questions(args.shots, args.batch_size, args.seed)
    with torch.inference_mode():
        model(input_ids=torch.tensor([tok(prompts[0])["input_ids"][:64]]))  # page the weights in
    v = args.memory_variant
    lm = make_lm_eval(path, args) if v == "greedy_lm_eval" else None
    with PeakRSS() as mem:
        if v == "greedy_ours":
            ours_greedy(model, tok, prompts, block, args)
        elif v == "greedy_hf":
            hf_greedy(model, tok, prompts, args)
        elif v == "greedy_lm_eval":
            lm_eval_greedy(lm, prompts, args)
        else:
            prompt = sampling_prompt(tok, block, args.sample_prompt_tokens)
            if v == "sample_ours":
                ours_sample(model, tok, prompt, args)
            elif v == "sample_hf_separate_call":
                hf_sample(model, tok, prompt, args, 1, 0)
            else:
                hf_sample(model, tok, prompt, args, args.samples, 0)
    print(
        "MEMORY "
        + json.dumps({"variant": v, "peak_rss_growth_mb": mem.growth_mb, "exact": mem.exact, "rss_before_mb": round(mem.base, 1)})
    )


def measure_memory(args) -> dict:
    out = {}
    for v in MEMORY_VARIANTS:
        if v == "greedy_lm_eval" and args.no_lm_eval:
            continue
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--memory-variant",
            v,
            "--model",
            args.model,
            "--batch-size",
            str(args.batch_size),
            "--shots",
            str(args.shots),
            "--max-new-tokens",
            str(args.max_new_tokens),
            "--samples",
            str(args.samples),
            "--sample-tokens",
            str(args.sample_tokens),
            "--sample-prompt-tokens",
            str(args.sample_prompt_tokens),
            "--seed",
            str(args.seed),
        ] + (["--threads", str(args.threads)] if args.threads else [])
        res = subprocess.run(cmd, check=False, capture_output=True, text=True)
        line = next((ln for ln in res.stdout.splitlines() if ln.startswith("MEMORY ")), None)
        if line is None:
            out[v] = {"error": (res.stderr or res.stdout)[-500:]}
        else:
            out[v] = json.loads(line[len("MEMORY ") :])
        print(f"  memory {v}: {out[v].get('peak_rss_growth_mb', out[v])} MB", flush=True)
    return out


# ------------------------------------------------------------------------------------ main
def main(argv=None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.memory_variant:
        run_memory_variant(args)
        return 0
    import warnings

    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    load_start = loadavg()
    path, model, tok = load(args)
    block, prompts, gold = build_questions(args.shots, args.questions, args.seed)
    n_block = len(tok(block)["input_ids"])
    prompt_lens = [len(tok(p)["input_ids"]) for p in prompts]
    print(
        f"greedy: {len(prompts)} questions, block {n_block} tokens, prompts {min(prompt_lens)}-{max(prompt_lens)} "
        f"tokens, batch size {args.batch_size}",
        flush=True,
    )
    lm = None if args.no_lm_eval else make_lm_eval(path, args)

    # warm-up (page weights in, first-call overheads) on 2 questions, not timed
    ours_greedy(model, tok, prompts[:2], block, args)
    hf_greedy(model, tok, prompts[:2], args)
    if lm is not None:
        lm_eval_greedy(lm, prompts[:2], args)

    methods = ["ours", "hf"] + ([] if lm is None else ["lm_eval"])
    ours_stats, hf_forwarded = [], 0

    def run(m, chunk):
        nonlocal hf_forwarded
        cp = [prompts[i] for i in chunk]
        if m == "ours":
            texts, tids, st = ours_greedy(model, tok, cp, block, args)
            ours_stats.append(st)
            return texts, tids
        if m == "hf":
            texts, tids, fw = hf_greedy(model, tok, cp, args)
            hf_forwarded += fw
            return texts, tids
        return lm_eval_greedy(lm, cp, args), None

    res = interleaved(methods, len(prompts), args.chunks, run)
    wall, cpu, answers, ids, per_chunk = res["wall"], res["cpu"], res["answers"], res["ids"], res["per_chunk"]

    def same(a, b):
        return sum(x == y for x, y in zip(a, b))

    n = len(prompts)
    greedy = {
        "seconds": {m: round(wall[m], 2) for m in methods},
        "cpu_seconds": {m: round(cpu[m], 2) for m in methods},
        "speedup_vs_hf_generate": round(wall["hf"] / wall["ours"], 2),
        "cpu_speedup_vs_hf_generate": round(cpu["hf"] / cpu["ours"], 2),
        "answers_identical_vs_hf_generate": same(answers["ours"], answers["hf"]),
        "token_ids_identical_vs_hf_generate": same(ids["ours"], ids["hf"]),
        "questions": n,
        "exact_match_with_gold": {m: sum(a.strip() == g for a, g in zip(answers[m], gold)) for m in methods},
        "tokens_forwarded": {
            "ours": sum(s["total_tokens"] for s in ours_stats),
            "ours_detail": {k: sum(s[k] for s in ours_stats) for k in ours_stats[0]},
            "hf_generate_including_padding": hf_forwarded,
        },
        "per_chunk": per_chunk,
        "examples": [
            {"question": prompts[i][len(block) :], "gold": gold[i], "ours": answers["ours"][i]} for i in range(min(5, n))
        ],
        "differing_answers": [
            {"i": i, **{m: answers[m][i] for m in methods}} for i in range(n) if len({answers[m][i] for m in methods}) > 1
        ][:20],
    }
    if lm is not None:
        greedy |= {
            "speedup_vs_lm_eval": round(wall["lm_eval"] / wall["ours"], 2),
            "cpu_speedup_vs_lm_eval": round(cpu["lm_eval"] / cpu["ours"], 2),
            "answers_identical_vs_lm_eval": same(answers["ours"], answers["lm_eval"]),
            "answers_identical_fraction_vs_lm_eval": round(same(answers["ours"], answers["lm_eval"]) / n, 4),
        }
        del lm
    print(
        f"greedy: ours {wall['ours']:.1f}s, hf {wall['hf']:.1f}s"
        + (f", lm-eval {wall['lm_eval']:.1f}s" if "lm_eval" in wall else "")
        + f"; speedup vs hf {greedy['speedup_vs_hf_generate']}x"
        + (
            f", vs lm-eval {greedy['speedup_vs_lm_eval']}x; identical answers vs lm-eval "
            f"{greedy['answers_identical_vs_lm_eval']}/{n}"
            if "lm_eval" in wall
            else ""
        )
        + f", vs hf {greedy['answers_identical_vs_hf_generate']}/{n}",
        flush=True,
    )

    # ---------------------------------------------------------------- sampling
    prompt = sampling_prompt(tok, block, args.sample_prompt_tokens)
    n_prompt = len(tok(prompt)["input_ids"])
    print(f"sampling: {args.samples} x {args.sample_tokens} tokens from a {n_prompt}-token prompt", flush=True)
    hf_sample(model, tok, prompt, args, 2, 0)  # warm-up
    ours_runs, nrs_runs, sep_wall, sep_cpu, sep_done, rounds = [], [], 0.0, 0.0, 0, []
    per_round = -(-args.separate_calls // args.rounds)
    samples = None
    for r in range(args.rounds):
        row = {"loadavg": loadavg()}
        with Timer() as t:
            samples, sample_stats = ours_sample(model, tok, prompt, args)
        ours_runs.append((t.wall, t.cpu))
        row["ours"] = round(t.wall, 2)
        with Timer() as t:
            hf_sample(model, tok, prompt, args, args.samples, 1000 + r)
        nrs_runs.append((t.wall, t.cpu))
        row["hf_num_return_sequences"] = round(t.wall, 2)
        calls = min(per_round, args.separate_calls - sep_done)
        with Timer() as t:
            for k in range(calls):
                hf_sample(model, tok, prompt, args, 1, sep_done + k)
        sep_wall += t.wall
        sep_cpu += t.cpu
        sep_done += calls
        row[f"hf_separate_{calls}_calls"] = round(t.wall, 2)
        rounds.append(row)
        print(f"  round {r + 1}: " + ", ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    ours_wall = statistics.median(w for w, _ in ours_runs)
    ours_cpu = statistics.median(c for _, c in ours_runs)
    nrs_wall = statistics.median(w for w, _ in nrs_runs)
    nrs_cpu = statistics.median(c for _, c in nrs_runs)
    sep_total = sep_wall / sep_done * args.samples
    sep_total_cpu = sep_cpu / sep_done * args.samples

    from factprobe.lm.naive import naive_token_logprobs

    ids_prompt = tok(prompt)["input_ids"]
    worst = 0.0
    for s in samples[:5]:
        ref = naive_token_logprobs(model, ids_prompt + s.token_ids)[len(ids_prompt) :]
        worst = max(worst, max(abs(a - b) for a, b in zip(ref, s.logprobs)))
    sampling = {
        "prompt_tokens": n_prompt,
        "samples": args.samples,
        "max_new_tokens": args.sample_tokens,
        "seconds": {
            "ours": round(ours_wall, 2),
            "hf_separate_calls": round(sep_total, 2),
            "hf_num_return_sequences": round(nrs_wall, 2),
        },
        "cpu_seconds": {
            "ours": round(ours_cpu, 2),
            "hf_separate_calls": round(sep_total_cpu, 2),
            "hf_num_return_sequences": round(nrs_cpu, 2),
        },
        "speedup_vs_hf_separate_calls": round(sep_total / ours_wall, 2),
        "speedup_vs_hf_num_return_sequences": round(nrs_wall / ours_wall, 2),
        "cpu_speedup_vs_hf_separate_calls": round(sep_total_cpu / ours_cpu, 2),
        "cpu_speedup_vs_hf_num_return_sequences": round(nrs_cpu / ours_cpu, 2),
        "separate_calls_timed": sep_done,
        "separate_calls_extrapolated": sep_done < args.samples,
        "ours_runs_seconds": [round(w, 2) for w, _ in ours_runs],
        "hf_num_return_sequences_runs_seconds": [round(w, 2) for w, _ in nrs_runs],
        "rounds": rounds,
        "ours_stats": sample_stats,
        "distinct_samples": len({tuple(s.token_ids) for s in samples}),
        "finish_reasons": {r: sum(s.finish_reason == r for s in samples) for r in ("eos", "stop", "length")},
        "max_abs_logprob_diff_vs_naive_5_samples": worst,
    }
    print(
        f"sampling: ours {ours_wall:.1f}s, hf separate {sep_total:.1f}s"
        f"{' (extrapolated)' if sep_done < args.samples else ''}, hf nrs {nrs_wall:.1f}s; speedup vs separate "
        f"{sampling['speedup_vs_hf_separate_calls']}x, vs nrs {sampling['speedup_vs_hf_num_return_sequences']}x; "
        f"max |dlogprob| vs naive {worst:.1e}",
        flush=True,
    )

    memory = {} if args.no_memory else measure_memory(args)
    if memory:
        greedy["peak_rss_growth_mb"] = {
            k[len("greedy_") :]: v.get("peak_rss_growth_mb") for k, v in memory.items() if k.startswith("greedy_")
        }
        sampling["peak_rss_growth_mb"] = {
            k[len("sample_") :]: v.get("peak_rss_growth_mb") for k, v in memory.items() if k.startswith("sample_")
        }

    values = {
        "greedy_speedup_vs_lm_eval": greedy.get("speedup_vs_lm_eval"),
        "greedy_answers_identical_fraction_vs_lm_eval": greedy.get("answers_identical_fraction_vs_lm_eval"),
        "sampling_speedup_vs_hf_separate_calls": sampling["speedup_vs_hf_separate_calls"],
        "sampling_speedup_vs_hf_num_return_sequences": sampling["speedup_vs_hf_num_return_sequences"],
    }
    passed = {k: (v is not None and (v >= t if op == ">=" else v <= t)) for k, (op, t) in TARGETS.items() for v in [values[k]]}
    result = {
        "benchmark": "generate",
        "started": started,
        "model": args.model,
        "dtype": "float32",
        "device": "cpu",
        "args": {k: v for k, v in vars(args).items() if k != "memory_variant"},
        "workload": {
            "shots": args.shots,
            "block_tokens": n_block,
            "prompt_tokens_min": min(prompt_lens),
            "prompt_tokens_max": max(prompt_lens),
            "questions": len(prompts),
            "max_new_tokens": args.max_new_tokens,
            "stop": "\\n",
            "batch_size": args.batch_size,
        },
        "greedy": greedy,
        "sampling": sampling,
        "memory_subprocesses": memory,
        "targets": {k: f"{op} {t}" for k, (op, t) in TARGETS.items()},
        "values": values,
        "passed": passed,
        "all_passed": all(passed.values()),
        "machine": machine_info(),
        "loadavg_start": load_start,
        "loadavg_end": loadavg(),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=out.parent, delete=False, suffix=".tmp") as fh:
        json.dump(portable(result), fh, indent=2)
        fh.write("\n")
    os.replace(fh.name, out)
    print(f"wrote {out}; targets: " + ", ".join(f"{k} {'ok' if v else 'MISSED'}" for k, v in passed.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
