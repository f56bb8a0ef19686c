"""Steps of the `finetune_known_unknown` pipeline (yuan2024 section 5), except the report.

1. `run_base_table_step`: the base model's known/unknown table: the one given (path or
   `runs:/<id>`, checked to be the base model's) or made by the `qa` probe over the train split
   (regular `known_shots`-shot answers). GPU step (when it probes).
2. `run_sets_step`: every setting's training set, built once here (the same code and seed the
   trainer uses, so its digest is the trainer's), logged to MLflow as datasets with their digests;
   refuses overlap with the evaluation facts. Returns the loop cells. CPU step.
3. `run_train_step`: one setting fine-tuned (`factprobe.finetune.run_finetune`) into a stable
   folder on the PVC (a retried pod resumes from the last checkpoint); the adapter, its config,
   the training set's digest and the loss curve go to MLflow as a model artifact with the loss
   figure. GPU step in the training image.
4. `run_evaluate_step`: zero-shot QA on the evaluation facts and IC-LKE on the same relations for
   one model (the base alias, or an adapter folder). GPU step.

Every step logs a child MLflow run of the pipeline's parent run and tags it
`factprobe.smoke_test` (see `smoke_reasons`).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from factprobe_ops.tracking.context import RunContext

#: the paper's budget (appendix B.2); a run below it is a smoke test, not a reproduction
PAPER_MAX_STEPS = 40
PAPER_EFFECTIVE_BATCH = 512
#: the eval overrides of the QA probe: zero-shot, evaluation split (yuan2024 Tables 2-4)
QA_EVAL = {"split": "eval", "shots": [0]}
SETTING_FILE = "finetune_setting.json"
#: MLflow keeps at most 36 characters of a dataset digest: the sha256's first 16 (the full one is a tag)
DIGEST_CHARS = 16


def smoke_reasons(ft: dict, trigger: str = "") -> list[str]:
    """Why a run is a smoke test rather than a reproduction of yuan2024 Tables 2-4 (empty: none):
    fewer optimizer steps or a smaller effective batch than the paper's, or a local run."""
    reasons = []
    ft = ft_options(ft)
    steps = int(float(ft.get("max_steps") or PAPER_MAX_STEPS))
    if steps < PAPER_MAX_STEPS:
        reasons.append(f"max_steps={steps} < {PAPER_MAX_STEPS}")
    accum = ft.get("grad_accum")
    per_step = int(float(ft.get("batch_size") or 1)) * int(float(accum)) if accum not in (None, "") else \
        int(float(ft.get("effective_batch") or PAPER_EFFECTIVE_BATCH))
    if per_step < PAPER_EFFECTIVE_BATCH:
        reasons.append(f"effective batch {per_step} < {PAPER_EFFECTIVE_BATCH} (per device)")
    if trigger == "local":
        reasons.append("local CPU run")
    return reasons


def smoke_tags(ft: dict, trigger: str) -> dict[str, str]:
    from factprobe_ops.tracking.conventions import tag

    reasons = smoke_reasons(ft, trigger)
    return {tag("smoke_test"): str(bool(reasons)).lower(), tag("smoke_reasons"): "; ".join(reasons) or "-"}


def smoke_banner(ft: dict, trigger: str) -> str:
    """One line saying whether this is a smoke test (printed by every step and the report)."""
    reasons = smoke_reasons(ft, trigger)
    if not reasons:
        return "fine-tuning at the paper's budget (yuan2024 appendix B.2)"
    return ("SMOKE TEST, not a reproduction of yuan2024 Tables 2-4: " + "; ".join(reasons)
            + " (the numbers show that the pipeline works, not what fine-tuning does)")


def ft_options(ft: dict) -> dict:
    """The pipeline's fine-tuning dict with its `options` JSON expanded: the options that are
    FinetuneConfig fields join it (the others are the probes' options, for the evaluation steps)."""
    from factprobe.finetune import FinetuneConfig

    from ._common import OPTIONS, expand_options

    names = set(FinetuneConfig.field_names())
    return {k: v for k, v in expand_options(ft).items() if k in ft or k in names} if OPTIONS in ft else dict(ft)


def finetune_config(ft: dict, model: str, setting: str, table: str | None, out: str):
    """The `FinetuneConfig` of one setting: the pipeline's fine-tuning options plus model, set,
    the base model's table (only the sets that need one) and the output folder."""
    from factprobe.finetune import NEEDS_TABLE, FinetuneConfig

    return FinetuneConfig.from_dict({**ft_options(ft), "model": model, "train_set": setting,
                                     "known_unknown": table if setting in NEEDS_TABLE else None, "out": out})


def _table_or_none(table_path: str) -> str | None:
    p = Path(table_path)
    return str(p) if p.is_file() and p.stat().st_size > 0 else None


def _work_root(work_root: str) -> Path:
    import os

    from factprobe.paths import cache_root

    return Path(work_root or os.environ.get("FACTPROBE_WORK") or cache_root() / "work")


def _safe(text: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:80] or "x"


# ------------------------------------------------------------------ 1. the known/unknown table
def run_base_table_step(items_dir: str, results_dir: str, table_path: str, model: str, config: dict, settings: list,
                        known_unknown: str, context: RunContext | str, work_root: str = "") -> dict:
    """Write the base model's known/unknown table to `table_path`.

    `known_unknown` given: it is resolved (`runs:/<id>` downloads it), checked to be `model`'s and
    copied; no model loads. Else, when some setting needs a table (known, unknown, mixed), the `qa`
    probe answers the train split with the regular `known_shots`-shot block (a child run, results
    to `results_dir`). Else an empty file (no setting needs one). Returns n_known / n_unknown of
    the train split and how the table was made."""
    from factprobe.datasets.known_unknown import read_known_unknown
    from factprobe.finetune import NEEDS_TABLE
    from factprobe.config import split_relations

    from .known_unknown import run_known_unknown_step

    from ._common import expand_options

    config = expand_options(config)
    Path(table_path).parent.mkdir(parents=True, exist_ok=True)
    Path(results_dir).mkdir(parents=True, exist_ok=True)
    shots = int(float(config.get("known_shots") or 10))
    if known_unknown.strip():
        df = read_known_unknown(known_unknown.strip(), model, shots=shots)
        df.to_parquet(table_path, index=False)
        how = f"given: {known_unknown.strip()}"
    elif any(str(s) in NEEDS_TABLE for s in settings):
        run_known_unknown_step(items_dir, results_dir, table_path, model, "qa", config,
                               {"split": "train", "shots": [shots]}, context, work_root)
        df = read_known_unknown(table_path, model, shots=shots)
        how = f"qa probe, {shots}-shot, train split"
    else:
        Path(table_path).write_bytes(b"")
        print("no setting needs a known/unknown table (regular and counterfactual only)", flush=True)
        return {"how": "none needed", "n_known": 0, "n_unknown": 0}
    pool = df[df["split"] == "train"]
    wanted = split_relations(config.get("relations") or None)
    if wanted:  # a reused table may cover more relations than this run trains on
        pool = pool[pool["relation"].astype(str).isin(wanted)]
    out = {"how": how, "n_known": int(pool["known"].sum()), "n_unknown": int((~pool["known"].astype(bool)).sum())}
    print(f"headline: known/unknown {model}: {out['n_known']} known, {out['n_unknown']} unknown train facts "
          f"({how})", flush=True)
    return out


# ------------------------------------------------------------------ 2. the training sets
def run_sets_step(out_dir: str, table_path: str, model: str, settings: list, ft: dict,
                  context: RunContext | str) -> list[dict]:
    """Build every setting's training set (`factprobe.datasets.finetune_sets.build_train_set`, the trainer's
    own builder: same data options and seed, so the same digest), save it to `out_dir/<setting>/`
    (`TrainSet.save`: the training step trains on exactly that set), log it as an MLflow dataset (context `training`, with its digest)
    in one `training-sets` child run, and tag the parent run with the smoke-test verdict.
    Refuses unknown settings and sets that overlap the evaluation facts (the builder names them).
    `context` is the pipeline run's `RunContext` (or its JSON); it rides in each loop cell.
    Returns the loop cells `[{"setting", "context"}]`."""
    import json

    import pandas as pd

    from factprobe.finetune.sets import build_train_set
    from factprobe.errors import ConfigError
    from factprobe.finetune import TRAIN_SETS
    from factprobe_ops.tracking.context import RunContext
    from factprobe_ops.tracking.conventions import tag
    from factprobe_ops.tracking.run import TrackedRun

    from factprobe.finetune import FinetuneConfig

    from ._common import check_options

    check_options(ft, ["qa", "ic-lke"], extra=(FinetuneConfig,))  # the pipeline's evaluation probes and the trainer
    names = [str(s) for s in settings]
    bad = [s for s in names if s not in TRAIN_SETS]
    if bad or not names:
        raise ConfigError(f"settings={names!r}: choose from {', '.join(TRAIN_SETS)}")
    if len(set(names)) != len(names):
        raise ConfigError(f"settings={names!r}: a setting is listed twice")
    table = _table_or_none(table_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ctx = RunContext.from_json(context)
    tags = {tag("step"): "training-sets", tag("model"): model, tag("kfp_run_id"): ctx.kfp_run_id,
            **smoke_tags(ft, ctx.trigger)}
    print(smoke_banner(ft, ctx.trigger), flush=True)
    summary = {}
    with TrackedRun.from_context(ctx, run_name="training-sets", required=True, tags=tags) as run:
        for s in names:
            cfg = finetune_config(ft, model, s, table, str(out / s))
            built = build_train_set(cfg.train_set, model=cfg.model, source=cfg.source, data=cfg.data,
                                    train_data=cfg.train_data, relations=cfg.relations, seed=cfg.seed,
                                    qa_train_per_relation=cfg.qa_train_per_relation, qa_templates=cfg.qa_templates,
                                    size=cfg.train_size, known_unknown=cfg.known_unknown)
            rows = [e.to_dict() for e in built.examples]
            built.save(out / s)  # the training step trains on exactly this set (FinetuneConfig.train_set_dir)
            summary[s] = {"digest": built.digest, "n": len(rows)}
            run.log_input(pd.DataFrame(rows), name=f"train-{s}-{_safe(model)}", source=str(out / s / "train_set.jsonl"),
                          digest=built.digest[:DIGEST_CHARS], context="training")
            run.log_metrics({f"n_examples/{s}": len(rows)})
            run.set_tags({tag(f"train_set_digest/{s}"): built.digest})
        run.log_text(json.dumps(summary, indent=1), "training_sets.json")
        run.log_params({"settings": ",".join(names), "model": model, **{k: v for k, v in ft.items()}})
        if ctx.tracked:
            parent = TrackedRun.parent_of(ctx)
            parent.__enter__()
            parent.set_tags(smoke_tags(ft, ctx.trigger))
    (out / "sets.json").write_text(json.dumps(summary, indent=1))
    for s, info in summary.items():
        print(f"training set {s}: {info['n']} examples, digest {info['digest']}", flush=True)
    return [{"setting": s, "context": ctx.to_json()} for s in names]


# ------------------------------------------------------------------ 3. training
def train_out_dir(work_root: str, kfp_run_id: str, model: str, setting: str, fingerprint: str) -> Path:
    """Stable folder of one setting's training on the PVC: a retried pod of the same run resumes
    its checkpoint; another run or configuration never does."""
    return _work_root(work_root) / "finetune" / _safe(kfp_run_id or "local") / f"{_safe(model)}-{setting}-{fingerprint}"


def run_train_step(table_path: str, adapter_dir: str, model: str, setting: str, ft: dict, context: RunContext | str,
                   work_root: str = "", sets_dir: str = "") -> dict:
    """Fine-tune `model` on `setting`'s training set (`run_finetune`, resuming from the last
    checkpoint of a killed pod), copy the adapter and its files to `adapter_dir`, and log a child
    run: parameters, the loss and the gradient norm per step, `train_loss`, `tokens_per_second`,
    `peak_memory_bytes`, `non_padding_fraction`, the training set as a dataset input with its digest, and under
    `model/` the adapter folder, `finetune_config.json`, `train_set.json` (digest),
    `trainer_state.json`, `loss_history.json` and the loss figure (also `figures/loss.png`).
    The child run begins when training begins (or a finished folder is reused): a step refused at
    its folder or at validation leaves no MLflow run.
    SIGTERM (eviction) stops it like Ctrl-C: the checkpoint stays, the child run is KILLED.
    Training that diverged or did not learn (`TrainingDivergedError`, `TrainingDidNotLearnError`)
    leaves a FAILED child run tagged `factprobe.error` with the reason, without a model artifact,
    and no adapter in `adapter_dir`; the error propagates.
    `sets_dir`: the training-sets step's folder; the set saved there for `setting` is trained on
    as is (same digest as logged), else the trainer builds it (same builder and seed).
    Returns the trainer's metrics plus the run id and the training set digest."""
    import json
    import shutil
    from contextlib import ExitStack

    from transformers import TrainerCallback

    from factprobe.errors import TrainingDivergedError
    from factprobe.finetune import run_finetune
    from factprobe.signals import sigterm_as_interrupt
    from factprobe_ops.tracking.context import RunContext
    from factprobe_ops.tracking.conventions import tag
    from factprobe_ops.tracking.run import TrackedRun

    ctx = RunContext.from_json(context)
    kfp_run_id, trigger = ctx.kfp_run_id, ctx.trigger
    table = _table_or_none(table_path)
    saved = Path(sets_dir) / setting if sets_dir else None
    if saved is not None and (saved / "train_set.json").is_file():
        ft = {**ft, "train_set_dir": str(saved)}
    probe_cfg = finetune_config(ft, model, setting, table, "-")
    out = train_out_dir(work_root, kfp_run_id, model, setting, probe_cfg.fingerprint_digest())
    cfg = finetune_config(ft, model, setting, table, str(out))
    print(smoke_banner(ft, trigger), flush=True)
    tags = {tag("step"): "finetune", tag("model"): model, tag("train_set"): setting, tag("kfp_run_id"): kfp_run_id,
            tag("trigger"): trigger, tag("config_key"): cfg.fingerprint_digest(), **smoke_tags(ft, trigger)}
    run = TrackedRun.from_context(ctx, run_name=f"finetune-{setting}-{_safe(model)}", required=True, tags=tags,
                                  step_key=f"{ctx.pipeline}/{kfp_run_id}/finetune/{setting}")
    with sigterm_as_interrupt(), ExitStack() as stack:
        started: list[bool] = []

        def start() -> None:  # the child run begins once the folder is claimed and the run validated
            if not started:
                started.append(True)
                stack.enter_context(run)
                run.log_params({k: v for k, v in cfg.to_dict().items()})  # credentials in URLs are masked

        class _Start(TrainerCallback):
            def on_train_begin(self, args, state, control, **kw):
                start()

        # if_finished="reuse": a pod retried after training finished gets the saved metrics
        try:
            metrics = run_finetune(cfg, progress=False, if_finished="reuse", callbacks=[_Start()])
        except TrainingDivergedError as e:  # diverged or did not learn: the FAILED run says why
            if started:
                run.set_tags({tag("error"): str(e)[:5000]})
            raise
        start()
        digest = _train_set_digest(out)
        run.set_tags({tag("train_set_digest"): digest})
        run.log_metrics({k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
        for step, loss in _loss_history(out):
            run.log_metrics({"loss": loss}, step=step)
        for step, norm in _grad_norms(out):
            run.log_metrics({"grad_norm": norm}, step=step)
        _log_train_set(run, out, setting, model, digest)
        _log_model(run, out)
    dest = Path(adapter_dir)
    if dest.exists():
        shutil.rmtree(dest)
    weights = out / "adapter" if (out / "adapter").is_dir() else out / "model"
    shutil.copytree(weights, dest)
    for name in ("finetune_config.json", "train_set.json", "metrics.json", "trainer_state.json", "loss_history.json",
                 "loss.png"):
        if (out / name).is_file():
            shutil.copy2(out / name, dest / f"finetune_{name}" if not name.startswith("finetune_") else dest / name)
    (dest / SETTING_FILE).write_text(json.dumps({"setting": setting, "base_model": model, "train_set_digest": digest,
                                                 "mlflow_run_id": run.run_id or "", "out": str(out)}))
    loss = metrics.get("train_loss")
    print(f"headline: finetune {setting} {model}: train_loss {loss:.4f}" if isinstance(loss, (int, float))
          else f"headline: finetune {setting} {model}: done", flush=True)
    return {**metrics, "run_id": run.run_id or "", "train_set_digest": digest}


def _train_set_digest(out: Path) -> str:
    import json

    p = out / "train_set.json"
    if not p.is_file():
        return ""
    info = json.loads(p.read_text())
    return str(info.get("digest") or info.get("sha256") or "")


def _loss_history(out: Path) -> list[tuple[int, float]]:
    """(step, loss) pairs from loss_history.json (a list of {step, loss}) or trainer_state.json."""
    import json

    for name, key in (("loss_history.json", None), ("trainer_state.json", "log_history")):
        p = out / name
        if not p.is_file():
            continue
        data = json.loads(p.read_text())
        entries = data.get(key, []) if key else (data if isinstance(data, list) else data.get("history", []))
        pairs = [(int(e["step"]), float(e["loss"])) for e in entries if isinstance(e, dict) and "loss" in e and "step" in e]
        if pairs:
            return pairs
    return []


def _grad_norms(out: Path) -> list[tuple[int, float]]:
    """(step, gradient norm) pairs of loss_history.json (steps whose norm is null are left out)."""
    import json

    p = out / "loss_history.json"
    entries = json.loads(p.read_text()) if p.is_file() else []
    return [(int(e["step"]), float(e["grad_norm"])) for e in entries if isinstance(e, dict) and "step" in e
            and isinstance(e.get("grad_norm"), (int, float))]


def _log_train_set(run, out: Path, setting: str, model: str, digest: str) -> None:
    import pandas as pd

    p = out / "train_set.jsonl"
    if p.is_file():
        run.log_input(pd.read_json(p, lines=True), name=f"train-{setting}-{_safe(model)}", source=str(p),
                      digest=digest[:DIGEST_CHARS] or None, context="training")


def _log_model(run, out: Path) -> None:
    """The adapter (or full model) and what describes it, as one model artifact folder `model/`."""
    weights = out / "adapter" if (out / "adapter").is_dir() else out / "model"
    if weights.is_dir():
        run.log_artifacts(weights, f"model/{weights.name}")
    for name in ("finetune_config.json", "train_set.json", "trainer_state.json", "loss_history.json", "metrics.json",
                 "loss.png"):
        if (out / name).is_file():
            run.log_artifact(out / name, "model")
    if (out / "loss.png").is_file():
        run.log_artifact(out / "loss.png", "figures")


# ------------------------------------------------------------------ 4. evaluation
def model_link(adapter_dir: str, work_root: str, kfp_run_id: str, model: str, setting: str) -> str:
    """A stable, readable path to an adapter artifact: `<work>/finetune/<run>/models/<model>-ft-<setting>`
    (a symlink, re-pointed on a retry), so the probes' working folders (keyed by the model path)
    resume on a retry and the MLflow runs name the setting."""
    link = _work_root(work_root) / "finetune" / _safe(kfp_run_id or "local") / "models" / f"{_safe(model)}-ft-{setting}"
    link.parent.mkdir(parents=True, exist_ok=True)
    target = Path(adapter_dir).resolve()
    if link.is_symlink() or link.exists():
        if link.resolve() == target:
            return str(link)
        link.unlink()
    link.symlink_to(target, target_is_directory=True)
    return str(link)


def run_evaluate_step(items_dir: str, qa_dir: str, mc_dir: str, model: str, setting: str, config: dict,
                      context: RunContext | str, work_root: str = "", training_dir: str = "") -> dict:
    """Zero-shot QA over the evaluation split (`QA_EVAL`) into `qa_dir` and IC-LKE over the same
    relations into `mc_dir`, for `model` (alias, or an adapter folder), each a child run
    (`factprobe_ops.components.steps.probe.run_probe_step`); `finetune_setting.json` in both folders names the
    setting, and the training's `finetune_*.json` files (loss history, metrics) from `training_dir`
    are copied into `qa_dir` for the report. Returns the headline numbers."""
    import json
    import shutil

    from .probe import run_probe_step

    common = {"context": context, "work_root": work_root}
    qa = run_probe_step(items_dir, qa_dir, model, "qa", config, overrides=QA_EVAL, **common)
    mc = run_probe_step(items_dir, mc_dir, model, "ic-lke", config, **common)
    for d in (qa_dir, mc_dir):
        (Path(d) / SETTING_FILE).write_text(json.dumps({"setting": setting, "model": model}))
    if training_dir:
        for p in Path(training_dir).glob("finetune_*.json"):
            if p.name != SETTING_FILE:
                shutil.copy2(p, Path(qa_dir) / p.name)
    s = {**{f"qa_{k}": v for k, v in qa["scalars"].items() if k in ("em", "f1", "contains")},
         **{"iclke_acc": v for k, v in mc["scalars"].items() if k == "accuracy"}}  # the fine-tuning table's column
    return {"setting": setting, "scalars": s, "qa_run_id": qa["run_id"], "mc_run_id": mc["run_id"]}


def evaluation_dirs(dirs: list[str]) -> dict[str, str]:
    """{setting: folder} of evaluation result folders (their `finetune_setting.json`)."""
    import json

    out: dict[str, str] = {}
    for d in dirs:
        p = Path(d) / SETTING_FILE
        if p.is_file():
            out[json.loads(p.read_text())["setting"]] = d
    return out
