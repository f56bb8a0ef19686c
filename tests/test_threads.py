"""Issue 30 item 5: the thread policy (factprobe/threads.py), with fake cgroup files, and where it is applied
(the CLI, the local pipeline runner's step environment, a probe run's record)."""

import json
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from factprobe import threads
from factprobe.errors import ConfigError
from factprobe.framework.config import BaseConfig

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def saved_environment(monkeypatch):
    """`apply` writes OMP_NUM_THREADS and friends into os.environ: each test leaves it as it found it (and
    starts with no value taken for factprobe's own, no cap said yet)."""
    saved = dict(os.environ)
    monkeypatch.setattr(threads, "_written", {}, raising=False)
    monkeypatch.setattr(threads, "_said", set(), raising=False)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A fake /sys/fs/cgroup and /proc/self/cgroup, 8 CPUs of affinity, no steps-at-once variable."""
    root = tmp_path / "cgroup"
    root.mkdir()
    proc = tmp_path / "proc_self_cgroup"
    proc.write_text("0::/\n")
    monkeypatch.setattr(threads, "CGROUP_ROOT", root)
    monkeypatch.setattr(threads, "PROC_SELF_CGROUP", proc)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.delenv(threads.STEPS_AT_ONCE_ENV, raising=False)
    for var in threads.THREAD_VARS:  # no user's count (pytest-xdist's conftest sets one; an earlier CLI test wrote one)
        monkeypatch.delenv(var, raising=False)

    def write(rel: str, text: str) -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    return write, proc


@pytest.fixture
def torch_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_no_cgroup_limit_is_the_affinity(fake):
    assert threads.cgroup_cpus() is None
    assert threads.available_cpus() == 8


def test_cgroup_v2_quota_limits_the_cpus_rounded_up(fake):
    write, _ = fake
    write("cpu.max", "150000 100000\n")
    assert threads.cgroup_cpus() == pytest.approx(1.5)
    assert threads.available_cpus() == 2
    write("cpu.max", "max 100000\n")
    assert threads.available_cpus() == 8


def test_cgroup_v2_quota_of_an_ancestor_of_the_own_cgroup(fake):
    write, proc = fake
    proc.write_text("0::/kubepods/pod1/ctr\n")
    write("kubepods/pod1/ctr/cpu.max", "max 100000")
    write("kubepods/pod1/cpu.max", "300000 100000")
    write("kubepods/cpu.max", "max 100000")
    assert threads.available_cpus() == 3


def test_cgroup_v1_quota(fake):
    write, proc = fake
    proc.write_text("4:memory:/x\n2:cpu,cpuacct:/docker/abc\n")
    write("cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "200000")
    write("cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000")
    assert threads.available_cpus() == 2
    write("cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1")  # unlimited
    assert threads.available_cpus() == 8


def test_affinity_smaller_than_the_quota_wins(fake, monkeypatch):
    write, _ = fake
    write("cpu.max", "600000 100000")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert threads.available_cpus() == 2


def test_default_is_divided_among_the_steps_run_at_once(fake, monkeypatch):
    write, _ = fake
    write("cpu.max", "400000 100000")
    assert threads.resolve(None) == 4
    monkeypatch.setenv(threads.STEPS_AT_ONCE_ENV, "2")
    assert threads.resolve(None) == 2
    monkeypatch.setenv(threads.STEPS_AT_ONCE_ENV, "8")
    assert threads.resolve(None) == 1  # never 0
    assert threads.resolve(3) == 3  # an explicit count overrides the policy
    assert threads.resolve(6) == 4  # ... up to the CPUs the process may use (issue 41 item 8)


def test_bad_counts_are_one_line_errors(fake, monkeypatch):
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ConfigError, match="threads="):
            threads.resolve(bad)
    monkeypatch.setenv(threads.STEPS_AT_ONCE_ENV, "two")
    with pytest.raises(ConfigError, match=threads.STEPS_AT_ONCE_ENV):
        threads.resolve(None)
    with pytest.raises(ConfigError, match="threads=0"):
        BaseConfig(threads=0)


def test_apply_sets_torch_threads_the_environment_and_passive_waiting(fake, monkeypatch, torch_threads):
    write, _ = fake
    write("cpu.max", "300000 100000")
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "64")
    assert threads.apply(None) == 3
    assert torch.get_num_threads() == 3 and threads.current() == 3
    assert os.environ["OMP_NUM_THREADS"] == "3" and os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # a policy the user named is kept
    assert threads.apply(2) == 2 and torch.get_num_threads() == 2 and os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


def test_policy_off_leaves_threads_to_torch_and_openmp(fake, monkeypatch, torch_threads):
    """FACTPROBE_THREAD_POLICY=off (what bench_threads.py measures the policy against): nothing is set, the
    count recorded is torch's own; an explicit count is still applied; a bad value is a one-line error."""
    write, _ = fake
    write("cpu.max", "300000 100000")
    for var in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(threads.POLICY_ENV, "off")
    torch.set_num_threads(5)
    assert threads.apply(None) == 5 and threads.current() == 5 and torch.get_num_threads() == 5
    threads.set_wait_policy()
    assert not {"OMP_WAIT_POLICY", "OMP_NUM_THREADS", "MKL_NUM_THREADS"} & set(os.environ)
    assert threads.step_environment(2) == {}
    assert threads.apply(2) == 2 and torch.get_num_threads() == 2  # --threads still wins
    assert threads.step_environment(2, 1)["OMP_NUM_THREADS"] == "1"
    monkeypatch.setenv(threads.POLICY_ENV, "ON")
    assert threads.step_environment(2)["OMP_NUM_THREADS"] == "1"  # policy on: 3 CPUs // 2 steps
    monkeypatch.setenv(threads.POLICY_ENV, "sometimes")
    with pytest.raises(ConfigError, match="FACTPROBE_THREAD_POLICY='sometimes'"):
        threads.apply(None)


@pytest.mark.slow
def test_cli_sets_passive_waiting_and_applies_threads(fake, monkeypatch, torch_threads):
    from factprobe.cli import main

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    # the run is refused after the command started (bad option value): the threads were applied by then
    assert main(["probe", "ic-lke", "--threads", "3", "--max-facts-per-relation", "0"]) == 2
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    assert threads.current() == 3 and torch.get_num_threads() == 3
    assert main(["finetune", "--threads", "2", "--model", ""]) != 0  # finetune takes --threads too
    assert threads.current() == 2
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert main(["models", "list"]) == 0  # every command waits passively, those without threads too
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE" and threads.current() == 2


@pytest.mark.slow
def test_cli_sets_passive_waiting_before_torch_loads(tmp_path):
    """In a fresh process: the variable is there when torch (and its OpenMP) is imported by a command."""
    code = (
        "import builtins, os, sys; os.environ.pop('OMP_WAIT_POLICY', None)\n"
        "seen = {}\n"
        "real_import = builtins.__import__\n"
        "def spy(name, *a, **k):\n"
        "    if name.split('.')[0] == 'torch' and 'torch' not in sys.modules:\n"
        "        seen.setdefault('policy', os.environ.get('OMP_WAIT_POLICY'))\n"
        "    return real_import(name, *a, **k)\n"
        "builtins.__import__ = spy\n"
        "from factprobe.cli import main\n"
        "assert 'torch' not in sys.modules\n"
        "main(['probe', 'ic-lke', '--threads', '1', '--max-facts-per-relation', '0'])\n"
        "print('policy at torch import', seen.get('policy'))\n"
    )
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=240, check=False
    )
    assert "policy at torch import PASSIVE" in out.stdout, (out.stdout[-500:], out.stderr[-2000:])


def test_local_runner_tells_each_step_how_many_run_at_once(fake, capsys):
    """A step started by kfp's pipeline thread runs alone; one started from a ParallelFor worker thread
    runs beside kfp's cap of others and gets its share of the CPUs, and passive OpenMP waiting."""
    from factprobe_ops.pipelines.local_steps import LocalSteps, parallel_steps_cap

    write, _ = fake
    write("cpu.max", "400000 100000")
    for var in threads.THREAD_VARS:  # a user's value would be inherited as it is (pytest-xdist's conftest sets one)
        os.environ.pop(var, None)
    steps = LocalSteps()
    steps.pipeline_thread = threading.current_thread()
    cmd = [
        sys.executable,
        "-c",
        (
            "import os; print('env', os.environ['FACTPROBE_STEPS_AT_ONCE'], "
            "os.environ['OMP_NUM_THREADS'], os.environ['OMP_WAIT_POLICY'])"
        ),
    ]
    assert steps.run_step(cmd) == 0
    assert "env 1 4 PASSIVE" in capsys.readouterr().out
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(steps.run_step, cmd).result() == 0
    cap = parallel_steps_cap()
    assert cap == 2
    assert f"env {cap} {4 // cap} PASSIVE" in capsys.readouterr().out
    steps.threads = 3  # the run's `threads` setting wins
    assert steps.run_step(cmd) == 0
    assert "env 1 3 PASSIVE" in capsys.readouterr().out


@pytest.mark.slow
def test_probe_run_records_the_resolved_count(tiny_model_path, tmp_path, fake, torch_threads):
    from factprobe.framework.config import RunConfig
    from factprobe.framework.runner import run_probe

    write, _ = fake
    write("cpu.max", "200000 100000")
    recs = [json.loads(line) for line in (REPO / "examples" / "mc_items" / "cloze.jsonl").read_text().splitlines()][:2]
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in recs))
    cfg = RunConfig.from_dict({"probe": "mc-items", "model": str(tiny_model_path("llama")), "data": str(data), "device": "cpu"})
    out = run_probe(cfg, tmp_path / "out", progress=False, log=lambda m: None)
    assert out.metrics["threads"] == 2
    assert json.loads((tmp_path / "out" / "metrics.json").read_text())["threads"] == 2
    assert cfg.base.threads == 2 and cfg.to_dict()["threads"] == 2  # what the MLflow hook logs as the param
    cfg2 = cfg.replace(threads=1)
    assert cfg2.results_key() == cfg.results_key()  # the count never decides results
    out = run_probe(cfg2, tmp_path / "out", progress=False, log=lambda m: None)
    assert out.metrics["threads"] == 1


def test_local_run_reads_the_threads_setting_from_a_parameter_or_the_options():
    from factprobe_ops.pipelines.local_run import _threads_setting

    assert _threads_setting({}) is None and _threads_setting({"options": ""}) is None
    assert _threads_setting({"options": '{"threads": 3}'}) == 3  # where `--param threads=3` goes
    assert _threads_setting({"threads": "2.0"}) == 2


def test_threads_is_a_pipeline_setting_checked_up_front():
    """`factprobe pipeline run probe --param threads=N` puts it in `options`: a BaseConfig field, checked before the run."""
    from factprobe_ops.pipelines.checks import check_run_values

    check_run_values("probe", {"options": '{"threads": 2}'})
    with pytest.raises(ConfigError, match="threads=0: must be >= 1"):
        check_run_values("probe", {"options": '{"threads": 0}'})


# ------------------------------------------------------------------ issue 42 item 4, issue 41 item 8: the user's count
@pytest.fixture
def no_thread_vars(monkeypatch):
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY"):
        monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize("var", ["OMP_NUM_THREADS", "MKL_NUM_THREADS"])
def test_a_users_thread_variable_is_kept_and_is_the_count(fake, monkeypatch, torch_threads, no_thread_vars, var):
    """docs/environment.md: the variables are set only when unset. A user's OMP_NUM_THREADS=1 (or
    MKL_NUM_THREADS=1) stays 1, and is the count the process computes with."""
    write, _ = fake
    write("cpu.max", "300000 100000")
    monkeypatch.setenv(var, "1")
    assert threads.apply(None) == 1
    assert os.environ[var] == "1" and torch.get_num_threads() == 1 and threads.current() == 1
    other = "MKL_NUM_THREADS" if var == "OMP_NUM_THREADS" else "OMP_NUM_THREADS"
    assert os.environ[other] == "1"  # the unset one is set, to the same count
    assert threads.step_environment(2).get(var, "1") == "1"  # a step inherits the user's value


def test_an_explicit_count_still_wins_over_the_users_variable(fake, monkeypatch, torch_threads, no_thread_vars):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert threads.apply(2) == 2 and os.environ["OMP_NUM_THREADS"] == "2"  # --threads: the flag wins


def test_factprobes_own_value_is_not_taken_for_the_users(fake, monkeypatch, torch_threads, no_thread_vars):
    """A count factprobe wrote itself (an earlier apply in the process) is replaced by the next policy."""
    write, _ = fake
    assert threads.apply(1) == 1 and os.environ["OMP_NUM_THREADS"] == "1"
    write("cpu.max", "300000 100000")
    assert threads.apply(None) == 3 and os.environ["OMP_NUM_THREADS"] == "3"
    assert threads.step_environment(1)["OMP_NUM_THREADS"] == "3"


def test_a_bad_users_variable_is_one_line(fake, monkeypatch, no_thread_vars):
    monkeypatch.setenv("OMP_NUM_THREADS", "lots")
    with pytest.raises(ConfigError, match=r"^OMP_NUM_THREADS='lots': "):
        threads.apply(None)
    monkeypatch.setenv("OMP_NUM_THREADS", "")  # empty: unset
    assert threads.resolve(None) == 8


@pytest.mark.parametrize("source", ["argument", "text", "OMP_NUM_THREADS", "MKL_NUM_THREADS"])
def test_a_count_above_the_cpus_is_capped_with_one_line(fake, monkeypatch, capsys, torch_threads, no_thread_vars, source):
    """Issue 41 item 8: `--threads 100000` segfaulted (torch started 100000 OpenMP threads). Any count above
    the CPUs the process may use is capped to them, and one note line says so."""
    write, _ = fake
    write("cpu.max", "200000 100000")
    if source.endswith("_THREADS"):
        monkeypatch.setenv(source, "100000")
        asked = None
    else:
        asked = 100000 if source == "argument" else "100000"
    assert threads.apply(asked) == 2
    assert torch.get_num_threads() == 2 and os.environ["OMP_NUM_THREADS"] == os.environ["MKL_NUM_THREADS"] == "2"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("note: ") and "100000" in err[0] and "2 CPUs" in err[0], err
    threads.apply(asked)  # said once
    assert capsys.readouterr().err == ""
    assert threads.step_environment(1, 100000)["OMP_NUM_THREADS"] == "2"


@pytest.mark.slow
def test_cli_threads_100000_is_capped_not_a_crash(tmp_path):
    """The command in a fresh process: exit as for any refused run (2, a bad value after the threads), no segfault."""
    import subprocess

    code = (
        "import sys; from factprobe.cli import main\n"
        "rc = main(['probe', 'ic-lke', '--threads', '100000', '--max-facts-per-relation', '0'])\n"
        "import torch; x = torch.randn(300, 300); (x @ x).sum().item()\n"
        "print('threads', torch.get_num_threads(), 'rc', rc)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=240, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"threads {threads.available_cpus()} rc 2" in out.stdout
    assert "Traceback" not in out.stderr and "note: 100000 threads" in out.stderr
