"""Issue 30, Bad input of the sweeps (`probe`, `nightly_sweep`): a models file with an unknown key, a
negative GPU count or `endpoint` with `device_map`, and `shards` larger than the facts, refused in one
line before anything runs or is sent (pipelines/checks.py `check_sweep_values`)."""

from __future__ import annotations

import json

import pytest

from factprobe.errors import ConfigError
from factprobe_ops.components.steps.shards import check_shards
from factprobe_ops.pipelines import remote
from factprobe_ops.pipelines.checks import check_run_values

pytestmark = pytest.mark.filterwarnings("ignore:This client only works with Kubeflow Pipeline:FutureWarning")


@pytest.fixture
def nothing_runs(monkeypatch, tmp_path):
    """Fail the test if anything is sent to a host or a local run starts; run in an empty folder."""
    from factprobe_ops.pipelines import local_steps

    def refuse(*a, **k):
        raise AssertionError("something ran or was sent before the refusal")

    monkeypatch.setattr(remote, "kfp_client", refuse)
    monkeypatch.setattr(local_steps.LocalSteps, "handling_signals", refuse)
    monkeypatch.setenv("FACTPROBE_IMAGE_CPU", "registry.example.com/factprobe-cpu:0.1.0-abc1234")
    monkeypatch.setenv("FACTPROBE_IMAGE_GPU", "registry.example.com/factprobe-gpu:0.1.0-abc1234")
    monkeypatch.chdir(tmp_path)
    return tmp_path


MODEL_CASES = [
    ({"name": "big", "gpu": 2}, "model 'big': unknown key 'gpu'"),
    ({"name": "big", "gpus": -1}, "model 'big': gpus=-1 is negative"),
    ({"name": "srv", "endpoint": "http://vllm:8000/v1", "device_map": "auto"}, "model 'srv': endpoint and device_map together"),
]


@pytest.mark.slow  # builds the pipelines (kfp): a few seconds
@pytest.mark.parametrize("entry, message", MODEL_CASES)
def test_a_bad_model_is_refused_before_a_run_starts(entry, message, nothing_runs, capsys):
    from factprobe.cli import main

    rc = main(["pipeline", "run", "probe", "--param", f"models={json.dumps(['ok', entry])}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "pipeline probe: models parameter: " + message in err[0], err
    models = nothing_runs / "models.yaml"
    models.write_text("models:\n  - ok\n  - " + json.dumps(entry) + "\n")
    rc = main(["pipeline", "run", "nightly_sweep", "--param", f"models_yaml={models}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and f"pipeline nightly_sweep: models YAML ({models}): {message}" in err[0], err
    assert sorted(p.name for p in nothing_runs.iterdir()) == ["models.yaml"]


@pytest.mark.slow  # builds the kfp client module: ~3 s
def test_submit_refuses_a_bad_model_before_anything_is_sent(nothing_runs, capsys):
    from factprobe.cli import main

    rc = main(
        [
            "pipeline",
            "submit",
            "nightly_sweep",
            "--host",
            "http://127.0.0.1:9",
            "--param",
            "models_yaml=models: [{name: m, gpus: -2}]",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "model 'm': gpus=-2 is negative" in err[0], err


def test_shards_above_the_facts_the_parameters_allow_are_refused():
    two = {"relations": "P36,P37", "max_facts_per_relation": 3}  # countryinfo, the default source
    with pytest.raises(ConfigError, match=r"shards=7 is more than the 6 facts of probe ic-lke's data \(source countryinfo, "):
        check_shards(7, two, ["ic-lke"])
    check_shards(6, two, ["ic-lke"])
    # every relation (issue 41 item 7: the bound is known without `relations`): countryinfo's 6 x 20
    with pytest.raises(ConfigError, match=r"shards=500 is more than the 120 facts"):
        check_shards(500, {"max_facts_per_relation": 20}, ["ic-lke"])
    for bad in (0, -1, "x"):
        with pytest.raises(ConfigError, match="shards="):
            check_shards(bad, {}, ["ic-lke"])


@pytest.mark.slow  # builds two pipelines: ~4 s
def test_sweep_values_a_step_accepts_pass(nothing_runs):
    check_run_values(
        "probe",
        {
            "models": ["a", {"name": "b", "gpus": 0, "endpoint": "http://vllm:8000/v1"}],
            "shards": 4,
            "relations": "P36",
            "max_facts_per_relation": "4",
        },
    )
    check_run_values("nightly_sweep", {"models_yaml": "/mnt/factprobe/models.yaml"})  # on the cluster's volume only
    with pytest.raises(ConfigError, match="pipeline probe: shards=5 is more than the 4 facts"):
        check_run_values("probe", {"shards": 5, "relations": "P36", "max_facts_per_relation": "4"})
