"""What the steps of the `finetune_known_unknown` pipeline (yuan2024 section 5) share: the smoke-test
verdict (`smoke_reasons`), one setting's `FinetuneConfig` (`finetune_config`), and the stable folders on
the PVC (`train_out_dir`, `work_root_dir`).

The steps, one module each (their KFP components are in `components/finetune.py`):

1. `finetune_base_table.run_base_table_step`: the base model's known/unknown table. GPU step (when it probes).
2. `finetune_sets.run_sets_step`: every setting's training set, built once and logged. CPU step.
3. `finetune_train.run_train_step`: one setting fine-tuned on one node (GPU step in the training image), or
   `finetune_trainjob.run_trainjob_step`: the same over several nodes as a Kubeflow Trainer TrainJob.
4. `finetune_evaluate.run_evaluate_step`: zero-shot QA and IC-LKE for one model (the base or an adapter). GPU step.
5. `finetune_report.run_finetune_report`: the before/after table. CPU step.

Every step logs a child MLflow run of the pipeline's parent run and tags it
`factprobe.smoke_test` (see `smoke_reasons`).
"""

from __future__ import annotations

from pathlib import Path

#: the paper's budget (appendix B.2); a run below it is a smoke test, not a reproduction
PAPER_MAX_STEPS = 40
PAPER_EFFECTIVE_BATCH = 512
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
    per_step = (
        int(float(ft.get("batch_size") or 1)) * int(float(accum))
        if accum not in (None, "")
        else int(float(ft.get("effective_batch") or PAPER_EFFECTIVE_BATCH))
    )
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
    return (
        "SMOKE TEST, not a reproduction of yuan2024 Tables 2-4: "
        + "; ".join(reasons)
        + " (the numbers show that the pipeline works, not what fine-tuning does)"
    )


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

    return FinetuneConfig.from_dict(
        {
            **ft_options(ft),
            "model": model,
            "train_set": setting,
            "known_unknown": table if setting in NEEDS_TABLE else None,
            "out": out,
        }
    )


def table_or_none(table_path: str) -> str | None:
    """`table_path` when it is a non-empty file (the base-table step wrote a table), else None (no setting needs one)."""
    p = Path(table_path)
    return str(p) if p.is_file() and p.stat().st_size > 0 else None


def work_root_dir(work_root: str) -> Path:
    """The pipeline's working folder: `work_root`, else `$FACTPROBE_WORK`, else `<cache>/work`."""
    import os

    from factprobe.paths import cache_root

    return Path(work_root or os.environ.get("FACTPROBE_WORK") or cache_root() / "work")


def safe_name(text: str) -> str:
    """`text` as one folder or MLflow name part: runs of other characters than [A-Za-z0-9._-] become "_", 80 at most."""
    import re

    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:80] or "x"


def train_out_dir(work_root: str, kfp_run_id: str, model: str, setting: str, fingerprint: str) -> Path:
    """Stable folder of one setting's training on the PVC: a retried pod of the same run resumes
    its checkpoint; another run or configuration never does."""
    run = work_root_dir(work_root) / "finetune" / safe_name(kfp_run_id or "local")
    return run / f"{safe_name(model)}-{setting}-{fingerprint}"
