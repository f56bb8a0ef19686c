"""Step 1 of the `finetune_known_unknown` pipeline: the base model's known/unknown table (GPU step when it probes).

The one given (path or `runs:/<id>`, checked to be the base model's) or made by the `qa` probe over the
train split (regular `known_shots`-shot answers); `factprobe_ops.components.steps.finetune` holds what the
pipeline's steps share.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from factprobe_ops.tracking.context import RunContext


def run_base_table_step(
    items_dir: str,
    results_dir: str,
    table_path: str,
    model: str,
    config: dict,
    settings: list,
    known_unknown: str,
    context: RunContext | str,
    work_root: str = "",
) -> dict:
    """Write the base model's known/unknown table to `table_path`.

    `known_unknown` given: it is resolved (`runs:/<id>` downloads it), checked to be `model`'s and
    copied; no model loads. Else, when some setting needs a table (known, unknown, mixed), the `qa`
    probe answers the train split with the regular `known_shots`-shot block (a child run, results
    to `results_dir`). Else an empty file (no setting needs one). Returns n_known / n_unknown of
    the train split and how the table was made."""
    from factprobe.config import split_relations
    from factprobe.datasets.known_unknown import read_known_unknown
    from factprobe.finetune import NEEDS_TABLE

    from ._common import expand_options
    from .known_unknown import run_known_unknown_step

    config = expand_options(config)
    Path(table_path).parent.mkdir(parents=True, exist_ok=True)
    Path(results_dir).mkdir(parents=True, exist_ok=True)
    shots = int(float(config.get("known_shots") or 10))
    if known_unknown.strip():
        df = read_known_unknown(known_unknown.strip(), model, shots=shots)
        df.to_parquet(table_path, index=False)
        how = f"given: {known_unknown.strip()}"
    elif any(str(s) in NEEDS_TABLE for s in settings):
        run_known_unknown_step(
            items_dir, results_dir, table_path, model, "qa", config, {"split": "train", "shots": [shots]}, context, work_root
        )
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
    print(f"headline: known/unknown {model}: {out['n_known']} known, {out['n_unknown']} unknown train facts ({how})", flush=True)
    return out
