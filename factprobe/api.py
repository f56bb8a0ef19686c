"""The Python API: run a probe, read a run's results, compare two runs (docs/python-api.md).

    import factprobe

    outcome = factprobe.probe("ic-lke", model="smollm2-135m-instruct", out="runs/a", relations="P36")
    df = factprobe.load_results("runs/a")        # one row per fact (per fact and template for HGP/MMP)
    metrics = factprobe.load_metrics("runs/a")   # metrics.json
    res = factprobe.compare("runs/a", "runs/b")  # fact by fact, as `factprobe compare` (accuracy_a, ...)

Each function calls the pieces the command line calls: `probe` builds a `RunConfig` from the same
options (`factprobe probe PROBE --help` lists them; flag `--max-facts-per-relation` is keyword
`max_facts_per_relation`) and runs `factprobe.probes.runner.run_probe`; `load_results` and
`load_metrics` read the files of README.md "Reading results"; `compare` joins the probes' declared
per-fact verdicts with `factprobe.metrics.comparison.compare_runs`. Bad input raises a
`factprobe.errors.FactprobeError` (`ConfigError`, `DataError`) with one line naming the option or
file. Nothing heavy is imported until a function is called (`import factprobe` stays light).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import ConfigError, DataError

if TYPE_CHECKING:  # pragma: no cover - types only
    import pandas as pd

    from .probes.runner import ProbeOutcome

RESULTS, METRICS, RUN_CONFIG = "results.jsonl", "metrics.json", "run_config.json"


def probe(
    name: str,
    model: str | None = None,
    out: str | Path | None = None,
    *,
    config: str | Path | None = None,
    progress: bool = False,
    verbose: bool = False,
    **options: Any,
) -> ProbeOutcome:
    """Run (or resume) probe `name` on `model` into the folder `out` and return its `ProbeOutcome`
    (`.results` DataFrame, `.metrics` dict, `.out_dir`, `.n_scored_now`, `.n_resumed`, `.notes`).

    `options` are the probe's options by field name (`relations="P36,P19"`, `max_facts_per_relation=5`,
    `seed=1`, ...); `config` is a YAML or JSON file of options (a run's own run_config.json repeats that
    run), which `model`, `out` and `options` override (`model` None: the file's, else the default model).
    `out` defaults to `runs/<probe>-<model>-<source>`, as on the command line. `progress` shows the
    progress bars; `verbose` prints the identity line and notes. ConfigError (one line) for an unknown
    probe or option or a bad value."""
    from .cli import default_out
    from .lm import quiet_libraries
    from .probes.config import RunConfig
    from .probes.registry import get_probe

    found = get_probe(name)
    given: dict[str, Any] = {}
    if config is not None:
        from .config_files import options_from_file
        from .probes.config import BaseConfig

        known = [*RunConfig.IGNORED, *BaseConfig.field_names(), *found.config_class.field_names()]
        given = options_from_file(config, "probe", found.name, known)
    given.update(options, probe=found.name)
    if model is not None:
        given["model"] = model
    if out is not None:
        given["out"] = str(out)
    cfg = RunConfig.from_dict(given)
    folder = Path(cfg.base.out) if cfg.base.out else default_out(cfg)
    quiet_libraries(progress=progress)
    from .probes.runner import run_probe

    return run_probe(cfg, folder, progress=progress, log=print if verbose else (lambda _msg: None))


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
    (`factprobe.probes.verdict.verdict_table`, in the headline's direction), and the compared share's
    name (the headline metric; `not_<column>` for a lower-is-better one). ConfigError (one line) for a
    probe with no verdict per fact; DataError for rows without a boolean verdict."""
    from .probes.verdict import verdict_table

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


__all__ = ["compare", "load_config", "load_metrics", "load_results", "probe"]
