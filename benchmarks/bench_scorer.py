"""Scorer benchmark: factprobe's shared-prefix scorer vs. a naive per-option forward vs. lm-eval.

Workload (DESIGN.md section 4): IC-LKE on one LAMA relation (P36) with 50 in-context examples
drawn from the LPAQA T-REx training facts, 100 choices per fact, 20 facts, on
`smollm2-135m-instruct`, fp32 on CPU. The contexts are built exactly as the probe runner builds
them (checked against the IC-LKE probe's `open_relation` + `score_batch` with a recording stub scorer).

Three methods, measured in ONE process and time-sliced: the work is cut into units of a few
seconds (one batch of facts of ours, a few naive options, one lm-eval model call, one plain
forward) and a scheduler runs next whichever method is furthest behind its share of the time,
so that load from other processes (this is a shared 2-core machine) hits all of them alike:

- ours:   `Scorer.prefix(relation prefix)` once, then `score_choices(batch, shared_prefix=...)`
          over all facts in the runner's batches (the IC-LKE probe's `batch_size`), default token budget.
- naive:  `factprobe.lm.naive.naive_logprob`, one full forward per (context, option), on the
          first fact only (all options, or an evenly spaced subset when the time budget says so;
          then extrapolated to the fact by token count and flagged in the JSON).
- lm-eval: `lm_eval.models.huggingface.HFLM(pretrained=<cached folder>, device="cpu",
          dtype="float32")` `.loglikelihood(...)` on the same (context, continuation) requests
          of the same options. Its one-token-continuation logits cache is left on (its default).

Also: log-prob agreement, tokens forwarded, a plain-forward tokens/s (for the token floor), and
peak RSS growth after 5 and after 20 facts (streamed in batches of 5).

Writes `benchmarks/results/scorer.json` atomically and prints a summary. See benchmarks/README.md.
Run: `python benchmarks/bench_scorer.py` (`--help` for knobs; defaults stay under ~10 minutes).
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import statistics
import sys
import threading
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

import numpy as np
import torch
from tqdm.auto import tqdm

TARGETS = {
    "speedup_vs_naive": (">=", 30.0),
    "speedup_vs_lm_eval": (">=", 30.0),
    "token_floor_fraction": (">=", 0.5),
    "max_abs_logprob_diff_vs_naive": ("<=", 1e-4),
    "max_abs_logprob_diff_vs_lm_eval": ("<=", 1e-3),
}


# ------------------------------------------------------------------------------------ helpers
def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--relation", default="P36")
    p.add_argument("--facts", type=int, default=20)
    p.add_argument("--choices", type=int, default=100)
    p.add_argument("--examples", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--min-ours-passes", type=int, default=4, help="complete passes of ours over all facts (spread over the run)")
    p.add_argument("--naive-unit", type=int, default=4, help="naive options per time slice")
    p.add_argument(
        "--token-budget",
        type=int,
        default=None,
        help="Scorer token_budget (default: the scorer's device default, as the runner uses)",
    )
    p.add_argument("--lm-eval-batch-size", type=int, default=4)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's default)")
    p.add_argument(
        "--max-seconds",
        type=float,
        default=540.0,
        help="soft wall-time budget; the naive/lm-eval option subset is sized to fit it",
    )
    p.add_argument(
        "--naive-max-seconds", type=float, default=240.0, help="most seconds for the naive baseline on its fact (brief: ~4 min)"
    )
    p.add_argument(
        "--naive-options", type=int, default=None, help="force this many (evenly spaced) options for naive and lm-eval"
    )
    p.add_argument("--tps-tokens", type=int, default=1024, help="length of the plain forward used to measure tokens/s")
    p.add_argument("--out", default=str(HERE / "results" / "scorer.json"))
    p.add_argument("--no-lm-eval", action="store_true")
    p.add_argument("--no-progress", action="store_true")
    return p.parse_args(argv)


def now() -> float:
    return time.perf_counter()


def cpu() -> float:
    """CPU seconds of this process (all threads): less sensitive to other processes than wall time."""
    return time.process_time()


class Memory:
    """Current and peak RSS in MB. Peak is reset with /proc/self/clear_refs (exact, Linux); where
    that is not allowed a 5 ms psutil sampler stands in."""

    def __init__(self) -> None:
        self.exact = False
        try:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
            self.exact = self._status("VmHWM") is not None
        except OSError:
            self.exact = False
        self._peak = 0.0
        self._stop = threading.Event()
        self._thread = None

    @staticmethod
    def _status(key: str) -> float | None:
        try:
            with open("/proc/self/status") as fh:
                for line in fh:
                    if line.startswith(key + ":"):
                        return int(line.split()[1]) / 1024.0
        except OSError:
            return None
        return None

    def rss(self) -> float:
        v = self._status("VmRSS")
        if v is not None:
            return v
        import psutil

        return psutil.Process().memory_info().rss / 2**20

    def reset_peak(self) -> None:
        if self.exact:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
            return
        self._peak = self.rss()
        if self._thread is None:

            def sample() -> None:
                while not self._stop.wait(0.005):
                    self._peak = max(self._peak, self.rss())

            self._thread = threading.Thread(target=sample, daemon=True)
            self._thread.start()

    def peak(self) -> float:
        if self.exact:
            return float(self._status("VmHWM"))
        return max(self._peak, self.rss())

    def stop(self) -> None:
        self._stop.set()


def machine_info() -> dict:
    import transformers

    info = {
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
    }
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        import lm_eval

        info["lm_eval_version"] = getattr(lm_eval, "__version__", None)
    except ImportError:  # pragma: no cover
        pass
    try:
        import psutil

        info["memory_gb"] = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:  # pragma: no cover
        pass
    return info


def loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


# ------------------------------------------------------------------------------------ workload
class _RecordingScorer:
    """Stands in for the Scorer inside the IC-LKE probe (`open_relation` + `score_batch`): records
    the prefix and requests."""

    def __init__(self, tokenizer, max_length: int) -> None:
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.prefix_texts: list[str] = []
        self.requests: list = []

    def encode_context(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=True)["input_ids"])

    def encode_continuation(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prefix(self, text):
        self.prefix_texts.append(text)
        return text

    def score_choices(self, requests, shared_prefix=None):
        self.requests.extend(requests)
        return [np.zeros(len(r.options)) for r in requests]


def build_workload(args, tokenizer, max_length: int) -> dict:
    from factprobe.datasets.examples import sample_examples
    from factprobe.framework.base import Session
    from factprobe.framework.config import RunConfig
    from factprobe.framework.registry import get_probe
    from factprobe.lm.scorer import ChoiceRequest
    from factprobe.paths import data_root
    from factprobe.probes import ic_lke

    root = data_root()
    cfg = RunConfig.from_dict(
        {
            "probe": "ic-lke",
            "model": args.model,
            "source": "lama",
            "data": str(root / "lama"),
            "train_data": str(root / "lpaqa" / "trex_train"),
            "relations": [args.relation],
            "max_facts_per_relation": args.facts,
            "choices": args.choices,
            "examples": args.examples,
            "seed": args.seed,
        }
    )
    probe = get_probe("ic-lke")
    prepared = probe.prepare(cfg)
    items = prepared.items[args.relation]
    p = cfg.params
    sep, fmt = p.separator, p.prompt_format
    # Examples exclude every test subject of the relation (not only the sampled items), as `mc.relation_examples`.
    exclude = [f for f in prepared.test if f.relation == args.relation]
    examples = sample_examples(
        prepared.train, args.relation, p.examples, seed=cfg.base.seed, exclude_subjects=exclude, drop_self=p.drop_self_examples
    )
    prefix_text = ic_lke.relation_prefix(examples, sep, fmt)
    requests = [
        ChoiceRequest(
            ic_lke.fact_context(prefix_text, it.subject, sep, fmt), [ic_lke.option_continuation(o, sep) for o in it.options]
        )
        for it in items
    ]
    # Same contexts as the runner? Run the IC-LKE probe's own loop with a recording stub scorer.
    check: dict = {"checked": False}
    try:
        stub = _RecordingScorer(tokenizer, max_length)
        session = Session(cfg, None, prepared, lambda m: None, _engines={"scorer": stub})
        state = probe.open_relation(session, args.relation)
        for batch in probe.batches(cfg, items):
            probe.score_batch(session, state, batch)
        same = stub.prefix_texts == [prefix_text] and [(r.context, list(r.options)) for r in stub.requests] == [
            (r.context, list(r.options)) for r in requests
        ]
        check = {"checked": True, "identical": bool(same)}
        if not same:  # trust the runner: it is what users run
            prefix_text = stub.prefix_texts[0]
            requests = list(stub.requests)
            check["note"] = "contexts differ from the public helpers; the runner's were used"
    except Exception as err:  # noqa: BLE001  (the probe's API moved: keep going, say so)
        check = {"checked": False, "error": f"{type(err).__name__}: {err}"}
    return {
        "cfg": cfg,
        "items": items,
        "examples": examples,
        "prefix_text": prefix_text,
        "requests": requests,
        "runner_check": check,
        "data_root": str(root),
    }


# ------------------------------------------------------------------------------------ methods
def run_ours(
    loaded,
    prefix_text: str,
    requests,
    batch: int,
    token_budget,
    desc: str,
    progress: bool,
    memory: Memory | None = None,
    mem_marks: tuple[int, ...] = (),
) -> dict:
    """The runner's IC-LKE scoring loop: relation prefix once, then batches of facts."""
    from factprobe.lm.scorer import Scorer

    scorer = Scorer(loaded.model, loaded.tokenizer, device=loaded.device, token_budget=token_budget, max_length=loaded.max_length)
    marks: dict[int, float] = {}
    if memory is not None:
        gc.collect()
        base = memory.rss()
        memory.reset_peak()
    t0, c0 = now(), cpu()
    prefix = scorer.prefix(prefix_text)
    t_prefix = now() - t0
    out: list[np.ndarray] = []
    batch_seconds = []
    with tqdm(total=len(requests), desc=desc, unit="fact", disable=not progress, leave=False) as bar:
        for b in range(0, len(requests), batch):
            tb = now()
            out.extend(scorer.score_choices(requests[b : b + batch], shared_prefix=prefix))
            batch_seconds.append(now() - tb)
            bar.update(len(requests[b : b + batch]))
            if memory is not None and (len(out) in mem_marks or not mem_marks):
                marks[len(out)] = memory.peak() - base
    total = now() - t0
    res = {
        "seconds_total": total,
        "cpu_seconds_total": cpu() - c0,
        "seconds_prefix": t_prefix,
        "batch_seconds": batch_seconds,
        "logprobs": out,
        "stats": {
            "prefix_tokens": scorer.stats.prefix_tokens,
            "packed_tokens": scorer.stats.packed_tokens,
            "fallback_tokens": scorer.stats.fallback_tokens,
            "total_tokens": scorer.stats.total_tokens,
            "forwards": scorer.stats.forwards,
            "fallbacks": scorer.stats.fallbacks,
        },
        "token_budget": scorer.token_budget,
    }
    if memory is not None:
        res["rss_baseline_mb"] = base
        res["peak_growth_mb"] = marks
        res["peak_abs_mb"] = memory.peak()
    return res


def run_naive(model, tokenizer, context: str, options: list[str], desc: str, progress: bool) -> dict:
    from factprobe.lm.naive import naive_logprob

    lps = []
    t0, c0 = now(), cpu()
    for o in tqdm(options, desc=desc, unit="opt", disable=not progress, leave=False):
        lps.append(naive_logprob(model, tokenizer, context, o))
    return {"seconds": now() - t0, "cpu_seconds": cpu() - c0, "logprobs": lps}


def run_lm_eval(lm, context: str, options: list[str], progress: bool) -> dict:
    from lm_eval.api.instance import Instance

    inst = [Instance(request_type="loglikelihood", doc={}, arguments=(context, o), idx=i) for i, o in enumerate(options)]
    t0, c0 = now(), cpu()
    res = lm.loglikelihood(inst, disable_tqdm=not progress)
    return {"seconds": now() - t0, "cpu_seconds": cpu() - c0, "logprobs": [float(r[0]) for r in res]}


@torch.inference_mode()
def plain_forward_tps(model, ids: list[int], reps: int = 2) -> list[float]:
    """Tokens/s of a plain forward of `ids` through the model body (no LM head)."""
    x = torch.tensor([ids])
    out = []
    for _ in range(reps):
        t0 = now()
        model.base_model(input_ids=x, use_cache=False)
        out.append(len(ids) / (now() - t0))
    return out


# ------------------------------------------------------------------------------------ token accounting
def naive_tokens(enc) -> list[int]:
    """Tokens a full forward of context+option costs, per option (from the scorer's encoding)."""
    return [len(w) for w in enc.whole_ids]


def lm_eval_groups(ctx_ids: list[int], cont_ids: list[list[int]], idx: list[int]) -> dict[tuple, list[int]]:
    """lm-eval's causal grouping (logits_cache=True): key = context + continuation[:-1]; one
    forward of length len(key) per key (its input drops the last token)."""
    groups: dict[tuple, list[int]] = {}
    for i in idx:
        groups.setdefault(tuple(ctx_ids + cont_ids[i][:-1]), []).append(i)
    return groups


def lm_eval_tokens(groups: dict[tuple, list[int]]) -> int:
    return sum(len(k) for k in groups)


def lm_eval_units(groups: dict[tuple, list[int]], batch_size: int) -> list[list[int]]:
    """lm-eval time slices: whole groups (so its one-token cache still works), `batch_size` groups
    per slice, longest first as lm-eval orders them; each slice is one lm-eval model call."""
    keys = sorted(groups, key=len, reverse=True)
    return [sorted(i for k in keys[j : j + batch_size] for i in groups[k]) for j in range(0, len(keys), batch_size)]


class OursPasses:
    """Ours as time slices: a pass = the relation prefix, then the runner's batches of facts.
    A pass's time is the sum of its slices; other methods' slices may run in between."""

    def __init__(self, loaded, prefix_text: str, requests, batch: int, token_budget) -> None:
        self.loaded, self.prefix_text, self.requests, self.batch, self.token_budget = (
            loaded,
            prefix_text,
            requests,
            batch,
            token_budget,
        )
        self.passes: list[dict] = []
        self.first_logprobs: list[np.ndarray] | None = None
        self.cur: dict | None = None

    @property
    def in_pass(self) -> bool:
        return self.cur is not None

    def step(self) -> float:
        """Run the next slice; returns its wall seconds."""
        from factprobe.lm.scorer import Scorer

        t0, c0 = now(), cpu()
        if self.cur is None:
            sc = Scorer(
                self.loaded.model,
                self.loaded.tokenizer,
                device=self.loaded.device,
                token_budget=self.token_budget,
                max_length=self.loaded.max_length,
            )
            self.cur = {
                "scorer": sc,
                "prefix": sc.prefix(self.prefix_text),
                "next": 0,
                "out": [],
                "t_start": t0,
                "seconds_prefix": now() - t0,
                "batch_seconds": [],
                "seconds": 0.0,
                "cpu_seconds": 0.0,
            }
        else:
            c = self.cur
            chunk = self.requests[c["next"] : c["next"] + self.batch]
            c["out"].extend(c["scorer"].score_choices(chunk, shared_prefix=c["prefix"]))
            c["next"] += len(chunk)
            c["batch_seconds"].append(now() - t0)
        dt = now() - t0
        self.cur["seconds"] += dt
        self.cur["cpu_seconds"] += cpu() - c0
        if self.cur["next"] >= len(self.requests):
            self._finish()
        return dt

    def _finish(self) -> None:
        c, self.cur = self.cur, None
        st = c["scorer"].stats
        rec = {
            "seconds": c["seconds"],
            "cpu_seconds": c["cpu_seconds"],
            "seconds_prefix": c["seconds_prefix"],
            "t_start": c["t_start"],
            "t_end": now(),
            "batch_seconds": c["batch_seconds"],
            "stats": {
                "prefix_tokens": st.prefix_tokens,
                "packed_tokens": st.packed_tokens,
                "fallback_tokens": st.fallback_tokens,
                "total_tokens": st.total_tokens,
                "forwards": st.forwards,
                "fallbacks": st.fallbacks,
            },
            "loadavg": loadavg(),
        }
        if self.first_logprobs is None:
            self.first_logprobs = c["out"]
            self.token_budget_used = c["scorer"].token_budget
        else:  # deterministic: every pass must give the same numbers
            rec["max_abs_diff_vs_pass1"] = float(max(np.abs(a - b).max() for a, b in zip(c["out"], self.first_logprobs)))
        self.passes.append(rec)


# ------------------------------------------------------------------------------------ main
def main(argv=None) -> int:
    args = parse_args(argv)
    warnings.filterwarnings("ignore")
    if args.threads:
        torch.set_num_threads(args.threads)
    progress = not args.no_progress
    t_start = now()
    load_start = loadavg()
    memory = Memory()

    from factprobe.framework.registry import get_probe
    from factprobe.models import load_model, resolve_model_path

    FACTS_PER_BATCH = get_probe("ic-lke").batch_size  # the runner's batches of IC-LKE facts

    def say(msg: str) -> None:
        tqdm.write(f"[{now() - t_start:6.1f}s] {msg}")

    say(f"loading {args.model} (fp32, cpu); torch {torch.__version__}, {torch.get_num_threads()} threads, load {load_start}")
    loaded = load_model(args.model, device="cpu", dtype="float32")
    model, tok = loaded.model, loaded.tokenizer
    wl = build_workload(args, tok, loaded.max_length)
    requests, prefix_text = wl["requests"], wl["prefix_text"]
    n_facts = len(requests)
    say(
        f"workload: {args.relation}, {len(wl['examples'])} examples, {n_facts} facts x {len(requests[0].options)} options; runner check {wl['runner_check']}"
    )

    from factprobe.lm.scorer import Scorer

    enc_scorer = Scorer(model, tok, device="cpu", max_length=loaded.max_length)  # tokenization only
    prefix_ids = enc_scorer.encode_context(prefix_text)
    encs = [enc_scorer._encode_request(r.context, r.options) for r in requests]
    floor_tokens = len(prefix_ids) + sum(len(e.ctx_ids) - len(prefix_ids) + sum(len(c) for c in e.cont_ids) for e in encs)
    fact0, enc0 = requests[0], encs[0]
    n_opt = len(fact0.options)
    naive_tok0 = naive_tokens(enc0)

    # Plain-forward input for tokens/s: real text of the workload, cut to --tps-tokens.
    tps_ids = (enc0.whole_ids[0] * (args.tps_tokens // len(enc0.whole_ids[0]) + 1))[: args.tps_tokens]

    # ---- warm-up: the first forwards page in the (mmapped) weights and build kernels; keep that
    # one-time cost out of both the memory pass and the timings.
    run_ours(loaded, prefix_text, requests[:1], 1, args.token_budget, "warm-up", False)
    plain_forward_tps(model, tps_ids[:128], reps=1)

    # ---- memory pass (also a first timed run of ours): batches of 5, peak after 5 and 20 facts
    mem_batch = 5
    say(f"memory pass: ours over {n_facts} facts in batches of {mem_batch} (peak RSS after 5 and {n_facts} facts)")
    mem = run_ours(loaded, prefix_text, requests, mem_batch, args.token_budget, "ours (memory pass)", progress, memory=memory)
    say(
        f"  {mem['seconds_total']:.1f}s; peak RSS growth {', '.join(f'{k} facts: {v:.1f} MB' for k, v in mem['peak_growth_mb'].items())}"
    )

    # ---- warm-ups and cost estimates for the baselines
    t_naive_one = run_naive(model, tok, fact0.context, [fact0.options[0]], "warm-up naive", False)["seconds"]

    lm = None
    lm_info: dict = {}
    lm_calls: list[tuple[int, int]] = []
    if not args.no_lm_eval:
        from lm_eval.models.huggingface import HFLM

        path = resolve_model_path(args.model)
        say(f"lm-eval HFLM(pretrained={path}, batch_size={args.lm_eval_batch_size}, device=cpu, dtype=float32)")
        lm = HFLM(pretrained=str(path), batch_size=args.lm_eval_batch_size, device="cpu", dtype="float32")
        # Are lm-eval's requests the ones we score? Compare its own (context, continuation) split.
        same = True
        for o, cont in zip(fact0.options, enc0.cont_ids):
            c_enc, k_enc = lm._encode_pair(fact0.context, o)
            same &= (list(c_enc) == enc0.ctx_ids) and (list(k_enc) == cont)
        lm_info = {
            "batch_size": args.lm_eval_batch_size,
            "add_bos_token": lm.add_bos_token,
            "logits_cache": lm.logits_cache,
            "max_length": lm.max_length,
            "tokenizer_adds_bos": tok("x")["input_ids"][:1] == [tok.bos_token_id],
            "requests_identical_to_ours": bool(same),
            "model_dtype": str(next(lm.model.parameters()).dtype),
            "attn_implementation": getattr(lm.model.config, "_attn_implementation", None),
        }
        say(f"  lm-eval token split identical to ours: {same}; add_bos_token={lm.add_bos_token}")
        run_lm_eval(lm, fact0.context, fact0.options[:2], False)  # warm-up
        # Count what lm-eval really forwards (batch x padded length per model call).
        orig_call = lm._model_call

        def counted_call(inps, *a, **kw):
            lm_calls.append(tuple(inps.shape))
            return orig_call(inps, *a, **kw)

        lm._model_call = counted_call

    # ---- size the naive / lm-eval option subset to the time budget
    elapsed = now() - t_start
    t_ours_est = mem["seconds_total"]
    tps_share = 0.4  # plain-forward time per unit of ours time
    naive_full_est = t_naive_one * sum(naive_tok0) / naive_tok0[0]
    groups_all = lm_eval_groups(enc0.ctx_ids, enc0.cont_ids, list(range(n_opt)))
    # lm-eval costs about what naive costs per forwarded token (measured: 0.6-0.9x); estimate 1x.
    lm_full_est = 0.0 if lm is None else naive_full_est * lm_eval_tokens(groups_all) / sum(naive_tok0)
    left = args.max_seconds - elapsed - (1 + tps_share) * args.min_ours_passes * t_ours_est - 15
    limits = {
        "all options": 1.0,
        f"--naive-max-seconds {args.naive_max_seconds:g}": args.naive_max_seconds / naive_full_est,
        f"--max-seconds {args.max_seconds:g}": max(left, 0.0) / (naive_full_est + lm_full_est),
    }
    why, frac = min(limits.items(), key=lambda kv: kv[1])
    k = args.naive_options or max(min(10, n_opt), math.floor(frac * n_opt))
    k = min(k, n_opt)
    if args.naive_options:
        why = "--naive-options"
    subset = sorted(set(np.linspace(0, n_opt - 1, k).round().astype(int).tolist()))
    say(
        f"estimates: naive {naive_full_est:.0f}s/fact, lm-eval {lm_full_est:.0f}s/fact, ours {t_ours_est:.0f}s/{n_facts} facts; "
        f"timing {len(subset)}/{n_opt} options of fact 1 for naive and lm-eval (limited by {why})"
    )

    # ---- time-sliced run. Shares of wall time, relative to naive: lm-eval and ours get what
    # they need to finish alongside naive (ours: --min-ours-passes passes), the plain forward a bit.
    naive_q = [subset[j : j + args.naive_unit] for j in range(0, len(subset), args.naive_unit)]
    naive_q = naive_q[::2] + naive_q[1::2]  # spread the option mix over time
    groups_sub = lm_eval_groups(enc0.ctx_ids, enc0.cont_ids, subset)
    lm_q = lm_eval_units(groups_sub, args.lm_eval_batch_size) if lm is not None else []
    naive_sub_est = naive_full_est * len(subset) / n_opt
    share = {
        "naive": 1.0,
        "lm_eval": max(0.05, lm_full_est / naive_full_est),
        "ours": max(0.05, args.min_ours_passes * t_ours_est / max(naive_sub_est, 1e-9)),
    }
    share["tps"] = tps_share * share["ours"]  # plain forwards interleave with ours slices: the floor is paired in time
    spent = dict.fromkeys(share, 0.0)
    ours = OursPasses(loaded, prefix_text, requests, FACTS_PER_BATCH, args.token_budget)
    naive_units, lm_units, tps_samples, tps_times = [], [], [], []
    naive_lp: dict[int, float] = {}
    lm_lp: dict[int, float] = {}
    t_run = now()
    bar = tqdm(total=len(naive_q) + len(lm_q), desc="interleaved (naive + lm-eval slices)", unit="slice", disable=not progress)
    while True:
        ready = []
        if naive_q:
            ready.append("naive")
        if lm_q:
            ready.append("lm_eval")
        baselines_left = bool(naive_q or lm_q)
        if baselines_left or ours.in_pass or len(ours.passes) < args.min_ours_passes:
            ready.append("ours")
        if ready or len(tps_samples) < 3:
            ready.append("tps")
        if not ready:
            break
        m = min(ready, key=lambda x: spent[x] / share[x])
        if m == "naive":
            chunk = naive_q.pop(0)
            nv = run_naive(model, tok, fact0.context, [fact0.options[i] for i in chunk], "naive", False)
            naive_lp.update(zip(chunk, nv["logprobs"]))
            naive_units.append(
                {
                    "options": chunk,
                    "seconds": nv["seconds"],
                    "cpu_seconds": nv["cpu_seconds"],
                    "tokens": sum(naive_tok0[i] for i in chunk),
                    "t": now() - t_run,
                }
            )
            dt = nv["seconds"]
            bar.update(1)
        elif m == "lm_eval":
            chunk = lm_q.pop(0)
            n_calls = len(lm_calls)
            le = run_lm_eval(lm, fact0.context, [fact0.options[i] for i in chunk], False)
            lm_lp.update(zip(chunk, le["logprobs"]))
            lm_units.append(
                {
                    "options": chunk,
                    "seconds": le["seconds"],
                    "cpu_seconds": le["cpu_seconds"],
                    "tokens": sum(b * n for b, n in lm_calls[n_calls:]),
                    "model_calls": len(lm_calls) - n_calls,
                    "t": now() - t_run,
                }
            )
            dt = le["seconds"]
            bar.update(1)
        elif m == "ours":
            dt = ours.step()
        else:
            tps_samples.append(plain_forward_tps(model, tps_ids, reps=1)[0])
            dt = len(tps_ids) / tps_samples[-1]
            tps_times.append(now() - dt / 2)
        spent[m] += dt
        bar.set_postfix_str(
            f"ours passes {len(ours.passes)}, plain {statistics.median(tps_samples) if tps_samples else 0:.0f} tok/s"
        )
    bar.close()
    passes_txt = ", ".join(f"{p['seconds']:.1f}s" for p in ours.passes)
    say(
        f"interleaved run {now() - t_run:.0f}s: ours passes {passes_txt}; "
        f"naive {sum(u['seconds'] for u in naive_units):.0f}s in {len(naive_units)} slices; "
        f"lm-eval {sum(u['seconds'] for u in lm_units):.0f}s in {len(lm_units)} slices; "
        f"plain forward median {statistics.median(tps_samples):.0f} tok/s ({len(tps_samples)} samples); load {loadavg()}"
    )

    # ---- aggregate. Baselines: timed seconds scaled to the whole fact by tokens (exactly 1x when
    # all options were timed; lm-eval tokens as it forwards them). Ours: median pass / facts.
    timed = sorted(naive_lp)
    extrapolated = len(timed) < n_opt
    naive_all_tokens = sum(naive_tok0)
    lm_all_tokens = lm_eval_tokens(groups_all)

    def per_fact(units: list[dict], all_tokens: int, clock: str) -> float | None:
        if not units:
            return None
        return sum(u[clock] for u in units) * all_tokens / sum(u["tokens"] for u in units)

    def ratio(a, b):
        return None if a is None or b is None else a / b

    pass_s = [p["seconds"] for p in ours.passes]
    ours_per_fact = statistics.median(pass_s) / n_facts
    ours_cpu_per_fact = statistics.median(p["cpu_seconds"] for p in ours.passes) / n_facts
    naive_per_fact = per_fact(naive_units, naive_all_tokens, "seconds")
    lm_per_fact = per_fact(lm_units, lm_all_tokens, "seconds")
    naive_cpu_per_fact = per_fact(naive_units, naive_all_tokens, "cpu_seconds")
    lm_cpu_per_fact = per_fact(lm_units, lm_all_tokens, "cpu_seconds")
    tokens_per_second = statistics.median(tps_samples)
    floor_seconds = floor_tokens / tokens_per_second
    # Floor fraction per pass, against the plain forwards run during that pass (the nearest two
    # if none): both sides then saw the same outside load.
    floor_fraction_per_pass = []
    for p in ours.passes:
        inside = [v for t, v in zip(tps_times, tps_samples) if p["t_start"] <= t <= p["t_end"]]
        if not inside:
            near = sorted(zip(tps_times, tps_samples), key=lambda tv: abs(tv[0] - (p["t_start"] + p["t_end"]) / 2))[:2]
            inside = [v for _, v in near]
        p["plain_forward_tokens_per_second"] = statistics.median(inside)
        floor_fraction_per_pass.append(floor_tokens / p["plain_forward_tokens_per_second"] / p["seconds"])
    for p in ours.passes:
        p["t_start"] -= t_run
        p["t_end"] -= t_run
    ours_stats = ours.passes[0]["stats"]
    ours_lp = ours.first_logprobs

    d_naive = max(abs(naive_lp[i] - ours_lp[0][i]) for i in timed)
    d_lm = max(abs(lm_lp[i] - ours_lp[0][i]) for i in timed) if lm is not None else None
    d_lm_naive = max(abs(lm_lp[i] - naive_lp[i]) for i in timed) if lm is not None else None

    def quartiles(xs):
        return [float(x) for x in np.percentile(xs, [0, 25, 50, 75, 100])] if xs else None

    res = {
        "speedup_vs_naive": ratio(naive_per_fact, ours_per_fact),
        "speedup_vs_lm_eval": ratio(lm_per_fact, ours_per_fact),
        "speedup_range_over_ours_passes": {
            "note": "baseline s/fact / (slowest .. fastest ours pass): how much the outside load moves the headline",
            "vs_naive": [ratio(naive_per_fact, max(pass_s) / n_facts), ratio(naive_per_fact, min(pass_s) / n_facts)],
            "vs_lm_eval": [ratio(lm_per_fact, max(pass_s) / n_facts), ratio(lm_per_fact, min(pass_s) / n_facts)],
        },
        "max_abs_logprob_diff_vs_naive": d_naive,
        "max_abs_logprob_diff_vs_lm_eval": d_lm,
        "max_abs_logprob_diff_lm_eval_vs_naive": d_lm_naive,
        "token_floor_fraction": statistics.median(floor_fraction_per_pass),
        "token_floor_fraction_per_pass": floor_fraction_per_pass,
        "token_floor_fraction_unpaired": floor_seconds / statistics.median(pass_s),
        "token_floor_fraction_best": floor_tokens / max(tps_samples) / min(pass_s),
        "token_floor_tokens": floor_tokens,
        "token_floor_seconds_per_fact": floor_seconds / n_facts,
        "ours_seconds_per_fact": ours_per_fact,
        "ours_seconds_total": statistics.median(pass_s),
        "ours_seconds_total_per_pass": pass_s,
        "ours_seconds_prefix_per_pass": [p["seconds_prefix"] for p in ours.passes],
        "ours_seconds_total_memory_pass": mem["seconds_total"],
        "naive_seconds_per_fact": naive_per_fact,
        "lm_eval_seconds_per_fact": lm_per_fact,
        "cpu_time": {
            "note": "process CPU seconds (all threads); less sensitive to other processes than wall time",
            "ours_cpu_seconds_per_fact": ours_cpu_per_fact,
            "naive_cpu_seconds_per_fact": naive_cpu_per_fact,
            "lm_eval_cpu_seconds_per_fact": lm_cpu_per_fact,
            "speedup_vs_naive": ratio(naive_cpu_per_fact, ours_cpu_per_fact),
            "speedup_vs_lm_eval": ratio(lm_cpu_per_fact, ours_cpu_per_fact),
        },
        "tokens_per_fact_ours": ours_stats["total_tokens"] / n_facts,
        "tokens_per_fact_ours_excluding_prefix": (ours_stats["total_tokens"] - ours_stats["prefix_tokens"]) / n_facts,
        "tokens_per_fact_naive": naive_all_tokens,
        "tokens_per_fact_lm_eval": lm_all_tokens,
        "tokens_per_second": tokens_per_second,
        "tokens_per_second_samples": tps_samples,
        "tokens_per_second_sample_times": [t - t_run for t in tps_times],
        "tokens_per_second_how": f"plain forward of {len(tps_ids)} tokens through the model body (no LM head), median of samples spread over the run",
        "peak_rss_mb_5_facts": mem["peak_growth_mb"].get(5),
        "peak_rss_mb_20_facts": mem["peak_growth_mb"].get(n_facts),
        "peak_rss_mb_by_facts": {str(k): v for k, v in mem["peak_growth_mb"].items()},
        "peak_rss_how": (
            "growth of peak RSS (VmHWM, reset via /proc/self/clear_refs)"
            if memory.exact
            else "growth of peak RSS (5 ms psutil sampler)"
        )
        + f" over the RSS just before scoring ({mem['rss_baseline_mb']:.0f} MB, model loaded and warmed up);"
        + f" facts streamed in batches of {mem_batch}; absolute peak {mem['peak_abs_mb']:.0f} MB",
        "scorer_stats": ours_stats,
        "scorer_token_budget": ours.token_budget_used,
        "facts_per_batch": FACTS_PER_BATCH,
        "baseline_fact": {
            "index": 0,
            "subject": wl["items"][0].subject,
            "options": n_opt,
            "options_timed": len(timed),
            "options_timed_indices": timed,
            "extrapolated": extrapolated,
            "subset_limited_by": why,
            "estimated_seconds_per_fact_before_timing": {"naive": naive_full_est, "lm_eval": lm_full_est},
            "extrapolation": "timed seconds x (tokens of the whole fact / tokens forwarded while timing); lm-eval tokens as it "
            "forwards them (one sequence per context+continuation[:-1] group, padded batches)",
            "naive_seconds_timed": sum(u["seconds"] for u in naive_units),
            "lm_eval_seconds_timed": sum(u["seconds"] for u in lm_units) if lm is not None else None,
            "naive_seconds_per_option_quartiles": quartiles([u["seconds"] / len(u["options"]) for u in naive_units]),
            "single_token_options": sum(1 for c in enc0.cont_ids if len(c) == 1),
            "lm_eval_sequences_per_fact": len(groups_all),
        },
        "lm_eval": lm_info,
        "workload": {
            "relation": args.relation,
            "facts": n_facts,
            "choices": n_opt,
            "examples": len(wl["examples"]),
            "model": args.model,
            "model_path": str(loaded.path),
            "dtype": "float32",
            "device": "cpu",
            "prefix_tokens": len(prefix_ids),
            "context_tokens_fact0": len(enc0.ctx_ids),
            "data_root": wl["data_root"],
            "runner_context_check": wl["runner_check"],
            "seed": args.seed,
        },
        "schedule": {
            "how": "time-sliced: next slice goes to the method furthest behind its share of wall time",
            "shares_relative_to_naive": share,
            "wall_seconds_spent": spent,
            "ours_passes": ours.passes,
            "naive_slices": naive_units,
            "lm_eval_slices": lm_units,
        },
        "machine": machine_info(),
        "loadavg_start": load_start,
        "loadavg_end": loadavg(),
    }
    passed = {}
    for key, (op, thr) in TARGETS.items():
        v = res.get(key)
        passed[key] = None if v is None else bool(v >= thr if op == ">=" else v <= thr)
    res["targets"] = {k: f"{op} {thr:g}" for k, (op, thr) in TARGETS.items()}
    res["passed"] = passed
    res["all_passed"] = all(v for v in passed.values() if v is not None)
    res["wall_seconds"] = now() - t_start
    memory.stop()

    from factprobe.io import atomic_write_json

    out = Path(args.out)
    atomic_write_json(out, res)
    print_summary(res, out)
    return 0


def print_summary(r: dict, out: Path) -> None:
    def fmt(v, spec):
        return format("n/a", spec.split(".")[0]) if v is None else format(v, spec)

    def fx(v, spec=".1f"):
        return "n/a" if v is None else f"{v:{spec}}x"

    b = r["baseline_fact"]
    w = r["workload"]
    lines = [
        "",
        f"Scorer benchmark: {w['relation']}, {w['examples']} examples ({w['prefix_tokens']} prefix tokens), {w['facts']} facts x {w['choices']} options, {w['model']} fp32 CPU, {r['machine']['torch_threads']} threads",
        f"  load average start {r['loadavg_start']} end {r['loadavg_end']} (shared machine: methods are time-sliced; compare ratios)",
        f"  {'method':<10}{'s/fact':>10}{'tokens/fact':>13}{'speedup':>10}",
        f"  {'ours':<10}{r['ours_seconds_per_fact']:>10.3f}{r['tokens_per_fact_ours']:>13.0f}{1:>10.1f}",
        f"  {'naive':<10}{r['naive_seconds_per_fact']:>10.2f}{r['tokens_per_fact_naive']:>13.0f}{r['speedup_vs_naive']:>10.1f}",
        f"  {'lm-eval':<10}{fmt(r['lm_eval_seconds_per_fact'], '>10.2f')}{r['tokens_per_fact_lm_eval']:>13.0f}{fmt(r['speedup_vs_lm_eval'], '>10.1f')}",
        f"  CPU-time speedups (less load-sensitive): naive {fx(r['cpu_time']['speedup_vs_naive'])}, lm-eval {fx(r['cpu_time']['speedup_vs_lm_eval'])}",
        f"  baselines timed on fact 1: {b['options_timed']}/{b['options']} options"
        + (" (extrapolated to the fact by tokens)" if b["extrapolated"] else ""),
        "  ours passes (s): "
        + ", ".join(f"{x:.1f}" for x in r["ours_seconds_total_per_pass"])
        + "; speedup range over them: naive "
        + " to ".join(fx(x, ".0f") for x in r["speedup_range_over_ours_passes"]["vs_naive"])
        + ", lm-eval "
        + " to ".join(fx(x, ".0f") for x in r["speedup_range_over_ours_passes"]["vs_lm_eval"]),
        (
            f"  token floor: {r['token_floor_tokens']} tokens at {r['tokens_per_second']:.0f} tok/s = {r['token_floor_seconds_per_fact']:.3f} s/fact; "
            f"floor fraction {r['token_floor_fraction']:.2f} (per pass, against plain forwards run during it: "
            + ", ".join(f"{x:.2f}" for x in r["token_floor_fraction_per_pass"])
            + ")"
        ),
        f"  max |logprob diff|: vs naive {r['max_abs_logprob_diff_vs_naive']:.2e}, vs lm-eval {fmt(r['max_abs_logprob_diff_vs_lm_eval'], '.2e')} (lm-eval vs naive {fmt(r['max_abs_logprob_diff_lm_eval_vs_naive'], '.2e')})",
        f"  peak RSS growth: 5 facts {fmt(r['peak_rss_mb_5_facts'], '.1f')} MB, 20 facts {fmt(r['peak_rss_mb_20_facts'], '.1f')} MB",
        "  targets: "
        + ", ".join(
            f"{k} {r['targets'][k]}: {'PASS' if v else ('n/a' if v is None else 'FAIL')}" for k, v in r["passed"].items()
        ),
        f"  wrote {out} ({r['wall_seconds']:.0f}s)",
    ]
    la = r.get("loadavg_start") or [0]
    if la[0] >= (r["machine"]["cpu_count"] or 1) and r["machine"]["torch_threads"] > 1:
        lines.append(
            f"  note: load average {la[0]} >= {r['machine']['cpu_count']} CPUs; with {r['machine']['torch_threads']} torch threads "
            "every method slows down a lot (OpenMP threads wait for each other); --threads 1 gives steadier numbers"
        )
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
