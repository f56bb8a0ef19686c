"""What the pipelines layer adds to the `factprobe` command line (entry point `factprobe.commands`):
`factprobe pipeline run|compile|submit ...` and `factprobe schedule ...` (see pipelines/cli.py)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add `pipeline` and `schedule`; their own parsers live in pipelines/cli.py."""

    def pipeline(a: argparse.Namespace) -> int:
        from .cli import pipeline_cli

        return pipeline_cli(a.rest)

    def schedule(a: argparse.Namespace) -> int:
        from .cli import schedule_cli

        return schedule_cli(a.rest)

    pl = sub.add_parser("pipeline", help="run, compile or submit a Kubeflow pipeline", add_help=False)
    pl.add_argument("rest", nargs=argparse.REMAINDER)
    pl.set_defaults(func=pipeline)
    sc = sub.add_parser("schedule", help="create a recurring run on a Kubeflow Pipelines host", add_help=False)
    sc.add_argument("rest", nargs=argparse.REMAINDER)
    sc.set_defaults(func=schedule)
