"""Steps of the `belief` pipeline (BELIEF-ICL, zhao2024): the model x setting x instruction plan, one
belief-icl probe run per cell (GPU), and the cross-run report (calibration plots, tables).

The report reads each probe folder (`run_config.json`, `metrics.json`, `results.jsonl`,
`belief_templates.parquet`) and writes/logs to the MLflow parent run:
- `figures/belief_calibration.png`: confidence bins against Acc@1 (Figures 2-3), one panel per
  model, one curve per (setting, instruction);
- tables `belief_summary` (one row per run: acc with range and stdev, consist, overconf, one-word
  rate (Table 4's instruction following), coverage, empty answers), `belief_per_relation`,
  `belief_per_template` (which templates help), `belief_sharing` (knowledge sharing rates between
  runs of the same instruction, Figure 4);
- metrics `<metric>/<model>/<setting>/<instruction>` for acc, acc_range, acc_stdev, consist,
  overconf, one_word_rate, coverage_oracle.
"""
from __future__ import annotations

PROBE = "belief-icl"
SUMMARY_KEYS = ("acc", "acc_range", "acc_stdev", "consist", "overconf", "one_word_rate", "coverage_avg", "coverage_max",
                "coverage_oracle", "mean_confidence", "n_empty", "n_prompts", "n_pairs")
RELATION_KEYS = ("n_pairs", "n_templates", "acc", "coverage_max", "coverage_oracle", "consist", "one_word_rate",
                 "confidence", "n_empty", "best_template")
LOGGED = ("acc", "acc_range", "acc_stdev", "consist", "overconf", "one_word_rate", "coverage_oracle")


def run_belief_plan(models: list, settings: list, instructions: list, config: dict, parent_run_id: str = "") -> list:
    """[{"model", "setting", "instruction", "parent_run_id"}, ...] for every combination, after
    validating the belief-icl run config of each (an unknown setting or instruction fails here,
    before any model loads)."""
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
    """One belief-icl run (the generic probe step with this cell's setting and instruction)."""
    from .probe import run_probe_step

    return run_probe_step(items_dir, out_dir, model, PROBE, config, parent_run_id, tracking_uri, work_root, kfp_run_id,
                          trigger, pipeline, overrides={"setting": setting, "instruction": instruction})


def load_belief_runs(dirs: list[str]) -> list[dict]:
    """Per probe folder: {"model", "setting", "instruction", "label", "metrics", "dir"} (belief-icl runs only)."""
    import json
    from pathlib import Path

    from tracking.probe_logging import model_label

    runs = []
    for d in dirs:
        cfg = json.loads((Path(d) / "run_config.json").read_text())["config"]
        if cfg.get("probe") != PROBE:
            continue
        m = json.loads((Path(d) / "metrics.json").read_text())
        model = model_label(cfg["model"])
        runs.append({"model": model, "setting": cfg["setting"], "instruction": cfg["instruction"],
                     "label": f"{cfg['setting']} / {cfg['instruction']}", "metrics": m, "dir": str(d)})
    return runs


def summary_rows(runs: list[dict]) -> list[dict]:
    return [{"model": r["model"], "setting": r["setting"], "instruction": r["instruction"],
             **{k: r["metrics"].get(k) for k in SUMMARY_KEYS}} for r in runs]


def relation_rows(runs: list[dict]) -> list[dict]:
    return [{"model": r["model"], "setting": r["setting"], "instruction": r["instruction"], "relation": rel,
             **{k: entry.get(k) for k in RELATION_KEYS}}
            for r in runs for rel, entry in (r["metrics"].get("per_relation") or {}).items()]


def template_rows(runs: list[dict]):
    """Every run's `belief_templates.parquet` with model, setting and instruction columns."""
    from pathlib import Path

    import pandas as pd

    parts = []
    for r in runs:
        path = Path(r["dir"]) / "belief_templates.parquet"
        if path.is_file():
            parts.append(pd.read_parquet(path).assign(model=r["model"], setting=r["setting"],
                                                      instruction=r["instruction"]))
    if not parts:
        return pd.DataFrame()
    df = pd.concat(parts, ignore_index=True)
    first = ["model", "setting", "instruction", "relation", "template_id"]
    return df[first + [c for c in df.columns if c not in first]]


def sharing_rows(runs: list[dict]) -> list[dict]:
    """Knowledge sharing rate (Figure 4) of every ordered pair of runs with the same instruction
    (their (fact, template) units are the same prompts' facts and templates)."""
    from pathlib import Path

    import pandas as pd

    from factprobe.io import read_jsonl
    from factprobe.metrics.belief import knowledge_sharing_rate

    tables = {}
    for r in runs:
        recs = [rec for _, rec in read_jsonl(Path(r["dir"]) / "results.jsonl", required=("fact_id", "template_id"))]
        tables[(r["model"], r["setting"], r["instruction"])] = pd.DataFrame(recs)[["fact_id", "template_id", "correct"]]
    rows = []
    for a, ta in tables.items():
        for b, tb in tables.items():
            if a != b and a[2] == b[2]:
                rows.append({"from_model": a[0], "from_setting": a[1], "to_model": b[0], "to_setting": b[1],
                             "instruction": a[2], "sharing_rate": knowledge_sharing_rate(ta, tb)})
    return rows


def run_belief_report(result_dirs: list[str], html_path: str, md_path: str, parent_run_id: str, tracking_uri: str,
                      pipeline: str = "belief") -> list[dict]:
    """Write the HTML and Markdown reports and log figures, tables and metrics to the parent run
    (module docstring). Returns the summary rows."""
    import base64
    import html as html_lib
    from pathlib import Path

    import matplotlib.pyplot as plt
    import pandas as pd

    from factprobe.io import atomic_write_text
    from factprobe.report.calibration import calibration_figure
    from factprobe.report.html import figure_png
    from tracking.probe_logging import metric_key
    from tracking.run import TrackedRun

    from ._common import resolve_tracking_uri
    from .report import _html_table, _markdown_table

    runs = load_belief_runs(result_dirs)
    panels: dict[str, dict] = {}
    overconf: dict[str, dict] = {}
    for r in runs:
        panels.setdefault(r["model"], {})[r["label"]] = (r["metrics"].get("calibration") or {}).get("overconf") or []
        overconf.setdefault(r["model"], {})[r["label"]] = r["metrics"].get("overconf")
    fig = calibration_figure(panels, "BELIEF-ICL calibration: confidence bins vs Acc@1", overconf)
    tables = {"belief_summary": summary_rows(runs), "belief_per_relation": relation_rows(runs),
              "belief_sharing": sharing_rows(runs) if len(runs) > 1 else []}
    templates = template_rows(runs)
    title = f"factprobe {pipeline}: {len(runs)} BELIEF-ICL run(s)"
    png = base64.b64encode(figure_png(fig)).decode()
    body = "".join(_html_table(rows, name) for name, rows in tables.items() if rows)
    if not templates.empty:
        body += _html_table(templates.to_dict("records"), "belief_per_template")
    page = (f"<html><head><meta charset='utf-8'><title>{html_lib.escape(title)}</title></head><body>"
            f"<h1>{html_lib.escape(title)}</h1><h2>calibration</h2><img src='data:image/png;base64,{png}'/>{body}</body></html>")
    atomic_write_text(html_path, page)
    md = f"# {title}\n\n" + "".join("\n" + _markdown_table(rows, name) for name, rows in tables.items() if rows)
    atomic_write_text(md_path, md)
    uri = resolve_tracking_uri(tracking_uri)
    if uri is not None and parent_run_id:
        run = TrackedRun(pipeline=pipeline, tracking_uri=uri, required=True, run_id=parent_run_id)
        run.__enter__()
        run.log_figure(fig, "figures/belief_calibration.png")
        for name, rows in tables.items():
            if rows:
                run.log_table(pd.DataFrame(rows), f"tables/{name}.json")
        if not templates.empty:
            run.log_table(templates, "tables/belief_per_template.json")
            run.log_parquet(templates, "tables/belief_per_template.parquet")
        run.log_text(Path(html_path).read_text(), "report/belief_report.html")
        flat = {}
        for r in runs:
            where = f"{metric_key(r['model'])}/{r['setting']}/{r['instruction']}"
            for k in LOGGED:
                v = r["metrics"].get(k)
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    flat[f"{k}/{where}"] = v
        run.log_metrics(flat)
    plt.close("all")
    return tables["belief_summary"]
