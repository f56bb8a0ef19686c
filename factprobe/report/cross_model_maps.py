"""Cross-model maps over many runs, as `factprobe compare RUN RUN RUN --out DIR` and the report step
show them (Wu et al. 2024, section 4.2: Figure 5, Figure 6, Tables 1 and 10).

- `align_runs`: the runs' per-fact tables made comparable: one run per model, one verdict per fact
  (prompt-baseline templates paired or reduced as `compare` does), and the same facts in every run.
  Runs built on different fact sets (different test-data digests, different fact ids, or
  configurations that select other facts) are refused in one line naming the digests, unless
  `intersect` (then the facts all runs share, and a note says how many).
- `build_maps`: the model x relation accuracy heatmap in Figure 5's order (families by the accuracy
  of their model closest to 7B, models by average accuracy), the Pearson r of per-relation accuracy
  between every two models with the within-family and across-family means, eta (the share of the
  smaller model's known facts the larger one also knows) for every within-family smaller/larger pair
  of pre-trained models, as the mean over relations (the paper's Tables 1 and 10) and pooled, and
  each fine-tuned model against its base (eta and the accuracy delta). A fine-tuned model (one with
  a base) is never in a size pair nor in the within-family Pearson mean. The numbers come from
  `factprobe.metrics.cross_model`; family, size and base from `factprobe.report.model_meta`.
- `format_maps`: the console summary (eta as the relation mean first, the pooled value second and
  labelled; a line saying when families are by architecture, not pretraining lineage, i.e. without
  `--model-meta`); `maps_figures`: the heatmap and Pearson figures.

Pure: no mlflow, no tracking. Undefined numbers are NaN in memory and null in `CrossModelMaps.result`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd

from ..errors import ConfigError, DataError
from ..metrics.comparison import TEMPLATE_RULES, collapse_templates, data_differences, describe_differences
from .model_meta import ModelMeta, base_pairs, unique_labels

#: run options that change how a fact is asked (other distractors or in-context examples): runs that
#: differ in one test other items even on the facts they share, so not even `intersect` joins them
ITEM_OPTIONS = ("choices", "train_data", "seed")
#: the console lists every pair's Pearson r up to this many models
SHOW_PAIRS_UP_TO = 6
#: the console line when a family is not known from --model-meta (model_meta: config.json's model_type)
FAMILIES_BY_ARCHITECTURE = (
    "families are by architecture (config.json's model_type), not by pretraining lineage: "
    "e.g. SmolLM2 falls in one family with any Llama; give --model-meta FILE with each model's "
    "family for the paper's families"
)


@dataclass
class RunFacts:
    """One run as the maps take it: the model it probed (as its run names it), its per-fact table
    (`fact_id`, `relation`, `correct`, optionally `template`), where it came from (`ref`), its
    test-data digest and flat configuration where known, and its probe."""

    model: str
    table: pd.DataFrame
    ref: str
    digest: str | None = None
    config: dict | None = None
    probe: str | None = None


@dataclass
class Aligned:
    """`align_runs`' result: {label: per-fact table} in the runs' order, {label: run}, the notes to
    show, the number of facts every table holds, and the intersection info (None without it)."""

    tables: dict[str, pd.DataFrame]
    runs: dict[str, RunFacts]
    notes: list[str] = field(default_factory=list)
    n_facts: int = 0
    intersect: dict | None = None


def _has_templates(df: pd.DataFrame) -> bool:
    return "template" in df.columns and bool(df["template"].notna().any())


def _digest_groups(labels: Sequence[str], runs: Mapping[str, RunFacts], sets: Mapping[str, set]) -> str:
    groups: dict[str, list[str]] = {}
    for lab in labels:
        groups.setdefault(runs[lab].digest or "unknown (no digest recorded)", []).append(lab)
    return "; ".join(f"data digest {d}: {', '.join(f'{x} ({len(sets[x])} facts)' for x in labs)}" for d, labs in groups.items())


def align_runs(runs: Sequence[RunFacts], *, intersect: bool = False, templates: str = "majority") -> Aligned:
    """The runs' tables, labelled by model (`model_meta.unique_labels`), made comparable (see the
    module docstring). Raises ConfigError for fewer than two runs, two runs of one model, or runs
    whose configurations ask the same facts differently (`ITEM_OPTIONS`); DataError for runs on
    different fact sets (naming each run's data digest and fact count) unless `intersect`, and for
    runs that share no fact."""
    if templates not in TEMPLATE_RULES:
        raise ConfigError(f"templates must be one of {', '.join(TEMPLATE_RULES)}, got {templates!r}")
    if len(runs) < 2:
        raise ConfigError(f"cross-model maps need runs of at least two models, got {len(runs)}")
    seen: dict[str, str] = {}
    for r in runs:
        if r.model in seen:
            raise ConfigError(
                f"runs {seen[r.model]} and {r.ref} both probe model {r.model}; the cross-model maps take one run per model"
            )
        seen[r.model] = r.ref
    labels = unique_labels([r.model for r in runs])
    by_label = {labels[r.model]: r for r in runs}
    notes: list[str] = []

    # configurations: what selects the facts, and what changes how a fact is asked
    first_label, first = next(iter(by_label.items()))
    option_diffs = {}
    for lab, r in list(by_label.items())[1:]:
        diffs = data_differences(first.config, r.config)
        item = {k: v for k, v in diffs.items() if k in ITEM_OPTIONS}
        if item:
            raise ConfigError(
                f"runs {first_label} and {lab} ask the facts differently: "
                f"{describe_differences(item).replace('(a)', f'({first_label})').replace('(b)', f'({lab})')}; "
                f"rerun one with the other's options so that both test the same items"
            )
        select = {k: v for k, v in diffs.items() if k not in ITEM_OPTIONS}
        if select:
            option_diffs[lab] = describe_differences(select).replace("(a)", f"({first_label})").replace("(b)", f"({lab})")

    # one verdict per fact: templates paired when every run has them, reduced by `templates` otherwise
    tables: dict[str, pd.DataFrame] = {}
    with_t = [lab for lab, r in by_label.items() if _has_templates(r.table)]
    for lab, r in by_label.items():
        df = r.table
        missing = [c for c in ("fact_id", "relation", "correct") if c not in df.columns]
        if missing:
            raise DataError(f"run {r.ref} ({lab}): per-fact table lacks column(s) {missing}; has {list(df.columns)}")
        if with_t and len(with_t) == len(by_label):
            df = df.assign(fact_id=df["fact_id"].astype(str) + "#" + df["template"].astype(str))
        elif lab in with_t:
            df = collapse_templates(df, templates)
        df = df[["fact_id", "relation", "correct"]].copy()
        dup = df["fact_id"][df["fact_id"].duplicated()]
        if len(dup):
            raise DataError(
                f"run {r.ref} ({lab}): {dup.nunique()} duplicate fact_id value(s), e.g. {dup.iloc[0]!r}; "
                f"each fact must appear once"
            )
        tables[lab] = df
    if with_t and len(with_t) == len(by_label):
        notes.append("every run scores one row per (fact, template): compared per template")
    elif with_t:
        notes.append(
            f"run(s) {', '.join(with_t)} score one row per (fact, template): reduced to one verdict per fact "
            f"by the {templates!r} rule over its templates"
        )

    # the same facts everywhere
    sets = {lab: set(df["fact_id"].astype(str)) for lab, df in tables.items()}
    common = set.intersection(*sets.values())
    digests = {r.digest for r in by_label.values() if r.digest}
    differ = len(digests) > 1 or len({frozenset(s) for s in sets.values()}) > 1
    info = None
    if differ:
        opts = f"; options: {'; '.join(option_diffs.values())}" if option_diffs else ""
        if not intersect:
            raise DataError(
                f"the runs test different fact sets ({_digest_groups(list(tables), by_label, sets)}{opts}); "
                f"rerun them on the same data, or pass --intersect to compare the {len(common)} facts "
                f"all {len(tables)} runs share"
            )
        if not common:
            raise DataError(
                f"the runs share no fact ({_digest_groups(list(tables), by_label, sets)}); "
                f"there is nothing to compare, even with --intersect"
            )
        tables = {lab: df[df["fact_id"].astype(str).isin(common)].reset_index(drop=True) for lab, df in tables.items()}
        info = {
            "n_common": len(common),
            "n_per_run": {lab: len(s) for lab, s in sets.items()},
            "digests": {lab: by_label[lab].digest for lab in tables},
        }
        notes.append(
            f"--intersect: compared on the {len(common)} facts all {len(tables)} runs share "
            f"(of {', '.join(f'{lab} {len(s)}' for lab, s in sets.items())})"
        )
    return Aligned(tables=tables, runs=by_label, notes=notes, n_facts=len(common), intersect=info)


@dataclass
class CrossModelMaps:
    """`build_maps`' result: `result` (JSON-ready: what `cross_model.json` holds), the accuracy
    `matrix` and `pearson` frames (rows in `order`), and `order` (Figure 5's model order)."""

    result: dict
    matrix: pd.DataFrame
    pearson: pd.DataFrame
    order: list[str]


def _plain(value):
    """NaN -> None in a {key: number} mapping (nested), with no `_reason` keys: keys stay relations/models."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _frame_dict(df: pd.DataFrame, rows: Sequence[str], cols: Sequence[str] | None = None) -> dict:
    cols = list(df.columns) if cols is None else list(cols)
    return {r: {c: (None if math.isnan(v := float(df.loc[r, c])) else v) for c in cols} for r in rows}


def build_maps(aligned: Aligned, metas: Mapping[str, ModelMeta], metric: str = "accuracy") -> CrossModelMaps:
    """The cross-model maps of `aligned` (see the module docstring); `metas` by model (as the runs
    name them, `model_meta.resolve_model_meta`). `result` holds::

        {"metric", "n_facts", "notes", "intersect",
         "families_by": "lineage" (every family from --model-meta) or "architecture" (from config.json),
         "models": [{label, model, family, size, base, source, ref, probe, digest, accuracy,
                     accuracy_relation_mean}] (Figure 5 order),
         "order": [label, ...],
         "heatmap": {label: {relation: accuracy}},
         "pearson": {label: {label: r}},
         "family_correlation": {"within", "across", "n_within", "n_across", "families"},
         "eta": {"<small> vs <large>": {"pooled", "relation_mean", "per_relation", "n_joined", ...}},
         "eta_families": {family: Table 1's smallest-vs-largest row},
         "base_vs_finetuned": {"<fine-tuned> vs <base>": {"eta" (fine-tuned | base, pooled),
              "eta_relation_mean", "eta_per_relation", "accuracy_finetuned", "accuracy_base",
              "accuracy_delta" (fine-tuned - base), "accuracy_delta_per_relation", "n_joined"}}}

    Undefined numbers (a model that knows no fact, fewer than two relations, ...) are null."""
    from ..metrics.cross_model import (
        accuracy_matrix,
        eta_family_summary,
        eta_pairs,
        family_correlation,
        figure5_order,
        pearson_matrix,
    )
    from ..metrics.json_safe import json_safe

    labels = list(aligned.tables)
    meta = {lab: metas.get(aligned.runs[lab].model) or ModelMeta(model=aligned.runs[lab].model) for lab in labels}
    families = {lab: m.family for lab, m in meta.items()}
    sizes = {lab: m.size for lab, m in meta.items()}
    by_model = {aligned.runs[lab].model: lab for lab in labels}
    base_of = {by_model[t]: by_model[b] for t, b in base_pairs({aligned.runs[lab].model: meta[lab] for lab in labels}).items()}

    finetuned = {lab for lab, m in meta.items() if m.base}  # fine-tuned, whether or not its base is in the runs
    full = accuracy_matrix(aligned.tables)
    rel_mean = {lab: float(full.loc[lab].mean()) if full.loc[lab].notna().any() else float("nan") for lab in labels}
    order = figure5_order(labels, families, sizes, rel_mean)
    matrix = full.loc[order]
    pearson = pearson_matrix(matrix)
    fam = family_correlation(pearson, families, finetuned)
    pairs = eta_pairs(aligned.tables, families, sizes, base_of, finetuned)
    eta = {k: {**v, "per_relation": _plain(v["per_relation"])} for k, v in pairs.items() if v.get("kind") == "size"}
    fam = {**fam, "families": _plain(fam["families"])}
    tuned = {}
    for k, v in pairs.items():
        if v.get("kind") != "fine-tuned":
            continue
        ft, base = v["small"], v["large"]
        rels = [r for r in matrix.columns if not (math.isnan(matrix.loc[ft, r]) or math.isnan(matrix.loc[base, r]))]
        tuned[k] = {
            "finetuned": ft,
            "base": base,
            "eta": v["pooled"],
            "eta_relation_mean": v["relation_mean"],
            "eta_per_relation": _plain(v["per_relation"]),
            "accuracy_finetuned": v["acc_small"],
            "accuracy_base": v["acc_large"],
            "accuracy_delta": v["acc_small"] - v["acc_large"],
            "accuracy_delta_per_relation": {r: float(matrix.loc[ft, r] - matrix.loc[base, r]) for r in rels},
            "n_joined": v["n_joined"],
            "n_finetuned_known": v["n_small_known"],
            "n_both_known": v["n_both_known"],
        }
    overall = {lab: float(pd.Series(aligned.tables[lab]["correct"]).astype(bool).mean()) for lab in labels}
    models = [
        {
            "label": lab,
            **meta[lab].to_dict(),
            "base": (by_model.get(meta[lab].base) or meta[lab].base),
            "ref": aligned.runs[lab].ref,
            "probe": aligned.runs[lab].probe,
            "digest": aligned.runs[lab].digest,
            "accuracy": overall[lab],
            "accuracy_relation_mean": rel_mean[lab],
        }
        for lab in order
    ]
    by_lineage = all(m.source.startswith("meta file") for m in meta.values())
    notes = list(aligned.notes)
    if finetuned:
        notes.append(
            f"fine-tuned model(s) {', '.join(sorted(finetuned))}: in no size pair and in no within-family "
            f"Pearson mean (the paper's families are pre-trained models)"
        )
    result = {
        "metric": metric,
        "n_facts": aligned.n_facts,
        "families_by": "lineage" if by_lineage else "architecture",
        "notes": notes,
        "intersect": aligned.intersect,
        "models": models,
        "order": order,
        "heatmap": _frame_dict(matrix, order),
        "pearson": _frame_dict(pearson, order, order),
        "family_correlation": fam,
        "eta": eta,
        "eta_families": eta_family_summary(pairs),
        "base_vs_finetuned": tuned,
    }
    return CrossModelMaps(result=json_safe(result), matrix=matrix, pearson=pearson.loc[order, order], order=order)


def _num(v, fmt: str = ".3f") -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def _size(v) -> str:
    if v is None:
        return "?"
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if v >= scale:
            return f"{v / scale:.3g}{unit}"
    return f"{v:.0f}"


def _pairs(n: int) -> str:
    return f"{n} pair" if n == 1 else f"{n} pairs"


def format_maps(result: Mapping) -> str:
    """The console summary of `build_maps(...).result`: the models (family, size), the heatmap as a
    table (relations as rows, models as columns, the overall accuracy last), the within- and
    across-family Pearson means (and each pair's r up to `SHOW_PAIRS_UP_TO` models), eta per pair
    and each fine-tuned model against its base."""
    order = result["order"]
    metric = result.get("metric", "accuracy")
    models = {m["label"]: m for m in result["models"]}
    lines = [f"cross-model maps of {len(order)} runs over {result['n_facts']} facts ({metric})"]
    if result.get("families_by", "architecture") != "lineage":
        lines.append(FAMILIES_BY_ARCHITECTURE)
    lines += list(result.get("notes") or [])
    lines.append("")
    for i, lab in enumerate(order):
        m = models[lab]
        base = f", fine-tuned from {m['base']}" if m.get("base") else ""
        lines.append(f"  M{i + 1} = {lab}  (family {m.get('family') or '?'}, size {_size(m.get('size'))}{base})")
    lines.append("")
    w = 8
    heat = result["heatmap"]
    rels = sorted({r for row in heat.values() for r in row})
    lines.append(f"{metric + ' per relation':<22}" + "".join(f"{f'M{i + 1}':>{w}}" for i in range(len(order))))
    for rel in rels:
        lines.append(f"{rel:<22}" + "".join(f"{_num(heat[lab].get(rel), '.3f'):>{w}}" for lab in order))
    lines.append(f"{'overall':<22}" + "".join(f"{_num(models[lab]['accuracy'], '.3f'):>{w}}" for lab in order))
    fc = result["family_correlation"]
    lines += [
        "",
        (
            f"Pearson r of per-relation {metric}: within families {_num(fc['within'])} ({_pairs(fc['n_within'])}), "
            f"across families {_num(fc['across'])} ({_pairs(fc['n_across'])})"
        ),
    ]
    if len(order) <= SHOW_PAIRS_UP_TO:  # more models: the matrix is in cross_model.json and pearson.png
        for i, a in enumerate(order):
            for b in order[i + 1 :]:
                lines.append(f"  r({a}, {b}) = {_num(result['pearson'][a][b])}")
    if result["eta"]:
        lines += [
            "",
            (
                "subsumption eta(small | large): share of the smaller model's known facts the larger one also "
                "knows, mean over relations (as the paper's Table 1); pooled over all facts second"
            ),
        ]
        for k, v in result["eta"].items():
            lines.append(
                f"  {k}: eta {_num(v['relation_mean'])} (pooled over facts {_num(v['pooled'])}; "
                f"{v['n_small_known']} of {v['n_joined']} facts known by the smaller)"
            )
    else:
        lines += [
            "",
            ("subsumption eta: no two models of one family with known, different sizes (give family and size with --model-meta)"),
        ]
    for k, v in result.get("base_vs_finetuned", {}).items():
        lines.append(
            f"fine-tuned vs base {k}: {metric} delta {_num(v['accuracy_delta'], '+.3f')} "
            f"({_num(v['accuracy_finetuned'])} vs {_num(v['accuracy_base'])}), eta(fine-tuned | base) "
            f"{_num(v['eta_relation_mean'])} mean over relations, as Table 10 (pooled over facts "
            f"{_num(v['eta'])})"
        )
    return "\n".join(lines)


def maps_figures(maps: CrossModelMaps, metric: str = "accuracy") -> dict[str, object]:
    """{"heatmap": Figure 5, "pearson": Figure 6} of `maps` (matplotlib Figures)."""
    from .cross_model_plots import heatmap_figure, pearson_figure

    return {
        "heatmap": heatmap_figure(maps.matrix, maps.order, title=f"{metric}: model x relation"),
        "pearson": pearson_figure(maps.pearson, maps.order, title=f"Pearson r of per-relation {metric}"),
    }


__all__ = [
    "FAMILIES_BY_ARCHITECTURE",
    "ITEM_OPTIONS",
    "Aligned",
    "CrossModelMaps",
    "RunFacts",
    "align_runs",
    "build_maps",
    "format_maps",
    "maps_figures",
]
