"""Cross-model maps over many runs (Wu et al. 2024, section 4.2: Figures 5-6, Tables 1 and 10).

Every input is a per-fact table per model (the table every multiple-choice probe logs): columns
`relation` and `correct` (bool or 0/1), plus `fact_id` where facts are joined across models
(`subsumption`, `eta_pairs`). Tables are keyed by a model label (the name a figure shows).

- `accuracy_matrix`: model x relation accuracy (Figure 5's heatmap).
- `figure5_order`: Figure 5's row order: families by the accuracy of their model closest to 7B
  parameters (best first), models within a family by their average accuracy (best first);
  `order_models`: grouped by family, smallest model first within a family (the order of size pairs).
- `pearson_matrix`: Pearson r of per-relation accuracy between every two models (Figure 6 and the
  paper's Table 14); `family_correlation`: its within-family and across-family means (fine-tuned
  models take no part in the within-family mean: the paper's families are pre-trained models).
- `subsumption`: eta(small | large) = |phi(small) ∩ phi(large)| / |phi(small)|, phi = the facts a model
  gets right, over the facts both ran. Two aggregates, both kept: `pooled` takes F = all joined facts;
  `relation_mean` takes F = each relation's facts and averages over the relations where eta is defined,
  which is the paper's Table 1 number ("average subsumption rate ... over the relations").
- `eta_pairs`: eta for every within-family (smaller, larger) pair of pre-trained models (a fine-tuned
  model is never in a size pair), and fine-tuned models against their base; `eta_family_summary`:
  Table 1 (each family's smallest against its largest model).

Pure functions (numpy, pandas, scipy). Undefined values are NaN; pass results through
`metrics.json_safe.json_safe` before writing strict JSON. Bad tables raise `DataError` naming the model.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence

import numpy as np
import pandas as pd

from ..errors import DataError
from .comparison import _as_bool_array, align_templates, join_runs, pearson_per_relation, subsumption_by_relation


def _correct(table: pd.DataFrame, model: str) -> np.ndarray:
    missing = [c for c in ("relation", "correct") if c not in table.columns]
    if missing:
        raise DataError(f"model {model!r}: per-fact table lacks column(s) {missing}; has {list(table.columns)}")
    try:
        return _as_bool_array(table["correct"], f"model {model!r}: column 'correct'")
    except ValueError as e:
        raise DataError(str(e)) from None


def accuracy_matrix(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Model x relation accuracy: rows are the models in `tables`' order, columns the relations of any
    model, sorted. A cell is the share of the model's rows of that relation with `correct` true; NaN
    where the model has no row of the relation. Each table has columns `relation` and `correct` (one row
    per fact; a prompt-baseline table with one row per (fact, template) gives the template-averaged
    accuracy). An empty mapping gives an empty frame."""
    rows: dict[str, pd.Series] = {}
    for model, table in tables.items():
        correct = _correct(table, model)
        rows[model] = pd.Series(correct, dtype=float).groupby(table["relation"].astype(str).to_numpy()).mean()
    if not rows:
        return pd.DataFrame(dtype=float)
    relations = sorted({r for s in rows.values() for r in s.index})
    out = pd.DataFrame({m: s.reindex(relations) for m, s in rows.items()}).T
    out.index.name, out.columns.name = "model", "relation"
    return out.astype(float)


def _known(value) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def order_models(models: Sequence[str], families: Mapping[str, str | None], sizes: Mapping[str, float | None]) -> list[str]:
    """Figure 5's order: models grouped by family, families in the order their first model appears in
    `models`; within a family, ascending size. A model without a size comes last in its family, models
    without a family come after every family; ties and unknowns keep their order in `models` (stable)."""
    fam_rank: dict[str, int] = {}
    for m in models:
        fam = families.get(m)
        if _known(fam) and fam not in fam_rank:
            fam_rank[fam] = len(fam_rank)

    def key(item: tuple[int, str]) -> tuple:
        i, m = item
        fam, size = families.get(m), sizes.get(m)
        return (
            fam_rank[fam] if _known(fam) else len(fam_rank),
            0 if _known(size) else 1,
            float(size) if _known(size) else 0.0,
            i,
        )

    return [m for _, m in sorted(enumerate(models), key=key)]


#: Figure 5 ranks a family by its model closest to this many parameters (wu2024 section 4.2.1, footnote 3)
REFERENCE_SIZE = 7e9


def figure5_order(
    models: Sequence[str],
    families: Mapping[str, str | None],
    sizes: Mapping[str, float | None],
    accuracies: Mapping[str, float],
    reference: float = REFERENCE_SIZE,
) -> list[str]:
    """Figure 5's order (wu2024: "grouped by family and arranged from left to right based on the
    accuracy of the model closest to 7 billion parameters. Within each family, models are ordered by
    their average accuracy"): families by the accuracy of their model whose size is closest to
    `reference` in parameters (the paper's "gap of <= 1B parameters"; best first; a family without a known size
    ranks by its best model), models within a
    family by accuracy (best first); models without a family last, by accuracy. Ties (and NaN
    accuracies, which rank last) keep their order in `models`."""

    def acc(m: str) -> float:
        v = accuracies.get(m)
        return float(v) if _known(v) else -math.inf

    by_family: dict[str, list[str]] = {}
    for m in models:
        fam = families.get(m)
        if _known(fam):
            by_family.setdefault(fam, []).append(m)

    def family_key(fam: str) -> float:
        sized = [m for m in by_family[fam] if _known(sizes.get(m))]
        if not sized:
            return max(acc(m) for m in by_family[fam])
        closest = min(sized, key=lambda m: (abs(float(sizes[m]) - reference), by_family[fam].index(m)))
        return acc(closest)

    fams = sorted(by_family, key=lambda f: -family_key(f))  # sorted() is stable: ties keep first appearance
    out = [m for f in fams for m in sorted(by_family[f], key=lambda m: -acc(m))]
    return out + sorted((m for m in models if not _known(families.get(m))), key=lambda m: -acc(m))


def pearson_matrix(matrix: pd.DataFrame) -> pd.DataFrame:
    """Pearson r (`scipy.stats.pearsonr`) of per-relation accuracy between every two models (rows of
    `matrix`, as from `accuracy_matrix`), over the relations both have (non-NaN in both rows). NaN when
    fewer than 2 relations are shared or either model is constant over them; the diagonal is 1.0 except
    where that holds. Symmetric, rows and columns in `matrix`'s row order."""
    models = list(matrix.index)
    acc = {m: {r: float(v) for r, v in matrix.loc[m].items() if not math.isnan(float(v))} for m in models}
    out = pd.DataFrame(np.nan, index=models, columns=models, dtype=float)
    for i, a in enumerate(models):
        for b in models[i:]:
            r = pearson_per_relation(acc[a], acc[b])
            out.loc[a, b] = out.loc[b, a] = r
    out.index.name, out.columns.name = "model", "model"
    return out


def family_correlation(pearson: pd.DataFrame, families: Mapping[str, str | None], finetuned: Collection[str] = ()) -> dict:
    """Figure 6's means: the mean Pearson r over the pairs of models of one family (`within`) and over
    the pairs of models of two different families (`across`). Off-diagonal pairs only, each unordered
    pair once; pairs whose r is NaN and pairs with a model of unknown family are left out, and so are
    the within-family pairs with a model of `finetuned` (a fine-tuned model is not a pre-trained
    member of its base's family; its across-family pairs stay). Returns::

        {"within", "across", "n_within", "n_across",
         "families": {family_a: {family_b: mean r}}}   # the family x family matrix of Figure 6

    `families[f][f]` is f's within-family mean (NaN for a family of one model). NaN means where no pair
    is left."""
    models = list(pearson.index)
    within: list[float] = []
    across: list[float] = []
    by_pair: dict[tuple[str, str], list[float]] = {}
    for i, a in enumerate(models):
        for b in models[i + 1 :]:
            fa, fb = families.get(a), families.get(b)
            r = float(pearson.loc[a, b])
            if not (_known(fa) and _known(fb)) or math.isnan(r) or (fa == fb and (a in finetuned or b in finetuned)):
                continue
            (within if fa == fb else across).append(r)
            by_pair.setdefault(tuple(sorted((fa, fb))), []).append(r)
    fams = list(dict.fromkeys(f for m in models if _known(f := families.get(m))))
    table = {
        fa: {fb: (float(np.mean(v)) if (v := by_pair.get(tuple(sorted((fa, fb))))) else float("nan")) for fb in fams}
        for fa in fams
    }
    return {
        "within": float(np.mean(within)) if within else float("nan"),
        "across": float(np.mean(across)) if across else float("nan"),
        "n_within": len(within),
        "n_across": len(across),
        "families": table,
    }


def subsumption(small: pd.DataFrame, large: pd.DataFrame, key: str = "fact_id") -> dict:
    """eta(small | large): the share of the facts the smaller model knows that the larger one also knows,
    over the facts both ran (inner join on `key`; `comparison.join_runs`, which refuses duplicate ids,
    an empty join and a fact whose relation differs). Two prompt-baseline runs are paired per (fact,
    template); one against a one-row-per-fact run is first reduced to one verdict per fact by majority
    (`comparison.align_templates`). Returns::

        {"pooled": eta over all joined facts,
         "relation_mean": eta per relation averaged over the relations where it is defined (Table 1),
         "per_relation": {rel: eta}, "n_relations": relations with a defined eta,
         "n_joined", "n_small_known", "n_large_known", "n_both_known",
         "acc_small", "acc_large": accuracies on the joined facts, "note": what align_templates did or ""}

    eta is NaN where the smaller model knows no fact (pooled, per relation, and the mean when no
    relation is left)."""
    a, b, note = align_templates(small, large)
    joined = join_runs(a, b, key)
    s = joined["correct_a"].to_numpy(dtype=bool)
    lg = joined["correct_b"].to_numpy(dtype=bool)
    eta = subsumption_by_relation(s, lg, joined["relation"].astype(str).to_numpy())
    return {
        "pooled": eta["eta_pooled"],
        "relation_mean": eta["eta_relation_mean"],
        "per_relation": eta["per_relation"],
        "n_relations": eta["n_relations"],
        "n_joined": int(s.size),
        "n_small_known": int(s.sum()),
        "n_large_known": int(lg.sum()),
        "n_both_known": int((s & lg).sum()),
        "acc_small": float(s.mean()),
        "acc_large": float(lg.mean()),
        "note": note,
    }


def eta_pairs(
    tables: Mapping[str, pd.DataFrame],
    families: Mapping[str, str | None],
    sizes: Mapping[str, float | None],
    base_of: Mapping[str, str] | None = None,
    finetuned: Collection[str] = (),
) -> dict[str, dict]:
    """eta for every within-family pair of models of different known sizes, smaller given larger, keyed
    `"<small> vs <large>"` in `order_models` order; and, for each `{fine-tuned: base}` of `base_of` whose
    two models are both in `tables`, `"<fine-tuned> vs <base>"`: eta(fine-tuned | base), the share of
    the fine-tuned model's knowledge already in its base (the paper's Table 10). Each value is
    `subsumption(...)` plus `"kind"` ("size" or "fine-tuned"), `"family"`, `"small"`, `"large"`,
    `"size_small"`, `"size_large"` (for a fine-tuned pair, small is the fine-tuned model and large its
    base). Models without a family or a size, two models of one family with the same size, and any
    fine-tuned model (a key of `base_of`, or in `finetuned`: fine-tuned from a base that may not be
    in the runs) form no size pair: the paper's size pairs are pre-trained models. A name in
    `base_of` that is not in `tables` raises DataError naming it."""
    base_of = dict(base_of or {})
    unknown = sorted({m for pair in base_of.items() for m in pair} - set(tables))
    if unknown:
        raise DataError(f"base_of names model(s) not in the runs: {', '.join(unknown)}; the runs are {', '.join(tables)}")
    ordered = order_models(list(tables), families, sizes)
    tuned = set(base_of) | set(finetuned)
    out: dict[str, dict] = {}

    def add(small: str, large: str, kind: str) -> None:
        entry = subsumption(tables[small], tables[large])
        entry.update(
            kind=kind,
            family=families.get(small),
            small=small,
            large=large,
            size_small=sizes.get(small),
            size_large=sizes.get(large),
        )
        out[f"{small} vs {large}"] = entry

    for i, small in enumerate(ordered):
        for large in ordered[i + 1 :]:
            fam, s_small, s_large = families.get(small), sizes.get(small), sizes.get(large)
            if (
                _known(fam)
                and fam == families.get(large)
                and _known(s_small)
                and _known(s_large)
                and float(s_small) < float(s_large)
                and small not in tuned
                and large not in tuned
            ):
                add(small, large, "size")
    for tuned, base in base_of.items():
        add(tuned, base, "fine-tuned")
    return out


def eta_family_summary(pairs: Mapping[str, dict]) -> dict[str, dict]:
    """Table 1 from `eta_pairs`' size pairs: per family, the pair of its smallest and its largest model
    (`small`, `large`, their sizes and accuracies on the joined facts, `pooled`, `relation_mean`), plus
    `mean_over_pairs` (the mean `relation_mean` over all its size pairs, NaNs left out) and `n_pairs`."""
    by_family: dict[str, list[dict]] = {}
    for entry in pairs.values():
        if entry.get("kind") == "size":
            by_family.setdefault(entry["family"], []).append(entry)
    out: dict[str, dict] = {}
    for fam, entries in by_family.items():
        smallest = min(float(e["size_small"]) for e in entries)
        largest = max(float(e["size_large"]) for e in entries)
        ends = next(e for e in entries if float(e["size_small"]) == smallest and float(e["size_large"]) == largest)
        means = [e["relation_mean"] for e in entries if not math.isnan(e["relation_mean"])]
        out[fam] = {
            **{
                k: ends[k]
                for k in (
                    "small",
                    "large",
                    "size_small",
                    "size_large",
                    "acc_small",
                    "acc_large",
                    "pooled",
                    "relation_mean",
                    "n_joined",
                )
            },
            "mean_over_pairs": float(np.mean(means)) if means else float("nan"),
            "n_pairs": len(entries),
        }
    return out


__all__ = [
    "accuracy_matrix",
    "eta_family_summary",
    "eta_pairs",
    "family_correlation",
    "figure5_order",
    "order_models",
    "pearson_matrix",
    "subsumption",
]
