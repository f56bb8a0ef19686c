"""`factprobe-lm-eval`: lm-eval's command line with `--model factprobe`, started as factprobe's commands start.

`factprobe.lm_eval_model` imports torch and lm-eval when it is imported (it registers the model with
lm-eval), so the console script starts here, in a module that imports neither:

- OpenMP's wait policy is set before torch loads and the thread policy is applied, as `factprobe` does
  (`factprobe.cli.main`, `factprobe/threads.py`): the CPUs this process may use, a user's
  `OMP_NUM_THREADS` kept, `--threads N` (taken out of the arguments: lm-eval has no such flag);
- without the `lm-eval` extra the command is one line naming it (`pip install 'factprobe[lm-eval]'`), not
  an ImportError traceback;
- then `factprobe.lm_eval_model.main` runs lm-eval's CLI with the model registered.

Exit status: lm-eval's; 2 with one `error:` line for what a user can cause in factprobe's part.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from .errors import FactprobeError
from .plugins import extras_for

#: the console script's name (pyproject.toml `[project.scripts]`)
COMMAND = "factprobe-lm-eval"


def missing_extra_line() -> str:
    """The one line for a run without lm-evaluation-harness: which extra of factprobe installs it."""
    extras = extras_for("lm_eval") or ("lm-eval",)
    install = " or ".join(f"'factprobe[{e}]'" for e in extras)
    return f"{COMMAND} needs lm-evaluation-harness (module lm_eval), which is not installed: pip install {install}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run `factprobe-lm-eval` with `argv` (default `sys.argv[1:]`): lm-eval's arguments, plus `--threads N`."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        from .threads import apply, set_wait_policy, take_option

        set_wait_policy()  # before torch loads: OpenMP reads it once
        apply(take_option(args)[0])  # `main` below takes `--threads` out of lm-eval's arguments (and applies it again)
        try:
            from . import lm_eval_model
        except ModuleNotFoundError as err:
            if (err.name or "").split(".")[0] != "lm_eval":
                raise
            print(f"error: {missing_extra_line()}", file=sys.stderr)
            return 2
    except FactprobeError as e:
        text = str(e).strip().splitlines()
        print(f"error: {text[0] if text else type(e).__name__}", file=sys.stderr)
        return int(getattr(e, "exit_code", 2))
    return lm_eval_model.main(args)


if __name__ == "__main__":
    sys.exit(main())
