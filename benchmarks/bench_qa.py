"""QA probe benchmark: the QA probe's generation (factprobe's Generator behind the shared k-shot
block) vs. lm-evaluation-harness `generate_until` (and HF `generate`) on the same requests.

The workload is the real QA probe (`factprobe/probes/qa.py`, yuan2024 FACT-Bench) on LAMA T-REx,
`smollm2-135m-instruct`, fp32 on the CPU:

- data: `get_probe("qa").prepare(RunConfig.from_dict({"probe": "qa", "source": "lama", ...}))`
  with the LAMA T-REx test facts (`<data root>/lama`) and the LPAQA T-REx training facts
  (`<data root>/lpaqa/trex_train`) of `--relations` (10 by default), `--questions / len(relations)`
  evaluation-split questions per relation (`max_facts_per_relation`), seed `--seed`. The prepared
  dataset is cut to exactly the benchmark's questions, so the probe's own group holds exactly them;
- the block: the probe's regular `--shots`-shot block (instruction + exemplars drawn once with the
  seed from the train split across relations, `qa.regular_block` / `qa.exemplar_block`), as
  `QAProbe.open_relation` builds it (`fit_block`, which would drop exemplars that do not fit);
- each request: `qa_prompt(block, question)`; stop strings `qa.STOP` = ("\\n", "Question:"),
  `max_new_tokens` 16, greedy.

Methods (one process, interleaved: the questions are cut into `--chunks` turns and the methods take
turns chunk by chunk, rotating who goes first, so outside load hits them alike):

- ours:    literally the probe's code path: a fresh `Session` per chunk, `QAProbe.open_relation`
           (the block, the token budget for `qa.BATCH` = 16 rows), then `QAProbe.score_batch` on
           each of `QAProbe.batches` (16 questions each), i.e. `Generator.greedy(prompts, 16,
           stop=STOP, shared_prefix=block)` plus the probe's scoring. The block is forwarded once
           per chunk (`--chunks` times instead of once: conservative);
- lm-eval: `HFLM(pretrained=<model folder>, batch_size=--batch-size).generate_until` on the same
           (context, {"until": ["\\n", "Question:"], "max_gen_toks": 16, "do_sample": False});
- hf:      `model.generate(do_sample=False)` per batch of `--batch-size` prompts, left padding, a
           stopping criterion that ends a row at either stop string (like lm-eval's).

Answers are compared as text (ours' `answer` vs lm-eval's string vs hf's text cut at the earliest
stop string), and ours' token ids with hf's. Every disagreement is listed in the JSON.

Peak memory (unless `--no-memory`): each method runs again in a fresh subprocess on one batch (ours:
one probe batch of 16 behind the block; the baselines: one batch of `--batch-size`) and reports its
peak-RSS growth (helpers shared with `bench_generate.py`).

Writes `benchmarks/results/qa.json` atomically and prints the ratios. See benchmarks/README.md.
Run: `.venv/bin/python benchmarks/bench_qa.py --threads 1` (full size, ~20 min on 2 busy cores, mostly
lm-eval and hf); quick check: `.venv/bin/python benchmarks/bench_qa.py --questions 24 --chunks 2 --no-memory
--out /tmp/qa.json`. Use `--threads 1` on a shared machine: with 2 torch threads and the cores
oversubscribed, every parallel op waits at an OpenMP barrier for a descheduled thread, which costs ours'
many mid-sized ops far more than the baselines' large prefills (README: "Threads").
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from portable_paths import portable  # benchmarks/ is sys.path[0] when a bench runs

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for p in (str(REPO), str(HERE)):
    if p not in sys.path:  # run as a script from anywhere
        sys.path.insert(0, p)

import torch
from bench_generate import PeakRSS, hf_greedy, interleaved, lm_eval_greedy, loadavg, machine_info, make_lm_eval

RELATIONS = ["P17", "P19", "P20", "P27", "P36", "P37", "P103", "P106", "P159", "P176"]
GROUP = "regular@{k}"
TARGETS = {
    "speedup_vs_lm_eval": (">=", 5.0),
    "answers_identical_fraction_vs_lm_eval": (">=", 1.0),
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--questions", type=int, default=200)
    p.add_argument("--shots", type=int, default=32)
    p.add_argument("--relations", default=",".join(RELATIONS), help="comma-separated LAMA T-REx relation ids")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=32, help="rows per batch for lm-eval and hf (ours: the probe's 16)")
    p.add_argument("--chunks", type=int, default=4, help="the questions are cut into this many turns")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's default)")
    p.add_argument("--no-hf", action="store_true", help="leave out the HF generate column")
    p.add_argument("--no-lm-eval", action="store_true")
    p.add_argument("--no-memory", action="store_true", help="skip the per-method peak-memory subprocesses")
    p.add_argument("--out", default=str(HERE / "results" / "qa.json"))
    p.add_argument("--memory-variant", default=None, help=argparse.SUPPRESS)  # internal: one memory subprocess
    return p.parse_args(argv)


# ------------------------------------------------------------------------------------ workload
class Workload:
    """The QA probe's config, prepared data (cut to the benchmark's questions), tasks and block."""

    def __init__(self, args) -> None:
        from factprobe.framework.config import RunConfig
        from factprobe.framework.registry import get_probe
        from factprobe.paths import data_root

        root = data_root()
        rels = [r.strip() for r in args.relations.split(",") if r.strip()]
        per_rel = -(-args.questions // len(rels))
        self.cfg = RunConfig.from_dict(
            {
                "probe": "qa",
                "model": args.model,
                "source": "lama",
                "data": str(root / "lama"),
                "train_data": str(root / "lpaqa" / "trex_train"),
                "relations": rels,
                "max_facts_per_relation": per_rel,
                "shots": [args.shots],
                "max_new_tokens": args.max_new_tokens,
                "split": "eval",
                "seed": args.seed,
                "device": "cpu",
                "dtype": "float32",
            }
        )
        self.probe = get_probe("qa")
        prepared = self.probe.prepare(self.cfg)
        # questions round-robin across relations (so every chunk mixes them), cut to --questions
        queues = [list(items) for items in prepared.items.values()]
        picked = []
        while len(picked) < args.questions and any(queues):
            for q in queues:
                if q and len(picked) < args.questions:
                    picked.append(q.pop(0))
        if len(picked) < args.questions:
            raise SystemExit(f"only {len(picked)} QA items for {args.questions} questions")
        keep = {it.fact_id for it in picked}
        # the probe's own group then holds exactly these questions (open_relation reads it)
        self.prepared = dataclasses.replace(
            prepared, items={rel: [it for it in its if it.fact_id in keep] for rel, its in prepared.items.items()}
        )
        self.group = GROUP.format(k=args.shots)
        by_id = {t.item.fact_id: t for t in self.probe.groups(self.cfg, self.prepared)[self.group]}
        if set(by_id) != keep:
            raise SystemExit(f"the probe's group {self.group} holds {len(by_id)} questions, expected {len(keep)}")
        self.tasks = [by_id[it.fact_id] for it in picked]
        self.relations = {rel: sum(it.relation == rel for it in picked) for rel in prepared.items}
        self.notes: list[str] = []  # the probe's notes (e.g. a block cut to fit), over all sessions

    def session(self, loaded):
        from factprobe.framework.base import Session

        def note(msg: str) -> None:
            if msg not in self.notes:
                self.notes.append(msg)

        return Session(self.cfg, loaded, self.prepared, note)

    def open(self, loaded):
        """(session, state) as the runner opens the group: a fresh Session (fresh Generator)."""
        session = self.session(loaded)
        return session, self.probe.open_relation(session, self.group)

    def ours(self, loaded, tasks):
        """The probe's own loop over `tasks`: open the group, score each probe batch. Rows, stats."""
        session, state = self.open(loaded)
        rows = []
        for batch in self.probe.batches(self.cfg, tasks):
            rows += self.probe.score_batch(session, state, batch)
        g = session.generator
        return rows, vars(g.stats) | {"total_tokens": g.stats.total_tokens}, state


def gold_em(text: str, task) -> float:
    from factprobe.metrics import qa as qam

    return qam.score_answer(text, task.item.gold, task.item.answer_type)["em"]


# ------------------------------------------------------------------------------------ memory subprocesses
MEMORY_VARIANTS = ["ours", "hf", "lm_eval"]


def run_memory_variant(args) -> None:
    """Subprocess body: load, warm up, then one batch of one method; prints its peak-RSS growth."""
    from factprobe.framework.runner import load_for_probe
    from factprobe.probes.qa import STOP, qa_prompt

    w = Workload(args)
    loaded = load_for_probe(w.cfg)
    model, tok = loaded.model, loaded.tokenizer
    _, state = w.open(loaded)
    prompts = [qa_prompt(state.block, t.item.question) for t in w.tasks]
    with torch.inference_mode():
        model(input_ids=torch.tensor([tok(prompts[0])["input_ids"][:64]]))  # page the weights in
    v = args.memory_variant
    lm = make_lm_eval(loaded.path, args) if v == "lm_eval" else None
    stop = STOP
    with PeakRSS() as mem:
        if v == "ours":
            w.ours(loaded, w.tasks[: w.probe.batch_size])
        elif v == "hf":
            hf_greedy(model, tok, prompts[: args.batch_size], args, stops=stop)
        else:
            lm_eval_greedy(lm, prompts[: args.batch_size], args, until=stop)
    print(
        "MEMORY "
        + json.dumps({"variant": v, "peak_rss_growth_mb": mem.growth_mb, "exact": mem.exact, "rss_before_mb": round(mem.base, 1)})
    )


def measure_memory(args, variants) -> dict:
    out = {}
    for v in variants:
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--memory-variant",
            v,
            "--model",
            args.model,
            "--questions",
            str(args.questions),
            "--shots",
            str(args.shots),
            "--relations",
            args.relations,
            "--max-new-tokens",
            str(args.max_new_tokens),
            "--batch-size",
            str(args.batch_size),
            "--seed",
            str(args.seed),
        ] + (["--threads", str(args.threads)] if args.threads else [])
        res = subprocess.run(cmd, check=False, capture_output=True, text=True)
        line = next((ln for ln in res.stdout.splitlines() if ln.startswith("MEMORY ")), None)
        out[v] = json.loads(line[len("MEMORY ") :]) if line else {"error": (res.stderr or res.stdout)[-500:]}
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

    from factprobe.framework.runner import load_for_probe
    from factprobe.probes.qa import BATCH, STOP, exemplar_block, qa_prompt, regular_block

    hf_logging.set_verbosity_error()
    started = time.strftime("%Y-%m-%d %H:%M:%S")

    def rel(path: str) -> str:  # repo-relative where inside the repo
        full = os.path.abspath(path)
        return os.path.relpath(full, REPO) if full.startswith(str(REPO) + os.sep) else path

    command = shlex.join([rel(sys.executable), rel(sys.argv[0]), *sys.argv[1:]])
    load_start = loadavg()
    w = Workload(args)
    loaded = load_for_probe(w.cfg)
    model, tok = loaded.model, loaded.tokenizer

    # the block and the requests, as the probe builds them
    _, state = w.open(loaded)
    block = state.block
    drawn = regular_block(w.prepared, args.shots, w.cfg.base.seed)
    from factprobe.datasets.counterfactual import Exemplar

    block_is_regular = block == exemplar_block([Exemplar.of(it) for it in drawn])
    prompts = [qa_prompt(block, t.item.question) for t in w.tasks]
    n = len(prompts)
    n_block = len(tok(block)["input_ids"])
    prompt_lens = [len(tok(p)["input_ids"]) for p in prompts]
    print(
        f"qa: {n} questions over {len(w.relations)} relations, {len(state.exemplars)}-shot block of {n_block} "
        f"tokens, prompts {min(prompt_lens)}-{max(prompt_lens)} tokens; ours: probe batches of {BATCH}, "
        f"baselines: batch size {args.batch_size}",
        flush=True,
    )
    lm = None if args.no_lm_eval else make_lm_eval(loaded.path, args)
    lm_encoding_same = None
    if lm is not None:  # same token sequences? (lm-eval's own encoding of each context vs ours)
        gen = w.session(loaded).generator
        lm_encoding_same = sum(list(lm.tok_encode(p)) == gen.encode(p) for p in prompts)

    # warm-up (page weights in, first-call overheads) on 2 questions, not timed
    w.ours(loaded, w.tasks[:2])
    if not args.no_hf:
        hf_greedy(model, tok, prompts[:2], args, stops=STOP)
    if lm is not None:
        lm_eval_greedy(lm, prompts[:2], args, until=STOP)

    methods = ["ours"] + ([] if lm is None else ["lm_eval"]) + ([] if args.no_hf else ["hf"])
    ours_stats, ours_rows, hf_forwarded = [], {}, 0

    def run(m, chunk):
        nonlocal hf_forwarded
        if m == "ours":
            rows, st, _ = w.ours(loaded, [w.tasks[i] for i in chunk])
            ours_stats.append(st)
            for i, r in zip(chunk, rows):
                ours_rows[i] = r
            return [r["answer"] for r in rows], [r["answer_token_ids"] for r in rows]
        cp = [prompts[i] for i in chunk]
        if m == "hf":
            texts, tids, fw = hf_greedy(model, tok, cp, args, stops=STOP)
            hf_forwarded += fw
            return texts, tids
        return lm_eval_greedy(lm, cp, args, until=STOP), None

    res = interleaved(methods, n, args.chunks, run)
    wall, cpu, answers, ids = res["wall"], res["cpu"], res["answers"], res["ids"]
    same_prompts = sum(ours_rows[i]["prompt"] == prompts[i] for i in range(n))

    def same(a, b):
        return sum(x == y for x, y in zip(a, b))

    ems = {m: [gold_em(answers[m][i], w.tasks[i]) for i in range(n)] for m in methods}
    result_qa = {
        "seconds": {m: round(wall[m], 2) for m in methods},
        "cpu_seconds": {m: round(cpu[m], 2) for m in methods},
        "questions": n,
        "exact_match_with_gold": {m: int(sum(e >= 1.0 for e in ems[m])) for m in methods},
        "ours_finish_reasons": {r: sum(ours_rows[i]["finish_reason"] == r for i in range(n)) for r in ("stop", "eos", "length")},
        "tokens_forwarded": {
            "ours": sum(s["total_tokens"] for s in ours_stats),
            "ours_detail": {k: sum(s[k] for s in ours_stats) for k in ours_stats[0]},
        },
        "per_chunk": res["per_chunk"],
    }
    for m in methods[1:]:
        key = "lm_eval" if m == "lm_eval" else "hf_generate"
        result_qa[f"speedup_vs_{key}"] = round(wall[m] / wall["ours"], 2)
        result_qa[f"cpu_speedup_vs_{key}"] = round(cpu[m] / cpu["ours"], 2)
        result_qa[f"answers_identical_vs_{key}"] = same(answers["ours"], answers[m])
        result_qa[f"answers_identical_fraction_vs_{key}"] = round(same(answers["ours"], answers[m]) / n, 4)
    if "hf" in methods:
        result_qa["token_ids_identical_vs_hf_generate"] = same(ids["ours"], ids["hf"])
        result_qa["tokens_forwarded"]["hf_generate_including_padding"] = hf_forwarded
    result_qa["differing"] = [
        {
            "i": i,
            "relation": w.tasks[i].item.relation,
            "question": w.tasks[i].item.question,
            "gold": list(w.tasks[i].item.gold),
            **{m: answers[m][i] for m in methods},
            "ours_token_ids": ids["ours"][i],
            "ours_finish_reason": ours_rows[i]["finish_reason"],
            **({"hf_token_ids": ids["hf"][i]} if "hf" in methods else {}),
        }
        for i in range(n)
        if len({answers[m][i] for m in methods}) > 1 or ("hf" in methods and ids["ours"][i] != ids["hf"][i])
    ]
    result_qa["examples"] = [
        {"question": w.tasks[i].item.question, "gold": list(w.tasks[i].item.gold), "ours": answers["ours"][i]}
        for i in range(min(8, n))
    ]
    print(
        "qa: "
        + ", ".join(f"{m} {wall[m]:.1f}s" for m in methods)
        + "".join(
            f"; speedup vs {m} {result_qa['speedup_vs_' + ('lm_eval' if m == 'lm_eval' else 'hf_generate')]}x"
            for m in methods[1:]
        )
        + "".join(
            f"; identical answers vs {m} "
            f"{result_qa['answers_identical_vs_' + ('lm_eval' if m == 'lm_eval' else 'hf_generate')]}/{n}"
            for m in methods[1:]
        )
        + (f"; token ids vs hf {result_qa['token_ids_identical_vs_hf_generate']}/{n}" if "hf" in methods else ""),
        flush=True,
    )
    for d in result_qa["differing"][:10]:
        print(f"  differs: {d}", flush=True)

    memory = {} if args.no_memory else measure_memory(args, [m for m in MEMORY_VARIANTS if m in methods])
    if memory:
        result_qa["peak_rss_growth_mb"] = {k: v.get("peak_rss_growth_mb") for k, v in memory.items()}

    values = {k: result_qa.get(k) for k in TARGETS}
    passed = {k: (v is not None and (v >= t if op == ">=" else v <= t)) for k, (op, t) in TARGETS.items() for v in [values[k]]}
    result = {
        "benchmark": "qa",
        "started": started,
        "command": command,
        "model": args.model,
        "model_revision": getattr(loaded, "revision", ""),
        "dtype": "float32",
        "device": "cpu",
        "args": {k: v for k, v in vars(args).items() if k != "memory_variant"},
        "workload": {
            "probe": "qa",
            "source": "lama",
            "group": w.group,
            "shots": args.shots,
            "exemplars_in_block": len(state.exemplars),
            "block_is_probe_regular_block": block_is_regular,
            "block_tokens": n_block,
            "block_chars": len(block),
            "prompt_tokens_min": min(prompt_lens),
            "prompt_tokens_max": max(prompt_lens),
            "questions": n,
            "questions_per_relation": w.relations,
            "max_new_tokens": args.max_new_tokens,
            "stop": list(STOP),
            "ours_batch": BATCH,
            "baseline_batch_size": args.batch_size,
            "chunks": args.chunks,
            "ours_prompts_identical_to_requests": same_prompts,
            "lm_eval_context_encoding_identical_to_ours": lm_encoding_same,
            "probe_notes": w.notes,
            "block": block,
        },
        "qa": result_qa,
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
        json.dump(portable(result), fh, indent=2, ensure_ascii=False)
        fh.write("\n")
    os.replace(fh.name, out)
    print(f"wrote {out}; targets: " + ", ".join(f"{k} {'ok' if v else 'MISSED'}" for k, v in passed.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
