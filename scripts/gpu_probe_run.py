"""The IC-LKE run a user gets, measured (issue 40 item 6): `scripts/gpu_item6.py`'s speed section times this.

A user's `factprobe probe ic-lke --source triples --data FILE --max-facts-per-relation F --examples E
--choices C` is `factprobe.framework.runner.run_probe` on that configuration: data preparation, the data
contract, the identity, the relation's in-context examples and shared prefix (`ICLKE.open_relation`),
the probe's own batching (the runner's `Probe.batches_for`, which fills the token budget) with one `ICLKE.score_batch` per batch (the scorer's packed
forwards within its token budget: 8,192 tokens on CUDA by default), each batch's rows appended to the
checkpoint, then the metrics (bootstrap intervals) and the result files. `probe_runs` runs exactly that,
with the model already in memory (a `LoadedModel`, as the CLI has once it loaded the weights; loading is
not timed), into a fresh folder per run: one untimed warm-up, then `repeats` timed runs, each measured
with `gpu_measure.region` (wall, process CPU, GPU utilisation, peak memory) and `gpu_measure.ForwardTimer`
(the forwards, their tokens and their time). `ICLKE.score_batch` is wrapped for the duration (an
instance attribute on the registered probe, removed after) to record each batch's facts and forwards.

- `write_user_facts(path, facts, examples, options)`: a triples file of one 1-1 relation (`P36`,
  "<country> has the capital <city>"-like synthetic names) with enough facts that the source's own
  train/test split (half of the subjects for examples) leaves `facts` test facts, `examples` training
  facts and a distractor pool of at least `options` objects.
- `random_loaded(model, tokenizer)`: the `LoadedModel` of a model with RANDOM weights built in memory,
  named `memory:random-<class>` with a `random-weights:<sha256 of its config>` revision (the weights
  are not hashed: 13 GB of a 7B model would cost a minute of the device's time for a name).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import torch
from gpu_measure import ForwardTimer, region

#: the relation of the synthetic facts and the words their names are made of
RELATION = "P36"
COUNTRIES = ["France", "Japan", "Peru", "Kenya", "Italy", "Spain", "Canada", "Chile", "Egypt", "Norway", "India", "Brazil"]
CITIES = ["Paris", "Tokyo", "Lima", "Nairobi", "Rome", "Madrid", "Ottawa", "Santiago", "Cairo", "Oslo", "Delhi", "Recife"]
QUALIFIERS = ["", "North ", "South ", "East ", "West ", "New ", "Old ", "Upper ", "Lower ", "Greater ", "Little ", "Port "]


def _name(words: list[str], i: int) -> str:
    """The i-th distinct name: each word, then each word with a qualifier, then with a number."""
    word, round_ = words[i % len(words)], i // len(words)
    return QUALIFIERS[round_] + word if round_ < len(QUALIFIERS) else f"{word} {round_}"


def write_user_facts(path: Path, facts: int, examples: int, options: int) -> Path:
    """Write the triples file (module docstring) to `path` (jsonl) and return it."""
    n = max(2 * max(facts, examples) + 4, options + 4)
    rows = [{"subject": _name(COUNTRIES, i), "relation": RELATION, "object": _name(CITIES, i)} for i in range(n)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def user_options(model_name: str, data: Path, facts: int, examples: int, options: int) -> dict[str, Any]:
    """The run's options, as `factprobe probe ic-lke` takes them (flag names with `_`)."""
    return {
        "probe": "ic-lke",
        "model": model_name,
        "source": "triples",
        "data": str(data),
        "relations": RELATION,
        "max_facts_per_relation": facts,
        "examples": examples,
        "choices": options,
    }


def random_loaded(model: torch.nn.Module, tokenizer: Any):
    """The `LoadedModel` of an in-memory model with random weights (module docstring)."""
    import copy

    from factprobe.lm.device import input_device
    from factprobe.models.loading import LoadedModel, context_window

    tok = copy.deepcopy(tokenizer)
    if tok.pad_token is None and tok.eos_token is not None:
        tok.pad_token = tok.eos_token
    max_length = context_window(model.config, tok)
    tok.model_max_length = max_length
    digest = hashlib.sha256(model.config.to_json_string(use_diff=False).encode()).hexdigest()
    return LoadedModel(
        model=model,
        tokenizer=tok,
        name=f"memory:random-{type(model).__name__}",
        path=Path("."),
        device=input_device(model, torch.device("cpu")),
        dtype=next(model.parameters()).dtype,
        revision=f"random-weights:{digest}",
        max_length=max_length,
        source="memory",
        is_random=True,
        kind="causal",
    )


def probe_runs(loaded, options: dict[str, Any], work: Path, repeats: int, interval_s: float = 0.05) -> list[dict]:
    """One warm-up and `repeats` timed `run_probe` calls of `options` (module docstring), each into
    `work/run<i>` (emptied first). Returns one record per run (the warm-up first, `"warmup": True`): `folder`, `seconds`,
    `process_cpu_s`, `gpu_utilisation`, `peak_memory`, `forwards`, `head_calls`, `forwarded_tokens`,
    `forward_wall_s`, `forward_cpu_s`, `batches` ([{"facts", "forwards"}] in order), `metrics_forwards`
    and `metrics_tokens_forwarded` (what the run's metrics.json says)."""
    from factprobe.framework.config import RunConfig
    from factprobe.framework.registry import get_probe
    from factprobe.framework.runner import run_probe

    probe = get_probe(options["probe"])
    timer = ForwardTimer(loaded.model, loaded.device)
    batches: list[dict] = []
    score_batch = probe.score_batch

    def counted(session, state, batch):
        before = timer.forwards
        rows = score_batch(session, state, batch)
        batches.append({"facts": len(batch), "forwards": timer.forwards - before})
        return rows

    probe.score_batch = counted  # the registered instance's: the runner calls probe.score_batch
    runs = []
    try:
        with timer:
            for i in range(repeats + 1):
                timer.reset()
                batches.clear()
                cfg = RunConfig.from_dict(dict(options))
                folder = work / f"run{i}"
                shutil.rmtree(folder, ignore_errors=True)  # a fresh folder: a finished one would be resumed, not run
                with region(loaded.device, interval_s) as m:
                    outcome = run_probe(cfg, folder, loaded=loaded, progress=False, log=lambda _msg: None)
                if outcome.n_resumed or not outcome.n_scored_now:
                    raise RuntimeError(f"{folder}: the run scored {outcome.n_scored_now} rows and resumed {outcome.n_resumed}")
                runs.append(
                    {
                        "warmup": i == 0,
                        "folder": str(folder),
                        **m,
                        "forwards": timer.forwards,
                        "head_calls": timer.head_calls,
                        "forwarded_tokens": timer.tokens,
                        "forward_wall_s": timer.wall_s,
                        "forward_cpu_s": timer.cpu_s,
                        "batches": list(batches),
                        "metrics_forwards": outcome.metrics.get("forwards"),
                        "metrics_tokens_forwarded": outcome.metrics.get("tokens_forwarded"),
                        "facts": outcome.metrics.get("n"),
                    }
                )
    finally:
        del probe.score_batch
    return runs
