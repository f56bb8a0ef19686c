"""One finished probe run as one verdict per fact: what the knowledge map joins.

A run reference (`find_runs`) is any of:
- a probe run folder written by `factprobe probe`: its `metrics.json` says the run finished and what
  it read (probe, model, model revision, data digest, identity); its per-fact table is
  `per_fact.parquet` or `tables/per_fact.parquet` where present, else `results.jsonl`;
- a per-fact file (`results.jsonl`, `*.parquet`) of such a folder;
- an MLflow run, `runs:/<run id>` or a bare 32-hex run id, through the run-reference resolvers
  (`factprobe.refs`: the operations layer downloads the run's `results/` artifacts, a run folder);
- a folder holding probe run folders one or two levels down (a findings study, a pipeline's merged
  results): every finished run in it whose probe the map reads; the others are named in a note.

The verdict of a run (`reading_of`) is the one its probe declares for the map
(`factprobe.framework.reporting.MapVerdict`), else its gate verdict (`fact_verdict`) in its headline's
direction, several rows of one fact by majority. `read_verdicts` streams the table's few columns
(pyarrow; a results.jsonl's other fields are never materialised) and reduces the rows to facts with
array group-bys. Bad input is one line naming the run and what is wrong.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, DataError

RESULTS, METRICS, RUN_CONFIG = "results.jsonl", "metrics.json", "run_config.json"
PER_FACT = ("per_fact.parquet", "tables/per_fact.parquet")
_RUN_ID = re.compile(r"^[0-9a-f]{32}$")
#: a gold probability column, read where a table has it (the multiple-choice probes' `gold_prob`)
GOLD_PROB = "gold_prob"


@dataclass(frozen=True)
class Reading:
    """How one probe's rows become one verdict per fact: the rows where every (column, value) of
    `where` holds; a row is right when every column of `columns` is True (False with `negate`, a
    lower-is-better gate verdict); a fact is right under `rule` ("majority", "all", "any")."""

    probe: str
    columns: tuple[str, ...]
    rule: str = "majority"
    where: tuple[tuple[str, Any], ...] = ()
    negate: bool = False

    def describe(self) -> str:
        """e.g. `correct, majority of rows where split=eval` (what the map reads, in words)."""
        cols = " and ".join(f"not {c}" if self.negate else c for c in self.columns)
        where = f" where {', '.join(f'{c}={v}' for c, v in self.where)}" if self.where else ""
        return f"{cols}, {self.rule} of rows{where}"


def reading_of(probe: str) -> Reading | None:
    """The map's reading of runs of the registered probe named `probe` (module docstring); None for a
    probe that declares neither a map verdict nor a gate verdict, or one not registered here."""
    from ..framework.registry import load_probes
    from ..framework.verdict import verdict_of

    spec = load_probes().get(probe)
    if spec is None:
        return None
    declared = getattr(spec, "map_verdict", None)
    if declared is not None:
        return Reading(probe, tuple(declared.columns), declared.rule, tuple(declared.where))
    verdict = verdict_of(spec)
    if verdict is None:
        return None
    return Reading(probe, (verdict.column,), "majority", (), not verdict.higher_is_better)


def map_probes() -> list[str]:
    """The registered probes whose runs the map reads (registry order)."""
    from ..framework.registry import load_probes

    return [name for name in load_probes() if reading_of(name) is not None]


@dataclass
class RunSource:
    """A finished run the map reads: the reference as given, its folder, the per-fact file read, and
    what its metrics.json says it read."""

    ref: str
    folder: Path
    table: Path
    probe: str
    model: str
    model_revision: str | None
    data_digest: str | None
    identity: dict | None

    @property
    def name(self) -> str:
        """`<probe>:<model>` (the model's short name), how messages and tables name the run."""
        from ..framework.reporting import model_label

        return f"{self.probe}:{model_label(self.model)}"


def _json(path: Path) -> dict:
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return d if isinstance(d, dict) else {}


def _table_file(folder: Path) -> Path | None:
    for name in (*PER_FACT, RESULTS):
        if (folder / name).is_file():
            return folder / name
    return None


def _source(ref: str, folder: Path, table: Path) -> RunSource:
    """The run of `folder` (reference `ref`, per-fact file `table`); DataError when it did not finish."""
    from ..identity import identity_of

    metrics = _json(folder / METRICS)
    if not metrics:
        raise DataError(
            f"run {ref}: no readable {METRICS} in {folder}, so not a finished run; finish it (rerun the same "
            "`factprobe probe` command into the same --out) or leave it out"
        )
    config = _json(folder / RUN_CONFIG).get("config") or {}
    identity = identity_of(metrics) or identity_of(_json(folder / RUN_CONFIG))
    probe = metrics.get("probe") or config.get("probe")
    model = metrics.get("model") or config.get("model")
    if not probe or not model:
        raise DataError(f"run {ref}: {folder / METRICS} names no probe or model; a map needs both for every run")
    revision = metrics.get("model_revision") or (identity or {}).get("model_revision")
    digest = (identity or {}).get("data_digest") or metrics.get("data_digest")
    return RunSource(ref, folder, table, str(probe), str(model), revision or None, digest or None, identity)


def _expand(ref: str, folder: Path, notes: list[str]) -> list[RunSource]:
    """The finished runs one or two levels below `folder` whose probe the map reads (a study, a
    merged pipeline folder); those it leaves out are named in `notes`."""
    found: list[RunSource] = []
    skipped: list[str] = []
    for metrics in sorted([*folder.glob(f"*/{METRICS}"), *folder.glob(f"*/*/{METRICS}")]):
        run = metrics.parent
        table = _table_file(run)
        if table is None or (run / "failed.json").exists():
            continue  # a study's own folder (no per-fact table), or a failed pipeline step
        src = _source(str(run), run, table)
        if reading_of(src.probe) is None:
            skipped.append(src.name)
            continue
        found.append(src)
    if skipped:
        notes.append(f"{ref}: left out {', '.join(skipped)}: no verdict per fact the map can read")
    if not found:
        raise DataError(
            f"{ref}: neither a finished probe run (no {RESULTS} or per_fact.parquet) nor a folder holding any "
            f"whose probe the map reads ({', '.join(map_probes())})"
        )
    return found


def _resolve(ref: str) -> Path:
    """The local path of `ref`: a path, or an MLflow run (`runs:/...`, a bare 32-hex id) downloaded
    by the installed resolver (`factprobe.refs`)."""
    from ..refs import resolve_ref

    p = Path(ref)
    if p.exists():
        return p
    if _RUN_ID.match(ref):
        return resolve_ref(f"runs:/{ref}")
    path = resolve_ref(ref)
    if not path.exists():
        raise DataError(f"run {ref}: no such folder or file")
    return path


def find_runs(refs: list[str]) -> tuple[list[RunSource], list[str]]:
    """The runs the references name (module docstring), in order, and notes on what a folder of runs
    left out. Raises DataError/ConfigError (one line) for a missing, unfinished or unreadable run and
    for a run whose probe the map cannot read."""
    sources: list[RunSource] = []
    notes: list[str] = []
    for ref in refs:
        path = _resolve(ref)
        if path.is_file():
            folder = path.parent if (path.parent / METRICS).exists() else path.parent.parent
            sources.append(_source(ref, folder, path))
            continue
        table = _table_file(path)
        if table is None:
            sources.extend(_expand(ref, path, notes))
            continue
        src = _source(ref, path, table)
        if reading_of(src.probe) is None:
            from ..framework.verdict import why_no_verdict

            raise ConfigError(
                f"run {ref} is a {src.probe} run{why_no_verdict(src.probe)}; the knowledge map joins runs of "
                f"{', '.join(map_probes())}"
            )
        sources.append(src)
    return sources, notes


# ------------------------------------------------------------------ the per-fact table, few columns at a time
def _arrow_type(value: Any):
    import pyarrow as pa

    if isinstance(value, bool):
        return pa.bool_()
    if isinstance(value, int):
        return pa.int64()
    if isinstance(value, float):
        return pa.float64()
    return pa.string()


def _bad_jsonl_line(path: Path) -> str:
    """Where results.jsonl `path` stops being whole JSON objects: ` line N: ...`; "" when every line is."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for i, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                return f" line {i}: not a whole JSON record ({getattr(e, 'msg', e)}); the file is truncated or damaged"
            if not isinstance(row, dict):
                return f" line {i}: a JSON {type(row).__name__}, not a result row"
    return ""


def read_columns(src: RunSource, reading: Reading):
    """The columns of `src`'s per-fact table the map reads (fact_id, relation, the reading's columns and
    `where` columns, gold_prob where present) as a pyarrow Table; a column a results.jsonl lacks is all null.
    DataError (one line naming the file, and the line for a damaged results.jsonl)."""
    import pyarrow as pa

    wanted: dict[str, Any] = {"fact_id": pa.string(), "relation": pa.string()}
    wanted.update({c: pa.bool_() for c in reading.columns})
    wanted.update({c: _arrow_type(v) for c, v in reading.where})
    wanted[GOLD_PROB] = pa.float64()
    path = src.table
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            names = set(pq.read_schema(path).names)
            table = pq.read_table(path, columns=[c for c in wanted if c in names])
        else:
            from pyarrow import json as pj

            opts = pj.ParseOptions(explicit_schema=pa.schema(list(wanted.items())), unexpected_field_behavior="ignore")
            table = pj.read_json(path, read_options=pj.ReadOptions(block_size=1 << 24), parse_options=opts)
    except FileNotFoundError:
        raise DataError(f"run {src.ref}: {path}: file not found") from None
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a damaged or mistyped file
        where = _bad_jsonl_line(path) if path.suffix != ".parquet" else ""
        why = where or f": not readable as the map reads it ({str(e).splitlines()[0][:200]})"
        raise DataError(f"run {src.ref}: {path}{why}") from None
    return table


@dataclass
class FactVerdicts:
    """One run reduced to its facts: `fact_id` (a pyarrow string array, one entry per fact), `rel` (each
    fact's code into `rel_names`), `right` (bool), `gold_prob` (float32, NaN where the table has none),
    `n_rows` (the rows of each fact the verdict reads)."""

    fact_id: Any
    rel: np.ndarray
    rel_names: np.ndarray
    right: np.ndarray
    gold_prob: np.ndarray
    n_rows: np.ndarray


class Encoder:
    """Codes of pyarrow string columns (`encode`: codes in order of first appearance, and the distinct
    values), remembered by content: the runs of one probe on every model hold one column of fact ids and
    relations, so a column equal to one seen before is not hashed again, and the same distinct-values
    object comes back (the map's fact index then skips it too). Keeps the last `KEEP` columns."""

    KEEP = 32

    def __init__(self) -> None:
        self._seen: list[tuple[Any, np.ndarray, Any]] = []

    def encode(self, column) -> tuple[np.ndarray, Any]:
        import pyarrow.compute as pc

        arr = column.combine_chunks() if hasattr(column, "combine_chunks") else column
        for i, (seen, codes, uniques) in enumerate(self._seen):
            if len(seen) == len(arr) and seen.equals(arr):
                self._seen.insert(0, self._seen.pop(i))
                return codes, uniques
        enc = pc.dictionary_encode(arr)
        codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        self._seen.insert(0, (arr, codes, enc.dictionary))
        del self._seen[self.KEEP :]
        return codes, enc.dictionary


def read_verdicts(src: RunSource, reading: Reading, encoder: Encoder | None = None) -> FactVerdicts:
    """`src`'s verdict per fact under `reading` (module docstring); `encoder` remembers the fact id and
    relation columns across runs (a new one when None). DataError (one line naming the run) for an empty
    table, a row without a fact id or relation, a row without a boolean verdict, a fact whose rows name
    two relations, or no row matching the reading's `where`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = read_columns(src, reading)
    who = f"run {src.ref} ({src.name})"
    if table.num_rows == 0:
        raise DataError(f"{who}: its per-fact table is empty (the run scored nothing)")
    missing = [
        c for c in ("fact_id", "relation", *reading.columns, *(c for c, _ in reading.where)) if c not in table.column_names
    ]
    if missing:
        raise DataError(f"{who} has no {', '.join(map(repr, missing))} column in {src.table}; the map reads {reading.describe()}")
    if reading.where:
        keep = pa.array(np.ones(table.num_rows, dtype=bool))
        for col, value in reading.where:
            keep = pc.and_(
                keep, pc.fill_null(pc.equal(table.column(col), pa.scalar(value, type=table.schema.field(col).type)), False)
            )
        table = table.filter(keep)
        if table.num_rows == 0:
            raise DataError(f"{who}: no row of {src.table} matches {reading.describe()}; nothing to read as a verdict")
    if table.column("fact_id").null_count or table.column("relation").null_count:
        raise DataError(f"{who}: rows without a fact_id or relation in {src.table}")
    right = np.ones(table.num_rows, dtype=bool)
    for col in reading.columns:
        values = table.column(col)
        if values.null_count:
            raise DataError(f"{who} has rows without a boolean `{col}` in {src.table} (not one verdict per row)")
        right &= values.to_numpy().astype(bool)
    if reading.negate:
        right = ~right
    encoder = encoder or Encoder()
    codes, uniques = encoder.encode(table.column("fact_id"))
    n_facts = len(uniques)
    n_rows = np.bincount(codes, minlength=n_facts)
    if n_facts == table.num_rows:  # one row per fact (codes 0, 1, ... in row order): the row is the verdict
        verdict = right
    else:
        n_right = np.bincount(codes, weights=right, minlength=n_facts)
        verdict = {"majority": 2 * n_right > n_rows, "all": n_right == n_rows, "any": n_right > 0}[reading.rule]
    rel_codes, rel_dict = encoder.encode(table.column("relation"))
    rel_names = rel_dict.to_numpy(zero_copy_only=False)
    lo = np.full(n_facts, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(n_facts, -1, dtype=np.int64)
    np.minimum.at(lo, codes, rel_codes)
    np.maximum.at(hi, codes, rel_codes)
    if (lo != hi).any():
        bad = int(np.flatnonzero(lo != hi)[0])
        raise DataError(
            f"{who}: fact {uniques[bad].as_py()} has rows of relations {rel_names[lo[bad]]} and {rel_names[hi[bad]]} in {src.table}"
        )
    prob = np.full(n_facts, np.nan, dtype=np.float32)
    if GOLD_PROB in table.column_names and table.column(GOLD_PROB).null_count < table.num_rows:
        p = table.column(GOLD_PROB).to_numpy().astype(float)  # nulls are NaN
        ok = ~np.isnan(p)
        counts = np.bincount(codes[ok], minlength=n_facts)
        sums = np.bincount(codes[ok], weights=p[ok], minlength=n_facts)
        prob = ratio_or_nan(sums, counts).astype(np.float32)
    return FactVerdicts(uniques, lo, rel_names, verdict, prob, n_rows)


def ratio_or_nan(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den, NaN where den is 0."""
    out = np.full(num.shape, np.nan)
    np.divide(num, den, out=out, where=den > 0)
    return out


__all__ = ["Encoder", "FactVerdicts", "Reading", "RunSource", "find_runs", "map_probes", "read_verdicts", "reading_of"]
