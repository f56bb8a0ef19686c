"""`factprobe pipeline run|compile|submit NAME` and `factprobe schedule NAME`: the argparse
front end. The work is done by the catalogue (parameters and their checks, pipelines/catalogue.py),
the local runner (pipelines/local_run.py) and the remote client (pipelines/remote.py).

- run: the real DAG with `kfp.local.SubprocessRunner(use_venv=False)` in this Python, logging to
  the store `run_local` resolves (the `tracking_uri` parameter, else `--tracking-uri`, else
  `MLFLOW_TRACKING_URI`, else the embedded sqlite `sqlite:///<cwd>/mlruns.db`); the last line names
  the store that was used.
- compile: the YAML to upload in the Kubeflow UI (default `build/pipelines/<name>.yaml`).
- submit / schedule: `kfp.Client(host=...)`: `create_run_from_pipeline_func`, and
  `create_recurring_run` with a six-field cron (seconds first).
"""

from __future__ import annotations

import argparse
import sys

from factprobe.cli import HelpSafeParser
from factprobe.redact import redact

from .catalogue import PIPELINES, format_params, get_pipeline, parse_params
from .local_run import run_local
from .remote import (
    KfpAccess,
    add_access_arguments,
    compile_all,
    image_notice,
    schedule,
    submit,
    wait_for_run,
)

COMPAT_HELP = (
    "compile without the platform fields older Kubeflow Pipelines backends reject (secretNameParameter, "
    "optional, securityContext): runs on KFP 2.1.0 or newer; k8s/README.md lists each field's version"
)


def _parser(prog: str) -> argparse.ArgumentParser:
    return HelpSafeParser(prog=prog)


def _host_for(args: argparse.Namespace, parser: argparse.ArgumentParser) -> str:
    if not args.host:
        parser.error("the following arguments are required: --host (or --list-params to list the parameters)")
    return args.host


def pipeline_cli(argv: list[str]) -> int:
    p = _parser("factprobe pipeline")
    sub = p.add_subparsers(dest="action", required=True)
    r = sub.add_parser("run", help="run locally with the KFP SubprocessRunner and embedded MLflow")
    r.add_argument("name", help=f"one of {', '.join(PIPELINES)}")
    r.add_argument("--param", action="append", default=[], metavar="K=V")
    r.add_argument("--tracking-uri")
    r.add_argument("--pipeline-root")
    r.add_argument("--list-params", action="store_true", help="list the pipeline's parameters and exit")
    r.add_argument(
        "--verbose", action="store_true", help="print every step's full output (kfp's executor logs) instead of one line per step"
    )
    c = sub.add_parser("compile", help="write pipeline YAML for the Kubeflow UI")
    c.add_argument("names", nargs="*")
    c.add_argument("--out", default="build/pipelines")
    c.add_argument("--compat", action="store_true", help=COMPAT_HELP)
    s = sub.add_parser("submit", help="submit a run to a Kubeflow Pipelines host")
    s.add_argument("name", help=f"one of {', '.join(PIPELINES)}")
    s.add_argument("--host", help="Kubeflow Pipelines API, e.g. https://kubeflow.example.com/pipeline")
    s.add_argument("--param", action="append", default=[], metavar="K=V")
    s.add_argument("--experiment")
    s.add_argument("--run-name")
    s.add_argument("--list-params", action="store_true", help="list the pipeline's parameters and exit (submits nothing)")
    s.add_argument("--wait", action="store_true", help="follow the run to its end; exit 1 unless it SUCCEEDED")
    s.add_argument(
        "--allow-default-image",
        action="store_true",
        help="submit even though FACTPROBE_IMAGE_CPU/GPU (and FACTPROBE_IMAGE_TRAIN for fine-tuning) are unset (the default images are not published)",
    )
    s.add_argument("--wait-timeout", type=float, default=24 * 3600, metavar="SECONDS", help="with --wait (default: 24 h)")
    s.add_argument("--compat", action="store_true", help=COMPAT_HELP)
    add_access_arguments(s)
    args = p.parse_args(argv)
    if args.action == "compile":
        print(image_notice(False, pipeline=args.names), file=sys.stderr)
        for path in compile_all(args.out, args.names or None, compat=args.compat):
            print(path)
        return 0
    if args.list_params:
        print(format_params(args.name))
        return 0
    if args.action == "submit":
        _host_for(args, s)
        images = image_notice(True, args.allow_default_image, args.name)  # refuses the unpublished default image
    pipe = get_pipeline(args.name)
    params = parse_params(pipe, args.param, args.name)
    if args.action == "run":
        from .local_steps import PipelineStopped

        try:
            ok, seconds, root, uri = run_local(args.name, params, args.tracking_uri, args.pipeline_root, verbose=args.verbose)
        except PipelineStopped as stopped:
            print(str(stopped), file=sys.stderr, flush=True)
            return stopped.exit_code
        where = "off (tracking_uri=none)" if uri.strip().lower() == "none" else uri
        print(
            redact(
                f"pipeline {args.name} {'succeeded' if ok else 'FAILED'} in {seconds:.1f} s; outputs under {root}; MLflow: {where}"
            )
        )
        return 0 if ok else 1
    result = submit(args.name, args.host, params, args.experiment, args.run_name, KfpAccess.from_args(args), compat=args.compat)
    print(images, file=sys.stderr)
    print(f"submitted run {result.run_id} to {args.host}", flush=True)
    if not args.wait:
        return 0
    state = wait_for_run(result.client, result.run_id, args.wait_timeout)
    print(f"run {result.run_id} {state}")
    return 0 if state == "SUCCEEDED" else 1


def schedule_cli(argv: list[str]) -> int:
    p = _parser("factprobe schedule")
    p.add_argument("name", help=f"one of {', '.join(PIPELINES)}")
    p.add_argument("--host", help="Kubeflow Pipelines API, e.g. https://kubeflow.example.com/pipeline")
    p.add_argument("--cron", help="six fields, seconds first, in UTC: '0 0 2 * * *' = daily at 02:00 UTC")
    p.add_argument("--param", action="append", default=[], metavar="K=V")
    p.add_argument("--experiment")
    p.add_argument("--job-name")
    p.add_argument("--max-concurrency", type=int, default=1)
    p.add_argument(
        "--catchup",
        action="store_true",
        help="after a pause or outage, run once per missed interval (default: once, KFP no_catchup)",
    )
    p.add_argument("--list-params", action="store_true", help="list the pipeline's parameters and exit (schedules nothing)")
    p.add_argument(
        "--allow-default-image",
        action="store_true",
        help="schedule even though FACTPROBE_IMAGE_CPU/GPU are unset (the default images are not published)",
    )
    p.add_argument("--compat", action="store_true", help=COMPAT_HELP)
    add_access_arguments(p)
    args = p.parse_args(argv)
    if args.list_params:
        print(format_params(args.name))
        return 0
    _host_for(args, p)
    if not args.cron:
        p.error("the following arguments are required: --cron")
    images = image_notice(True, args.allow_default_image, args.name)  # refuses the unpublished default image
    pipe = get_pipeline(args.name)
    params = parse_params(pipe, args.param, args.name)
    job = schedule(
        args.name,
        args.host,
        args.cron,
        params,
        args.experiment,
        args.job_name,
        args.max_concurrency,
        catchup=args.catchup,
        access=KfpAccess.from_args(args),
        compat=args.compat,
    )
    print(images, file=sys.stderr)
    print(
        f"scheduled {args.name} on {args.host} with cron '{args.cron}' (UTC"
        f"{'' if args.catchup else ', no catch-up of missed runs'}): "
        f"recurring run {getattr(job, 'recurring_run_id', job)}"
    )
    return 0
