"""Prototype (not used by factprobe): per-tree attention for the scorer's packed forward.

Why: a packed chunk holds several facts' segment trees in one sequence of batch 1. Every query
then attends over `prefix + all packed tokens` with an additive mask, and torch's CPU SDPA
kernel cannot skip masked blocks of an arbitrary float mask. With 8 facts (~1,300 packed tokens)
behind a 363-token prefix a query pays for ~1,660 keys while it may see only ~370.

What: run the linear layers over the whole packed chunk as today, but compute attention tree by
tree: queries of tree t attend over `prefix keys + keys of tree t` (the mask sliced to those
columns). Keys of other trees are masked out anyway, so the result is the same up to float
summation order. Implemented as a transformers attention function registered under
`factprobe_tree`; it reads the tree boundaries from a kwarg `tree_bounds` passed through the model
call and falls back to plain SDPA when that kwarg is absent.

`TreeScorer` subclasses `factprobe.lm.scorer.Scorer` and changes only the model call in
`_forward_packed`. Run `python benchmarks/proto_tree_attention.py` to compare it with the
shipped scorer (interleaved, same process) and check exactness.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

import numpy as np
import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

from factprobe.lm.scorer import PrefixCache, Scorer

NAME = "factprobe_tree"


def tree_attention_forward(
    module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, tree_bounds=None, **kwargs
):
    """SDPA, but each tree's queries only attend over the prefix and that tree's own keys.

    query [1, H, q, d]; key/value [1, Hkv, P + q, d] (prefix cache + packed chunk); mask
    [1, 1, q, P + q]. `tree_bounds` are [start, end) query ranges of the trees in the chunk.
    """
    if tree_bounds is None or attention_mask is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    q_len = query.shape[2]
    plen = key.shape[2] - q_len
    n_rep = getattr(module, "num_key_value_groups", 1)
    outs = []
    for a, b in tree_bounds:
        k = torch.cat([key[:, :, :plen], key[:, :, plen + a : plen + b]], dim=2)
        v = torch.cat([value[:, :, :plen], value[:, :, plen + a : plen + b]], dim=2)
        m = torch.cat([attention_mask[..., a:b, :plen], attention_mask[..., a:b, plen + a : plen + b]], dim=-1)
        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)
        outs.append(
            torch.nn.functional.scaled_dot_product_attention(
                query[:, :, a:b], k, v, attn_mask=m, dropout_p=0.0, scale=scaling, is_causal=False
            )
        )
    out = torch.cat(outs, dim=2)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, tree_attention_forward)
ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)


class TreeScorer(Scorer):
    """The shipped Scorer with per-tree attention in packed forwards."""

    def __init__(self, model, *a, **kw) -> None:
        super().__init__(model, *a, **kw)
        self._impl = model.config._attn_implementation

    @torch.inference_mode()
    def _forward_packed(self, prefix: PrefixCache, segments, keep_kv: bool = False):
        # Tree boundaries (root segments start a tree; trees are contiguous in a chunk).
        bounds, start, cur = [], 0, None
        for s in segments:
            if s.parent < 0:
                if cur is not None:
                    bounds.append((cur, start))
                cur = start
            start += len(s.token_ids)
        bounds.append((cur, start))
        base = self.model.base_model
        orig_forward = base.forward

        def forward(*a, **kw):
            return orig_forward(*a, tree_bounds=bounds, **kw)

        self.model.config._attn_implementation = NAME
        base.forward = forward
        try:
            return super()._forward_packed(prefix, segments, keep_kv=keep_kv)
        finally:
            base.forward = orig_forward
            self.model.config._attn_implementation = self._impl


def main(argv=None) -> int:
    import bench_scorer as B  # same folder (on sys.path when run as a script)

    p = argparse.ArgumentParser()
    p.add_argument("--facts", type=int, default=20)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--budgets", default="1024,4096")
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from factprobe.framework.runner import FACTS_PER_BATCH
    from factprobe.models import load_model

    loaded = load_model("smollm2-135m-instruct", device="cpu", dtype="float32")
    wl = B.build_workload(B.parse_args(["--facts", str(args.facts)]), loaded.tokenizer, loaded.max_length)
    reqs, ptext = wl["requests"], wl["prefix_text"]
    budgets = [int(x) for x in args.budgets.split(",")]

    def run(cls, budget):
        sc = cls(loaded.model, loaded.tokenizer, device="cpu", token_budget=budget, max_length=loaded.max_length)
        t0, c0 = time.perf_counter(), time.process_time()
        pre = sc.prefix(ptext)
        out = []
        for b in range(0, len(reqs), FACTS_PER_BATCH):
            out += sc.score_choices(reqs[b : b + FACTS_PER_BATCH], shared_prefix=pre)
        return time.perf_counter() - t0, time.process_time() - c0, out, sc.stats

    run(Scorer, 1024)  # warm-up
    ref = None
    times: dict[str, list] = {}
    for rep in range(args.reps):
        for budget in budgets:
            for name, cls in (("shipped", Scorer), ("tree", TreeScorer)):
                wall, cpu_s, out, stats = run(cls, budget)
                if ref is None:
                    ref = out
                diff = max(float(np.abs(a - b).max()) for a, b in zip(out, ref))
                times.setdefault(f"{name}@{budget}", []).append((wall, cpu_s))
                print(
                    f"rep {rep + 1} {name:>7} budget {budget:>5}: {wall:6.1f}s wall {cpu_s:6.1f}s cpu "
                    f"forwards {stats.forwards:>3} max|diff| vs first {diff:.1e}",
                    flush=True,
                )
    print("\nmedian wall / cpu seconds for", args.facts, "facts:")
    for k, v in times.items():
        print(f"  {k:>16}: {statistics.median(w for w, _ in v):6.1f}s wall  {statistics.median(c for _, c in v):6.1f}s cpu")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main())
