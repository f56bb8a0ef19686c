"""Steps of the `belief` pipeline (BELIEF-ICL, zhao2024): the model x setting x instruction plan, one
probe run per cell (GPU), and the cross-run report.

The report is the generic report step (components/steps/report.py): the BELIEF-ICL probe declares
its part (factprobe/probes/belief_reporting.py: calibration plot `figures/belief_calibration.png`,
tables `belief_summary`, `belief_per_relation`, `belief_per_template`, `belief_sharing`, metrics
`<metric>/<model>/<setting>/<instruction>`); `run_belief_report` only keeps the belief pipeline's
artifact name (`report/belief_report.html`) and returns the summary rows.
"""
from __future__ import annotations

#: the probe of the belief pipeline's cells (pipelines/belief.py names the same probe)
PROBE = "belief-icl"


def run_belief_plan(models: list, settings: list, instructions: list, config: dict, parent_run_id: str = "") -> list:
    """[{"model", "setting", "instruction", "parent_run_id"}, ...] for every combination, after
    validating the run config of each (an unknown setting or instruction fails here, before any
    model loads)."""
    from factprobe.errors import ConfigError

    from ._common import run_config

    for name, values in (("models", models), ("settings", settings), ("instructions", instructions)):
        if not values:
            raise ConfigError(f"belief pipeline: the {name} list is empty")
    cells = []
    for m in models:
        for s in settings:
            for i in instructions:
                run_config(config, probe=PROBE, model=str(m), setting=str(s), instruction=str(i))
                cells.append({"model": str(m), "setting": str(s), "instruction": str(i), "parent_run_id": parent_run_id})
    return cells


def run_probe_belief(items_dir: str, out_dir: str, model: str, setting: str, instruction: str, config: dict,
                     parent_run_id: str, tracking_uri: str, work_root: str = "", kfp_run_id: str = "",
                     trigger: str = "local", pipeline: str = "belief") -> dict:
    """One cell's probe run (the generic probe step with this cell's setting and instruction)."""
    from .probe import run_probe_step

    return run_probe_step(items_dir, out_dir, model, PROBE, config, parent_run_id, tracking_uri, work_root, kfp_run_id,
                          trigger, pipeline, overrides={"setting": setting, "instruction": instruction})


def run_belief_report(result_dirs: list[str], html_path: str, md_path: str, parent_run_id: str, tracking_uri: str,
                      pipeline: str = "belief") -> list[dict]:
    """The generic report (`write_report`) of the cells' runs, its page logged as
    `report/belief_report.html`. Returns the `belief_summary` rows (one per run)."""
    from .report import write_report

    _, parts = write_report(result_dirs, html_path, md_path, parent_run_id, tracking_uri, pipeline,
                            html_artifact="report/belief_report.html")
    return next((p.tables["belief_summary"] for p in parts if "belief_summary" in p.tables), [])
