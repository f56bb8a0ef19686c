"""Issue 18 item 13: pipeline parameter values are validated before anything runs or is sent
(`pipeline run`, `submit`, `schedule`), with the validation of the step that would use them;
item 18d: a malformed FACTPROBE_GPU_COUNT on `pipeline compile` is one line, not a traceback."""

from __future__ import annotations

import pytest

from factprobe.cli import main
from factprobe.errors import ConfigError

# ruff: noqa: F811 - the shared fixture is imported by name and requested as a test parameter
from tests.pipelines.pipeline_fixtures import kfp_api  # noqa: F401 (fixture)

pytestmark = pytest.mark.filterwarnings("ignore:This client only works with Kubeflow Pipeline:FutureWarning")


@pytest.fixture(autouse=True)
def built_images(monkeypatch):
    monkeypatch.setenv("FACTPROBE_IMAGE_CPU", "registry.example.com/factprobe-cpu:0.1.0-abc1234")
    monkeypatch.setenv("FACTPROBE_IMAGE_GPU", "registry.example.com/factprobe-gpu:0.1.0-abc1234")
    monkeypatch.setenv("FACTPROBE_IMAGE_TRAIN", "registry.example.com/factprobe-train:0.1.0-abc1234")


@pytest.fixture
def no_local_run(monkeypatch, tmp_path):
    """`pipeline run` must refuse before the local runner starts (nothing runs, no store is made)."""
    from factprobe_ops.pipelines import cli

    def forbidden(*a, **k):
        raise AssertionError("run_local was called with an invalid parameter value")

    monkeypatch.setattr(cli, "run_local", forbidden)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0][len("error: ") :]


def _step_message(fn) -> str:
    with pytest.raises(ConfigError) as e:
        fn()
    return str(e.value)


@pytest.mark.slow
def test_item13_lora_r_minus_one_is_refused_before_the_local_run(no_local_run, capsys):
    """issue 18 item 13: `lora_r=-1` used to fail only in the fine-tuning step, after the
    45-second known/unknown step; now at once, with the fine-tuning step's own message."""
    from factprobe_ops.components.steps.finetune import finetune_config

    rc = main(["pipeline", "run", "finetune_known_unknown", "--param", "lora_r=-1"])
    line = _one_error_line(capsys)
    assert rc == 2
    assert line == _step_message(lambda: finetune_config({"lora_r": -1}, "m", "known", None, "/tmp/o"))
    assert line.startswith("lora_r=-1")
    assert not (no_local_run / "mlruns.db").exists() and not (no_local_run / "build").exists()


def test_item13_negative_max_facts_is_refused_before_the_local_run(no_local_run, capsys):
    """issue 18 item 13: a negative max_facts_per_relation, with the probe step's message."""
    from factprobe_ops.components.steps._common import run_config

    rc = main(["pipeline", "run", "probe", "--param", "max_facts_per_relation=-3"])
    line = _one_error_line(capsys)
    assert rc == 2
    assert line == _step_message(lambda: run_config({"max_facts_per_relation": "-3"}, probe="ic-lke", model="-"))
    assert "max_facts_per_relation" in line


def test_item13_unknown_probe_is_refused_before_the_local_run(no_local_run, capsys):
    """issue 18 item 13: an unknown probe name, in one line naming the parameter."""
    rc = main(["pipeline", "run", "probe", "--param", 'probes=["ic-lke","no-such-probe"]'])
    line = _one_error_line(capsys)
    assert rc == 2 and "probes" in line and "no-such-probe" in line and "ic-lke" in line  # the known ones are listed


@pytest.mark.parametrize("pair, name", [("max_facts_per_relation=-3", "max_facts_per_relation"), ('probes=["nope"]', "probes")])
def test_item13_submit_sends_nothing_for_an_invalid_value(kfp_api, capsys, pair, name):
    """issue 18 item 13: `submit` refuses before it contacts the host."""
    rc = main(["pipeline", "submit", "probe", "--host", kfp_api.host, "--param", pair])
    line = _one_error_line(capsys)
    assert rc == 2 and name in line
    assert kfp_api.requests == []


@pytest.mark.slow
def test_item13_submit_function_refuses_lora_r_minus_one(kfp_api):
    """issue 18 item 13: the library entry point validates too (nothing sent)."""
    from factprobe_ops.pipelines import remote

    with pytest.raises(ConfigError, match=r"^lora_r=-1"):
        remote.submit("finetune_known_unknown", kfp_api.host, {"lora_r": -1})
    assert kfp_api.requests == []


@pytest.mark.parametrize(
    "pair, name", [("max_facts_per_relation=-1", "max_facts_per_relation"), ('probes=["ic-lke","bogus"]', "probes")]
)
@pytest.mark.slow
def test_item13_schedule_sends_nothing_for_an_invalid_value(kfp_api, capsys, pair, name):
    """issue 18 item 13: `schedule` refuses before it contacts the host."""
    rc = main(["schedule", "nightly_sweep", "--host", kfp_api.host, "--cron", "0 0 2 * * *", "--param", pair])
    line = _one_error_line(capsys)
    assert rc == 2 and name in line
    assert kfp_api.requests == []


@pytest.mark.slow
def test_item13_regression_probe_name_is_checked(no_local_run, capsys):
    """issue 18 item 13: the regression pipeline's single probe (`probe_name`) is checked too."""
    rc = main(["pipeline", "run", "regression", "--param", "probe_name=nope"])
    line = _one_error_line(capsys)
    assert rc == 2 and "probe_name" in line and "nope" in line


@pytest.mark.parametrize(
    "pair, name",
    [
        ("probe_name=qa", "probe_name"),
        ("probe_name=belief-icl", "probe_name"),
        ("max_drop=nan", "max_drop"),
        ("alpha=1.5", "alpha"),
    ],
)
@pytest.mark.slow
def test_item13_15_regression_refuses_what_its_gate_cannot_gate(no_local_run, capsys, pair, name):
    """issue 18 items 13 and 15: `pipeline run regression` refuses a probe its gate step cannot gate
    (qa, belief, ...) and a max_drop/alpha out of range before the candidate is probed (the gate
    step used to refuse it only after the whole candidate run)."""
    rc = main(["pipeline", "run", "regression", "--param", pair])
    line = _one_error_line(capsys)
    assert rc == 2 and f"parameter {name}" in line


@pytest.mark.slow
def test_item13_valid_values_still_pass(kfp_api, capsys):
    """issue 18 item 13: valid values go through (the run is submitted)."""
    rc = main(
        [
            "pipeline",
            "submit",
            "finetune_known_unknown",
            "--host",
            kfp_api.host,
            "--param",
            "lora_r=0",
            "--param",
            "max_facts_per_relation=5",
        ]
    )
    assert rc == 0, capsys.readouterr().err


@pytest.mark.parametrize("value", ["-1", "abc"])
def test_item18d_bad_gpu_count_on_compile_is_one_line(tmp_path, monkeypatch, capsys, value):
    """issue 18 item 18d: FACTPROBE_GPU_COUNT=-1 or abc on `pipeline compile` gave a traceback."""
    monkeypatch.setenv("FACTPROBE_GPU_COUNT", value)
    rc = main(["pipeline", "compile", "probe", "--out", str(tmp_path)])
    line = _one_error_line(capsys)
    assert rc == 2
    assert "FACTPROBE_GPU_COUNT" in line and repr(value) in line
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("name", __import__("factprobe_ops.pipelines.catalogue", fromlist=["PIPELINES"]).PIPELINES)
def test_item13_every_pipeline_validates_its_defaults(name):
    """issue 18 item 13: the up-front validation knows every pipeline (its probes and configs): each
    one's default parameters pass it (a pipeline it could not read used to fail `pipeline run`
    with an AttributeError traceback)."""
    from factprobe_ops.pipelines import catalogue

    catalogue.validate_params(catalogue.get_pipeline(name), name, {})
