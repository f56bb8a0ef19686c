"""Issue 28 item 7, the pipeline cases: what a later step would refuse is refused before anything
runs or is sent (`pipeline run`, `submit`, `schedule`), in one line; and `submit --wait` prints
what the server said, not a state it never reported."""

from __future__ import annotations

import pytest

from factprobe.errors import ConfigError
from factprobe_ops.pipelines import remote
from factprobe_ops.pipelines.checks import check_device, check_run_values

# ruff: noqa: F811 - the shared fixture is imported by name and requested as a test parameter
from tests.pipelines.pipeline_fixtures import kfp_api  # noqa: F401 (fixture)

pytestmark = pytest.mark.filterwarnings("ignore:This client only works with Kubeflow Pipeline:FutureWarning")
MC = '["mc-items"]'


@pytest.fixture(autouse=True)
def built_images(monkeypatch):
    monkeypatch.setenv("FACTPROBE_IMAGE_CPU", "registry.example.com/factprobe-cpu:0.1.0-abc1234")
    monkeypatch.setenv("FACTPROBE_IMAGE_GPU", "registry.example.com/factprobe-gpu:0.1.0-abc1234")


@pytest.fixture
def nothing_runs(monkeypatch, tmp_path):
    """Fail the test if anything is sent to a host or a local run starts; run in an empty folder."""
    from factprobe_ops.pipelines import local_steps

    def refuse(*a, **k):
        raise AssertionError("something ran or was sent before the refusal")

    monkeypatch.setattr(remote, "kfp_client", refuse)
    monkeypatch.setattr(local_steps.LocalSteps, "handling_signals", refuse)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("value", ["auto", "cpu", "cuda", "cuda:0", "cuda:12", "mps", " CUDA:1 "])
def test_device_names_the_steps_can_use_are_accepted(value):
    check_device(value)


@pytest.mark.parametrize("value", ["tpu", "cuda:x", "cuda:-1", "cpu:0", "", "gpu", "xla:0"])
def test_other_device_names_are_refused_in_one_line(value):
    with pytest.raises(ConfigError) as e:
        check_device(value)
    assert str(e.value) == f"device={value!r}: unknown device; use auto, cpu, cuda or cuda:N"


PIPELINE_CASES = [
    (["device=tpu"], "device='tpu': unknown device; use auto, cpu, cuda or cuda:N"),
    (['options={"device": "tpu"}'], "device='tpu': unknown device; use auto, cpu, cuda or cuda:N"),
    ([f"probes={MC}"], "pipeline probe, probe mc-items: data=None: mc-items needs --param data=FILE"),
    (
        [f"probes={MC}", "data=/somewhere/items.jsonl", "examples=50"],
        "pipeline probe, probe mc-items: examples=50: in-context examples need --param train_data=FILE",
    ),
    (
        [f"probes={MC}", "data=/somewhere/items.jsonl"],  # the pipeline's examples default (50, ic-lke's) applies too
        "pipeline probe, probe mc-items: examples=50: in-context examples need --param train_data=FILE",
    ),
    (['probes=["ic-lke","mc-items"]', "examples=3"], "probe mc-items: data=None"),
]


@pytest.mark.slow  # builds the probe pipeline (kfp): 1-3 s
@pytest.mark.parametrize("pairs, message", PIPELINE_CASES)
def test_pipeline_run_refuses_before_anything_runs(pairs, message, nothing_runs, capsys):
    """`factprobe pipeline run probe --param ...`: exit 2, one error line, no run started, no
    store or pipeline root made (device=tpu used to fail in the first model step, mc-items without
    data in the data-build step)."""
    from factprobe.cli import main

    rc = main(["pipeline", "run", "probe", *[a for p in pairs for a in ("--param", p)]])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert list(nothing_runs.iterdir()) == []


@pytest.mark.slow  # compiles nothing, but builds the kfp client module: ~3 s
@pytest.mark.parametrize("command", [["pipeline", "submit", "probe"], ["schedule", "probe", "--cron", "0 0 2 * * *"]])
@pytest.mark.parametrize("pairs, message", PIPELINE_CASES[:4])
def test_submit_and_schedule_refuse_before_anything_is_sent(command, pairs, message, nothing_runs, capsys):
    from factprobe.cli import main

    rc = main([*command, "--host", "http://127.0.0.1:9", *[a for p in pairs for a in ("--param", p)]])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and message in err[0], err


@pytest.mark.slow  # builds the probe pipeline three times: ~3 s
def test_the_api_entry_points_check_too(nothing_runs):
    """`remote.submit`, `remote.schedule` and `local_run.run_local` called directly (not through the
    command line) refuse the same values."""
    from factprobe_ops.pipelines.local_run import run_local

    params = {"probes": ["mc-items"], "data": "items.jsonl", "examples": 2}
    for call in (
        lambda: remote.submit("probe", "http://127.0.0.1:9", params),
        lambda: remote.schedule("probe", "http://127.0.0.1:9", "0 0 2 * * *", params),
        lambda: run_local("probe", params),
    ):
        with pytest.raises(ConfigError, match="examples=2: in-context examples need --param train_data=FILE"):
            call()


@pytest.mark.slow  # builds two pipelines: ~4 s
def test_values_a_step_accepts_pass(nothing_runs):
    check_run_values(
        "probe",
        {
            "probes": ["mc-items"],
            "data": "items.jsonl",
            "train_data": "train.jsonl",
            "examples": 5,
            "options": '{"device": "cuda:1"}',
        },
    )
    check_run_values("probe", {"probes": ["mc-items"], "data": "items.jsonl", "examples": 0})  # no training items needed
    check_run_values("probe", {})  # ic-lke, every default
    check_run_values("regression", {"probe_name": "ic-lke", "options": '{"device": "cpu"}'})


# --- submit --wait: what the server reported -------------------------------------------------------


class _Run:
    def __init__(self, state):
        self.state = state


class _Client:
    def __init__(self, states):
        self.states = list(states)

    def get_run(self, run_id):
        return _Run(self.states.pop(0) if len(self.states) > 1 else self.states[0])


@pytest.mark.parametrize("none", [None, "", "RUNTIME_STATE_UNSPECIFIED"])
def test_wait_says_the_state_is_unknown_when_the_server_reports_none(none):
    """The server's answer carried no state: the log says so (it used to print PENDING)."""
    lines: list[str] = []
    state = remote.wait_for_run(_Client([none, "running", "SUCCEEDED"]), "r1", 60, poll_s=0, log=lines.append)
    assert state == "SUCCEEDED"
    assert [x.split(" after ")[0] for x in lines] == [
        "run r1: state unknown (the server reported none)",
        "run r1: RUNNING",
        "run r1: SUCCEEDED",
    ]
    assert not any("PENDING" in x for x in lines)


def test_wait_timeout_with_no_state_says_so():
    with pytest.raises(ConfigError, match=r"run r1 still in state unknown \(the server reported none\) after --wait-timeout"):
        remote.wait_for_run(_Client([None]), "r1", -1, poll_s=0, log=lambda m: None)


@pytest.mark.slow
def test_submit_wait_through_the_api_prints_no_invented_pending(kfp_api, capsys, monkeypatch):
    from factprobe.cli import main

    monkeypatch.setattr(remote.time, "sleep", lambda s: None)
    kfp_api.run_states = [None, "SUCCEEDED"]
    assert main(["pipeline", "submit", "probe", "--host", kfp_api.host, "--wait"]) == 0
    out = capsys.readouterr().out
    assert "state unknown (the server reported none)" in out and "PENDING" not in out, out
