"""How many CPU threads a command or pipeline step computes with: the thread policy.

Contract:
- `available_cpus()` is the number of CPUs this process may use: the smallest of its CPU affinity
  (`os.sched_getaffinity(0)`) and its cgroup CPU quota (v2 `cpu.max`, v1 `cpu.cfs_quota_us` /
  `cpu.cfs_period_us`, of its own cgroup and every ancestor, rounded up), never the node's core
  count (a pod limited to 2 CPUs on a 64-core node gets 2).
- `steps_at_once()` is how many steps the local pipeline runner runs beside this one, itself
  included: the environment variable `STEPS_AT_ONCE_ENV` that `pipelines/local_steps.py` sets in
  each step's environment; 1 when unset (a command run by hand, a pod on a cluster).
- `resolve(threads)` is `threads` when given (>= 1), else the user's own `OMP_NUM_THREADS` (or
  `MKL_NUM_THREADS`) when the environment sets one that factprobe did not write, else
  `available_cpus() // steps_at_once()` (at least 1). Never more than `available_cpus()`: a larger
  count (`--threads 100000`, which made torch start 100000 OpenMP threads and crash) is capped to the
  CPUs the process may use, and one `note:` line on stderr says so (once per count and process).
- `apply(threads)` resolves the count and makes it the process's: torch's intra-op threads when
  torch is already imported, and `OMP_NUM_THREADS` / `MKL_NUM_THREADS` in the environment (read by
  torch when it is imported later, and by child processes): an explicit count (`--threads`) sets
  both; otherwise a variable the user set is kept as it is (a value above the CPUs is lowered to the
  cap) and only an unset one is set. It also sets
  `OMP_WAIT_POLICY=PASSIVE` unless the environment names a policy: OpenMP threads then sleep
  instead of spinning while they wait, which is what made two concurrent steps with every core's
  threads several times slower. OpenMP reads that variable once, when torch loads it: the CLI
  sets it before anything imports torch (`factprobe.cli.main`), the local runner in each step's
  environment. The count applied last is `current()`; runs record it (metrics.json `threads`,
  the MLflow param `threads`).
- `POLICY_ENV=off` (`FACTPROBE_THREAD_POLICY`) turns the policy off, for an operator who sets
  OpenMP/MKL threads themselves and for measuring the policy against none
  (`benchmarks/bench_threads_tour.py`): `apply(None)` then changes nothing and returns torch's own count
  (recorded as the run's `threads`), `set_wait_policy` sets nothing and `step_environment` adds
  nothing to a step's environment. An explicit count (`--threads`) is still applied.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

from .errors import ConfigError

#: where cgroup file systems are mounted (tests point it at a tmp folder)
CGROUP_ROOT = Path("/sys/fs/cgroup")
#: this process's cgroup membership, one `id:controllers:path` line per hierarchy
PROC_SELF_CGROUP = Path("/proc/self/cgroup")
#: set by the local pipeline runner in each step's environment: steps it may run at once
STEPS_AT_ONCE_ENV = "FACTPROBE_STEPS_AT_ONCE"
#: the OpenMP wait policy set unless the environment names one
WAIT_POLICY = "PASSIVE"
#: `off` turns the thread policy off (module docstring); unset, empty or `on` keeps it
POLICY_ENV = "FACTPROBE_THREAD_POLICY"
#: v1 folder names that hold the `cpu` controller
_V1_CPU_DIRS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")
#: the variables that carry the count, in the order torch reads them
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")

_current: int | None = None
#: {variable: value} that `apply` wrote into this process's environment (so not the user's)
_written: dict[str, str] = {}
#: (asked, cap) pairs already said by `capped`
_said: set[tuple[int, int]] = set()


def policy_on(env: dict | None = None) -> bool:
    """False when `POLICY_ENV` in `env` (default `os.environ`) is `off`; True when unset, empty or `on`.
    ConfigError naming the variable for any other value."""
    raw = (os.environ if env is None else env).get(POLICY_ENV, "").strip().lower()
    if raw in ("", "on"):
        return True
    if raw == "off":
        return False
    raise ConfigError(f"{POLICY_ENV}={raw!r}: expected 'on' or 'off' (off: factprobe leaves threads to torch and OpenMP)")


def set_wait_policy(env: dict | None = None) -> None:
    """`OMP_WAIT_POLICY=PASSIVE` in `env` (default `os.environ`) unless it already names a policy or the
    policy is off (`POLICY_ENV`). Must run before torch is imported for this process to see it (OpenMP
    reads it once, at load)."""
    target = os.environ if env is None else env
    if policy_on(target):
        target.setdefault("OMP_WAIT_POLICY", WAIT_POLICY)


def _cgroup_paths() -> dict[str, str]:
    """{controller: path} of this process's cgroups ("" for the v2 unified hierarchy); {} if unknown."""
    try:
        text = PROC_SELF_CGROUP.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(",") if parts[1] else [""]:
            out[controller] = parts[2]
    return out


def _ancestors(base: Path, rel: str) -> list[Path]:
    """`base/rel`, then each parent folder up to `base` itself (each once)."""
    parts = [p for p in rel.strip("/").split("/") if p and p != ".."]
    return [base.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None


def _quota_v2(folder: Path) -> float | None:
    """CPUs allowed by `folder/cpu.max` ("max 100000" or "200000 100000"); None if unlimited or absent."""
    text = _read(folder / "cpu.max")
    if not text:
        return None
    parts = text.split()
    try:
        if parts[0] == "max":
            return None
        quota, period = int(parts[0]), int(parts[1]) if len(parts) > 1 else 100_000
    except (ValueError, IndexError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def _quota_v1(folder: Path) -> float | None:
    """CPUs allowed by `folder/cpu.cfs_quota_us` over `cpu.cfs_period_us`; None if -1 (unlimited) or absent."""
    quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
    try:
        q, p = int(quota or ""), int(period or "")
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def cgroup_cpus() -> float | None:
    """The CPU quota of this process's cgroups (v2 and v1, own cgroup and ancestors), in CPUs
    (1.5 for "150000 100000"); the smallest one found, None when nothing limits the process."""
    paths = _cgroup_paths()
    found: list[float] = []
    v2 = paths.get("", "/")
    for folder in _ancestors(CGROUP_ROOT, v2) + _ancestors(CGROUP_ROOT / "unified", v2):
        if (q := _quota_v2(folder)) is not None:
            found.append(q)
    v1 = paths.get("cpu", "/")
    for name in _V1_CPU_DIRS:
        for folder in _ancestors(CGROUP_ROOT / name, v1):
            if (q := _quota_v1(folder)) is not None:
                found.append(q)
    return min(found) if found else None


def affinity_cpus() -> int:
    """CPUs this process may be scheduled on (`os.sched_getaffinity(0)`; `os.cpu_count()` where
    the platform has no affinity call)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def available_cpus() -> int:
    """CPUs this process may use: min(affinity, cgroup quota rounded up), at least 1."""
    cpus = affinity_cpus()
    quota = cgroup_cpus()
    if quota is not None:
        cpus = min(cpus, max(1, math.ceil(quota - 1e-9)))
    return max(1, cpus)


def steps_at_once(env: dict | None = None) -> int:
    """Steps the local runner runs at once with this one (`STEPS_AT_ONCE_ENV`), 1 when unset.
    ConfigError naming the variable for a value that is not a whole number >= 1."""
    raw = (os.environ if env is None else env).get(STEPS_AT_ONCE_ENV, "").strip()
    if not raw:
        return 1
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError(f"{STEPS_AT_ONCE_ENV}={raw!r}: expected a whole number >= 1 (steps run at once), or leave it unset")
    return n


def default_threads(cpus: int, steps: int = 1) -> int:
    """The policy: `cpus` divided among `steps` concurrent steps, at least 1 each."""
    return max(1, cpus // max(1, steps))


def _user_value(var: str, env: dict | None = None) -> int | None:
    """The count in variable `var` of `env` (default `os.environ`) when the user set it: a non-empty value
    that `apply` did not write (OpenMP's nested form `4,2` counts its first level); None otherwise.
    ConfigError naming the variable for a value that is not a whole number >= 1."""
    raw = (os.environ if env is None else env).get(var, "").strip()
    if not raw or _written.get(var) == raw:
        return None
    first = raw.split(",")[0].strip()
    if not first.isdigit() or int(first) < 1:
        raise ConfigError(
            f"{var}={raw!r}: expected a whole number >= 1 (threads), or leave it unset for the CPUs this process may use"
        )
    return int(first)


def user_count(env: dict | None = None) -> tuple[str, int] | None:
    """(variable, count) of the thread count the user set: `OMP_NUM_THREADS`, else `MKL_NUM_THREADS`
    (`_user_value`: set, and not by `apply`); None when neither is. ConfigError for a malformed value."""
    for var in THREAD_VARS:
        n = _user_value(var, env)
        if n is not None:
            return var, n
    return None


def capped(n: int) -> int:
    """`n`, or `available_cpus()` when `n` is larger; the first time a count is capped, one `note:` line
    on stderr says so (torch starting more OpenMP threads than it may run crashed with 100000)."""
    cap = available_cpus()
    if n <= cap:
        return n
    if (n, cap) not in _said:
        _said.add((n, cap))
        sys.stderr.write(
            f"note: {n} threads asked for, more than the {cap} CPUs this process may use "
            f"(CPU affinity, cgroup quota); computing with {cap}\n"
        )
    return cap


def _explicit(threads: int | str | None) -> int | None:
    """An explicit count (text such as "4" from a command line read as one), None for none; ConfigError
    unless it is a whole number >= 1."""
    if isinstance(threads, str):
        text = threads.strip()
        threads = int(text) if text.isdigit() else (None if not text else threads)  # type: ignore[assignment]
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ConfigError(
            f"threads={threads!r}: must be a whole number >= 1 (or leave it unset for the CPUs this process may use)"
        )
    return threads


def resolve(threads: int | str | None = None) -> int:
    """The count (module docstring): `threads` when given (ConfigError unless it is a whole number >= 1),
    else the user's `OMP_NUM_THREADS` / `MKL_NUM_THREADS` (`user_count`), else the policy
    `default_threads(available_cpus(), steps_at_once())`; capped at `available_cpus()` (`capped`)."""
    explicit = _explicit(threads)
    if explicit is not None:
        return capped(explicit)
    user = user_count()
    if user is not None:
        return capped(user[1])
    return default_threads(available_cpus(), steps_at_once())


def apply(threads: int | str | None = None) -> int:
    """Resolve the thread count (`resolve`) and make it this process's (module docstring): torch's
    intra-op threads when torch is loaded, the OpenMP/MKL variables (an explicit count overwrites them, a
    user's value is kept), `current()`. Returns it."""
    global _current
    explicit = _explicit(threads)
    if explicit is None and not policy_on():
        import torch

        _current = int(torch.get_num_threads())
        return _current
    n = resolve(explicit)
    set_wait_policy()
    for var in THREAD_VARS:
        users = _user_value(var)
        if explicit is not None or users is None:  # a flag wins; an unset variable is set
            os.environ[var] = _written[var] = str(n)
        elif users > available_cpus():  # a user's value above the CPUs: lowered to the cap (said by `resolve`)
            os.environ[var] = _written[var] = str(capped(users))
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "set_num_threads"):
        torch.set_num_threads(n)
    _current = n
    return n


def take_option(args: list[str]) -> tuple[str | None, list[str]]:
    """(the value of a `--threads N` / `--threads=N` in `args` or None, `args` without it), for a command
    line whose own parser has no such flag (`factprobe-lm-eval`). The last one wins; ConfigError for a
    `--threads` without a value. Arguments after a `--` are left alone."""
    end = args.index("--") if "--" in args else len(args)
    value, kept, i = None, [], 0
    while i < end:
        arg = args[i]
        if arg == "--threads":
            if i + 1 >= end:
                raise ConfigError("--threads needs a value: a whole number >= 1")
            value, i = args[i + 1], i + 2
            continue
        if arg.startswith("--threads="):
            value = arg.split("=", 1)[1]
        else:
            kept.append(arg)
        i += 1
    return value, kept + args[end:]


def current() -> int | None:
    """The count `apply` set last in this process; None before any."""
    return _current


def step_environment(steps: int, threads: int | str | None = None) -> dict[str, str]:
    """Environment for a step that runs beside `steps - 1` others: `STEPS_AT_ONCE_ENV`, the OpenMP
    wait policy (unless this process's environment names one) and `OMP_NUM_THREADS`/`MKL_NUM_THREADS`
    for its share of this process's CPUs (`threads` when given, capped), so even a step that never
    calls `apply` computes with its share. A variable the user set (not `apply`) is left out, so the
    step inherits the user's value (unless `threads` is given). Nothing (an empty dict) when the policy
    is off (`POLICY_ENV`) and `threads` is unset."""
    if threads is None and not policy_on():
        return {}
    n = resolve(threads) if threads is not None else default_threads(available_cpus(), steps)
    env = {
        STEPS_AT_ONCE_ENV: str(max(1, steps)),
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", WAIT_POLICY),
    }
    for var in THREAD_VARS:
        users = _user_value(var)
        if threads is not None or users is None:
            env[var] = str(n)
        elif users > available_cpus():
            env[var] = str(capped(users))
    return env
