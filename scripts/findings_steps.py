"""Run the steps of `factprobe study findings` in several processes at once (one model's steps, or a part of them).

A findings study runs its steps one after another in one process. On a machine with more cores than one torch process
uses well (two 1-thread processes on 2 cores beat one 2-thread process on these small models), start this script
once per worker with the study's own flags and the same `--out`; then run the study command itself, which reads every
finished step back (nothing is scored twice) and writes the table:

    for w in 1 2; do FACTPROBE_STEPS_AT_ONCE=2 .venv/bin/python scripts/findings_steps.py --models gemma-3-270m \\
        --relations ... --budget paper ... --out runs/findings-paper & done; wait
    .venv/bin/factprobe study findings --models smollm2-135m-instruct,gemma-3-270m ... --out runs/findings-paper

Each worker walks the steps in `--order` (default: the slowest first, as measured on the paper budget) and runs
every step that no other live process is writing: a step folder is claimed by its own lock (`factprobe.run_folder`),
so two workers never run the same step. A finished step is read back, which refuses a folder of another configuration
in one line; a killed worker's probe steps resume from their checkpoints. The configurations are the study's own
(`factprobe.studies.findings.ModelSteps`), so the study recognises the folders as its steps.
`FACTPROBE_STEPS_AT_ONCE=2` gives each of two workers half the CPUs (`factprobe.threads`, applied before torch loads,
as the CLI applies it). Exit status: 0 when every step of this worker's list is finished or was left to a live
worker, 1 on an error (one line), 143 / 130 on SIGTERM / Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from factprobe import threads
from factprobe.config import add_config_arguments, namespace_to_dict
from factprobe.errors import ConfigError, FactprobeError
from factprobe.run_folder import FolderBusyError
from factprobe.signals import sigterm_as_interrupt
from factprobe.studies.base import StudyContext
from factprobe.studies.findings import FindingsConfig, ModelSteps, step_names

#: the slowest steps first (paper budget, 2 cores): each worker starts on the longest step nobody runs yet
SLOWEST_FIRST = (
    "belief-icl",
    "icl-examples",
    "counterfactual",
    "coherency",
    "hgp",
    "mmp",
    "ic-lke",
    "icl-sequence-incorrect",
    "icl-sequence-unknown",
    "icl-sequence-incorrect-block",
    "icl-sequence-unknown-block",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_config_arguments(parser, FindingsConfig)
    parser.add_argument("--out", required=True, help="the findings study's output folder")
    parser.add_argument("--order", default=",".join(SLOWEST_FIRST), help="comma-separated steps, in the order to try them")
    args = parser.parse_args(argv)
    try:
        # the thread policy before anything imports torch (none of the imports above does), as `factprobe.cli.main`
        # applies it: OpenMP reads its wait policy once, when torch loads
        threads.set_wait_policy()
        threads.apply(None)
        with sigterm_as_interrupt():
            return _work(args)
    except (FactprobeError, OSError) as e:  # a bad option, model, relation or folder: one line
        lines = str(e).strip().splitlines()
        print(f"error: {lines[0] if lines else type(e).__name__}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: the probe steps keep their checkpoints
        print("findings_steps: interrupted; rerunning with the same --out resumes its probe steps", file=sys.stderr)
        return getattr(e, "exit_code", 130)


def _work(args: argparse.Namespace) -> int:
    """Every model's steps in `--order`: run what is not finished and not another live process's; 0."""
    cfg = FindingsConfig.from_dict(namespace_to_dict(args, (FindingsConfig,)))
    order = [s.strip() for s in args.order.split(",") if s.strip()]
    for model in cfg.models:
        known = step_names(cfg, model)
        unknown = [s for s in order if s not in known]
        if unknown:
            raise ConfigError(f"--order: no step {', '.join(unknown)}; the steps are {', '.join(known)}")
        ctx = StudyContext(base=None, cfg=cfg, out=Path(args.out), progress=True, note=lambda m: print(f"note: {m}"))
        steps = ModelSteps(ctx, model, Path(args.out) / Path(model).name)
        for step in order:
            name = f"findings_steps: {Path(model).name}: {step}"
            # a finished step is still run: that reads it back and refuses a folder of another configuration
            done = steps.finished(step)
            try:
                print(f"{name} {'is finished; checking it' if done else 'starts'}", flush=True)
                steps.run(step)
                print(f"{name} {'is this configuration' if done else 'finished'}", flush=True)
            except FolderBusyError as e:
                print(f"{name} is another worker's ({e})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
