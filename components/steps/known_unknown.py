"""Steps: the two probe steps of counterfactual ICL that hand a model's known/unknown table on.

The first runs a probe that writes `known_unknown.parquet` (the `qa` probe over the train and
eval splits) and copies the table to its own KFP artifact; the second runs a probe that reads
such a table (the `counterfactual` probe's `known_unknown` option) from that artifact. Both are
`run_probe_step` with per-step config overrides; GPU steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from factprobe_ops.tracking.context import RunContext


def run_known_unknown_step(
    items_dir: str,
    out_dir: str,
    table_path: str,
    model: str,
    probe: str,
    config: dict,
    overrides: dict,
    context: RunContext | str,
    work_root: str = "",
) -> dict:
    """`run_probe_step` (results to `out_dir`), then the run's `known_unknown.parquet` is copied to
    `table_path`, the artifact the next step reads. Raises ConfigError when the probe wrote no
    table (it is not one that classifies facts as known/unknown). Returns the probe step's info
    plus `n_known` / `n_unknown` (train split, the exemplar pool) and `n_facts`."""
    import shutil
    from pathlib import Path

    from factprobe.datasets.known_unknown import FILE_NAME, read_known_unknown
    from factprobe.errors import ConfigError

    from .probe import run_probe_step

    info = run_probe_step(items_dir, out_dir, model, probe, config, context, work_root, overrides=overrides)
    made = Path(out_dir) / FILE_NAME
    if not made.is_file():
        raise ConfigError(
            f"probe {probe} wrote no {FILE_NAME} (only probes that classify facts as known/unknown "
            f"do, e.g. qa with a k > 0 in shots)"
        )
    Path(table_path).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(made, table_path)
    df = read_known_unknown(table_path, model)
    pool = df[df["split"] == "train"]
    return {**info, "n_facts": int(len(df)), "n_known": int(pool["known"].sum()), "n_unknown": int((~pool["known"]).sum())}


def run_with_known_unknown_step(
    items_dir: str,
    table_path: str,
    out_dir: str,
    model: str,
    probe: str,
    config: dict,
    overrides: dict,
    context: RunContext | str,
    work_root: str = "",
) -> dict:
    """`run_probe_step` with the probe's `known_unknown` option pointing at `table_path` (the
    previous step's table of the same model: a table of another model is refused before the
    model loads)."""
    from .probe import run_probe_step

    return run_probe_step(
        items_dir, out_dir, model, probe, config, context, work_root, overrides={**(overrides or {}), "known_unknown": table_path}
    )
