"""The cross-model part of a pipeline's report (Wu et al. 2024 section 4.2), from the runs' per-fact verdicts.

For every registered probe that declares a per-fact verdict (`factprobe.framework.verdict`, plug-ins
included) and has runs of two or more models, `cross_model_parts` reads each run's results.jsonl with
that verdict in its headline's direction (a fact is right when the verdict is True under a
higher-is-better headline, False under a lower-is-better one) and draws the cross-model maps of
`factprobe.report.cross_model_maps`: the model x relation heatmap of the share of right facts
(Figure 5 order: families by the score of their model closest to 7B, models by mean score), the
Pearson r between models with its within/across-family means, the subsumption eta of smaller in
larger models of a family and of fine-tuned models in their base. They become figures, tables
(`cross_model_<probe>`, `cross_model_pearson_<probe>`, `cross_model_families_<probe>`,
`cross_model_eta_<probe>`) and parent-run metrics (`pearson_within/<probe>`, `pearson_across/<probe>`,
`eta/<probe>/<small> vs <large>`) of one `ReportPart` per probe; family and size come from each
model's config (`factprobe.report.model_meta`). Runs on different fact sets are mapped on the facts
they share, and the table says so. What cannot be mapped (a model run in several settings, runs that
ask the facts differently, a table without the verdict) becomes a row of the `cross_model_notes`
table instead of failing the report.

The operations layer's report step (components/steps/report.py) only lays these parts
out and logs them. Pure: reads the run folders, imports no mlflow or kfp.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..framework.reporting import ReportPart, ReportRun


def _verdict_runs(runs: Sequence[ReportRun]) -> dict[str, list[ReportRun]]:
    """{probe: its finished runs with a results.jsonl} for the probes declaring a per-fact verdict,
    in registry order (plug-ins after the built-ins)."""
    from ..framework.registry import probe_names
    from ..framework.verdict import verdict_of

    by_probe: dict[str, list[ReportRun]] = {}
    for r in runs:
        if r.dir is not None and (r.dir / "results.jsonl").exists() and verdict_of(r.probe) is not None:
            by_probe.setdefault(r.probe, []).append(r)
    rank = {n: i for i, n in enumerate(probe_names())}
    return {n: by_probe[n] for n in sorted(by_probe, key=lambda n: rank.get(n, len(rank)))}


def _one_run_per_model(name: str, runs: Sequence[ReportRun], notes: list[dict]) -> list[ReportRun]:
    """The runs of the models run once; a note for each model run in several settings (when other
    models are there: one model alone has nothing to be mapped against)."""
    per_model: dict[str, list[ReportRun]] = {}
    for r in runs:
        per_model.setdefault(str(r.model), []).append(r)
    for model, rs in per_model.items():
        if len(rs) > 1 and len(per_model) > 1:
            notes.append(
                {
                    "probe": name,
                    "note": f"{model} has {len(rs)} runs ({', '.join(r.name for r in rs)}); "
                    f"left out of the cross-model maps, which take one run per model",
                }
            )
    return [rs[0] for rs in per_model.values() if len(rs) == 1]


def _maps_part(name: str, maps: Any, metric: str, notes: list[dict]) -> ReportPart:
    """The figures, tables and parent-run metrics of probe `name`'s maps (`build_maps`'s result),
    the compared share named `metric`; the maps' own notes are appended to `notes`."""
    from ..report.cross_model_maps import maps_figures

    res = maps.result
    part = ReportPart()
    figs = maps_figures(maps, metric)
    part.figures[f"{name}: {metric}, model x relation (Figure 5 order)"] = (f"cross_model_heatmap_{name}", figs["heatmap"])
    part.figures[f"{name}: Pearson r of per-relation {metric} between models"] = (f"cross_model_pearson_{name}", figs["pearson"])
    meta = {m["label"]: m for m in res["models"]}
    part.tables[f"cross_model_{name}"] = [
        {
            "model": lab,
            "family": meta[lab]["family"],
            "size": None if meta[lab]["size"] is None else int(meta[lab]["size"]),
            "base": meta[lab]["base"],
            metric: meta[lab]["accuracy"],
            **res["heatmap"][lab],
        }
        for lab in res["order"]
    ]
    fc = res["family_correlation"]
    part.tables[f"cross_model_pearson_{name}"] = [{"model": lab, **res["pearson"][lab]} for lab in res["order"]]
    part.tables[f"cross_model_families_{name}"] = [
        {"model pairs": "within a family", "mean Pearson r": fc["within"], "pairs": fc["n_within"]},
        {"model pairs": "across families", "mean Pearson r": fc["across"], "pairs": fc["n_across"]},
    ]
    eta_rows = [
        {
            "pair": k,
            "kind": "size",
            "eta_pooled": v["pooled"],
            "eta_relation_mean": v["relation_mean"],
            "n_joined": v["n_joined"],
            "n_small_known": v["n_small_known"],
        }
        for k, v in res["eta"].items()
    ]
    eta_rows += [
        {
            "pair": k,
            "kind": "fine-tuned",
            "eta_pooled": v["eta"],
            "eta_relation_mean": v["eta_relation_mean"],
            "n_joined": v["n_joined"],
            "n_small_known": v["n_finetuned_known"],
            "accuracy_delta": v["accuracy_delta"],
        }
        for k, v in res["base_vs_finetuned"].items()
    ]
    if eta_rows:
        part.tables[f"cross_model_eta_{name}"] = eta_rows
    notes.extend({"probe": name, "note": note} for note in res["notes"])
    for key, value in (("within", fc["within"]), ("across", fc["across"])):
        if value is not None:
            part.metrics[f"pearson_{key}/{name}"] = value
    for k, v in res["eta"].items():
        if v["pooled"] is not None:
            part.metrics[f"eta/{name}/{k}"] = v["pooled"]
    for k, v in res["base_vs_finetuned"].items():
        if v["eta"] is not None:
            part.metrics[f"eta/{name}/{k}"] = v["eta"]
    return part


def cross_model_parts(runs: Sequence[ReportRun]) -> list[ReportPart]:
    """One `ReportPart` per probe (registry order) that declares a per-fact verdict and has runs of
    at least two models, one run each, then a `cross_model_notes` part when anything was left out
    (see the module docstring)."""
    import pandas as pd

    from ..errors import FactprobeError
    from ..framework.verdict import verdict_table
    from ..report.cross_model_maps import RunFacts, align_runs, build_maps
    from ..report.model_meta import resolve_model_meta

    parts, notes = [], []
    for name, probe_runs in _verdict_runs(runs).items():
        single = _one_run_per_model(name, probe_runs, notes)
        if len(single) < 2:
            continue
        try:
            facts, metric = [], ""
            for r in single:
                df, verdict = verdict_table(
                    pd.read_json(r.dir / "results.jsonl", lines=True),
                    name,
                    f"run {r.name} ({r.dir})",
                    "the cross-model maps read one boolean verdict per fact",
                )
                metric = verdict.compared
                facts.append(
                    RunFacts(
                        model=str(r.model),
                        table=df,
                        ref=str(r.dir),
                        digest=r.metrics.get("data_digest"),
                        config=r.config,
                        probe=name,
                    )
                )
            aligned = align_runs(facts, intersect=True)
            maps = build_maps(aligned, resolve_model_meta([f.model for f in facts]), metric)
        except FactprobeError as e:
            notes.append({"probe": name, "note": f"no cross-model maps: {e}"})
            continue
        parts.append(_maps_part(name, maps, metric, notes))
    if notes:
        parts.append(ReportPart(tables={"cross_model_notes": notes}))
    return parts


__all__ = ["cross_model_parts"]
