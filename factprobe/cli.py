"""`factprobe` command line.

    factprobe probe ic-lke --model smollm2-135m-instruct --source countryinfo --out runs/x
    factprobe models list | factprobe models path ALIAS
    factprobe pipeline run|compile|submit NAME ...      (see pipelines/)
    factprobe schedule NAME --host URL --cron EXPR
    factprobe compare RUN_A RUN_B
    factprobe regress --candidate MODEL_OR_RUN --baseline RUN_OR_TAG [--max-drop 0.02]

User errors (bad data, unknown relation or model, ...) print one line `error: ...` and exit 2.
"""
from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path
from typing import Sequence

from .errors import FactprobeError


def _add_probe_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("probe", choices=["ic-lke", "eic-lke", "hgp", "mmp"], help="which estimator to run")
    p.add_argument("--model", default="smollm2-135m-instruct", help="alias, local Hugging Face folder, or hub id")
    p.add_argument("--source", default="countryinfo", choices=["countryinfo", "lama", "nobel", "triples", "s3", "lpaqa-train"])
    p.add_argument("--data", help="test facts: lama folder, Nobel CSV, triples file, or s3://bucket/prefix")
    p.add_argument("--train-data", help="folder of P*.jsonl training facts for in-context examples")
    p.add_argument("--relations", help="comma-separated relation ids, e.g. P36,P19")
    p.add_argument("--max-facts-per-relation", type=int, help="test facts per relation (deterministic sample)")
    p.add_argument("--examples", type=int, default=50, help="in-context examples per relation (default 50)")
    p.add_argument("--choices", type=int, default=100, help="options per item, gold included (default 100)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--separator", default=" ", help="between subject and object and between examples (default space)")
    p.add_argument("--templates", type=int, default=3, help="HGP/MMP: prompts per relation (default 3)")
    p.add_argument("--prompts-root", help="LPAQA prompts folder (default <data>/lpaqa/prompts)")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--token-budget", type=int, help="query tokens per packed forward")
    p.add_argument("--on-too-long", choices=["truncate", "refuse"], default="truncate")
    p.add_argument("--out", default=None, help="output folder (default runs/<probe>-<model>-<source>)")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default sqlite:///mlruns.db here)")
    p.add_argument("--no-track", action="store_true", help="do not log to MLflow")
    p.add_argument("--require-tracking", action="store_true", help="fail (exit 1) if MLflow logging fails")
    p.add_argument("--trigger", default="local", choices=["local", "ui", "nightly", "ci"])
    p.add_argument("--no-progress", action="store_true")


def cmd_probe(args: argparse.Namespace) -> int:
    from .probes.config import ProbeConfig
    from .probes.runner import format_relation_table, run_probe

    cfg = ProbeConfig(
        probe=args.probe, model=args.model, source=args.source, data=args.data, train_data=args.train_data,
        relations=args.relations, max_facts_per_relation=args.max_facts_per_relation, examples=args.examples,
        choices=args.choices, seed=args.seed, separator=args.separator, templates_per_relation=args.templates,
        prompts_root=args.prompts_root, device=args.device, dtype=args.dtype, token_budget=args.token_budget,
        on_too_long=args.on_too_long,
    )
    model_slug = Path(args.model).name if Path(args.model).exists() else args.model.replace("/", "_")
    out = Path(args.out or f"runs/{args.probe}-{model_slug}-{args.source}")
    from tracking.probe_logging import log_probe_outcome, probe_run

    # Same config into the same folder on the same host = the same step: a rerun marks the run of a
    # crashed attempt (left RUNNING when the server died) FAILED instead of leaving it RUNNING.
    step_key = f"cli/{socket.gethostname()}/{out.resolve()}/{cfg.results_key()}"
    with probe_run(cfg, args.tracking_uri, enabled=not args.no_track, required=args.require_tracking,
                   trigger=args.trigger, step_key=step_key) as run:
        outcome = run_probe(cfg, out, progress=not args.no_progress)
        log_probe_outcome(run, outcome, cfg)
    m = outcome.metrics
    print(format_relation_table(m))
    print(f"\n{cfg.probe} {cfg.model}: accuracy {m['accuracy']:.3f} over {m['n']} items "
          f"({outcome.n_scored_now} scored now, {outcome.n_resumed} resumed); results in {out}")
    if m.get("naive_tokens"):
        print(f"tokens forwarded {m['tokens_forwarded']:,} vs {m['naive_tokens']:,} for one full forward per option "
              f"({m['token_savings']:.1%} saved)")
    if run.active:
        print(f"MLflow run {run.run_id} at {run.uri}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from tracking.compare import compare_cli

    return compare_cli(args)


def cmd_regress(args: argparse.Namespace) -> int:
    from tracking.compare import regress_cli

    return regress_cli(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="factprobe", description="Measure what language models know about facts.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("probe", help="run a multiple-choice knowledge probe")
    _add_probe_args(p)
    p.set_defaults(func=cmd_probe)

    m = sub.add_parser("models", help="list model aliases or print a cached model folder")
    m.add_argument("rest", nargs=argparse.REMAINDER)
    m.set_defaults(func=lambda a: __import__("factprobe.lm.models_cli", fromlist=["models_cli"]).models_cli(a.rest))

    pl = sub.add_parser("pipeline", help="run, compile or submit a Kubeflow pipeline")
    pl.add_argument("rest", nargs=argparse.REMAINDER)
    pl.set_defaults(func=lambda a: __import__("pipelines.cli", fromlist=["pipeline_cli"]).pipeline_cli(a.rest))

    sc = sub.add_parser("schedule", help="create a recurring run on a Kubeflow Pipelines host")
    sc.add_argument("rest", nargs=argparse.REMAINDER)
    sc.set_defaults(func=lambda a: __import__("pipelines.cli", fromlist=["schedule_cli"]).schedule_cli(a.rest))

    c = sub.add_parser("compare", help="join two runs fact by fact and compare them")
    c.add_argument("run_a", help="MLflow run id or a results folder/results.jsonl")
    c.add_argument("run_b")
    c.add_argument("--tracking-uri")
    c.add_argument("--n-boot", type=int, default=2000)
    c.add_argument("--json", action="store_true", help="print the comparison as JSON")
    c.set_defaults(func=cmd_compare)

    r = sub.add_parser("regress", help="CI gate: fail if a candidate is significantly worse than a baseline")
    r.add_argument("--candidate", required=True, help="model (alias/folder) to probe now, or an MLflow run id / results folder")
    r.add_argument("--baseline", required=True, help="MLflow run id, results folder, or tag filter key=value")
    r.add_argument("--max-drop", type=float, default=0.02)
    r.add_argument("--alpha", type=float, default=0.05)
    r.add_argument("--tracking-uri")
    r.add_argument("--out", help="where to write the candidate's probe results and the gate report")
    r.add_argument("--report", help="write the readable report to this file too")
    r.add_argument("--no-track", action="store_true")
    r.set_defaults(func=cmd_regress)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except FactprobeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - tracking failures (--require-tracking) are one line too
        if "TrackingError" not in {c.__name__ for c in type(e).__mro__}:  # incl. LocalServerError
            raise
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; finished facts are kept in the output folder's checkpoint", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
