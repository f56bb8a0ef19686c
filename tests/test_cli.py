"""The CLI: one-line errors (exit 2) for bad input, and a tracked probe run end to end (tiny RANDOM model)."""

import json

import pytest

from factprobe.cli import main


def run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--relations", "P999"], "unknown relation(s) P999"),
        (
            ["--relations", "P30", "--choices", "100"],
            (
                "(--skip-small-relations probes the rest): P30: distractor pool has 6 objects; --choices 100 needs 100, "
                "the largest supported is 6"
            ),
        ),
        (["--relations", "P36,P30", "--choices", "100"], "P30: distractor pool has 6 objects"),
        (["--relations", " , "], "relations=' , ': empty relation id"),
        (["--model", "no-such-model-xyz"], "unknown model 'no-such-model-xyz'"),
        (["--choices", "1"], "choices=1: must be at least 2"),
        (["--examples", "ten"], "examples: expected int, got 'ten'"),
        (["--source", "triples"], "data=None: source triples needs --data"),
    ],
)
def test_bad_input_is_one_line(capsys, tmp_path, argv, needle, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rc, _, err = run(capsys, "probe", "ic-lke", "--no-track", "--no-progress", "--out", str(tmp_path / "o"), *argv)
    assert rc == 2
    lines = err.strip().splitlines()
    assert lines[-1].startswith("error: ") and needle in lines[-1]
    assert not (tmp_path / "o" / "results.jsonl").exists()


def test_malformed_jsonl_names_file_and_line(capsys, tmp_path):
    lama = tmp_path / "lama"
    (lama / "trex").mkdir(parents=True)
    (lama / "relations.jsonl").write_text(
        '{"relation": "P36", "template": "[X] capital [Y] .", "label": "capital", "type": "N-1"}\n'
    )
    good = '{"sub_uri": "Q1", "obj_uri": "Q2", "sub_label": "A", "obj_label": "B"}\n'
    (lama / "trex" / "P36.jsonl").write_text(good + '{"sub_uri": "Q3", "obj_uri": \n')
    rc, _, err = run(
        capsys, "probe", "ic-lke", "--source", "lama", "--data", str(lama), "--no-track", "--out", str(tmp_path / "o")
    )
    assert rc == 2 and "P36.jsonl:2" in err
    (lama / "trex" / "P36.jsonl").write_text(good + '{"sub_uri": "Q3", "obj_uri": "Q4", "sub_label": "C"}\n')
    rc, _, err = run(
        capsys, "probe", "ic-lke", "--source", "lama", "--data", str(lama), "--no-track", "--out", str(tmp_path / "o")
    )
    assert rc == 2 and "P36.jsonl:3" not in err and "P36.jsonl:2" in err and "obj_label" in err


@pytest.mark.slow
def test_unreachable_tracking_uri_still_writes_results(capsys, tmp_path, tiny_model_path):
    model = str(tiny_model_path("gpt2"))
    rc, _, err = run(
        capsys,
        "probe",
        "ic-lke",
        "--model",
        model,
        "--relations",
        "P36",
        "--max-facts-per-relation",
        "2",
        "--choices",
        "5",
        "--examples",
        "3",
        "--tracking-uri",
        "http://127.0.0.1:9",
        "--no-progress",
        "--out",
        str(tmp_path / "o"),
    )
    assert "warning: MLflow tracking server http://127.0.0.1:9 unreachable" in err  # one line, no UserWarning
    assert rc == 0 and (tmp_path / "o" / "results.jsonl").exists()
    assert json.loads((tmp_path / "o" / "metrics.json").read_text())["n"] == 2


def test_skip_small_relations_probes_the_rest(capsys, tmp_path, tiny_model_path):
    why = "P30: distractor pool has 6 objects; --choices 10 needs 10, the largest supported is 6"
    rc, out, _ = run(
        capsys,
        "probe",
        "ic-lke",
        "--model",
        str(tiny_model_path("gpt2")),
        "--relations",
        "P36,P30",
        "--choices",
        "10",
        "--skip-small-relations",
        "--max-facts-per-relation",
        "2",
        "--examples",
        "3",
        "--no-track",
        "--no-progress",
        "--out",
        str(tmp_path / "o"),
    )
    assert rc == 0
    m = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert m["n"] == 2 and set(m["per_relation"]) == {"P36"} and m["dropped_relations"] == {"P30": why}
    assert f"note: dropped {why}" in out


@pytest.mark.slow
def test_probe_logs_to_mlflow(capsys, tmp_path, monkeypatch, tiny_model_path):
    """`factprobe probe` with tracking on (the default store, ./mlruns.db): one FINISHED run with
    the metrics, the model, the dataset digest and input. Plumbing: a tiny RANDOM model."""
    from mlflow.tracking import MlflowClient

    model = str(tiny_model_path("gpt2"))
    monkeypatch.chdir(tmp_path)
    rc, out, _ = run(
        capsys,
        "probe",
        "ic-lke",
        "--model",
        model,
        "--relations",
        "P36",
        "--max-facts-per-relation",
        "4",
        "--choices",
        "20",
        "--examples",
        "3",
        "--no-progress",
        "--out",
        "o",
    )
    assert rc == 0 and "P36" in out and "MLflow run" in out
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlruns.db'}")
    exp = client.get_experiment_by_name("factprobe/probe")
    (r,) = client.search_runs([exp.experiment_id])
    assert r.info.status == "FINISHED" and r.data.metrics["n"] == 4 and "accuracy/P36" in r.data.metrics
    assert r.data.params["model"] == model
    assert r.data.tags["factprobe.dataset_digest"]
    assert r.inputs.dataset_inputs
    # the run is named by probe, model and config key, and the terminal says how to open it (issue 22)
    key = r.data.tags["factprobe.config_key"]
    assert r.info.run_name == f"ic-lke-{tiny_model_path('gpt2').name}-{key[:6]}"
    assert f"ui --backend-store-uri sqlite:///{tmp_path / 'mlruns.db'} --port 5000" in out
    assert f"#/experiments/{exp.experiment_id}/runs/{r.info.run_id}?workflowType=machine_learning" in out


@pytest.mark.slow
def test_rerun_of_a_finished_folder_logs_no_new_run(capsys, tmp_path, monkeypatch, tiny_model_path):
    """The same command twice into one folder: one MLflow run; the second says the folder is
    finished and points at the first run (issue 22 item 3)."""
    from mlflow.tracking import MlflowClient

    monkeypatch.chdir(tmp_path)
    argv = [
        "probe",
        "ic-lke",
        "--model",
        str(tiny_model_path("gpt2")),
        "--relations",
        "P36",
        "--max-facts-per-relation",
        "2",
        "--choices",
        "5",
        "--examples",
        "2",
        "--no-progress",
        "--out",
        "o",
    ]
    assert run(capsys, *argv)[0] == 0
    rc, out, _ = run(capsys, *argv)
    assert rc == 0 and "o already holds this finished run; nothing was scored and no new run was logged" in out
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlruns.db'}")
    (r,) = client.search_runs([client.get_experiment_by_name("factprobe/probe").experiment_id])
    assert r.info.status == "FINISHED" and f"MLflow run {r.info.run_id}; open it in the MLflow UI:" in out


@pytest.mark.slow
def test_rerun_of_a_finished_folder_that_was_never_logged_logs_it_once(capsys, tmp_path, monkeypatch, tiny_model_path):
    """A folder finished without a logged run (here --no-track; in life a tracking server that died
    after the results were written) is logged by the next tracked rerun, and only once: the rerun
    after that logs nothing (tests/integration/test_server_failure.py covers the dead server)."""
    from mlflow.tracking import MlflowClient

    monkeypatch.chdir(tmp_path)
    argv = [
        "probe",
        "ic-lke",
        "--model",
        str(tiny_model_path("gpt2")),
        "--relations",
        "P36",
        "--max-facts-per-relation",
        "2",
        "--choices",
        "5",
        "--examples",
        "2",
        "--no-progress",
        "--out",
        "o",
    ]
    assert run(capsys, *argv, "--no-track")[0] == 0
    assert not (tmp_path / "mlruns.db").exists()
    rc, out, _ = run(capsys, *argv)
    assert rc == 0 and "already holds this finished run" not in out and "2 resumed" in out
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlruns.db'}")
    exp = client.get_experiment_by_name("factprobe/probe").experiment_id
    (r,) = client.search_runs([exp])
    assert r.info.status == "FINISHED" and r.data.metrics["n"] == 2
    rc, out, _ = run(capsys, *argv)
    assert rc == 0 and "already holds this finished run" in out
    assert [x.info.run_id for x in client.search_runs([exp])] == [r.info.run_id]


@pytest.mark.parametrize(
    "command, subcommands",
    [
        ("pipeline", ["run", "compile", "submit"]),
        ("models", ["list", "path", "verify"]),
        ("schedule", ["--host", "--cron"]),
    ],
)
def test_help_of_passthrough_commands_lists_their_subcommands(command, subcommands, capsys):
    """`factprobe pipeline --help` (and models, schedule) reach the command's own parser, which
    lists every subcommand; argparse used to reject the leading `--help` ("unrecognized arguments")."""
    try:
        rc = main([command, "--help"])
    except SystemExit as e:  # argparse's own exit, where the command does not catch it
        rc = e.code
    assert rc == 0
    out = capsys.readouterr().out
    assert f"usage: factprobe {command}" in out
    for s in subcommands:
        assert s in out


def test_unknown_option_outside_passthrough_commands_is_still_refused(capsys):
    with pytest.raises(SystemExit) as e:
        main(["probe", "ic-lke", "--model", "x", "--no-such-option"])
    assert e.value.code == 2
    assert "unrecognized arguments: --no-such-option" in capsys.readouterr().err
