"""Shared fixtures.

- `real_data_root`: the real probing data (`factprobe.paths.data_root()`, env FACTPROBE_DATA);
  tests that use it are skipped with the reason when the folder is missing.
- `moto_s3_endpoint`: a real S3-compatible HTTP server (`moto_server` from `moto[server]`) on
  127.0.0.1 and a free port, started once per session in its own process group and killed at
  teardown. Yields the endpoint URL (`http://127.0.0.1:PORT`).
- `s3_env`: env for boto3 clients against that server (dummy credentials, region, and
  `AWS_ENDPOINT_URL`); yields the endpoint URL.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from factprobe.paths import data_root

# DeepSpeed JIT-builds its CPU ops (shared-memory comm, CPU Adam: 2-3 min of CPU each on 2 cores) into
# TORCH_EXTENSIONS_DIR, by default ~/.cache/torch_extensions for every venv of the machine. A build
# records its venv's include paths, so two checkouts with their own .venv rebuild each other's ops on
# every run. The tests keep them per venv (unless the variable is set); subprocesses inherit it.
os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(Path(sys.prefix) / "torch_extensions"))

# Under pytest-xdist (`make test` runs `-n auto`) the workers share the cores: each gets its share of
# threads (torch reads OMP_NUM_THREADS when it loads) instead of every worker starting one per core
# and all of them fighting over the same cores. An explicit OMP_NUM_THREADS is kept.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))


@pytest.fixture(scope="session")
def real_data_root() -> Path:
    root = data_root()
    if not root.is_dir():
        pytest.skip(f"real probing data not found at {root} (set FACTPROBE_DATA)")
    return root


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def moto_s3_endpoint():
    exe = Path(sys.executable).parent / "moto_server"
    exe = str(exe) if exe.exists() else shutil.which("moto_server")
    if not exe:
        pytest.skip("moto_server not installed (pip install 'moto[server]')")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        [exe, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                log.seek(0)
                pytest.fail(f"moto_server exited with {proc.returncode}: {log.read().decode(errors='replace')[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/moto-api/data.json", timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"moto_server did not answer on {url} within 60 s")
                time.sleep(0.1)
        yield url
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()


@pytest.fixture
def s3_env(monkeypatch, moto_s3_endpoint):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_s3_endpoint)
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "MLFLOW_S3_ENDPOINT_URL"):
        monkeypatch.delenv(var, raising=False)
    yield moto_s3_endpoint


# ---- language-model fixtures (moved from tests/lm/conftest.py so every test folder can use them)
# Fixtures for language-model tests.
#
# - `tiny_model_path(kind)`: session-wide factory; builds (once) the TINY RANDOM model `kind`
#   ("gpt2" or "llama") in a temp folder and returns its path. Random weights: never a result.
# - `real_model_path(alias)`: session-wide factory; returns the converted folder of a real alias
#   in the *real* cache (`FACTPROBE_CACHE` as set when the session started, else
#   `~/.cache/factprobe`), converting it once if needed. Use only in `@pytest.mark.real_model`
#   tests. It works even while a test has pointed `FACTPROBE_CACHE` elsewhere.
# - `tmp_cache`: points `FACTPROBE_CACHE` at an empty temp folder for one test; yields it.


from collections.abc import Callable, Iterator

import pytest

from factprobe.paths import cache_root

REAL_CACHE_ROOT = cache_root()


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    from factprobe.models.testing import make_tiny_random_model

    root = tmp_path_factory.mktemp("tiny-models")
    built: dict[str, Path] = {}

    def get(kind: str) -> Path:
        if kind not in built:
            built[kind] = make_tiny_random_model(kind, root)  # type: ignore[arg-type]
        return built[kind]

    return get


@pytest.fixture(scope="session")
def real_model_path() -> Callable[[str], Path]:
    from factprobe.models import prepare_alias

    done: dict[str, Path] = {}

    def get(alias: str) -> Path:
        if alias not in done:
            old = os.environ.get("FACTPROBE_CACHE")
            os.environ["FACTPROBE_CACHE"] = str(REAL_CACHE_ROOT)
            try:
                done[alias] = prepare_alias(alias)
            finally:
                if old is None:
                    os.environ.pop("FACTPROBE_CACHE", None)
                else:
                    os.environ["FACTPROBE_CACHE"] = old
        return done[alias]

    return get


@pytest.fixture
def tmp_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = tmp_path / "factprobe-cache"
    monkeypatch.setenv("FACTPROBE_CACHE", str(root))
    yield root


# ---- one real local run of the `probe` pipeline, shared by the tests that inspect it
# `probe_pipeline_run`: session-wide; runs `factprobe pipeline run probe` once, `make run`'s shape on
# the REAL SmolLM2 (ic-lke and hgp, P36 of the default source, 2 facts, 10 choices, 10 examples),
# in its own folder with embedded MLflow (`<folder>/mlruns.db`) and FACTPROBE_WORK=`<folder>/work`.
# Returns the folder; the terminal output is in `<folder>/terminal.txt`. A session fixture because a
# local pipeline run costs minutes on 2 cores: the local-run tests (tests/pipelines) and the MLflow UI
# test (tests/integration) read the same run. Tests that use it must not write into its experiment
# `factprobe/probe` (other experiments in the same store are fine).

PROBE_PIPELINE_ARGS = (
    "--param",
    'models=["smollm2-135m-instruct"]',
    "--param",
    'probes=["ic-lke","hgp"]',
    "--param",
    "relations=P36",
    "--param",
    "max_facts_per_relation=2",
    "--param",
    "choices=10",
    "--param",
    "examples=10",
)


@pytest.fixture(scope="session")
def probe_pipeline_run(tmp_path_factory: pytest.TempPathFactory, real_model_path: Callable[[str], Path]) -> Path:
    real_model_path("smollm2-135m-instruct")
    tmp = tmp_path_factory.mktemp("probe-pipeline")
    env = {**os.environ, "FACTPROBE_WORK": str(tmp / "work")}
    env.pop("MLFLOW_TRACKING_URI", None)
    p = subprocess.run(
        [sys.executable, "-m", "factprobe.cli", "pipeline", "run", "probe", *PROBE_PIPELINE_ARGS],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    log = p.stdout + p.stderr
    assert p.returncode == 0, log[-3000:]
    (tmp / "terminal.txt").write_text(log)
    return tmp


# ---- unmarked slow tests are named at the end of the run
# `make test-fast` skips tests marked `real_model`, `server`, `pipeline` or `slow`; an unmarked test
# that takes longer than SLOW_S (wall clock, its call phase) would silently make it slower. The
# terminal summary lists each one under "unmarked tests slower than ..." (a report, not a failure:
# a loaded machine is slow everywhere). Mark it `slow` or make it faster. FACTPROBE_TEST_SLOW_S
# overrides the threshold.

FAST_EXCLUDED_MARKERS = ("real_model", "server", "pipeline", "slow")
SLOW_S = float(os.environ.get("FACTPROBE_TEST_SLOW_S", "2"))
_unmarked_slow: list[tuple[float, str]] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    if call.when == "call" and call.duration > SLOW_S and not any(item.get_closest_marker(m) for m in FAST_EXCLUDED_MARKERS):
        # carried on the report, so the list also fills under pytest-xdist (reports travel to the controller)
        outcome.get_result().user_properties.append(("unmarked_slow_s", call.duration))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for key, value in report.user_properties:
        if key == "unmarked_slow_s":
            _unmarked_slow.append((float(value), report.nodeid))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _unmarked_slow:
        terminalreporter.section(f"unmarked tests slower than {SLOW_S:g} s (mark them slow or make them faster)")
        for duration, nodeid in sorted(_unmarked_slow, reverse=True):
            terminalreporter.write_line(f"{duration:8.2f}s {nodeid}")
