"""factprobe's scorer and generator as an lm-evaluation-harness model: `--model factprobe`.

lm-evaluation-harness (0.4.13) runs a multiple-choice question as one `loglikelihood` request per
choice, and its `hf` model forwards the whole context again for every one of them (25 in-context
examples x 4 choices = the examples forwarded 4 times per question; EleutherAI/lm-evaluation-harness#1351).
`FactprobeLM` answers the same requests with `factprobe.lm.scorer.Scorer`'s shared-prefix machinery:

- *Tokens exactly as `--model hf`.* The class is lm-eval's own `HFLM` (the `hf` model) with the
  model loaded by `factprobe.models.load_model` (aliases, local folders, hub ids, adapters), so
  the request's context and continuation tokens come from HFLM's own `loglikelihood` (trailing
  whitespace moved into the continuation, `add_bos_token`, the empty-context `prefix_token_id`),
  and only the scoring of those tokens (`_loglikelihood_tokens`) is replaced: the numbers equal
  `--model hf`'s within float rounding (1e-4 tested), `is_greedy` included. A request longer than
  the context window is cut from the left as HFLM cuts it.
- *One context, all its continuations.* Requests are grouped by their context tokens; contexts
  that start with the same run of tokens (the same k-shot block) form a run whose common prefix is
  forwarded ONCE (`Scorer.prefix`, its keys/values kept); each context's own tokens and the token
  trie of its continuations are then packed, many contexts per forward, after that prefix.
- `loglikelihood_rolling` is HFLM's (its windows go through the same `_loglikelihood_tokens`).
- `generate_until` runs through `factprobe.lm.generate.Generator`: greedy (token-identical to
  `model.generate`) with the prompts' common text prefix forwarded once, or shared-KV sampling for
  `do_sample=True`; requests HFLM would left-truncate (prompt + `max_gen_toks` over the window) or
  that cut at an integer `think_end_token` go to HFLM's own `generate_until`.

The model must be what every probe accepts: a causal LM that behaves causally. A masked LM, or a
bidirectional model saved under a causal-LM class (a RoBERTa as `RobertaForCausalLM` without
`is_decoder`), is refused in one line (`factprobe.lm.causality.check_causal`, as `factprobe.models.require_kind`).

lm-eval 0.4.13 finds models only in its own registry (no entry-point group), and its CLI imports
nothing else, so the console script `factprobe-lm-eval` (`factprobe.lm_eval_cli`: the thread policy
before torch loads, one line without the `lm-eval` extra) imports this module, which registers the
model, and then runs lm-eval's CLI with the same arguments (`main`; also `python -m factprobe.lm_eval_model`).
From Python: `import factprobe.lm_eval_model` before `lm_eval.simple_evaluate(model="factprobe", ...)`.
lm_eval is imported by this module only (an optional dependency of factprobe).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from contextlib import contextmanager
from typing import Any

import torch

from factprobe.errors import ConfigError
from factprobe.lm.generate import common_prefix_len
from factprobe.lm.scorer import PrefixCache, Scorer, Segment, _OptionTree, apply_lm_head, pack_within_budget

try:
    import lm_eval.models  # noqa: F401  (fills the registry with lm-eval's own models before ours joins it)
    from lm_eval.api.registry import register_model
    from lm_eval.models.huggingface import HFLM
    from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs, postprocess_generated_text
except ModuleNotFoundError as err:  # pragma: no cover - depends on the environment
    raise ModuleNotFoundError(
        f"factprobe.lm_eval_model needs lm-evaluation-harness: pip install 'factprobe[lm-eval]' ({err})", name=err.name
    ) from err

#: the name lm-eval's `--model` takes
MODEL_NAME = "factprobe"
#: contexts form a run (their common tokens forwarded once, kept as a prefix cache) when they share
#: at least this many more leading tokens than the prefix they already share
MIN_SHARED_TOKENS = 16

#: one answer of lm-eval's `loglikelihood`: (summed log-prob of the continuation, every token greedy)
Answer = tuple[float, bool]


def fit_window(ctx: Sequence[int], cont: Sequence[int], max_length: int) -> tuple[list[int], list[int]]:
    """The (context, continuation) tokens HFLM scores: when they exceed `max_length + 1` tokens the
    context is cut from the left (`(ctx + cont)[-(max_length + 1):]`, the continuation kept whole).
    ConfigError if the continuation alone does not fit (HFLM asserts the same)."""
    if len(cont) > max_length:
        raise ConfigError(
            f"a continuation of {len(cont)} tokens exceeds the model's context window of "
            f"{max_length} tokens; pass a larger max_length= in --model_args or shorten the choices"
        )
    if len(ctx) + len(cont) <= max_length + 1:
        return list(ctx), list(cont)
    whole = (list(ctx) + list(cont))[-(max_length + 1) :]
    return whole[: len(whole) - len(cont)], list(cont)


def shared_runs(contexts: Sequence[tuple[int, ...]], members: Sequence[int], depth: int) -> list[tuple[int, list[int]]]:
    """`members` (indices into `contexts`, all sharing their first `depth` tokens) cut into runs that
    share more: `(shared length, indices)` each, in token order.

    Sorted by their tokens, neighbours whose common prefix reaches `depth + MIN_SHARED_TOKENS` join
    one run, whose shared length is the shortest such common prefix inside it; a context with no
    such neighbour is a run of its own, of shared length `depth` (nothing more to share)."""
    order = sorted(members, key=lambda i: contexts[i])
    runs: list[tuple[int, list[int]]] = []
    for prev, i in zip([None, *order], order):
        k = common_prefix_len(contexts[prev], contexts[i]) if prev is not None else 0
        if prev is not None and k >= depth + MIN_SHARED_TOKENS:
            shared, run = runs[-1]
            runs[-1] = (min(k, shared) if len(run) > 1 else k, run + [i])
        else:
            runs.append((depth, [i]))
    return runs


@torch.inference_mode()
def _tree_answers(scorer: Scorer, prefix: PrefixCache, trees: Sequence[_OptionTree]) -> list[list[tuple[float, bool]]]:
    """Per tree, per query: (log P(target), target is the argmax) given `prefix`.

    Trees are packed into forwards of at most `scorer.token_budget` tokens (a larger tree goes
    alone); a query on segment -1 reads the prefix's next-token distribution."""
    out: list[list[tuple[float, bool]]] = [[] for _ in trees]
    for chunk in pack_within_budget([t.n_tokens for t in trees], scorer.token_budget):
        segs: list[Segment] = []
        bases = []
        for t in chunk:
            bases.append(len(segs))
            segs.extend(
                Segment(sg.token_ids, sg.parent + bases[-1] if sg.parent >= 0 else -1, spans=[]) for sg in trees[t].segments
            )
        hidden, seg_start = None, []
        if segs:
            _, hidden, seg_start = scorer._forward_hidden(prefix, segs)
        rows = [seg_start[s + base] + pos if s >= 0 else -1 for t, base in zip(chunk, bases) for s, pos, _ in trees[t].queries]
        targets = [tok for t in chunk for _, _, tok in trees[t].queries]
        answers = _row_answers(scorer, prefix, hidden, rows, targets)
        at = 0
        for t in chunk:
            n = len(trees[t].queries)
            out[t] = answers[at : at + n]
            at += n
    return out


def _row_answers(
    scorer: Scorer, prefix: PrefixCache, hidden: torch.Tensor | None, rows: list[int], targets: list[int]
) -> list[tuple[float, bool]]:
    """(log P(target), target is the argmax) at each packed hidden row (-1: the prefix's next token).
    The LM head runs once per distinct row, `scorer.head_chunk` rows at a time."""
    distinct = sorted({r for r in rows if r >= 0})
    dists: dict[int, torch.Tensor] = {}
    if -1 in rows:
        dists[-1] = prefix.next_logprobs
    for c0 in range(0, len(distinct), scorer.head_chunk):
        sel = distinct[c0 : c0 + scorer.head_chunk]
        lp = torch.log_softmax(apply_lm_head(scorer.model, hidden[torch.tensor(sel, device=hidden.device)]), dim=-1)
        dists.update(zip(sel, lp))
    answers = []
    for r, tok in zip(rows, targets):
        dist = dists[r]
        answers.append((float(dist[tok]), bool(int(dist.argmax()) == tok)))
    return answers


def _sum_answers(tree: _OptionTree, answers: Sequence[tuple[float, bool]], out: list[list[tuple[float, bool]]]) -> None:
    """Add each query's answer to its option's list in `out` (one list per option)."""
    for oi, ans in zip(tree.option_of, answers):
        out[oi].append(ans)


def score_token_requests(scorer: Scorer, requests: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[Answer]:
    """lm-eval answers `(sum log P(cont | ctx), every cont token is the argmax)` for token pairs.

    Every context's tokens are forwarded at most once: requests are grouped by context; contexts
    that share a run of leading tokens (`shared_runs`, a k-shot block; recursively, so a block and a
    longer shared instruction after it are each forwarded once) have it forwarded once and kept as
    a prefix cache; each context's remaining tokens plus the token trie of its continuations
    (`_OptionTree`: shared leading tokens once, no last token) are packed, many per forward, after
    it. Contexts must be non-empty; an empty continuation scores (0.0, True). Equal to one full
    forward of `ctx + cont` per request up to float rounding."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, (ctx, _) in enumerate(requests):
        if not ctx:
            raise ValueError(f"request {i}: an empty context cannot predict a continuation's first token")
        groups.setdefault(tuple(ctx), []).append(i)
    contexts = list(groups)
    per_token: list[list[tuple[float, bool]]] = [[] for _ in requests]
    conts = [[i for i in groups[c] if requests[i][1]] for c in contexts]  # requests with tokens to score

    def options(c: int) -> list[list[int]]:
        return [list(requests[i][1]) for i in conts[c]]

    def score_after(prefix: PrefixCache, depth: int, members: Sequence[int]) -> None:
        trees, owners = [], []
        for shared, run in shared_runs(contexts, members, depth):
            if len(run) > 1:  # forward the shared part once, then go on inside the run
                score_after(scorer.extend(prefix, list(contexts[run[0]][depth:shared])), shared, run)
                continue
            (c,) = run
            tree = _OptionTree.build(contexts[c][depth:], options(c), [False] * len(conts[c]))
            if tree.n_tokens <= scorer.token_budget:
                trees.append(tree)
                owners.append(c)
                continue
            # its continuations' trie exceeds the budget: its own tokens run once as a longer prefix,
            # then the trie is cut into parts within the budget
            own = scorer.extend(prefix, list(contexts[c][depth:]))
            parts = _OptionTree.build([], options(c), [False] * len(conts[c])).split(scorer.token_budget)
            for part, answers in zip(parts, _tree_answers(scorer, own, parts)):
                _sum_answers(part, answers, [per_token[i] for i in conts[c]])
        for tree, c, answers in zip(trees, owners, _tree_answers(scorer, prefix, trees)):
            _sum_answers(tree, answers, [per_token[i] for i in conts[c]])

    score_after(PrefixCache(token_ids=(), kv=None, next_logprobs=None), 0, range(len(contexts)))
    return [(float(sum(lp for lp, _ in toks)), all(g for _, g in toks)) for toks in per_token]


@contextmanager
def _quiet_logger(name: str):
    """Within the block, logger `name` shows ERROR and above only."""
    logger = logging.getLogger(name)
    old = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(old)


class FactprobeLM(HFLM):
    """lm-eval's `hf` model with factprobe's scoring and generation (see the module docstring).

    Model args (`--model_args k=v,...`): `pretrained` (required: an alias such as
    `smollm2-135m-instruct`, a local folder, a hub id or a PEFT adapter folder, loaded by
    `factprobe.models.load_model`), `device` (default "auto": CUDA when available, else CPU),
    `dtype` ("auto": float32 on CPU, bfloat16 on CUDA; float32/bfloat16/float16), `token_budget`
    (query tokens per packed forward; default 1024 on CPU, 8192 on CUDA), `trust_remote_code`;
    every other argument (`max_length`, `add_bos_token`, `prefix_token_id`, `max_gen_toks`,
    `batch_size`, ...) means what it means for `--model hf`.
    """

    def __init__(
        self,
        pretrained: str | None = None,
        device: str | None = None,
        dtype: str | None = None,
        token_budget: int | str | None = None,
        trust_remote_code: bool = False,
        **kwargs: Any,
    ) -> None:
        from factprobe.lm.generate import Generator
        from factprobe.models import load_model

        if not pretrained or not isinstance(pretrained, str):
            raise ConfigError(
                "--model factprobe needs pretrained=<alias, folder or hub id> in --model_args, "
                "e.g. --model_args pretrained=smollm2-135m-instruct"
            )
        for name in ("tokenizer", "parallelize", "peft", "delta", "autogptq", "gptqmodel", "gguf_file", "tp_plan"):
            if kwargs.get(name):
                raise ConfigError(
                    f"--model factprobe does not take {name}= in --model_args; factprobe loads the "
                    f"model itself (pretrained= takes an alias, folder, hub id or adapter folder)"
                )
        kwargs.pop("backend", None)
        from factprobe.lm.served import is_served

        if is_served(pretrained):
            raise ConfigError(
                f"--model factprobe scores local weights, not the served model {pretrained}; "
                "use lm-eval's own local-completions model for a server"
            )
        loaded = load_model(
            pretrained, device=device or "auto", dtype=dtype or "auto", trust_remote_code=_flag(trust_remote_code)
        )
        require_causal(loaded, pretrained)
        with _quiet_logger("lm_eval.models.huggingface"):  # "pretrained is not of type str": known, not news
            super().__init__(pretrained=loaded.model, tokenizer=loaded.tokenizer, backend="causal", **kwargs)
        self.loaded = loaded
        self.pretrained = pretrained
        budget = int(token_budget) if token_budget not in (None, "") else None
        self.scorer = Scorer(loaded.model, self.tokenizer, device=loaded.device, token_budget=budget, max_length=self.max_length)
        self.generator = Generator(
            loaded.model, self.tokenizer, device=loaded.device, token_budget=budget, max_length=self.max_length
        )

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None) -> FactprobeLM:
        """lm-eval's constructor from `--model_args`; a `device=` there wins over `--device` (lm-eval
        would pass both and fail with "multiple values for keyword argument")."""
        from lm_eval.utils import simple_parse_args_string

        return cls.create_from_arg_obj(simple_parse_args_string(arg_string), additional_config)

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None) -> FactprobeLM:
        """As `create_from_arg_string`, from a dict of model args."""
        extra = {k: v for k, v in (additional_config or {}).items() if v is not None}
        return cls(**{**extra, **arg_dict})

    # ------------------------------------------------------------------ log-likelihoods
    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, override_bs: int | None = None) -> list[Answer]:
        """(log-prob, is_greedy) per `(request strings, context ids, continuation ids)`, as HFLM's,
        with every context forwarded once (`score_token_requests`)."""
        pairs = [fit_window(ctx, cont, self.max_length) for _, ctx, cont in requests]
        answers = score_token_requests(self.scorer, pairs)
        for (request_str, _, _), answer in zip(requests, answers):
            if request_str is not None:
                self.cache_hook.add_partial("loglikelihood", request_str, answer)
        return answers

    # ------------------------------------------------------------------ generation
    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Text continuing each request's context until a stop string, as HFLM's `generate_until`,
        through factprobe's Generator (module docstring); requests grouped by their generation args."""
        results: list[str | None] = [None] * len(requests)
        groups: dict[str, list[int]] = {}
        for i, req in enumerate(requests):
            groups.setdefault(repr(sorted(req.args[1].items())), []).append(i)
        eos = self.tok_decode(self.eot_token_id, skip_special_tokens=False)
        for idx in groups.values():
            gen_kwargs = requests[idx[0]].args[1]
            kwargs = normalize_gen_kwargs(dict(gen_kwargs), self.max_gen_toks)
            until = handle_stop_sequences(kwargs.pop("until", None), eos=eos)
            max_new = kwargs.pop("max_gen_toks")
            ours = [i for i in idx if self._generates(requests[i].args[0], max_new)]
            theirs = sorted(set(idx) - set(ours))
            for i, text in zip(ours, self._generate([requests[i].args[0] for i in ours], kwargs, until, max_new)):
                results[i] = text
                self.cache_hook.add_partial("generate_until", (requests[i].args[0], gen_kwargs), text)
            if theirs:
                for i, text in zip(theirs, super().generate_until([requests[i] for i in theirs], disable_tqdm=True)):
                    results[i] = text
        return results  # type: ignore[return-value]

    def _generates(self, context: str, max_new: int) -> bool:
        """Whether factprobe's Generator runs this prompt: its tokens are HFLM's (no `add_bos_token`
        override, and the Generator's encoding equals `tok_encode`'s), they fit the window with
        `max_new` tokens, and no integer `think_end_token` cuts the output. Else HFLM generates it."""
        if isinstance(self.think_end_token, int) or self.add_bos_token is not None:
            return False
        ids = self.generator.encode(context)
        same = ids == self.tok_encode(context)  # not so for a prompt that starts with the BOS text (a chat template's)
        return same and 0 < len(ids) and len(ids) + max_new <= self.max_length

    def _generate(self, prompts: list[str], kwargs: dict, until: list[str], max_new: int) -> list[str]:
        """Greedy (do_sample False or temperature 0) with the prompts' common text prefix shared,
        else one shared-KV sample per prompt; each text cut at the stop strings as HFLM cuts it."""
        if not prompts:
            return []
        temperature = float(kwargs.get("temperature", 0.0) or 0.0)
        do_sample = kwargs.get("do_sample")
        if not do_sample or temperature == 0.0:
            shared = os.path.commonprefix(prompts) if len(prompts) > 1 else ""
            gens = self.generator.greedy(prompts, max_new_tokens=max_new, stop=until, shared_prefix=shared or None)
        else:
            seed = int(kwargs.get("seed", 0) or 0)
            gens = [
                self.generator.sample(
                    p,
                    1,
                    max_new,
                    temperature=temperature,
                    top_p=float(kwargs.get("top_p", 1.0) or 1.0),
                    top_k=int(kwargs.get("top_k", 0) or 0),
                    seed=seed,
                    stop=until,
                )[0]
                for p in prompts
            ]
        think = self.think_end_token if isinstance(self.think_end_token, str) else None
        return [postprocess_generated_text(generation=g.text, stop=until, think_end_token=think) for g in gens]

    # ------------------------------------------------------------------ reporting
    def get_model_info(self) -> dict:
        """What lm-eval records about the model: factprobe's name, revision and dtype (no hub calls)."""
        return {
            "model_num_parameters": sum(p.numel() for p in self.loaded.model.parameters()),
            "model_dtype": str(self.loaded.dtype),
            "model_revision": self.loaded.revision,
            "model_sha": "",
        }


def require_causal(loaded: Any, name: str) -> None:
    """ConfigError (one line) unless the `LoadedModel` is a causal LM that behaves causally: a masked LM is
    named as one; a model whose logits at a position change with a later token (two-way attention under a
    causal-LM class) is refused by `factprobe.lm.causality.check_causal`, as every probe refuses it."""
    from factprobe.lm.causality import check_causal

    if loaded.kind != "causal":
        raise ConfigError(
            f"model {name} is a {loaded.kind} LM; --model factprobe scores causal LMs only "
            "(lm-eval's --model hf runs other model kinds)"
        )
    check_causal(loaded.model, name, loaded.tokenizer)


def _flag(value: Any) -> bool:
    """A boolean model arg: lm-eval passes strings ("True"/"false") from the command line."""
    if isinstance(value, str):
        if value.lower() in ("true", "1", "yes"):
            return True
        if value.lower() in ("false", "0", "no", ""):
            return False
        raise ConfigError(f"expected true or false in --model_args, got {value!r}")
    return bool(value)


def main(argv: Sequence[str] | None = None) -> int:
    """lm-eval's command line with `--model factprobe` registered: `python -m factprobe.lm_eval_model
    --model factprobe --model_args pretrained=... --tasks ...` (any lm-eval arguments).

    Differences from `lm_eval`: a run without `--device` gets `--device auto` (CUDA when available,
    else the CPU; lm-eval's own default is cuda:0), the thread policy is applied (`factprobe.threads.apply`;
    `--threads N` sets the count and is taken out of lm-eval's arguments), and an error a user can cause
    in factprobe's part (a model name, a device, a model arg) is one `error: ...` line and exit status 2.
    The console script (`factprobe.lm_eval_cli.main`) sets OpenMP's wait policy before torch loads and calls this."""
    from lm_eval.__main__ import cli_evaluate

    from factprobe.errors import FactprobeError
    from factprobe.threads import apply as apply_threads
    from factprobe.threads import take_option

    args = list(sys.argv[1:] if argv is None else argv)
    try:
        threads, args = take_option(args)
        apply_threads(threads)
    except FactprobeError as e:
        print(f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2
    if "--model" in args and not any(a == "--device" or a.startswith("--device=") for a in args):
        args += ["--device", "auto"]
    sys.argv = [sys.argv[0], *args]
    try:
        cli_evaluate()
    except FactprobeError as e:
        print(f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # `python -m`: register the class under its importable name, once
    from factprobe.lm_eval_model import main as _main

    sys.exit(_main())
else:
    register_model(MODEL_NAME)(FactprobeLM)
