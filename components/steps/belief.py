"""Steps of the `belief` pipeline (BELIEF-ICL, zhao2024): the model x setting x instruction plan, one
probe run per cell (GPU), and the cross-run report.

The report is the generic report step (components/steps/report.py): the BELIEF-ICL probe declares
its part (factprobe/probes/belief_reporting.py: calibration plot `figures/belief_calibration.png`,
tables `belief_summary`, `belief_per_relation`, `belief_per_template`, `belief_sharing`, metrics
`<metric>/<model>/<setting>/<instruction>`); `run_belief_report` only keeps the belief pipeline's
artifact name (`report/belief_report.html`) and returns the summary rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from factprobe_ops.tracking.context import RunContext


def run_belief_plan(models: list, settings: list, instructions: list, probe: str, config: dict, context: str = "") -> list:
    """[{"model", "setting", "instruction", "context"}, ...] for every combination, after validating
    the run config of `probe` (the pipeline's, pipelines/belief.py) for each: an unknown setting,
    instruction or option fails here, before any model loads. `config` may hold the `options`
    JSON. The run context (JSON) rides along in each cell (see pipelines/probe.py for why)."""
    from factprobe.errors import ConfigError

    from ._common import check_options, run_config

    for name, values in (("models", models), ("settings", settings), ("instructions", instructions)):
        if not values:
            raise ConfigError(f"belief pipeline: the {name} list is empty")
    check_options(config, [probe])
    cells = []
    for m in models:
        for s in settings:
            for i in instructions:
                run_config(config, probe=probe, model=str(m), setting=str(s), instruction=str(i))
                cells.append({"model": str(m), "setting": str(s), "instruction": str(i), "context": context})
    return cells


def run_probe_belief(
    items_dir: str,
    out_dir: str,
    model: str,
    probe: str,
    setting: str,
    instruction: str,
    config: dict,
    context: RunContext | str,
    work_root: str = "",
) -> dict:
    """One cell's run of `probe` (the generic probe step with this cell's setting and instruction)."""
    from .probe import run_probe_step

    return run_probe_step(
        items_dir, out_dir, model, probe, config, context, work_root, overrides={"setting": setting, "instruction": instruction}
    )


def run_belief_report(result_dirs: list[str], html_path: str, md_path: str, context: RunContext | str) -> list[dict]:
    """The generic report (`write_report`) of the cells' runs, its page logged as
    `report/belief_report.html`. Returns the `belief_summary` rows (one per run)."""
    from .report import write_report

    _, parts = write_report(result_dirs, html_path, md_path, context, html_artifact="report/belief_report.html")
    return next((p.tables["belief_summary"] for p in parts if "belief_summary" in p.tables), [])
