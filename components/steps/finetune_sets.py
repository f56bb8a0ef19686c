"""Step 2 of the `finetune_known_unknown` pipeline: every setting's training set (CPU step).

Built once here with the trainer's own builder and seed (so its digest is the trainer's), saved for the
training step, logged to MLflow as datasets with their digests; overlap with the evaluation facts is
refused. Returns the loop cells.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .finetune import DIGEST_CHARS, finetune_config, safe_name, smoke_banner, smoke_tags, table_or_none

if TYPE_CHECKING:
    from factprobe_ops.tracking.context import RunContext


def run_sets_step(out_dir: str, table_path: str, model: str, settings: list, ft: dict, context: RunContext | str) -> list[dict]:
    """Build every setting's training set (`factprobe.datasets.finetune_sets.build_train_set`, the trainer's
    own builder: same data options and seed, so the same digest), save it to `out_dir/<setting>/`
    (`TrainSet.save`: the training step trains on exactly that set), log it as an MLflow dataset (context
    `training`, with its digest) in one `training-sets` child run, and tag the parent run with the smoke-test verdict.
    Refuses unknown settings and sets that overlap the evaluation facts (the builder names them).
    `context` is the pipeline run's `RunContext` (or its JSON); it rides in each loop cell.
    Returns the loop cells `[{"setting", "context"}]`."""
    import json

    import pandas as pd

    from factprobe.errors import ConfigError
    from factprobe.finetune import TRAIN_SETS, FinetuneConfig
    from factprobe.finetune.sets import build_train_set
    from factprobe_ops.tracking.context import RunContext
    from factprobe_ops.tracking.conventions import tag
    from factprobe_ops.tracking.run import TrackedRun

    from ._common import check_options

    check_options(ft, ["qa", "ic-lke"], extra=(FinetuneConfig,))  # the pipeline's evaluation probes and the trainer
    names = [str(s) for s in settings]
    bad = [s for s in names if s not in TRAIN_SETS]
    if bad or not names:
        raise ConfigError(f"settings={names!r}: choose from {', '.join(TRAIN_SETS)}")
    if len(set(names)) != len(names):
        raise ConfigError(f"settings={names!r}: a setting is listed twice")
    table = table_or_none(table_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ctx = RunContext.from_json(context)
    tags = {tag("step"): "training-sets", tag("model"): model, tag("kfp_run_id"): ctx.kfp_run_id, **smoke_tags(ft, ctx.trigger)}
    print(smoke_banner(ft, ctx.trigger), flush=True)
    summary = {}
    with TrackedRun.from_context(ctx, run_name="training-sets", required=True, tags=tags) as run:
        for s in names:
            cfg = finetune_config(ft, model, s, table, str(out / s))
            built = build_train_set(
                cfg.train_set,
                model=cfg.model,
                source=cfg.source,
                data=cfg.data,
                train_data=cfg.train_data,
                relations=cfg.relations,
                seed=cfg.seed,
                qa_train_per_relation=cfg.qa_train_per_relation,
                qa_templates=cfg.qa_templates,
                size=cfg.train_size,
                known_unknown=cfg.known_unknown,
            )
            rows = [e.to_dict() for e in built.examples]
            built.save(out / s)  # the training step trains on exactly this set (FinetuneConfig.train_set_dir)
            summary[s] = {"digest": built.digest, "n": len(rows)}
            run.log_input(
                pd.DataFrame(rows),
                name=f"train-{s}-{safe_name(model)}",
                source=str(out / s / "train_set.jsonl"),
                digest=built.digest[:DIGEST_CHARS],
                context="training",
            )
            run.log_metrics({f"n_examples/{s}": len(rows)})
            run.set_tags({tag(f"train_set_digest/{s}"): built.digest})
        run.log_text(json.dumps(summary, indent=1), "training_sets.json")
        run.log_params({"settings": ",".join(names), "model": model, **{k: v for k, v in ft.items()}})
        if ctx.tracked:
            with TrackedRun.parent_of(ctx) as parent:  # the parent run: logged into, not ended (the finalize step ends it)
                parent.set_tags(smoke_tags(ft, ctx.trigger))
    (out / "sets.json").write_text(json.dumps(summary, indent=1))
    for s, info in summary.items():
        print(f"training set {s}: {info['n']} examples, digest {info['digest']}", flush=True)
    return [{"setting": s, "context": ctx.to_json()} for s in names]
