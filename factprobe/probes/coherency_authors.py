"""The `--candidate-score authors` mode of the coherency probe (`factprobe.probes.coherency`).

`authors` reproduces what `paulyoussef/coherency` (commit d0acafe) actually computes
(`authors_candidate_scores`); it is not the default because it is not the paper's "most probable
entity": a candidate's later tokens are scored after the model's own greedy tokens, not after
the candidate's earlier tokens. From `main_autoregressive.py` and `utils/newutils.py`:
- the query is the template with the given slot filled and the predicted slot replaced by ""
  (`prepare_inputs_obj`/`prepare_inputs_sub`, main_autoregressive.py lines 17-31), so it keeps
  the space before the slot ("The capital of France is "), and is encoded with the tokenizer's
  default special tokens (newutils.py line 538); the templates must end with the predicted slot
  (their `assert`, lines 18 and 26; here a ConfigError naming the relation);
- each candidate is tokenized alone, WITHOUT a leading space and without special tokens
  (`model_temp.format(o)`, line 22; newutils.py line 533);
- `model.generate(query, min_new_tokens=L, max_new_tokens=L, output_scores=True)` with L the
  longest candidate's token count (newutils.py line 541): greedy decoding with the EOS ids banned
  (`min_new_tokens` sets their logits to -inf at every step), and `log_softmax` of those step
  scores (line 544): step t's distribution is conditioned on the query plus the model's first t
  greedy tokens, the same for every candidate of the query;
- candidate token t is looked up in step t's distribution (line 546); -inf values (a banned EOS
  id) become 0, padding is masked, and the sum is divided by `count_nonzero` (lines 547-551): the
  mean over the candidate's tokens whose log-prob is finite and non-zero (a candidate with none
  scores -inf here, where their code divides 0 by 0);
- the top of a descending sort is the prediction (lines 558-559).
Their shape-keyed reuse of one batch's scores for the next (line 537) changes nothing: the
greedy continuation does not depend on the candidates. Here the greedy steps run on the
shared-prefix scorer (`Scorer.prefix` then `Scorer.extend` by one token per step). An evidence
paragraph is prepended as in the other modes (their autoregressive script has none).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ..errors import ConfigError


def greedy_step_logprobs(scorer, context: str, steps: int, banned: Collection[int] = ()):
    """`[steps, vocab]` float32 log-distributions of the tokens after `context` along the model's
    greedy continuation with the `banned` ids at -inf (renormalised over the rest): row t is
    conditioned on `context` (encoded with default special tokens, trailing whitespace kept) plus
    the first t greedy tokens. This is `log_softmax(model.generate(..., min_new_tokens=steps,
    max_new_tokens=steps, output_scores=True).scores)` of greedy decoding with `banned` the EOS ids."""
    import torch

    with torch.inference_mode():
        prefix = scorer.prefix(context)
        if prefix.next_logprobs is None:
            raise ConfigError(f"coherency: the query {context!r} encodes to no tokens; nothing to condition on")
        ban = torch.tensor(sorted(banned), dtype=torch.long, device=prefix.next_logprobs.device) if banned else None
        rows = []
        for t in range(steps):
            lp = prefix.next_logprobs.float()
            if ban is not None:
                lp = lp.index_fill(0, ban, float("-inf"))
                lp = lp - torch.logsumexp(lp, dim=0)
            rows.append(lp)
            if t + 1 < steps:
                prefix = scorer.extend(prefix, [int(torch.argmax(lp))])
        return torch.stack(rows)


def authors_candidate_scores(scorer, context: str, candidates: Sequence[str], banned: Collection[int] = ()) -> list[float]:
    """The authors' score of each candidate (module docstring, `--candidate-score authors`): its
    tokens (tokenized alone, no leading space, no special tokens) looked up in the greedy step
    distributions of `context` (`greedy_step_logprobs`), averaged over the tokens whose log-prob
    is finite and non-zero; -inf for a candidate without such a token."""
    import torch

    tok = scorer.tokenizer
    ids = [list(tok(c, add_special_tokens=False)["input_ids"]) for c in candidates]
    longest = max((len(x) for x in ids), default=0)
    if longest == 0:
        return [float("-inf")] * len(ids)
    lps = greedy_step_logprobs(scorer, context, longest, banned)
    out = []
    for x in ids:
        if not x:
            out.append(float("-inf"))
            continue
        vals = lps[torch.arange(len(x), device=lps.device), torch.tensor(x, device=lps.device)]
        keep = torch.isfinite(vals) & (vals != 0)
        out.append(float(vals[keep].sum() / keep.sum()) if bool(keep.any()) else float("-inf"))
    return out
