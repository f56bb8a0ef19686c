"""The per-model part of a map and the cross-model part, streamed to parquet one model at a time.

Per model (its runs coded against the joined facts): the facts x probes matrix of verdicts and gold
probabilities; the robust shares with their intervals (`stats.share_stats`), overall and per relation;
every probe pair's kappa and eta both ways (`stats.pair_stats`), overall and per relation; the
verdicts of every joined fact (`tables/verdicts.parquet`: each probe's verdict) and the disputed ones
(`tables/disputed.parquet`: each probe's verdict and gold probability), sorted by how much the probes
disagree (`stats.disagreement`), then by the spread of the gold probabilities (widest first), then
relation and fact; two figures. Across models: the facts known under every probe by every model, and
the knowledge sharing rates of the robust sets (`stats.sharing`). Memory: one model's matrices at a
time plus a facts x models boolean matrix of robust sets; the fact ids are converted once.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..framework.reporting import model_label
from ..report.plots import save_png
from . import figures, stats

PROB = ":gold_prob"
#: disputed facts per model in the summary and on the page (all of them are in tables/disputed.parquet)
TOP_DISPUTED = 20


@dataclass
class ModelPart:
    """What every model's part shares: the joined facts (ids as a pyarrow string array, relation codes
    into `relations`, in relation then id order), the probes in order, and `position` (a fact's code in the map's index -> its row,
    -1 when not joined)."""

    fact_id: np.ndarray
    relations: list[str]
    rel: np.ndarray
    probes: list[str]
    position: np.ndarray


def matrix(part: ModelPart, runs: dict) -> tuple[np.ndarray, np.ndarray]:
    """(verdicts facts x probes bool, gold probabilities facts x probes float32) of one model from its
    runs by probe (`build.RunFacts`)."""
    n, p = len(part.fact_id), len(part.probes)
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
    """A parquet file written one pyarrow table (one model's rows) at a time."""

    def __init__(self, path: Path) -> None:
        self.path, self.writer = path, None

    def write(self, table) -> None:
        import pyarrow.parquet as pq

        if self.writer is None:
            self.writer = pq.ParquetWriter(self.path, table.schema)
        self.writer.write_table(table)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _slug(text: str) -> str:
    """`text` as part of a file name (letters, digits, `.`, `_`, `-`)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_.") or "model"


def _model_tables(model: str, part: ModelPart, columns: dict, right: np.ndarray, prob: np.ndarray):
    """(verdicts, disputed) of `model` as pyarrow tables; `columns`: the fact_id and relation arrays."""
    import pyarrow as pa

    n, n_probes = right.shape
    k = right.sum(axis=1)
    head = {
        "model": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([model])).cast(pa.string()),
        **columns,
        "n_right": pa.array(k.astype(np.int16)),
        "n_probes": pa.array(np.full(n, n_probes, dtype=np.int16)),
    }
    verdicts = pa.table({**head, **{p: pa.array(right[:, j]) for j, p in enumerate(part.probes)}})
    dis = stats.disagreement(k, n_probes).astype(np.float32)
    spread = _spread(prob)
    rows = np.flatnonzero((k > 0) & (k < n_probes))
    order = rows[np.lexsort((rows, -np.nan_to_num(spread[rows], nan=-1.0), -dis[rows]))]  # rows are in relation, id order
    idx = pa.array(order)
    disputed = {name: col.take(idx) for name, col in head.items()}
    disputed["disagreement"] = pa.array(dis[order])
    disputed["gold_prob_spread"] = pa.array(spread[order])
    for j, p in enumerate(part.probes):
        disputed[p] = pa.array(right[order, j])
        disputed[p + PROB] = pa.array(prob[order, j])
    return verdicts, pa.table(disputed)


def _pair_frames(model: str, part: ModelPart, ps: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per probe pair a < b, one row per relation and pair) of one model from `stats.pair_stats`."""
    p = len(part.probes)
    a, b = np.triu_indices(p, k=1)
    t = ps["tables"][a, b]
    rows = pd.DataFrame(
        {
            "model": model,
            "probe_a": [part.probes[i] for i in a],
            "probe_b": [part.probes[j] for j in b],
            "n_facts": t.sum(axis=-1),
            "n_both": t[:, 0],
            "n_a_only": t[:, 1],
            "n_b_only": t[:, 2],
            "n_neither": t[:, 3],
            "agreement": ps["agreement"][a, b],
        }
    )
    for name, src, (i, j) in (("kappa", "kappa", (a, b)), ("eta_a_given_b", "eta", (a, b)), ("eta_b_given_a", "eta", (b, a))):
        rows[name] = ps[src][i, j]
        for suffix in ("ci_low", "ci_high", "pooled", "relations"):
            rows[f"{name}_{suffix}"] = ps[f"{src}_{suffix}"][i, j]
    per = ps["per_relation"][:, a, b]  # [n_rel, pairs, 4]
    k_rel = stats.kappa(per)
    e_ab, e_ba = stats.eta(per)
    n_rel = len(part.relations)
    by_rel = pd.DataFrame(
        {
            "model": model,
            "relation": np.repeat(np.asarray(part.relations, dtype=object), a.size),
            "probe_a": np.tile(np.asarray(part.probes, dtype=object)[a], n_rel),
            "probe_b": np.tile(np.asarray(part.probes, dtype=object)[b], n_rel),
            "n_facts": per.sum(axis=-1).ravel(),
            "n_both": per[..., 0].ravel(),
            "n_a_only": per[..., 1].ravel(),
            "n_b_only": per[..., 2].ravel(),
            "n_neither": per[..., 3].ravel(),
            "kappa": k_rel.ravel(),
            "eta_a_given_b": e_ab.ravel(),
            "eta_b_given_a": e_ba.ravel(),
        }
    )
    return rows, by_rel


def write_model_parts(part: ModelPart, models: Sequence[str], runs: Sequence, stage: Path) -> dict:
    """Write every model's and the cross-model tables and figures into `stage` (module docstring);
    returns {"models": [per model summary], "cross_model": {...}}."""
    import pyarrow as pa

    tables, figs = stage / "tables", stage / "figures"
    n_rel = len(part.relations)
    columns = {
        "fact_id": part.fact_id,
        "relation": pa.DictionaryArray.from_arrays(pa.array(part.rel.astype(np.int32)), pa.array(part.relations)).cast(
            pa.string()
        ),
    }
    verdicts, disputed = _Writer(tables / "verdicts.parquet"), _Writer(tables / "disputed.parquet")
    shares, shares_rel, pairs, pairs_rel, summaries = [], [], [], [], []
    robust = np.zeros((len(part.fact_id), len(models)), dtype=bool)
    counts = np.bincount(part.rel, minlength=n_rel)
    for m, model in enumerate(models):
        mine = {r.source.probe: r for r in runs if r.source.model == model}
        right, prob = matrix(part, mine)
        k = right.sum(axis=1)
        cats = stats.categories(k, len(part.probes))
        robust[:, m] = cats["every"]
        label = model_label(model)
        entry: dict = {
            "model": model,
            "label": label,
            "model_revision": next(iter(mine.values())).source.model_revision,
            "n_facts": int(k.size),
            "shares": {},
        }
        per_rel_cols = {}
        for name, mask in cats.items():
            out, per_rel_cols[name] = stats.share_stats(mask, part.rel, n_rel)
            entry["shares"][name] = out
            shares.append({"model": model, "category": name, **out, "n_facts": int(k.size), "n_probes": len(part.probes)})
        shares_rel.append(pd.DataFrame({"model": model, "relation": part.relations, "n_facts": counts, **per_rel_cols}))
        ps = stats.pair_stats(right, part.rel, n_rel)
        rows, by_rel = _pair_frames(model, part, ps)
        pairs.append(rows)
        pairs_rel.append(by_rel)
        entry["pairs"] = rows.drop(columns=["model"]).to_dict("records")
        vt, dt = _model_tables(model, part, columns, right, prob)
        verdicts.write(vt)
        disputed.write(dt)
        entry["n_disputed"] = dt.num_rows
        entry["top_disputed"] = dt.slice(0, TOP_DISPUTED).drop(["model"]).to_pylist()
        save_png(
            figures.agreement_figure(label, part.probes, ps["kappa"], ps["eta"], int(k.size)),
            figs / f"agreement_{_slug(label)}.png",
            dpi=80,
        )
        rank = np.lexsort((part.rel, -k))
        save_png(figures.facts_figure(label, part.probes, right, rank), figs / f"facts_{_slug(label)}.png", dpi=80)
        summaries.append(entry)
    verdicts.close()
    disputed.close()
    pd.DataFrame(shares).to_parquet(tables / "shares.parquet", index=False)
    pd.concat(shares_rel, ignore_index=True).to_parquet(tables / "shares_by_relation.parquet", index=False)
    pd.concat(pairs, ignore_index=True).to_parquet(tables / "pairs.parquet", index=False)
    pd.concat(pairs_rel, ignore_index=True).to_parquet(tables / "pairs_by_relation.parquet", index=False)
    return {"models": summaries, "cross_model": _cross_model(part, models, robust, stage)}


def _cross_model(part: ModelPart, models: Sequence[str], robust: np.ndarray, stage: Path) -> dict:
    n_rel = len(part.relations)
    everywhere = robust.all(axis=1)
    import pyarrow as pa
    import pyarrow.parquet as pq

    keep = pa.array(everywhere)
    pq.write_table(
        pa.table(
            {
                "fact_id": part.fact_id.filter(keep),
                "relation": pa.array(np.asarray(part.relations, dtype=object)[part.rel[everywhere]], pa.string()),
            }
        ),
        stage / "tables" / "known_everywhere.parquet",
    )
    share, _ = stats.share_stats(everywhere, part.rel, n_rel)
    sh = stats.sharing(robust, part.rel, n_rel)
    i, j = np.nonzero(~np.eye(len(models), dtype=bool))
    names = np.asarray(models, dtype=object)
    table = pd.DataFrame(
        {
            "model_a": names[i],
            "model_b": names[j],
            "rate": sh["rate"][i, j],
            "value": sh["value"][i, j],
            "ci_low": sh["ci_low"][i, j],
            "ci_high": sh["ci_high"][i, j],
            "n_robust_a": sh["shared"][i, i],
            "n_shared": sh["shared"][i, j],
        }
    )
    table.to_parquet(stage / "tables" / "sharing.parquet", index=False)
    if len(models) > 1:
        save_png(figures.sharing_figure([model_label(m) for m in models], sh["rate"]), stage / "figures" / "sharing.png")
    return {"n_known_everywhere": int(everywhere.sum()), "known_everywhere": share, "sharing": table.to_dict("records")}


__all__ = ["PROB", "TOP_DISPUTED", "ModelPart", "matrix", "write_model_parts"]
