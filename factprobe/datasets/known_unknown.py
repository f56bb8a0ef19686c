"""The per-model known/unknown table (yuan2024 section 4.2): which facts a model answers right.

A fact is *known* to a model when its regular k-shot QA answer is an exact match (EM = 1) and
*unknown* otherwise (an empty answer is unknown). `known_unknown_table(rows, model, revision)`
turns QA result rows into the table; `read_known_unknown(path, model)` reads it back, checked.

Columns (one row per fact and split): `fact_id, relation, subject, question, split ("train" |
"eval"), model, model_revision, shots, answer, em, f1, contains, known`.

It is written as `<out>/known_unknown.parquet` by the `qa` probe (regular k-shot, any split) and
the `counterfactual` probe, and logged to MLflow as a dataset. The counterfactual probe and the
fine-tuning sets read it by path or as `runs:/<MLflow run id>` (resolved by `factprobe_ops.tracking.refs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from ..errors import ConfigError, DataError
from ..refs import resolve_ref

FILE_NAME = "known_unknown.parquet"
COLUMNS = (
    "fact_id",
    "relation",
    "subject",
    "question",
    "split",
    "model",
    "model_revision",
    "shots",
    "answer",
    "em",
    "f1",
    "contains",
    "known",
)
#: how to make a table, for error messages (`{shots}`: the k of the regular block that decides known/unknown)
MAKE_ONE = (
    "make one with `factprobe probe qa --split all --shots {shots} --model {model} --out DIR` on the same "
    "data (--source, --data, --relations, --seed, --qa-train-per-relation as this run; then pass "
    "DIR/known_unknown.parquet) or run the `counterfactual_icl` pipeline, which writes it"
)


def known_unknown_table(rows: Sequence[dict], model: str, revision: str) -> pd.DataFrame:
    """The table from QA rows (dicts with fact_id, relation, subject, question, split, shots,
    answer, em, f1, contains). One row per (fact_id, split): the first row wins."""
    records = []
    seen: set[tuple[str, str]] = set()
    for r in rows:
        key = (r["fact_id"], r["split"])
        if key in seen:
            continue
        seen.add(key)
        records.append(
            {
                "fact_id": r["fact_id"],
                "relation": r["relation"],
                "subject": r["subject"],
                "question": r["question"],
                "split": r["split"],
                "model": model,
                "model_revision": revision or "",
                "shots": int(r["shots"]),
                "answer": r["answer"],
                "em": float(r["em"]),
                "f1": float(r["f1"]),
                "contains": float(r["contains"]),
                "known": bool(r["em"] >= 1.0),
            }
        )
    return pd.DataFrame.from_records(records, columns=list(COLUMNS))


def resolve_path(path: str | Path) -> Path:
    """A table file, or a folder holding `known_unknown.parquet`; `path` may be a reference such as
    `runs:/<MLflow run id>` (the run's logged results, see `factprobe.refs`)."""
    p = resolve_ref(path)
    return p / FILE_NAME if p.is_dir() else p


def read_known_unknown(path: str | Path, model: str | None = None, shots: int = 10) -> pd.DataFrame:
    """Read and check a known/unknown table. `model` (when given) must be the model it was made
    for. Raises ConfigError when the file is missing (naming how to make one, with `shots`
    exemplars: the reader's k) or belongs to another model, and DataError when it is not a
    known/unknown table."""
    p = resolve_path(path)
    if not p.is_file():
        raise ConfigError(f"no known/unknown table at {p}; " + MAKE_ONE.format(model=model or "MODEL", shots=shots))
    try:
        df = pd.read_parquet(p)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a bad file
        raise DataError(f"{p}: not a readable parquet file ({str(e).splitlines()[0][:160]})") from None
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise DataError(f"{p}: not a known/unknown table (missing column(s) {', '.join(missing)})")
    if model is not None:
        others = sorted(set(df["model"].astype(str)) - {model})
        if others:
            raise ConfigError(
                f"{p} is the known/unknown table of {', '.join(others)}, not of {model}; "
                + MAKE_ONE.format(model=model, shots=shots)
            )
    return df
