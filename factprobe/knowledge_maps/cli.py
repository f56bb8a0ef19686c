"""`factprobe map`: the knowledge map of finished runs, and the diff of two maps.

    factprobe map runs/ic-lke-smollm runs/hgp-smollm runs/qa-smollm ... --out maps/tonight
    factprobe map runs/findings --out maps/findings          # every readable probe run of a findings study
    factprobe map runs:/<run id> <run id> ... --out maps/x   # MLflow runs (the tracking extra's resolver)
    factprobe map --diff maps/last-night maps/tonight [--out diffs/tonight]

The map joins one verdict per fact of every run (probes x models) on `fact_id` and writes, per model,
the share of facts known under every probe, a majority, none, and disputed, the agreement of every
probe pair (Cohen's kappa, eta both ways), the disputed facts, and across models the facts every
model knows and the knowledge sharing rates (`factprobe.knowledge_maps.build`; docs/knowledge-map.md).
A folder holding the finished map of the same inputs is reused; one of other inputs is refused.
"""

from __future__ import annotations

import argparse
import json


def cmd_map(args: argparse.Namespace) -> int:
    from ..errors import ConfigError

    if args.diff:
        if args.runs:
            raise ConfigError("map --diff A B compares two map folders; give no runs with it")
        return _diff(args)
    if args.model_a or args.model_b:
        raise ConfigError("--model-a and --model-b choose models of the maps of --diff; give --diff A B")
    if not args.runs:
        raise ConfigError("map needs runs (run folders, a folder of runs, MLflow run ids) and --out DIR, or --diff A B")
    if not args.out:
        raise ConfigError("map needs --out DIR: the folder the map's tables, figures and page are written to")
    from .build import PAGE, build_map
    from .page import format_summary
    from .result import KnowledgeMap

    folder, reused, notes = build_map(args.runs, args.out)
    km = KnowledgeMap.open(folder)
    if args.json:
        print(json.dumps(km.summary, indent=2, allow_nan=False))
        return 0
    print(format_summary(km.summary))
    for note in notes:
        if note not in km.summary.get("notes", []):
            print(note)
    print(f"\n{folder} already held this map (same inputs): reused" if reused else f"\nwrote {folder} (open {folder / PAGE})")
    return 0


def _diff(args: argparse.Namespace) -> int:
    from ..metrics.json_safe import json_safe
    from .diff import format_diff, write_diff
    from .result import KnowledgeMap

    before, after = (KnowledgeMap.open(p) for p in args.diff)
    diff = before.diff(after, args.model_a, args.model_b)
    if args.out:
        write_diff(diff, args.out)
    if args.json:
        print(json.dumps(json_safe(diff.summary), indent=2, allow_nan=False))
    else:
        print(format_diff(diff))
        if args.out:
            print(f"\nwrote {args.out}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add `factprobe map`."""
    p = sub.add_parser(
        "map",
        help="knowledge map: which facts a model knows under every probe (and the diff of two maps)",
        description=__doc__.split("\n\n")[2],
    )
    p.add_argument("runs", nargs="*", metavar="RUN", help="finished runs: folders, a folder of runs, MLflow run ids (runs:/ID)")
    p.add_argument("--out", default=None, help="the map's folder (with --diff: where the diff is written, optional)")
    p.add_argument("--diff", nargs=2, metavar=("A", "B"), default=None, help="compare map folder A (before) with B (after)")
    p.add_argument("--model-a", default=None, help="with --diff: the model of map A, when it maps several")
    p.add_argument("--model-b", default=None, help="with --diff: the model of map B, when it maps several")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_map)
