"""`factprobe regress`: the CI gate. Probes the candidate (or reads its run), joins it with the
baseline fact by fact (`factprobe_ops.tracking.run_tables.resolve_run`) and applies `regression_gate`
to the per-fact verdict the probe declares, in its headline's direction (`factprobe.framework.verdict`:
any probe with a verdict, a plug-in included; under a lower-is-better headline a rise is the drop).

Like with like (issue 28 item 3): the gate compares only results of the same data and numerics,
read from each run's measurement identity (`factprobe.identity`):

- the baseline must carry an identity (a run made before identities were recorded is refused: probe
  it again); a `--baseline` tag filter must match exactly one run (several are refused, named);
- a candidate model is probed on the baseline's data *by content*: the baseline's inputs are read
  from the absolute locations its identity records (not its config's relative `--data`), the items
  are prepared, and their data digest must equal the baseline's, else the gate is refused before
  anything is scored. The baseline's resolved dtype is pinned, and its device type (unless
  `--allow-numerics-change`); `auto` is never replayed;
- a candidate run (folder or MLflow run) must carry an identity with the baseline's data digest;
- different numerics (dtype, device type, transformers major version) are refused unless
  `--allow-numerics-change` (then the report says what differs);
- the candidate must answer every baseline fact: the gate never decides on a subset.

The report and gate.json speak the probe's headline metric in its direction (issue 42 item 2;
`factprobe.metrics.gate.GateDecision`): a `win_rate` probe is reported as `win_rate`, a lower-is-better
`miss_rate` as itself (a rise is the regression).

`--out DIR` (claimed as a "regress" folder) holds the candidate's probe in DIR/candidate, the
report in DIR/gate_report.txt and the decision in DIR/gate.json (`gate_json`):

- `decision` ("PASS" / "FAIL") and `passed`; `reason`, the one-sentence why;
- `metric` (the gated headline, e.g. `accuracy`, `win_rate`) and `direction` ("higher is better" /
  "lower is better"); `candidate_value` and `baseline_value`, the metric of each run on the shared facts;
  `diff` (candidate_value - baseline_value) and `diff_ci` (its paired bootstrap interval, `1 - alpha`);
- `p_value`, `mcnemar_method`, `b01` / `b10` (facts better / worse in the candidate), `n` (shared
  facts), `n_only_candidate` / `n_only_baseline`; `max_drop` and `alpha`, the settings gated with;
- `candidate` and `baseline` (the references given), `baseline_run_id`, `notes`, and `verdict` (the
  per-fact column read, the headline it is the share of, and `higher_is_better`).
"""

from __future__ import annotations

import json
import sys
import tempfile
from contextlib import ExitStack, nullcontext
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from factprobe.errors import ConfigError, DataError
from factprobe.framework.verdict import DEFAULT_VERDICT, FactVerdict
from factprobe.metrics.comparison import align_templates
from factprobe.metrics.gate import GateDecision, regression_gate

from .run_tables import _from_results_file, folder_identity, resolve_run, run_provenance

REPORT_FILE = "gate_report.txt"
DECISION_FILE = "gate.json"
CANDIDATE_DIR = "candidate"


def require_identity(desc: dict, role: str) -> dict:
    """The measurement identity of the resolved run `desc` (`resolve_run`); ConfigError (one line)
    when it has none: a gate cannot check the data and numerics of a run made before identities."""
    from .identity_check import MISSING

    ident = desc.get("identity")
    if ident is not None:
        return ident
    ref = desc.get("ref", "?")
    if role == "baseline":
        raise ConfigError(
            f"baseline {ref} {MISSING}: the baseline predates measurement identities and must be "
            "re-probed; probe it again with this factprobe (then `factprobe baseline promote` the new run) "
            "and gate against that"
        )
    raise ConfigError(
        f"candidate {ref} {MISSING}: probe the candidate again with this factprobe, or give its model as --candidate"
    )


def check_gate_identities(
    baseline: dict, candidate: dict, allow_numerics_change: bool, configs: tuple[dict | None, dict | None] = (None, None)
) -> str:
    """Refuse a candidate whose identity says it measured something else than the baseline: DataError
    (one line: the digests, the inputs and the settings that differ, from the two runs' flat
    `configs` when known: `--seed 0 (baseline) vs 1 (candidate)`) for other data; ConfigError for other
    numerics (dtype, device type, transformers major version) unless `allow_numerics_change`, where
    the returned line says what differs ("" when nothing does)."""
    from .identity_check import data_difference, settings_difference

    names = ("baseline", "candidate")
    diff = data_difference(baseline, candidate, names, settings_difference(*configs, names))
    if diff:
        raise DataError(
            f"the candidate was probed on other data than the baseline: {diff}; regress gates only on the "
            "baseline's items: give the model as --candidate (it is probed on the baseline's inputs), or "
            "probe a new baseline"
        )
    return check_gate_numerics(baseline.get("numerics") or {}, candidate.get("numerics") or {}, allow_numerics_change)


def check_gate_numerics(baseline: dict, candidate: dict, allow_numerics_change: bool) -> str:
    """ "" when the two numerics are alike for a gate; the note naming the differences when
    `allow_numerics_change`; else ConfigError (one line naming them and the flag)."""
    from .identity_check import numerics_difference

    num = numerics_difference({"numerics": baseline}, {"numerics": candidate}, ("baseline", "candidate"))
    if not num:
        return ""
    if not allow_numerics_change:
        raise ConfigError(
            f"the candidate's numerics differ from the baseline's: {num}; a difference in the gated metric "
            "could come from the numerics, not the model: run regress where the baseline ran, probe a new "
            "baseline here, or pass --allow-numerics-change to gate anyway"
        )
    return f"numerics differ (allowed by --allow-numerics-change): {num}"


def check_every_baseline_fact(candidate: pd.DataFrame, baseline: pd.DataFrame) -> None:
    """DataError (one line) unless the candidate's per-fact table answers every fact of the
    baseline's (both joinable on `fact_id`): the gate never decides on a subset."""
    missing = sorted(map(str, set(baseline["fact_id"]) - set(candidate["fact_id"])))
    if missing:
        n = baseline["fact_id"].nunique()
        raise DataError(
            f"the candidate lacks {len(missing)} of the baseline's {n} facts (e.g. {missing[0]}); regress "
            "gates on every baseline fact: probe the candidate on the baseline's data (give its model as "
            "--candidate)"
        )


def _device_available(device_type: str) -> bool:
    import torch

    if device_type == "cuda":
        return torch.cuda.is_available()
    if device_type == "mps":
        return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
    return device_type == "cpu"


def replay_fields(config: dict, identity: dict, allow_numerics_change: bool) -> dict:
    """The baseline's flat configuration `config` as the candidate replays it: every input at the
    absolute location the baseline's identity recorded, the baseline's resolved dtype, and its
    device type (with `allow_numerics_change`: that device where this machine has one, else `auto`).
    ConfigError (one line) for a recorded input that no longer exists, or a device this machine lacks."""
    fields = dict(config)
    for inp in identity.get("inputs") or []:
        name, location = inp.get("name"), str(inp.get("location") or "")
        if name not in fields or not location:
            continue
        if not location.startswith("s3://") and not Path(location).exists():
            raise ConfigError(
                f"the baseline's input {name} {location} no longer exists; the candidate must be probed on "
                "the baseline's data: restore it there, or probe a new baseline"
            )
        fields[name] = location
    num = identity.get("numerics") or {}
    if num.get("dtype"):
        fields["dtype"] = str(num["dtype"])
    device = str(num.get("device") or "")
    if device:
        if _device_available(device):
            fields["device"] = device
        elif allow_numerics_change:
            fields["device"] = "auto"
        else:
            raise ConfigError(
                f"the baseline ran on {device} ({num.get('device_name') or device}) and this machine has no "
                f"{device} device: run regress where the baseline ran, or pass --allow-numerics-change to "
                "probe the candidate here"
            )
    return fields


def expected_numerics(device: str, dtype: str) -> dict:
    """What a probe with `device` / `dtype` would run with here (`factprobe.lm.numerics.resolved_numerics`:
    dtype, device type and name, library versions), without loading a model."""
    from factprobe.lm.numerics import resolved_numerics

    return resolved_numerics(device, dtype)


def _probe_candidate(
    model: str, baseline_params: dict, out: Path, args, identity: dict | None = None, failures: list[str] | None = None
) -> pd.DataFrame:
    """Probe `model` with the baseline run's configuration, so both see the same items: with the
    baseline's `identity`, on its inputs' recorded locations and its numerics (`replay_fields`), and
    only when the prepared items' data digest equals the baseline's (DataError before scoring). A
    failed MLflow logging of the candidate's run (`TrackedRun.failure`) is appended to `failures`."""
    from factprobe.framework.config import RunConfig
    from factprobe.framework.registry import get_probe
    from factprobe.framework.runner import run_probe
    from factprobe.identity import data_digest

    from .context import RunContext
    from .probe_logging import CONFIG_PARAM, log_probe_outcome
    from .probe_run import probe_run

    if CONFIG_PARAM not in baseline_params:
        raise ConfigError(
            f"the baseline run has no {CONFIG_PARAM!r} parameter (logged by factprobe >= 0.2); "
            "probe the baseline again or give a results folder"
        )
    fields = json.loads(baseline_params[CONFIG_PARAM])
    allow = bool(getattr(args, "allow_numerics_change", False))
    if identity is not None:
        fields = replay_fields(fields, identity, allow)
    cfg = RunConfig.from_dict(
        {**fields, "model": model, "base_model": getattr(args, "base_model", None) or None, "out": None, "threads": None}
    )  # this machine's own thread policy, not the baseline's count
    if identity is not None:
        note = check_gate_numerics(identity.get("numerics") or {}, expected_numerics(cfg.base.device, cfg.base.dtype), allow)
        if note:
            print(f"note: {note}", file=sys.stderr)
    prepared = get_probe(cfg.probe).prepare(cfg)
    if identity is not None:
        now = data_digest(prepared)
        if now != identity.get("data_digest"):
            from .identity_check import short

            where = ", ".join(f"{n} {fields[n]}" for n in (i.get("name") for i in identity.get("inputs") or []) if n in fields)
            raise DataError(
                f"the baseline's data changed since it was probed: data digest {short(str(identity.get('data_digest')))} "
                f"(baseline) vs {short(now)} (re-read now{f' from {where}' if where else ''}); the candidate "
                "would be scored on other items: restore the baseline's inputs, or probe a new baseline"
            )
    context = RunContext.start(getattr(args, "tracking_uri", None) or "", pipeline="probe", trigger="ci")
    with ExitStack() as stack:
        runs: list = []

        def start() -> None:  # the MLflow run begins once the folder is claimed and the run validated
            runs.append(
                stack.enter_context(
                    probe_run(cfg, context, enabled=not args.no_track, run_name=f"regress-candidate-{Path(model).name}")
                )
            )

        outcome = run_probe(cfg, out, on_start=start, prepared=prepared)
        for run in runs:
            log_probe_outcome(run, outcome, cfg)
            if run.failure and failures is not None:
                failures.append(run.failure)
    return _from_results_file(out)


def _baseline_params(args, bdesc: dict) -> dict:
    """The baseline's probe configuration as {CONFIG_PARAM: json}: its MLflow params, or its folder's run_config.json."""
    from .probe_logging import CONFIG_PARAM

    params = bdesc.get("params")
    if params is not None:
        return params
    ref = Path(args.baseline)
    cfg_file = (ref if ref.is_dir() else ref.parent) / "run_config.json"
    if not cfg_file.exists():
        raise ConfigError(f"baseline {args.baseline} records no probe configuration to repeat for the candidate")
    return {CONFIG_PARAM: json.dumps(json.loads(cfg_file.read_text())["config"])}


def _is_run(cand_ref: str, tracking_uri: str | None) -> tuple[bool, pd.DataFrame | None, dict | None]:
    """Whether `--candidate` names a run (results folder or file, MLflow run id or tag filter) rather
    than a model, with its table and description when it does."""
    if Path(cand_ref).joinpath("results.jsonl").exists() or cand_ref.endswith((".jsonl", ".parquet")):
        df, desc = resolve_run(cand_ref, tracking_uri)
        return True, df, desc
    if not Path(cand_ref).exists():
        try:
            df, desc = resolve_run(cand_ref, tracking_uri, unique=True)
            return True, df, desc
        except (ConfigError, DataError):
            pass
    return False, None, None


def gate_json(decision: GateDecision, args, bdesc: dict, notes: list[str], verdict: FactVerdict = DEFAULT_VERDICT) -> dict:
    """The decision as written to `--out`/gate.json (fields: the module docstring): every field of
    `GateDecision` (metric, direction, candidate_value, baseline_value, diff, ...), "decision"
    (PASS/FAIL), the two references, the baseline's run id (when it is an MLflow run), the notes, and
    the verdict gated on ("verdict": its column, headline metric and direction)."""
    from factprobe.metrics.json_safe import json_safe

    d = asdict(decision)
    d["diff_ci"] = list(d["diff_ci"])
    return json_safe(
        {
            "decision": "PASS" if decision.passed else "FAIL",
            **d,
            "candidate": args.candidate,
            "baseline": args.baseline,
            "baseline_run_id": bdesc.get("run_id"),
            "notes": notes,
            "verdict": asdict(verdict),
        }
    )


def regress_cli(args) -> int:
    """`factprobe regress`: see the module docstring. Exit 0 on PASS, 1 on FAIL; refusals raise
    ConfigError / DataError (exit 2, one line); a failed MLflow logging of the candidate's run raises
    TrackingError (exit 1, one line) after the report and gate.json are written."""
    from .baseline import gate_table

    allow = bool(getattr(args, "allow_numerics_change", False))
    baseline, bdesc = resolve_run(args.baseline, args.tracking_uri, unique=True)
    baseline, verdict = gate_table(baseline, bdesc, "baseline")  # refused before the candidate is probed
    is_run, candidate, cdesc = _is_run(args.candidate, args.tracking_uri)
    if is_run:
        candidate, _ = gate_table(candidate, cdesc, "candidate")
    base_ident = require_identity(bdesc, "baseline")
    notes: list[str] = []
    failures: list[str] = []
    if is_run:
        configs = (run_provenance(bdesc)[0], run_provenance(cdesc)[0])
        note = check_gate_identities(base_ident, require_identity(cdesc, "candidate"), allow, configs)
        notes += [note] if note else []
    claim_out = nullcontext(None)
    if args.out:
        from factprobe.run_folder import claim

        claim_out = claim(args.out, "regress", "regress")
    with claim_out as out:
        if not is_run:
            cand_out = Path(out) / CANDIDATE_DIR if out is not None else Path(tempfile.mkdtemp(prefix="factprobe-regress-"))
            candidate = _probe_candidate(args.candidate, _baseline_params(args, bdesc), cand_out, args, base_ident, failures)
            candidate, _ = gate_table(candidate, {"ref": str(cand_out)}, "candidate")  # the baseline's probe, its verdict
            cand_ident = folder_identity(str(cand_out))
            if cand_ident is not None:  # what the run itself recorded: the same data, and its loaded numerics
                configs = (run_provenance(bdesc)[0], run_provenance({"ref": str(cand_out)})[0])
                note = check_gate_identities(base_ident, cand_ident, allow, configs)
                notes += [note] if note else []
        candidate, baseline, note = align_templates(candidate, baseline, getattr(args, "templates", "majority"))
        check_every_baseline_fact(candidate, baseline)
        decision = regression_gate(
            candidate,
            baseline,
            max_drop=args.max_drop,
            alpha=args.alpha,
            metric=verdict.metric,
            higher_is_better=verdict.higher_is_better,
        )
        report = (
            f"candidate: {args.candidate}\nbaseline:  {args.baseline}\n"
            + (f"templates: {note}\n" if note else "")
            + "".join(f"note: {n}\n" for n in dict.fromkeys(notes))
            + decision.report()
        )
        print(report)
        if args.report:
            Path(args.report).write_text(report + "\n")
        if out is not None:
            from factprobe.io import atomic_write_json, atomic_write_text

            atomic_write_text(Path(out) / REPORT_FILE, report + "\n")
            atomic_write_json(Path(out) / DECISION_FILE, gate_json(decision, args, bdesc, list(dict.fromkeys(notes)), verdict))
    if failures:  # never exit 0 over a half-logged candidate run
        from .clients import TrackingError

        raise TrackingError(f"{failures[0]}; the gate itself decided {'PASS' if decision.passed else 'FAIL'} (report above)")
    return 0 if decision.passed else 1
