"""`factprobe compare` says why two runs do not join, and refuses runs built from different data
(issue 22 item 1): their configurations (run_config.json, MLflow `config_json`) and test-data
digests are compared before the facts are joined."""

import json

import pytest

from factprobe.cli import main
from factprobe.errors import DataError
from factprobe.metrics.comparison import check_same_data, data_differences

ROWS = [{"fact_id": f"P36|Q{i}|Q{10 * i}", "relation": "P36", "correct": i % 2 == 0} for i in range(1, 5)]
BASE = {
    "probe": "ic-lke",
    "model": "m",
    "source": "lama",
    "data": None,
    "train_data": "trex_train",
    "relations": ["P36"],
    "max_facts_per_relation": 10,
    "seed": 0,
    "choices": 100,
    "skip_small_relations": False,
}


def _folder(path, rows, config=None, digest=None):
    path.mkdir()
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if config is not None:
        (path / "run_config.json").write_text(json.dumps({"results_key": "k", "config": config}))
    if digest is not None:
        (path / "metrics.json").write_text(json.dumps({"data_digest": digest}))
    return path


def test_different_train_data_is_named_with_the_flag_that_fixes_it():
    b = {**BASE, "train_data": None}
    assert data_differences(BASE, b) == {"train_data": ("trex_train", None)}
    with pytest.raises(DataError) as e:
        check_same_data(BASE, b, "d1", "d2")
    msg = str(e.value)
    assert "--train-data trex_train (a) vs not set (b)" in msg
    assert "run b again with --train-data trex_train" in msg


def test_seed_and_choices_are_named_too():
    with pytest.raises(DataError, match=r"--seed 0 \(a\) vs 1 \(b\); --choices 100 \(a\) vs 20 \(b\)"):
        check_same_data(BASE, {**BASE, "seed": 1, "choices": 20})


def test_options_only_one_probe_has_are_not_compared():
    hgp = {k: v for k, v in BASE.items() if k != "choices"}
    assert data_differences(BASE, hgp) == {}
    assert check_same_data(BASE, {**BASE, "probe": "hgp"}, "d", "d") == ""


def test_other_relations_join_on_the_shared_ones_with_a_note():
    note = check_same_data(BASE, {**BASE, "relations": ["P36", "P19"]}, "d1", "d2")
    assert "different relations" in note and "only the relations both ran are compared" in note


def test_same_options_other_digest_means_the_files_changed():
    with pytest.raises(DataError, match="data digest d1 \\(a\\) vs d2 \\(b\\)"):
        check_same_data(BASE, dict(BASE), "d1", "d2")
    assert check_same_data(None, BASE, "d1", "d2") == ""  # a bare results.jsonl: nothing to say


def test_compare_refuses_folders_of_different_train_data(tmp_path, capsys):
    """The runs share every fact id, so without their configurations they would be joined silently."""
    a = _folder(tmp_path / "a", ROWS, BASE, "d1")
    b = _folder(tmp_path / "b", ROWS, {**BASE, "train_data": None}, "d2")
    assert main(["compare", str(a), str(b), "--n-boot", "50"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the runs were built from different data: --train-data trex_train (a) vs not set (b)")
    # the same tables without their configurations join: the refusal comes from the configs
    bare_a, bare_b = _folder(tmp_path / "c", ROWS), _folder(tmp_path / "d", ROWS)
    assert main(["compare", str(bare_a), str(bare_b), "--n-boot", "50"]) == 0
    assert "facts joined: 4" in capsys.readouterr().out


@pytest.mark.slow
def test_compare_refuses_real_runs_with_and_without_train_data(tmp_path, capsys, tiny_model_path, real_data_root):
    """Two real (tiny RANDOM model) IC-LKE runs on LAMA P36, one with the tour's --train-data, one
    without: compare fails naming --train-data (results are plumbing, not numbers)."""
    model = str(tiny_model_path("gpt2"))
    common = [
        "probe",
        "ic-lke",
        "--model",
        model,
        "--source",
        "lama",
        "--relations",
        "P36",
        "--max-facts-per-relation",
        "6",
        "--choices",
        "5",
        "--examples",
        "2",
        "--no-track",
        "--no-progress",
    ]
    train = str(real_data_root / "lpaqa" / "trex_train")
    assert main([*common, "--train-data", train, "--out", str(tmp_path / "with")]) == 0
    assert main([*common, "--out", str(tmp_path / "without")]) == 0
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "with"), str(tmp_path / "without"), "--n-boot", "50"]) == 2
    err = capsys.readouterr().err
    assert f"--train-data {train} (a) vs not set (b)" in err and "run b again with --train-data" in err


def test_mlflow_runs_are_read_from_config_json_and_the_digest_tag(tmp_path):
    from factprobe_ops.tracking.compare import run_provenance

    desc = {
        "ref": "abc",
        "run_id": "abc",
        "params": {"config_json": json.dumps(BASE), "seed": "0"},
        "tags": {"factprobe.dataset_digest": "d1"},
    }
    assert run_provenance(desc) == (BASE, "d1")
    assert run_provenance({"ref": "abc", "run_id": "abc", "params": {}, "tags": {}}) == (None, None)
    folder = _folder(tmp_path / "f", ROWS, BASE, "d2")
    assert run_provenance({"ref": str(folder / "results.jsonl")}) == (BASE, "d2")
