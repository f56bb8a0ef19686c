"""Step 4 of the `finetune_known_unknown` pipeline: zero-shot QA on the evaluation facts and IC-LKE on the
same relations for one model, the base alias or an adapter folder (GPU step).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .finetune import SETTING_FILE, safe_name, work_root_dir

if TYPE_CHECKING:
    from factprobe_ops.tracking.context import RunContext

#: the eval overrides of the QA probe: zero-shot, evaluation split (yuan2024 Tables 2-4)
QA_EVAL = {"split": "eval", "shots": [0]}


def model_link(adapter_dir: str, work_root: str, kfp_run_id: str, model: str, setting: str) -> str:
    """A stable, readable path to an adapter artifact: `<work>/finetune/<run>/models/<model>-ft-<setting>`
    (a symlink, re-pointed on a retry), so the probes' working folders (keyed by the model path)
    resume on a retry and the MLflow runs name the setting."""
    run = work_root_dir(work_root) / "finetune" / safe_name(kfp_run_id or "local")
    link = run / "models" / f"{safe_name(model)}-ft-{setting}"
    link.parent.mkdir(parents=True, exist_ok=True)
    target = Path(adapter_dir).resolve()
    if link.is_symlink() or link.exists():
        if link.resolve() == target:
            return str(link)
        link.unlink()
    link.symlink_to(target, target_is_directory=True)
    return str(link)


def run_evaluate_step(
    items_dir: str,
    qa_dir: str,
    mc_dir: str,
    model: str,
    setting: str,
    config: dict,
    context: RunContext | str,
    work_root: str = "",
    training_dir: str = "",
) -> dict:
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
    s = {
        **{f"qa_{k}": v for k, v in qa["scalars"].items() if k in ("em", "f1", "contains")},
        **({"iclke_acc": mc["scalars"]["accuracy"]} if "accuracy" in mc["scalars"] else {}),
    }  # the fine-tuning table's column
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
