"""Run any registered probe end to end: data -> items -> model -> rows -> metrics. Never names a probe.

Contract
--------
`run_probe(cfg, out_dir)` takes a `RunConfig` and an output folder and

1. claims the folder (`factprobe.run_folder.claim`: a second run into it, or a folder of another
   kind of run such as fine-tuning, is refused at once) and refuses a folder that holds another
   configuration (`framework/checkpoint.py`);
2. prepares the items (`probe.prepare`, or the `prepared` argument from the pipeline's data-build
   step), holds them to the data contract (`factprobe.framework.contract`: a broken rule is refused in
   one line; `--relations` and `--max-facts-per-relation` applied by the framework, the same for
   every probe) and lets the probe validate them (`probe.validate`);
3. loads the model only when something is left to score, checks that its kind (causal, masked)
   is one the probe accepts and lets the probe check it (`probe.check_model`); only then is
   `run_config.json` written and `on_start()` called (the tracking layer opens its MLflow run
   there, on a background thread while scoring goes on, so a run refused at the folder or at
   validation leaves none); rows of other weights are never mixed into the folder. When the
   folder already holds this configuration's finished run (metrics.json, every row done) the
   outcome says `already_finished`, and with `start_when_finished=False` (or a callable that
   returns False) `on_start()` is not called (the CLI logs no second MLflow run when the first
   was logged; a pipeline step, whose cached work folder a new pipeline run reuses, still starts
   its child run);
4. per relation: `probe.open_relation`, then `probe.score_batch` per batch (`probe.batches_for`: as many
   items as fill the scorer's token budget where the probe counts its items' tokens), each batch's rows
   appended to the checkpoint (fsynced) before the next;
5. writes `results.jsonl` (rows in item order, copied from where they were written), the probe's extra
   files (`probe.artifacts`) and `metrics.json` (`probe.metrics` plus token counts, resume counts,
   notes, and the run's measurement identity: model revision, data digest, config key, numerics)
   atomically, with no bare NaN. `probe.metrics` and `probe.artifacts` get the written rows read
   back, cut down to the probe's `metric_columns` (`factprobe.framework.row_stream`).

No row is kept in memory beyond its batch: finished rows are known by where they lie in the folder
(`RunFolder.done_index`), `Session.done` reads them from disk when asked, and the outcome's
`results` DataFrame is read from results.jsonl when first used. What a run holds grows only by a
key, an offset and the few numbers per row its metrics need (issue 40 item 3).

The measurement identity (`run_identity`, `factprobe.identity`) is computed and printed in one line
before anything is scored; a folder holding results of another identity is refused
(`RunFolder.check_identity`), and a row is resumed only when its item's content digest
(`item_digest`: prompt, options, answer) equals the current item's: an edited item is scored again,
a removed one is dropped.

Returns a `ProbeOutcome`. An interrupt (SIGINT, or SIGTERM turned into `Terminated` by
`factprobe.signals`) leaves every finished batch in the checkpoint for the next run to resume.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from ..datasets.prepared import Prepared
from ..errors import ConfigError, ContextTooLongError
from ..identity import RunIdentity, data_digest, item_digest, with_inputs
from ..lm.numerics import loaded_numerics, resolved_numerics
from ..metrics.json_safe import json_safe
from ..redact import redact_values
from .base import Session
from .checkpoint import METRICS, RESULTS, RunFolder, read_rows
from .config import RunConfig
from .contract import apply_contract
from .registry import get_probe
from .row_stream import Projector


@dataclass
class ProbeOutcome:
    out_dir: Path
    #: the rows as a DataFrame when the outcome was given them; None: read from results.jsonl (`results`)
    _results: pd.DataFrame | None
    metrics: dict
    prepared: Prepared
    n_scored_now: int
    n_resumed: int
    notes: list[str]
    #: the folder already held this configuration's finished run (results.jsonl and metrics.json,
    #: every row done): nothing was scored (and `on_start` was not called if `start_when_finished` was False)
    already_finished: bool = False

    @property
    def results(self) -> pd.DataFrame:
        """The run's rows (results.jsonl, in item order) as a DataFrame, read when first asked for."""
        if self._results is None:
            self._results = pd.DataFrame(read_rows(self.out_dir / RESULTS))
        return self._results


def load_for_probe(cfg: RunConfig):
    """Load the run's model and check that the probe accepts its kind (causal or masked)."""
    from ..lm.served import check_probe, is_served
    from ..models import load_model, require_kind

    if is_served(cfg.base.model):  # a server: its own checks (no weights to test for causality)
        loaded = load_model(
            cfg.base.model,
            kind="causal",
            base_model=cfg.base.base_model,
            device_map=cfg.base.device_map,
            max_memory=cfg.base.max_memory,
        )
        check_probe(loaded, cfg.probe, get_probe(cfg.probe).model_kinds)
        return loaded
    loaded = load_model(
        cfg.base.model,
        device=cfg.base.device,
        dtype=cfg.base.dtype,
        base_model=cfg.base.base_model,
        device_map=cfg.base.device_map,
        max_memory=cfg.base.max_memory,
    )
    require_kind(loaded, get_probe(cfg.probe).model_kinds, cfg.probe)
    return loaded


def run_probe(
    cfg: RunConfig,
    out_dir: str | Path,
    loaded=None,
    progress: bool = True,
    log: Callable[[str], None] = print,
    on_batch: Callable[[int, int], None] | None = None,
    prepared: Prepared | None = None,
    on_start: Callable[[], None] | None = None,
    start_when_finished: bool | Callable[[], bool] = True,
) -> ProbeOutcome:
    """Run (or resume) `cfg`'s probe into `out_dir`; see the module docstring.

    `loaded` is an optional `LoadedModel` (else loaded here, only if something is left to score);
    `on_batch(done, total)` is called after each batch; `prepared` skips data preparation;
    `on_start()` is called once the folder is claimed and the run validated, before scoring, unless
    the folder already holds the finished run and `start_when_finished` is False (a callable is
    asked only then: the CLI's "was this folder's run logged?"). The thread policy is applied first
    (`factprobe.threads.apply`) and `cfg.base.threads` set to the resolved count."""
    from ..threads import apply as apply_threads

    probe = get_probe(cfg.probe)
    cfg.base.threads = apply_threads(cfg.base.threads)  # the resolved count: the MLflow param and metrics.json `threads`
    notes: list[str] = []

    def note(msg: str) -> None:
        notes.append(msg)
        log(f"note: {msg}")

    with RunFolder(out_dir, cfg.results_key(), cfg.to_dict()) as folder:
        # the contract: `prepare` applies it itself (Probe wraps it); a dataset handed over is checked here
        prepared = probe.prepare(cfg) if prepared is None else apply_contract(probe, cfg, prepared)
        probe.validate(cfg, prepared)
        groups = probe.groups(cfg, prepared)
        keys = {id(it): probe.item_keys(cfg, prepared, it) for its in groups.values() for it in its}
        content = {k: item_digest(it) for its in groups.values() for it in its for k in keys[id(it)]}
        ident = run_identity(cfg, prepared, loaded)
        folder.check_identity(ident)
        ident = folder.completed_identity(ident)  # what a reused folder knows that a model's load would tell
        log(ident.line())
        # a row is reused only when its item's content (prompt, options, answer) is the same
        done = folder.done_index(lambda k, r: content.get(k) == r.get("item_digest"))  # key -> row on disk
        total = sum(len(k) for k in keys.values())
        resumed = sum(1 for ks in keys.values() for k in ks if k in done)
        finished_before = resumed == total and (Path(out_dir) / METRICS).exists()
        if resumed < total:
            loaded = loaded or load_for_probe(cfg)
            probe.check_model(cfg, prepared, loaded)
            ident = loaded_identity(ident, loaded)
            folder.check_identity(ident)
        folder.write_config(ident)  # only once the data (and the model, when one is needed) passed every check
        if on_start and (
            not finished_before or (start_when_finished() if callable(start_when_finished) else start_when_finished)
        ):
            on_start()
        for why in prepared.dropped.values():
            note(f"dropped {why}")

        n_new = 0
        token_stats: dict = {}
        if resumed < total:
            folder.set_revision(ident.model_revision, resumed, cfg.base.model)
            session = Session(cfg, loaded, prepared, note, done)
            bar = tqdm(total=total, initial=resumed, desc=f"{cfg.probe} {cfg.base.model}", unit="row", disable=not progress)
            try:
                for rel, items in groups.items():
                    todo = [it for it in items if any(k not in done for k in keys[id(it)])]
                    if not todo:
                        continue
                    state = probe.open_relation(session, rel)
                    for batch in probe.batches_for(session, state, todo):
                        fresh = [r for r in score_naming_long_items(probe, session, state, rel, batch) if r["key"] not in done]
                        for r in fresh:
                            r["item_digest"] = content.get(r["key"])
                        folder.append(fresh)  # and recorded in `done`
                        n_new += len(fresh)
                        bar.update(len(fresh))
                        if on_batch:
                            on_batch(len(done), total)
            finally:
                bar.close()
            token_stats = session.token_stats()

        order = (k for its in groups.values() for it in its for k in keys[id(it)] if k in done)
        ordered = folder.write_results(order, Projector(probe.metric_columns, probe.name))  # the rows' metric fields
        metrics = probe.metrics(ordered, prepared, cfg)
        metrics.update(token_stats)
        metrics.update(
            model_revision=ident.model_revision,
            n_resumed=resumed,
            notes=notes,
            probe=cfg.probe,
            model=cfg.base.model,
            data_digest=ident.data_digest,
            identity=redact_values(ident.to_dict()),
            threads=cfg.base.threads,
        )
        metrics = json_safe(metrics)
        folder.finish(metrics, probe.artifacts(ordered, prepared, cfg, metrics))
    return ProbeOutcome(Path(out_dir), None, metrics, prepared, n_new, resumed, notes, finished_before)


def run_identity(cfg: RunConfig, prepared: Prepared, loaded=None) -> RunIdentity:
    """The run's measurement identity (`factprobe.identity`) before anything is scored: the weights'
    content revision (of `loaded` when given, else of the files `cfg.base.model` names: no weights are
    loaded), the prepared data's digest, the config key, the numerics this machine resolves
    `cfg.base.device` / `cfg.base.dtype` to, and the config's input locations made absolute."""
    if loaded is not None:
        revision, num = loaded.revision, loaded_numerics(loaded)
    else:
        from ..lm.served import is_served, served_numerics
        from ..models.loading import model_revision

        revision = model_revision(cfg.base.model, cfg.base.base_model)
        num = (
            served_numerics()
            if is_served(cfg.base.model)
            else resolved_numerics(cfg.base.device, cfg.base.dtype, cfg.base.device_map)
        )
    from ..models.quantisation import weights_of

    ident = RunIdentity(revision or "", data_digest(prepared), cfg.results_key(), num, weights=weights_of(revision or ""))
    return with_inputs(ident, cfg.to_dict())


def loaded_identity(ident: RunIdentity, loaded) -> RunIdentity:
    """`ident` completed by the loaded model: its numerics (attention implementation included). The
    loaded weights must be those the identity names (ConfigError when the files changed in between)."""
    if loaded.revision and ident.model_revision and loaded.revision != ident.model_revision:
        raise ConfigError(
            f"the weights of {loaded.name} changed while the run started (revision {ident.model_revision} "
            f"when checked, {loaded.revision} when loaded); run again once they are stable"
        )
    from ..models.quantisation import weights_of

    revision = loaded.revision or ident.model_revision
    return RunIdentity(revision, ident.data_digest, ident.config_key, loaded_numerics(loaded), ident.inputs, weights_of(revision))


def score_naming_long_items(probe, session: Session, state, relation: str, batch) -> list[dict]:
    """`probe.score_batch`, but a ContextTooLongError names the item (fact id, subject) whose text
    does not fit, with its token count against the window: the batch's items are tried one by one
    to find it (only on this error path). If every item fits alone, the error names the batch."""
    try:
        return probe.score_batch(session, state, batch)
    except ContextTooLongError as e:
        if len(batch) > 1:
            for item in batch:
                score_naming_long_items(probe, session, state, relation, [item])
            keys = [probe.item_keys(session.cfg, session.prepared, it)[0] for it in batch]
            raise ContextTooLongError(f"{relation}: the batch of {', '.join(keys)} does not fit together: {e}") from None
        item = batch[0]
        fact = getattr(item, "fact_id", None) or probe.item_keys(session.cfg, session.prepared, item)[0]
        subject = getattr(item, "subject", None)
        who = f"fact {fact}" + (f" (subject {subject!r})" if subject is not None else "")
        raise ContextTooLongError(f"{who}: {e}; shorten the context (fewer examples) or drop the fact") from None
