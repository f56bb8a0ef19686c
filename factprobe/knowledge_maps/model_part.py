"""The per-model part of a map and the cross-model part, streamed to parquet one model at a time.

Per model (its runs coded against the joined facts): the facts x probes matrix of verdicts and gold
probabilities; the robust shares with their intervals (`stats.share_stats`), overall and per relation;
every probe pair's kappa and eta both ways (`stats.pair_stats`), overall and per relation; the
verdicts of every joined fact and the disputed ones, sorted by how much the probes disagree
(`stats.disagreement`, then the spread of the gold probabilities, widest first); two figures.
Across models: the facts known under every probe by every model, and the knowledge sharing rates of
the robust sets (`stats.sharing`). Memory: one model's matrix at a time plus a facts x models boolean
matrix of robust sets.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..probes.reporting import model_label
from ..report.plots import save_png
from . import figures, stats

PROB = ":gold_prob"
#: disputed facts per model in the summary and on the page (all of them are in tables/disputed.parquet)
TOP_DISPUTED = 20


@dataclass
class ModelPart:
    """What every model's part shares: the joined facts (ids, relation codes into `relations`), the
    probes in order, and `position` (a fact's code in the map's index -> its row, -1 when not joined)."""

    fact_id: np.ndarray
    relations: list[str]
    rel: np.ndarray
    probes: list[str]
    position: np.ndarray


def matrix(part: ModelPart, runs: dict) -> tuple[np.ndarray, np.ndarray]:
    """(verdicts facts x probes bool, gold probabilities facts x probes float32) of one model from its
    runs by probe (`build.RunFacts`)."""
    n, p = part.fact_id.size, len(part.probes)
    right = np.zeros((n, p), dtype=bool)
    prob = np.full((n, p), np.nan, dtype=np.float32)
    for j, probe in enumerate(part.probes):
        r = runs[probe]
        rows = part.position[r.codes]
        ok = rows >= 0
        right[rows[ok], j] = r.right[ok]
        prob[rows[ok], j] = r.prob[ok]
    return right, prob


def _spread(prob: np.ndarray) -> np.ndarray:
    """Per fact, the largest minus the smallest gold probability over the probes that have one; NaN
    where fewer than two have one."""
    finite = np.isfinite(prob)
    hi = np.where(finite, prob, -np.inf).max(axis=1)
    lo = np.where(finite, prob, np.inf).min(axis=1)
    return np.where(finite.sum(axis=1) >= 2, hi - lo, np.nan).astype(np.float32)


class _Writer:
    """A parquet file written one table at a time (one model's rows)."""

    def __init__(self, path: Path) -> None:
        self.path, self.writer = path, None

    def write(self, df: pd.DataFrame) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pandas(df, preserve_index=False)
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.path, table.schema)
        self.writer.write_table(table.cast(self.writer.schema))

    def close(self, empty: pd.DataFrame) -> None:
        if self.writer is None:
            empty.to_parquet(self.path, index=False)
        else:
            self.writer.close()


def _model_tables(model: str, part: ModelPart, right: np.ndarray, prob: np.ndarray) -> tuple[pd.DataFrame, np.ndarray]:
    """(the verdicts of every joined fact of `model`, the order of its disputed rows)."""
    n_probes = len(part.probes)
    k = right.sum(axis=1)
    cols = {
        "model": model,
        "fact_id": part.fact_id,
        "relation": np.asarray(part.relations, dtype=object)[part.rel],
        "n_right": k.astype(np.int16),
        "n_probes": np.int16(n_probes),
        "disagreement": stats.disagreement(k, n_probes).astype(np.float32),
        "gold_prob_spread": _spread(prob),
    }
    for j, p in enumerate(part.probes):
        cols[p] = right[:, j]
        cols[p + PROB] = prob[:, j]
    table = pd.DataFrame(cols)
    disputed = np.flatnonzero((k > 0) & (k < n_probes))
    spread = np.nan_to_num(table["gold_prob_spread"].to_numpy()[disputed], nan=-1.0)
    order = np.lexsort((part.fact_id[disputed], part.rel[disputed], -spread, -table["disagreement"].to_numpy()[disputed]))
    return table, disputed[order]


def _pairs(model: str, part: ModelPart, right: np.ndarray, n_rel: int) -> tuple[list[dict], list[dict], np.ndarray, np.ndarray]:
    """(pair rows, pair-per-relation rows, kappa matrix, eta(row | column) matrix) of one model."""
    p = len(part.probes)
    kappa, eta = np.eye(p), np.eye(p)
    eta[np.diag_indices(p)] = np.where(right.any(axis=0), 1.0, np.nan)
    rows, by_rel = [], []
    for a in range(p):
        for b in range(a + 1, p):
            out, per_rel = stats.pair_stats(right[:, a], right[:, b], part.rel, n_rel)
            rows.append({"model": model, "probe_a": part.probes[a], "probe_b": part.probes[b], **out})
            kappa[a, b] = kappa[b, a] = out["kappa"]
            eta[a, b], eta[b, a] = out["eta_a_given_b"], out["eta_b_given_a"]
            k_rel = stats.kappa(per_rel)
            e_ab, e_ba = stats.eta(per_rel)
            for r in range(n_rel):
                by_rel.append(
                    {
                        "model": model,
                        "relation": part.relations[r],
                        "probe_a": part.probes[a],
                        "probe_b": part.probes[b],
                        "n_facts": int(per_rel[r].sum()),
                        "n_both": int(per_rel[r, 0]),
                        "n_a_only": int(per_rel[r, 1]),
                        "n_b_only": int(per_rel[r, 2]),
                        "n_neither": int(per_rel[r, 3]),
                        "kappa": float(k_rel[r]),
                        "eta_a_given_b": float(e_ab[r]),
                        "eta_b_given_a": float(e_ba[r]),
                    }
                )
    return rows, by_rel, kappa, eta


def write_model_parts(part: ModelPart, models: Sequence[str], runs: Sequence, stage: Path) -> dict:
    """Write every model's and the cross-model tables and figures into `stage` (module docstring);
    returns {"models": [per model summary], "cross_model": {...}}."""
    tables, figs = stage / "tables", stage / "figures"
    n_rel = len(part.relations)
    verdicts, disputed = _Writer(tables / "verdicts.parquet"), _Writer(tables / "disputed.parquet")
    shares, shares_rel, pairs, pairs_rel, summaries = [], [], [], [], []
    robust = np.zeros((part.fact_id.size, len(models)), dtype=bool)
    empty = None
    for m, model in enumerate(models):
        mine = {r.source.probe: r for r in runs if r.source.model == model}
        right, prob = matrix(part, mine)
        k = right.sum(axis=1)
        cats = stats.categories(k, len(part.probes))
        robust[:, m] = cats["every"]
        entry: dict = {
            "model": model,
            "label": model_label(model),
            "model_revision": next(iter(mine.values())).source.model_revision,
            "n_facts": int(k.size),
            "shares": {},
        }
        per_rel_cols: dict[str, np.ndarray] = {}
        for name, mask in cats.items():
            out, per_rel = stats.share_stats(mask, part.rel, n_rel)
            entry["shares"][name] = out
            shares.append({"model": model, "category": name, **out, "n_facts": int(k.size), "n_probes": len(part.probes)})
            per_rel_cols[name] = per_rel
        counts = np.bincount(part.rel, minlength=n_rel)
        shares_rel += [
            {
                "model": model,
                "relation": part.relations[r],
                "n_facts": int(counts[r]),
                **{c: float(v[r]) for c, v in per_rel_cols.items()},
            }
            for r in range(n_rel)
        ]
        rows, by_rel, kappa, eta = _pairs(model, part, right, n_rel)
        pairs += rows
        pairs_rel += by_rel
        entry["pairs"] = [{k2: v for k2, v in r.items() if k2 != "model"} for r in rows]
        table, order = _model_tables(model, part, right, prob)
        verdicts.write(table)
        disputed.write(table.iloc[order])
        empty = table.iloc[:0]
        entry["n_disputed"] = int(order.size)
        entry["top_disputed"] = table.iloc[order[:TOP_DISPUTED]].drop(columns=["model"]).to_dict("records")
        label = entry["label"]
        save_png(figures.agreement_figure(label, part.probes, kappa, eta, int(k.size)), figs / f"agreement_{_slug(label)}.png")
        rank = np.lexsort((part.rel, -k))
        save_png(figures.facts_figure(label, part.probes, right, rank), figs / f"facts_{_slug(label)}.png")
        summaries.append(entry)
    verdicts.close(empty)
    disputed.close(empty)
    pd.DataFrame(shares).to_parquet(tables / "shares.parquet", index=False)
    pd.DataFrame(shares_rel).to_parquet(tables / "shares_by_relation.parquet", index=False)
    _frame(pairs, ["model", "probe_a", "probe_b"]).to_parquet(tables / "pairs.parquet", index=False)
    _frame(pairs_rel, ["model", "relation", "probe_a", "probe_b"]).to_parquet(tables / "pairs_by_relation.parquet", index=False)
    return {"models": summaries, "cross_model": _cross_model(part, models, robust, stage)}


def _frame(rows: list[dict], columns: list[str]) -> pd.DataFrame:
    """`rows` as a DataFrame; with `columns` (and no rows) when there is none (a map of one probe)."""
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=columns)


def _slug(text: str) -> str:
    """`text` as part of a file name (letters, digits, `.`, `_`, `-`)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_.") or "model"


def _cross_model(part: ModelPart, models: Sequence[str], robust: np.ndarray, stage: Path) -> dict:
    n_rel = len(part.relations)
    everywhere = robust.all(axis=1)
    pd.DataFrame(
        {"fact_id": part.fact_id[everywhere], "relation": np.asarray(part.relations, dtype=object)[part.rel[everywhere]]}
    ).to_parquet(stage / "tables" / "known_everywhere.parquet", index=False)
    share, _ = stats.share_stats(everywhere, part.rel, n_rel)
    sh = stats.sharing(robust, part.rel, n_rel)
    rows = [
        {
            "model_a": a,
            "model_b": b,
            "rate": float(sh["rate"][i, j]),
            "value": float(sh["value"][i, j]),
            "ci_low": float(sh["ci_low"][i, j]),
            "ci_high": float(sh["ci_high"][i, j]),
            "n_robust_a": int(sh["shared"][i, i]),
            "n_shared": int(sh["shared"][i, j]),
        }
        for i, a in enumerate(models)
        for j, b in enumerate(models)
        if i != j
    ]
    _frame(rows, ["model_a", "model_b", "rate", "value", "ci_low", "ci_high", "n_robust_a", "n_shared"]).to_parquet(
        stage / "tables" / "sharing.parquet", index=False
    )
    if len(models) > 1:
        labels = [model_label(m) for m in models]
        save_png(figures.sharing_figure(labels, sh["rate"]), stage / "figures" / "sharing.png")
    return {"n_known_everywhere": int(everywhere.sum()), "known_everywhere": share, "sharing": rows}


__all__ = ["PROB", "ModelPart", "matrix", "write_model_parts"]
