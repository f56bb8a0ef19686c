"""mc-items benchmark: the mc-items probe's scoring vs lm-eval's multiple-choice loglikelihood.

Workload: two 4-option item sets, `smollm2-135m-instruct`, fp32 on CPU.
- cloze: the 20 items shipped in `examples/mc_items/cloze.jsonl` (the slot at the end, in the middle
  and at the start), zero-shot and with `--examples` in-context examples per relation from
  `examples/mc_items/cloze_train.jsonl`;
- lama: items built at run time from the data root by `lama_items` (LAMA T-REx `--lama-relations`,
  `--lama-items` facts each, the gold object and 3 distractors of the relation; LPAQA T-REx training
  facts as the examples' pool), with each count of `--lama-examples` (default 0, 10, 50: the last is
  wu2024's IC-LKE setting).

- ours: the probe's own loop (`MCItems.open_relation` + `score_batch` over the runner's batches,
  a real `Session`): per relation the examples' prefix once, then packed forwards of several
  items, each item's context once and its options as a token trie.
- lm-eval: `HFLM(pretrained=<cached folder>, device="cpu", dtype="float32", batch_size=B)`
  `.loglikelihood(...)` on the same (context, continuation) pairs: what a multiple-choice task
  sends (one request per option, the continuation being `option + rest of the sentence`). Its
  one-token logits cache stays on (its default).
- naive: `factprobe.lm.naive.naive_logprob`, one full forward per option (exactness reference).

The methods alternate in rounds (ours pass, lm-eval pass, ...) so load from other processes hits
both alike; per method the median over rounds is reported, in wall and in process-CPU seconds.
Exactness: max |log-prob difference| of ours against lm-eval and against naive over every option
(ours' summed log-probs; the `mean` rule divides the same sums by token counts). The speed target is
judged on the last setting (the most examples; `judge`), each setting's verdict is listed too.

Writes `benchmarks/results/mc_items.json` atomically and prints a summary. See benchmarks/README.md.
Run: `python benchmarks/bench_mc_items.py` (about 8 min on the idle 2-core machine).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

from portable_paths import portable  # benchmarks/ is sys.path[0] when a bench runs

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

import torch
from tqdm.auto import tqdm

TARGETS = {
    "speedup_vs_lm_eval": (">=", 20.0),
    "max_abs_logprob_diff_vs_lm_eval": ("<=", 1e-4),
    "max_abs_logprob_diff_vs_naive": ("<=", 1e-4),
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--data", default=str(REPO / "examples" / "mc_items" / "cloze.jsonl"))
    p.add_argument("--train-data", default=str(REPO / "examples" / "mc_items" / "cloze_train.jsonl"))
    p.add_argument("--examples", type=int, default=2, help="in-context examples per relation for the few-shot setting")
    p.add_argument(
        "--lama-relations",
        default="P36,P19",
        help="LAMA T-REx relations of the second item set (4-option items built from the data root); '' skips it",
    )
    p.add_argument("--lama-items", type=int, default=10, help="test items per LAMA relation")
    p.add_argument("--lama-examples", default="0,10,50", help="in-context example counts run on the LAMA items")
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds (one pass of each method per round)")
    p.add_argument("--lm-eval-batch-size", type=int, default=8)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's default)")
    p.add_argument("--out", default=str(HERE / "results" / "mc_items.json"))
    p.add_argument("--no-progress", action="store_true")
    return p.parse_args(argv)


def loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def lama_items(relations: list[str], n_items: int, out_dir: Path, seed: int = 0) -> tuple[Path, Path]:
    """A 4-option mc-items set built from the data root (read, never copied into the repository):
    for each relation, `n_items` LAMA T-REx facts (drawn with `seed`) as items `template with [X]
    filled, [Y] the slot` (LAMA's " ." written "."), the gold object plus 3 distractors drawn from the
    relation's other objects, in a seeded order; and every LPAQA T-REx training fact of the relation
    whose subject is not a test subject, as training items of the same form (the examples' pool).
    Writes `<out_dir>/items.jsonl` and `<out_dir>/train.jsonl`; returns both paths."""
    import json
    import random

    from factprobe.io import read_jsonl
    from factprobe.paths import data_root

    root = data_root()
    templates = {r["relation"]: r["template"] for _, r in read_jsonl(root / "lama" / "relations.jsonl")}
    out_dir.mkdir(parents=True, exist_ok=True)
    items, train = [], []
    for rel in relations:
        template = templates[rel].replace(" .", ".")
        facts = [r for _, r in read_jsonl(root / "lama" / "trex" / f"{rel}.jsonl")]
        objects = sorted({f["obj_label"] for f in facts})
        rng = random.Random(f"{seed}/{rel}")
        chosen = rng.sample(facts, n_items)
        for f in chosen:
            options = [f["obj_label"], *rng.sample([o for o in objects if o != f["obj_label"]], 3)]
            rng.shuffle(options)
            items.append(
                {
                    "id": f["uuid"],
                    "relation": rel,
                    "prompt": template.replace("[X]", f["sub_label"]),
                    "options": options,
                    "answer": f["obj_label"],
                }
            )
        test_subjects = {f["sub_label"] for f in chosen}
        for _, f in read_jsonl(root / "lpaqa" / "trex_train" / f"{rel}.jsonl"):
            if f["sub_label"] not in test_subjects and f["obj_label"] in objects:
                others = rng.sample([o for o in objects if o != f["obj_label"]], 3)
                train.append(
                    {
                        "relation": rel,
                        "prompt": template.replace("[X]", f["sub_label"]),
                        "options": [f["obj_label"], *others],
                        "answer": 0,
                    }
                )
    for name, rows in (("items.jsonl", items), ("train.jsonl", train)):
        (out_dir / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return out_dir / "items.jsonl", out_dir / "train.jsonl"


def ours_pass(cfg, loaded, prepared) -> tuple[dict, list[dict]]:
    """One pass of the probe's own loop; (times and token counts, rows)."""
    from factprobe.framework.base import Session
    from factprobe.framework.registry import get_probe

    probe = get_probe("mc-items")
    session = Session(cfg, loaded, prepared, note=lambda m: None)
    rows: list[dict] = []
    t0, c0 = time.perf_counter(), time.process_time()
    for rel, items in probe.groups(cfg, prepared).items():
        state = probe.open_relation(session, rel)
        for batch in probe.batches(cfg, items):
            rows += probe.score_batch(session, state, batch)
    s = session.scorer.stats
    return {
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": time.process_time() - c0,
        "tokens_forwarded": s.total_tokens,
        "naive_tokens": s.naive_tokens,
        "forwards": s.forwards,
    }, rows


def lm_eval_pass(lm, pairs: list[tuple[str, str]]) -> tuple[dict, list[float]]:
    from lm_eval.api.instance import Instance

    inst = [Instance(request_type="loglikelihood", doc={}, arguments=p, idx=i) for i, p in enumerate(pairs)]
    t0, c0 = time.perf_counter(), time.process_time()
    res = lm.loglikelihood(inst, disable_tqdm=True)
    return {"seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0}, [float(r[0]) for r in res]


def setting(
    args, examples: int, loaded, lm, progress: bool, data: str | None = None, train_data: str | None = None, label: str = "cloze"
) -> dict:
    """Time ours and lm-eval (alternating rounds) on the items of `data` (default --data) with
    `examples` examples from `train_data` (default --train-data); check exactness."""
    data, train_data = data or args.data, train_data or args.train_data
    from factprobe.framework.config import RunConfig
    from factprobe.framework.registry import get_probe
    from factprobe.lm.naive import naive_logprob
    from factprobe.probes.mc_items import split_prompt

    cfg = RunConfig.from_dict(
        {
            "probe": "mc-items",
            "model": args.model,
            "data": str(data),
            "device": "cpu",
            "dtype": "float32",
            "examples": examples,
            "train_data": str(train_data) if examples else None,
        }
    )
    prepared = get_probe("mc-items").prepare(cfg)
    get_probe("mc-items").validate(cfg, prepared)
    _, rows = ours_pass(cfg, loaded, prepared)  # warm-up, and the rows whose requests lm-eval gets
    pairs, ours_lp = [], []
    for r in rows:
        _, after = split_prompt(r["subject"], cfg.params.slot)
        pairs += [(r["context"], o + after) for o in r["options"]]
        ours_lp += r["logprobs"]
    lm_eval_pass(lm, pairs[:4])  # warm-up
    # same token split? lm-eval's own encoding of each pair against the scorer's
    same = True
    from factprobe.lm.scorer import Scorer

    enc = Scorer(loaded.model, loaded.tokenizer, device="cpu", max_length=loaded.max_length)
    for ctx, cont in pairs:
        c_enc, k_enc = lm._encode_pair(ctx, cont)
        e = enc._encode_request(ctx, [cont])
        same &= list(c_enc) + list(k_enc) == e.whole_ids[0] and list(k_enc) == e.cont_ids[0]
    ours_t, lm_t = [], []
    lm_lp: list[float] = []
    stats = {}
    for _ in tqdm(range(args.rounds), desc=f"rounds ({label}, {examples} examples)", disable=not progress, leave=False):
        t, _rows = ours_pass(cfg, loaded, prepared)
        ours_t.append(t)
        stats = {k: t[k] for k in ("tokens_forwarded", "naive_tokens", "forwards")}
        t, lm_lp = lm_eval_pass(lm, pairs)
        lm_t.append(t)
    naive = [naive_logprob(loaded.model, loaded.tokenizer, c, k) for c, k in pairs]

    def med(ts, key):
        return statistics.median(x[key] for x in ts)

    n = len(rows)
    out = {
        "set": label,
        "data": _rel(data),
        "examples": examples,
        "items": n,
        "options": len(pairs),
        "ours_seconds_per_item": med(ours_t, "seconds") / n,
        "lm_eval_seconds_per_item": med(lm_t, "seconds") / n,
        "ours_cpu_seconds_per_item": med(ours_t, "cpu_seconds") / n,
        "lm_eval_cpu_seconds_per_item": med(lm_t, "cpu_seconds") / n,
        "ours_seconds_per_round": [x["seconds"] for x in ours_t],
        "lm_eval_seconds_per_round": [x["seconds"] for x in lm_t],
        "max_abs_logprob_diff_vs_lm_eval": max(abs(a - b) for a, b in zip(ours_lp, lm_lp)),
        "max_abs_logprob_diff_vs_naive": max(abs(a - b) for a, b in zip(ours_lp, naive)),
        "max_abs_logprob_diff_lm_eval_vs_naive": max(abs(a - b) for a, b in zip(lm_lp, naive)),
        "requests_identical_to_lm_eval": bool(same),
        "ours_tokens_forwarded": stats.get("tokens_forwarded"),
        "naive_tokens": stats.get("naive_tokens"),
        "ours_forwards": stats.get("forwards"),
        "context_tokens_mean": statistics.mean(len(enc.encode_context(r["context"])) for r in rows),
    }
    out["speedup_vs_lm_eval"] = out["lm_eval_seconds_per_item"] / out["ours_seconds_per_item"]
    out["cpu_speedup_vs_lm_eval"] = out["lm_eval_cpu_seconds_per_item"] / out["ours_cpu_seconds_per_item"]
    out["speedup_range_over_rounds"] = [
        min(b["seconds"] / a["seconds"] for a, b in zip(ours_t, lm_t)),
        max(b["seconds"] / a["seconds"] for a, b in zip(ours_t, lm_t)),
    ]
    return out


def judge(settings: list[dict]) -> dict:
    """The summary of the measured settings: the speed target is judged on the setting with the most
    in-context examples (the last one: wu2024's IC-LKE setting of 50 examples, where the items share a
    long context), exactness on every setting; each setting's own verdict is listed beside it."""

    def key(s: dict) -> str:
        return f"{s['set']}, {s['examples']} examples"

    target = settings[-1]
    res = {
        "target_setting": key(target),
        "speedup_vs_lm_eval": target["speedup_vs_lm_eval"],
        "speedup_by_setting": {key(s): round(s["speedup_vs_lm_eval"], 2) for s in settings},
        "max_abs_logprob_diff_vs_lm_eval": max(s["max_abs_logprob_diff_vs_lm_eval"] for s in settings),
        "max_abs_logprob_diff_vs_naive": max(s["max_abs_logprob_diff_vs_naive"] for s in settings),
    }

    def ok(value: float, k: str) -> bool:
        op, thr = TARGETS[k]
        return bool(value >= thr if op == ">=" else value <= thr)

    res["targets"] = {k: f"{op} {thr:g}" for k, (op, thr) in TARGETS.items()}
    res["passed"] = {k: ok(res[k], k) for k in TARGETS}
    res["speed_target_passed_by_setting"] = {key(s): ok(s["speedup_vs_lm_eval"], "speedup_vs_lm_eval") for s in settings}
    return res


def _rel(path) -> str:
    p = Path(path).resolve()
    return str(p.relative_to(REPO)) if p.is_relative_to(REPO) else str(path)


def main(argv=None) -> int:
    args = parse_args(argv)
    warnings.filterwarnings("ignore")
    if args.threads:
        torch.set_num_threads(args.threads)
    progress = not args.no_progress
    t_start, load_start = time.perf_counter(), loadavg()
    from lm_eval.models.huggingface import HFLM

    from factprobe.io import atomic_write_json
    from factprobe.models import load_model, resolve_model_path

    loaded = load_model(args.model, device="cpu", dtype="float32")
    path = resolve_model_path(args.model)
    lm = HFLM(pretrained=str(path), batch_size=args.lm_eval_batch_size, device="cpu", dtype="float32")
    settings = [setting(args, 0, loaded, lm, progress)]
    if args.examples:
        settings.append(setting(args, args.examples, loaded, lm, progress))
    if args.lama_relations:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="mc-items-lama-") as tmp:
            items, train = lama_items(args.lama_relations.split(","), args.lama_items, Path(tmp))
            for k in (int(x) for x in args.lama_examples.split(",")):
                settings.append(setting(args, k, loaded, lm, progress, items, train, f"lama {args.lama_relations}"))
                settings[-1]["data"] = f"built from LAMA T-REx {args.lama_relations} (lama_items)"
    import lm_eval
    import transformers

    head = settings[0]
    res = {
        **judge(settings),
        "settings": settings,
        "workload": {
            "model": args.model,
            "model_path": str(path),
            "data": str(Path(args.data).relative_to(REPO)) if Path(args.data).is_relative_to(REPO) else args.data,
            "dtype": "float32",
            "device": "cpu",
            "lm_eval_batch_size": args.lm_eval_batch_size,
            "lm_eval_logits_cache": lm.logits_cache,
            "rounds": args.rounds,
        },
        "machine": {
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "lm_eval": getattr(lm_eval, "__version__", None),
            "python": platform.python_version(),
        },
        "loadavg_start": load_start,
        "loadavg_end": loadavg(),
    }
    res["wall_seconds"] = time.perf_counter() - t_start
    atomic_write_json(args.out, portable(res))
    print(
        f"\nmc-items benchmark: {head['items']} items x 4 options, {args.model} fp32 CPU, "
        f"{res['machine']['torch_threads']} threads, load {load_start} -> {res['loadavg_end']}"
    )
    print(
        f"  {'set':<18}{'examples':>8}{'ours s/item':>13}{'lm-eval s/item':>16}{'speedup':>9}{'CPU speedup':>13}"
        f"{'|d| lm-eval':>13}{'|d| naive':>11}"
    )
    for s in settings:
        print(
            f"  {s['set']:<18}{s['examples']:>8}{s['ours_seconds_per_item']:>13.4f}{s['lm_eval_seconds_per_item']:>16.4f}"
            f"{s['speedup_vs_lm_eval']:>8.1f}x{s['cpu_speedup_vs_lm_eval']:>12.1f}x"
            f"{s['max_abs_logprob_diff_vs_lm_eval']:>13.1e}{s['max_abs_logprob_diff_vs_naive']:>11.1e}"
        )
    print(f"  targets {res['targets']} (speed judged on {res['target_setting']}): passed {res['passed']}; written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
