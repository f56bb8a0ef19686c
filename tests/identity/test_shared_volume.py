"""Two pipelines of one identity on one volume: the second probe step waits for the first's work
folder and then reuses it instead of failing as busy (components/steps/probe.py::when_free)."""

import subprocess
import sys
import time

import pytest

from factprobe.run_folder import FolderBusyError, claim
from factprobe_ops.components.steps.probe import when_free

HOLD = (
    "import sys, time; from factprobe.run_folder import claim\nwith claim(sys.argv[1], 'probe', 'ic-lke'):\n"
    "    print('held', flush=True); time.sleep(float(sys.argv[2]))\n"
)


def hold(folder, seconds: float) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(folder), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def attempt(folder):
    with claim(folder, "probe", "ic-lke"):
        return "ran"


@pytest.mark.slow
def test_a_step_waits_for_a_live_holder_and_then_proceeds(tmp_path, capsys):
    p = hold(tmp_path / "work", 2.0)
    t0 = time.monotonic()
    assert when_free(lambda: attempt(tmp_path / "work"), wait_s=60, poll_s=0.2) == "ran"
    assert time.monotonic() - t0 >= 1.0
    assert "waiting: output folder" in capsys.readouterr().out
    p.wait(timeout=30)


def test_a_step_gives_up_after_its_wait(tmp_path):
    p = hold(tmp_path / "work", 5.0)
    try:
        with pytest.raises(FolderBusyError):
            when_free(lambda: attempt(tmp_path / "work"), wait_s=0.5, poll_s=0.1)
    finally:
        p.kill()
        p.wait()
