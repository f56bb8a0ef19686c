"""The cross-run report of BELIEF-ICL (zhao2024) runs: one part per pipeline, from each run's
metrics.json, run config (`setting`, `instruction`), `results.jsonl` and `belief_templates.parquet`.

- figure `belief_calibration`: confidence bins against Acc@1 (Figures 2-3), one panel per model,
  one curve per (setting, instruction);
- tables `belief_summary` (one row per run: acc with range and stdev, consist, overconf, one-word
  rate (Table 4's instruction following), coverage, empty answers), `belief_per_relation`,
  `belief_sharing` (knowledge sharing rates between runs of the same instruction, Figure 4) and
  `belief_per_template` (which templates help; also as parquet);
- metrics `<metric>/<model>/<setting>/<instruction>` for acc, acc_range, acc_stdev, consist,
  overconf, one_word_rate, coverage_oracle; and, for a model with one run only, every top-level
  number as `<metric>/<probe>/<model>` (as every probe's runs in a report).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..framework.reporting import ReportPart, ReportRun, metric_key, number, top_level_metrics

SUMMARY_KEYS = (
    "acc",
    "acc_range",
    "acc_stdev",
    "consist",
    "overconf",
    "one_word_rate",
    "coverage_avg",
    "coverage_max",
    "coverage_oracle",
    "mean_confidence",
    "n_empty",
    "n_prompts",
    "n_pairs",
)
RELATION_KEYS = (
    "n_pairs",
    "n_templates",
    "acc",
    "coverage_max",
    "coverage_oracle",
    "consist",
    "one_word_rate",
    "confidence",
    "n_empty",
    "best_template",
)
LOGGED = ("acc", "acc_range", "acc_stdev", "consist", "overconf", "one_word_rate", "coverage_oracle")
TEMPLATES_FILE = "belief_templates.parquet"


def _cell(r: ReportRun) -> dict:
    return {"model": r.label, "setting": r.config.get("setting"), "instruction": r.config.get("instruction")}


def summary_rows(runs: Sequence[ReportRun]) -> list[dict]:
    """One row per run: model, setting, instruction and `SUMMARY_KEYS`."""
    return [{**_cell(r), **{k: r.metrics.get(k) for k in SUMMARY_KEYS}} for r in runs]


def relation_rows(runs: Sequence[ReportRun]) -> list[dict]:
    """One row per run and relation: model, setting, instruction, relation and `RELATION_KEYS`."""
    return [
        {**_cell(r), "relation": rel, **{k: entry.get(k) for k in RELATION_KEYS}}
        for r in runs
        for rel, entry in (r.metrics.get("per_relation") or {}).items()
    ]


def template_rows(runs: Sequence[ReportRun]):
    """Every run's `belief_templates.parquet` with model, setting and instruction columns."""
    import pandas as pd

    parts = []
    for r in runs:
        path = r.dir / TEMPLATES_FILE if r.dir is not None else None
        if path is not None and path.is_file():
            parts.append(pd.read_parquet(path).assign(**_cell(r)))
    if not parts:
        return pd.DataFrame()
    df = pd.concat(parts, ignore_index=True)
    first = ["model", "setting", "instruction", "relation", "template_id"]
    return df[first + [c for c in df.columns if c not in first]]


def sharing_rows(runs: Sequence[ReportRun]) -> list[dict]:
    """Knowledge sharing rate (Figure 4) of every ordered pair of runs with the same instruction
    (their (fact, template) units are the same prompts' facts and templates)."""
    import pandas as pd

    from ..io import read_jsonl
    from ..metrics.belief import knowledge_sharing_rate

    tables = {}
    for r in runs:
        if r.dir is None:
            continue
        recs = [rec for _, rec in read_jsonl(r.dir / "results.jsonl", required=("fact_id", "template_id"))]
        c = _cell(r)
        tables[(c["model"], c["setting"], c["instruction"])] = pd.DataFrame(recs)[["fact_id", "template_id", "correct"]]
    rows = []
    for a, ta in tables.items():
        for b, tb in tables.items():
            if a != b and a[2] == b[2]:
                rows.append(
                    {
                        "from_model": a[0],
                        "from_setting": a[1],
                        "to_model": b[0],
                        "to_setting": b[1],
                        "instruction": a[2],
                        "sharing_rate": knowledge_sharing_rate(ta, tb),
                    }
                )
    return rows


def belief_icl_report(runs: Sequence[ReportRun]) -> ReportPart:
    """The BELIEF-ICL part of a report (module docstring)."""
    from ..report.calibration import calibration_figure

    panels: dict[str, dict] = {}
    overconf: dict[str, dict] = {}
    for r in runs:
        c = _cell(r)
        label = f"{c['setting']} / {c['instruction']}"
        panels.setdefault(r.label, {})[label] = (r.metrics.get("calibration") or {}).get("overconf") or []
        overconf.setdefault(r.label, {})[label] = r.metrics.get("overconf")
    per_model: dict[str, int] = {}
    for r in runs:
        per_model[r.label] = per_model.get(r.label, 0) + 1
    # `<metric>/<probe>/<model>` only where it names one run (several settings of a model would collide)
    part = ReportPart(metrics=top_level_metrics([r for r in runs if per_model[r.label] == 1]))
    part.figures["calibration"] = (
        "belief_calibration",
        calibration_figure(panels, "BELIEF-ICL calibration: confidence bins vs Acc@1", overconf),
    )
    tables = {
        "belief_summary": summary_rows(runs),
        "belief_per_relation": relation_rows(runs),
        "belief_sharing": sharing_rows(runs) if len(runs) > 1 else [],
    }
    part.tables.update({k: v for k, v in tables.items() if v})
    templates = template_rows(runs)
    if not templates.empty:
        part.tables["belief_per_template"] = templates
        part.parquet = ("belief_per_template",)
    for r in runs:
        c = _cell(r)
        where = f"{metric_key(r.label)}/{c['setting']}/{c['instruction']}"
        for k in LOGGED:
            if number(r.metrics.get(k)):
                part.metrics[f"{k}/{where}"] = r.metrics[k]
    return part
