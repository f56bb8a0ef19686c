"""Step 3 of the `finetune_known_unknown` pipeline: one setting fine-tuned on one node (GPU step in the training image).

`factprobe.finetune.run_finetune` into a stable folder on the PVC (a retried pod resumes from the last
checkpoint); the adapter, its config, the training set's digest and the loss curve go to MLflow as a
model artifact with the loss figure. Several nodes: `finetune_trainjob`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .finetune import (
    DIGEST_CHARS,
    SETTING_FILE,
    finetune_config,
    safe_name,
    smoke_banner,
    smoke_tags,
    table_or_none,
    train_out_dir,
)

if TYPE_CHECKING:
    from factprobe_ops.tracking.context import RunContext


def run_train_step(
    table_path: str,
    adapter_dir: str,
    model: str,
    setting: str,
    ft: dict,
    context: RunContext | str,
    work_root: str = "",
    sets_dir: str = "",
) -> dict:
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
    table = table_or_none(table_path)
    saved = Path(sets_dir) / setting if sets_dir else None
    if saved is not None and (saved / "train_set.json").is_file():
        ft = {**ft, "train_set_dir": str(saved)}
    probe_cfg = finetune_config(ft, model, setting, table, "-")
    out = train_out_dir(work_root, kfp_run_id, model, setting, probe_cfg.fingerprint_digest())
    cfg = finetune_config(ft, model, setting, table, str(out))
    print(smoke_banner(ft, trigger), flush=True)
    tags = {
        tag("step"): "finetune",
        tag("model"): model,
        tag("train_set"): setting,
        tag("kfp_run_id"): kfp_run_id,
        tag("trigger"): trigger,
        tag("config_key"): cfg.fingerprint_digest(),
        **smoke_tags(ft, trigger),
    }
    run = TrackedRun.from_context(
        ctx,
        run_name=f"finetune-{setting}-{safe_name(model)}",
        required=True,
        tags=tags,
        step_key=f"{ctx.pipeline}/{kfp_run_id}/finetune/{setting}",
    )
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
    for name in ("finetune_config.json", "train_set.json", "metrics.json", "trainer_state.json", "loss_history.json", "loss.png"):
        if (out / name).is_file():
            shutil.copy2(out / name, dest / f"finetune_{name}" if not name.startswith("finetune_") else dest / name)
    (dest / SETTING_FILE).write_text(
        json.dumps(
            {
                "setting": setting,
                "base_model": model,
                "train_set_digest": digest,
                "mlflow_run_id": run.run_id or "",
                "out": str(out),
            }
        )
    )
    loss = metrics.get("train_loss")
    print(
        f"headline: finetune {setting} {model}: train_loss {loss:.4f}"
        if isinstance(loss, (int, float))
        else f"headline: finetune {setting} {model}: done",
        flush=True,
    )
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
    return [
        (int(e["step"]), float(e["grad_norm"]))
        for e in entries
        if isinstance(e, dict) and "step" in e and isinstance(e.get("grad_norm"), (int, float))
    ]


def _log_train_set(run, out: Path, setting: str, model: str, digest: str) -> None:
    import pandas as pd

    p = out / "train_set.jsonl"
    if p.is_file():
        run.log_input(
            pd.read_json(p, lines=True),
            name=f"train-{setting}-{safe_name(model)}",
            source=str(p),
            digest=digest[:DIGEST_CHARS] or None,
            context="training",
        )


def _log_model(run, out: Path) -> None:
    """The adapter (or full model) and what describes it, as one model artifact folder `model/`."""
    weights = out / "adapter" if (out / "adapter").is_dir() else out / "model"
    if weights.is_dir():
        run.log_artifacts(weights, f"model/{weights.name}")
    for name in ("finetune_config.json", "train_set.json", "trainer_state.json", "loss_history.json", "metrics.json", "loss.png"):
        if (out / name).is_file():
            run.log_artifact(out / name, "model")
    if (out / "loss.png").is_file():
        run.log_artifact(out / "loss.png", "figures")
