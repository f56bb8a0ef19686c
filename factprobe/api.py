"""The Python API: run a probe, read a run's results, compare two runs (docs/python-api.md).

    import factprobe

    outcome = factprobe.probe("ic-lke", model="smollm2-135m-instruct", out="runs/a", relations="P36")
    df = factprobe.load_results("runs/a")        # one row per fact (per fact and template for HGP/MMP)
    metrics = factprobe.load_metrics("runs/a")   # metrics.json
    res = factprobe.compare("runs/a", "runs/b")  # fact by fact, as `factprobe compare` (accuracy_a, ...)

Each function calls the pieces the command line calls: `probe` builds a `RunConfig` from the same
options (`factprobe probe PROBE --help` lists them; flag `--max-facts-per-relation` is keyword
`max_facts_per_relation`) and runs `factprobe.framework.runner.run_probe`; `load_results` and
`load_metrics` read the files of README.md "Reading results"; `compare` joins the probes' declared
per-fact verdicts with `factprobe.metrics.comparison.compare_runs`. Bad input raises a
`factprobe.errors.FactprobeError` (`ConfigError`, `DataError`) with one line naming the option or
file. Nothing heavy is imported until a function is called (`import factprobe` stays light).

The caller's process stays the caller's (`caller_state`):
- `probe` restores what a run changes in the process: torch's thread count, the thread and library
  variables (`OMP_NUM_THREADS`, `MKL_NUM_THREADS`, `OMP_WAIT_POLICY`, `TRANSFORMERS_VERBOSITY`,
  `HF_HUB_DISABLE_PROGRESS_BARS`), the warning filters, the libraries' logger levels (transformers'
  verbosity) and progress-bar settings (transformers', huggingface_hub's), and an in-memory model's
  train/eval flags.
- Its thread count is, in order: `threads=`, the caller's torch count when torch is loaded at the call
  (a library user's `torch.set_num_threads` is honoured), the user's `OMP_NUM_THREADS` /
  `MKL_NUM_THREADS`, the thread policy (factprobe/threads.py); never above the CPUs the process may use.
- Calls from several threads at once run one after another (a process-wide lock around the whole
  call): model loading patches process-wide state (transformers' lazy imports, accelerate's meta-device
  initialisation), and two loads at once failed (`cannot import name 'AutoConfig'`, `Cannot copy out of
  meta tensor`) and left no model loadable in the process.
- `model` may be a model already in memory (a `transformers` model with `tokenizer=`, or a
  `(model, tokenizer)` pair): it is probed as it is, identified by its content (`memory-sha256:<hex>`,
  `factprobe.models.in_memory`), and checked as a loaded model is (its kind, its causality).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import ConfigError, DataError

if TYPE_CHECKING:  # pragma: no cover - types only
    import pandas as pd

    from .framework.runner import ProbeOutcome

RESULTS, METRICS, RUN_CONFIG = "results.jsonl", "metrics.json", "run_config.json"
#: one `probe` call at a time in this process (module docstring); re-entrant for a call made inside one
_CALL_LOCK = threading.RLock()
#: the environment variables a run may set (the thread policy, `factprobe.lm.quiet_libraries`)
CALLER_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "TRANSFORMERS_VERBOSITY", "HF_HUB_DISABLE_PROGRESS_BARS")
#: the loggers whose level and filters a run sets (`factprobe.lm.QUIET_LOGGERS`)
CALLER_LOGGERS = ("transformers", "DeepSpeed", "accelerate", "huggingface_hub")
#: options that place or load weights: they do not apply to a model given in memory
_LOADING_OPTIONS = ("device", "dtype", "device_map", "max_memory", "offload_folder", "base_model")


def _hub_bars() -> Any:
    """huggingface_hub's progress-bar module when it is loaded (its switches live there), else None."""
    return sys.modules.get("huggingface_hub.utils.tqdm")


def _env_true(name: str) -> bool | None:
    """huggingface_hub's reading of a switch variable: None when unset."""
    raw = os.environ.get(name)
    return None if raw is None else raw.upper() in ("1", "ON", "YES", "TRUE")


@contextmanager
def caller_state() -> Iterator[None]:
    """Within the block anything may change the process settings a run changes (module docstring); on leaving,
    those that existed are put back as they were, and those of a library first loaded inside are set to
    what the caller's environment gives (transformers' default verbosity, progress bars unless
    `HF_HUB_DISABLE_PROGRESS_BARS` says otherwise). A torch loaded inside keeps the count it computed with."""
    env = {k: os.environ.get(k) for k in CALLER_ENV}
    filters = list(warnings.filters)
    known = logging.Logger.manager.loggerDict
    loggers = {n: (known[n].level, list(known[n].filters)) for n in CALLER_LOGGERS if isinstance(known.get(n), logging.Logger)}
    torch = sys.modules.get("torch")
    torch_threads = torch.get_num_threads() if torch is not None else None
    tf_logging = sys.modules.get("transformers.utils.logging")
    tf_bars = tf_logging.is_progress_bar_enabled() if tf_logging is not None else None
    hub = _hub_bars()
    hub_state = (hub.HF_HUB_DISABLE_PROGRESS_BARS, dict(hub.progress_bar_states)) if hub is not None else None
    try:
        yield
    finally:
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            elif os.environ.get(k) != v:
                os.environ[k] = v
        warnings.filters[:] = filters
        getattr(warnings, "_filters_mutated", lambda: None)()  # as warnings.catch_warnings does: drop cached lookups
        for name in CALLER_LOGGERS:
            logger = known.get(name)
            if isinstance(logger, logging.Logger):
                level, kept = loggers.get(name, (logging.NOTSET, []))
                logger.setLevel(level)
                logger.filters[:] = kept
        if torch is not None and torch.get_num_threads() != torch_threads:
            torch.set_num_threads(torch_threads)
        hub = _hub_bars()
        if hub is not None:  # first its switch: transformers' bar switch calls huggingface_hub's, which reads it
            hub.HF_HUB_DISABLE_PROGRESS_BARS = hub_state[0] if hub_state else _env_true("HF_HUB_DISABLE_PROGRESS_BARS")
        tf_logging = sys.modules.get("transformers.utils.logging")
        if tf_logging is not None:
            on = tf_bars if tf_bars is not None else not _env_true("HF_HUB_DISABLE_PROGRESS_BARS")
            if hasattr(tf_logging, "_tqdm_active"):  # transformers' own switch, without huggingface_hub's
                tf_logging._tqdm_active = on
            else:  # pragma: no cover - another transformers
                (tf_logging.enable_progress_bar if on else tf_logging.disable_progress_bar)()
        if hub is not None:
            hub.progress_bar_states.clear()
            hub.progress_bar_states.update(hub_state[1] if hub_state else {})


@contextmanager
def _eval_mode(model: Any) -> Iterator[None]:
    """`model` in eval mode within the block; each module's train/eval flag restored after."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training


def _caller_torch_threads() -> int | None:
    """The caller's torch thread count: torch's count when torch is loaded (before the call imports anything), else None."""
    torch = sys.modules.get("torch")
    return int(torch.get_num_threads()) if torch is not None and hasattr(torch, "get_num_threads") else None


def probe(
    name: str,
    model: Any = None,
    out: str | Path | None = None,
    *,
    tokenizer: Any = None,
    config: str | Path | None = None,
    progress: bool = False,
    verbose: bool = False,
    **options: Any,
) -> ProbeOutcome:
    """Run (or resume) probe `name` on `model` into the folder `out` and return its `ProbeOutcome`
    (`.results` DataFrame, `.metrics` dict, `.out_dir`, `.n_scored_now`, `.n_resumed`, `.notes`).

    `model` is a name (alias, folder, adapter folder, hub id, `openai:MODEL@URL`), or a model already in
    memory: a `transformers` model with its `tokenizer`, or a `(model, tokenizer)` pair (module docstring;
    recorded as `memory:<name>` with revision `memory-sha256:<hex>`; `device`, `dtype` and the other
    loading options do not apply to it). `options` are the probe's options by field name
    (`relations="P36,P19"`, `max_facts_per_relation=5`, `seed=1`, `threads=2`, ...); `config` is a YAML or
    JSON file of options (a run's own run_config.json repeats that run), which `model`, `out` and `options`
    override (`model` None: the file's, else the default model). `out` defaults to
    `runs/<probe>-<model>-<source>`, as on the command line. `progress` shows the progress bars; `verbose`
    prints the identity line and notes. ConfigError (one line) for an unknown probe or option, a bad
    value, or a model the probe does not accept. One call at a time per process; the caller's settings
    are restored afterwards (module docstring)."""
    with _CALL_LOCK, caller_state():
        callers = _caller_torch_threads()
        return _probe(name, model, out, tokenizer, config, progress, verbose, options, callers)


def _probe(
    name: str,
    model: Any,
    out: str | Path | None,
    tokenizer: Any,
    config: Any,
    progress: bool,
    verbose: bool,
    options: dict,
    callers_threads: int | None,
) -> ProbeOutcome:
    """`probe`'s work, inside its lock and `caller_state`; `callers_threads`: the caller's torch count or None."""
    from .cli import default_out
    from .framework.config import RunConfig
    from .framework.registry import get_probe
    from .lm import quiet_libraries

    found = get_probe(name)
    given: dict[str, Any] = {}
    if config is not None:
        from .config_files import options_from_file
        from .framework.config import BaseConfig

        known = [*RunConfig.IGNORED, *BaseConfig.field_names(), *found.config_class.field_names()]
        given = options_from_file(config, "probe", found.name, known)
    given.update(options, probe=found.name)
    if given.get("threads") in (None, "") and callers_threads is not None:
        given["threads"] = callers_threads  # a library user's torch.set_num_threads is honoured
    loaded = _in_memory(model, tokenizer, options)
    if loaded is not None:
        given["model"] = loaded.name
        for key in _LOADING_OPTIONS:
            given.pop(key, None)  # a config file's (a run's record): the model in memory is where it is
    elif model is not None:
        given["model"] = os.fspath(model)
    if out is not None:
        given["out"] = str(out)
    cfg = RunConfig.from_dict(given)
    folder = Path(cfg.base.out) if cfg.base.out else default_out(cfg)
    quiet_libraries(progress=progress)
    from .framework.runner import run_probe

    log = print if verbose else (lambda _msg: None)
    if loaded is None:
        return run_probe(cfg, folder, progress=progress, log=log)
    from .models import require_kind

    with _eval_mode(loaded.model):
        require_kind(loaded, found.model_kinds, found.name)
        return run_probe(cfg, folder, loaded=loaded, progress=progress, log=log)


def _in_memory(model: Any, tokenizer: Any, options: dict) -> Any:
    """The `LoadedModel` of a model given in memory (`factprobe.models.in_memory`), None for a name.
    ConfigError (one line) for a tokenizer without a model object, or a loading option given with one."""
    if isinstance(model, tuple) and len(model) == 2 and tokenizer is None:
        model, tokenizer = model
    if model is None or isinstance(model, (str, os.PathLike)):
        if tokenizer is not None:
            raise ConfigError("tokenizer= goes with a model object in memory; a model given by name brings its own")
        return None
    given = sorted(k for k in _LOADING_OPTIONS if options.get(k) not in (None, ""))
    if given:
        raise ConfigError(
            f"{', '.join(given)} do(es) not apply to a model given in memory (it is probed where and as it is); "
            "drop them, or give the model by name"
        )
    from .models.in_memory import loaded_from_memory

    return loaded_from_memory(model, tokenizer)


def _results_file(run: str | Path) -> Path:
    """The results.jsonl of a run folder (or the file itself); DataError when there is none."""
    path = Path(run)
    f = path / RESULTS if path.is_dir() else path
    if not f.is_file():
        raise DataError(f"{f}: no {RESULTS} here; give a run folder that `factprobe probe` wrote (its --out)")
    return f


def load_results(run: str | Path) -> pd.DataFrame:
    """The per-fact rows of a run (its folder or its results.jsonl) as a DataFrame, in item order:
    `fact_id`, `relation`, the options and their summed log-probs, `prediction`, `gold_prob`,
    `correct`, ... (README.md "Reading results"). DataError (one line naming the file and line) for a
    missing, damaged or empty file."""
    import pandas as pd

    from .io import read_jsonl

    f = _results_file(run)
    rows = [rec for _, rec in read_jsonl(f)]
    if not rows:
        raise DataError(f"{f}: no result rows (the run scored nothing); probe it again")
    return pd.DataFrame(rows)


def _read_json(path: Path) -> dict:
    """A JSON object file; DataError (one line) when it is missing, damaged or not an object."""
    from .io import read_text

    try:
        obj = json.loads(read_text(path))
    except ValueError as e:
        raise DataError(f"{path}: not valid JSON ({getattr(e, 'msg', e)}); the file is truncated or damaged") from None
    if not isinstance(obj, dict):
        raise DataError(f"{path}: a JSON {type(obj).__name__}, not an object")
    return obj


def load_metrics(run: str | Path) -> dict:
    """A finished run's metrics.json (headline such as `accuracy`, `per_relation`, `identity`, ...).
    DataError when the folder holds none (the run did not finish)."""
    folder = Path(run)
    folder = folder if folder.is_dir() else folder.parent
    if not (folder / METRICS).is_file():
        raise DataError(f"{folder}: no {METRICS} here (the run did not finish, or this is not a run folder)")
    return _read_json(folder / METRICS)


def load_config(run: str | Path) -> dict:
    """The flat options a run ran with (`probe`, `model`, `relations`, ...: its run_config.json's `config`)."""
    folder = Path(run)
    folder = folder if folder.is_dir() else folder.parent
    if not (folder / RUN_CONFIG).is_file():
        raise DataError(f"{folder}: no {RUN_CONFIG} here; give a run folder that `factprobe probe` wrote")
    record = _read_json(folder / RUN_CONFIG)
    return dict(record["config"]) if isinstance(record.get("config"), dict) else record  # {"config", "identity", ...}


def _verdict_table(run: str | Path, label: str) -> tuple[pd.DataFrame, str]:
    """Run `label`'s rows with its probe's per-fact verdict read as the right series `correct`
    (`factprobe.framework.verdict.verdict_table`, in the headline's direction), and the compared share's
    name (the headline metric; `not_<column>` for a lower-is-better one). ConfigError (one line) for a
    probe with no verdict per fact; DataError for rows without a boolean verdict."""
    from .framework.verdict import verdict_table

    df, verdict = verdict_table(
        load_results(run),
        load_config(run).get("probe") or None,
        f"run {label} ({run})",
        "compare needs one verdict per fact (the multiple-choice probes and any probe declaring one)",
        error=DataError,
    )
    return df, verdict.compared


def compare(run_a: str | Path, run_b: str | Path, *, templates: str = "majority", n_boot: int = 2000, seed: int = 0) -> dict:
    """Run b against run a, fact by fact on the facts both answered (`factprobe compare A B --json`
    without its data checks): `<metric>_a`, `<metric>_b` (e.g. `accuracy_a`), `diff` (b - a) and its
    95% paired bootstrap `diff_ci`, `mcnemar`, the subsumption rates (`eta_pooled_a_given_b`,
    `eta_relation_mean_a_given_b`, ...), `pearson_per_relation`, `n_joined`, `n_only_a`, `n_only_b`,
    `per_relation`, and `metric`. A template run (HGP/MMP) against a per-fact run is first reduced to
    one verdict per fact by `templates` (majority | any | all); the note is in `templates`."""
    from .metrics.comparison import TEMPLATE_RULES, align_templates, compare_runs

    if templates not in TEMPLATE_RULES:
        raise ConfigError(f"templates={templates!r}: choose one of {', '.join(TEMPLATE_RULES)}")
    a, metric_a = _verdict_table(run_a, "a")
    b, metric_b = _verdict_table(run_b, "b")
    a, b, note = align_templates(a, b, templates)
    res = compare_runs(a, b, n_boot=n_boot, seed=seed, metric=(metric_a, metric_b))
    res["metric"] = metric_a if metric_a == metric_b else f"{metric_a} (A) / {metric_b} (B)"
    if note:
        res["templates"] = note
    return res


def knowledge_map(runs: str | Path | list, out: str | Path | None = None):
    """The knowledge map of finished runs (run folders, a folder of runs, MLflow run ids), as `factprobe
    map RUN... --out DIR` builds it (docs/knowledge-map.md), as DataFrames: `.shares`, `.pairs`,
    `.disputed`, `.verdicts`, `.sharing`, ... and `.summary` (`factprobe.knowledge_maps.KnowledgeMap`;
    `.diff(other_map)` for two maps). `out`: the map's folder (reused for the same inputs, refused
    for others); None: a temporary folder removed when the process exits."""
    from .knowledge_maps import knowledge_map as build

    return build(runs, out)


__all__ = ["compare", "knowledge_map", "load_config", "load_metrics", "load_results", "probe"]
