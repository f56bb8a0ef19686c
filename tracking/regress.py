"""`factprobe regress`: the CI gate. Probes the candidate (or reads its run), joins it with the
baseline fact by fact (`tracking.compare.resolve_run`) and applies `regression_gate`."""
from __future__ import annotations

import json
import tempfile
from contextlib import ExitStack
from pathlib import Path

import pandas as pd

from factprobe.errors import ConfigError, DataError
from factprobe.metrics.comparison import align_templates, regression_gate

from .compare import _from_results_file, resolve_run


def _probe_candidate(model: str, baseline_params: dict, out: Path, args) -> pd.DataFrame:
    """Probe `model` with the baseline run's configuration, so both see the same facts."""
    from factprobe.errors import ConfigError
    from factprobe.probes.config import RunConfig
    from factprobe.probes.runner import run_probe

    from .probe_logging import CONFIG_PARAM, log_probe_outcome
    from .context import RunContext
    from .probe_run import probe_run

    if CONFIG_PARAM not in baseline_params:
        raise ConfigError(f"the baseline run has no {CONFIG_PARAM!r} parameter (logged by factprobe >= 0.2); "
                          "probe the baseline again or give a results folder")
    cfg = RunConfig.from_dict({**json.loads(baseline_params[CONFIG_PARAM]), "model": model,
                               "base_model": getattr(args, "base_model", None) or None, "out": None})
    context = RunContext.start(getattr(args, "tracking_uri", None) or "", pipeline="probe", trigger="ci")
    with ExitStack() as stack:
        runs: list = []

        def start() -> None:  # the MLflow run begins once the folder is claimed and the run validated
            runs.append(stack.enter_context(probe_run(cfg, context, enabled=not args.no_track,
                                                      run_name=f"regress-candidate-{Path(model).name}")))

        outcome = run_probe(cfg, out, on_start=start)
        for run in runs:
            log_probe_outcome(run, outcome, cfg)
    return _from_results_file(out)


def regress_cli(args) -> int:
    from .baseline import check_gate_table

    baseline, bdesc = resolve_run(args.baseline, args.tracking_uri)
    check_gate_table(baseline, bdesc, "baseline")  # refused before the candidate is probed
    cand_ref = args.candidate
    is_run = Path(cand_ref).joinpath("results.jsonl").exists() or cand_ref.endswith(".jsonl")
    if not is_run and not Path(cand_ref).exists():
        try:
            candidate, cdesc = resolve_run(cand_ref, args.tracking_uri)
            is_run = True
        except (ConfigError, DataError):
            is_run = False
    if is_run and (Path(cand_ref).exists() or cand_ref.endswith(".jsonl")):
        candidate, cdesc = _from_results_file(Path(cand_ref)), {"ref": cand_ref}
    if is_run:
        check_gate_table(candidate, cdesc, "candidate")
    else:
        params = bdesc.get("params")
        if params is None:
            cfg_file = Path(args.baseline) / "run_config.json"
            if not cfg_file.exists():
                raise ConfigError(f"baseline {args.baseline} records no probe configuration to repeat for the candidate")
            from .probe_logging import CONFIG_PARAM

            params = {CONFIG_PARAM: json.dumps(json.loads(cfg_file.read_text())["config"])}
        out = Path(args.out or tempfile.mkdtemp(prefix="factprobe-regress-"))
        candidate = _probe_candidate(cand_ref, params, out, args)
    candidate, baseline, note = align_templates(candidate, baseline, getattr(args, "templates", "majority"))
    decision = regression_gate(candidate, baseline, max_drop=args.max_drop, alpha=args.alpha)
    report = (f"candidate: {args.candidate}\nbaseline:  {args.baseline}\n" + (f"templates: {note}\n" if note else "")
              + decision.report())
    print(report)
    if args.report:
        Path(args.report).write_text(report + "\n")
    return 0 if decision.passed else 1
