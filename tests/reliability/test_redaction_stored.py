"""Issue 18 ("Trust across commands"), item 17: credentials inside URLs are redacted where they are
stored (MLflow params, `config_json`, `run_config.json`, `finetune_config.json`), not only on the
terminal; the run itself uses the real value, and the results key is the real config's (a rerun
still matches)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from factprobe.cli import main
from factprobe.framework.config import RunConfig

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "mc_snapshot"
SECRET = "s3cr3tPW"


def creds_folder(tmp_path: Path) -> str:
    """A real data folder whose path reads as a URL with credentials: `<tmp>/http://user:PW@host`."""
    d = tmp_path / "http:" / f"user:{SECRET}@host"
    d.mkdir(parents=True)
    shutil.copy(FIXTURE / "test.jsonl", d / "test.jsonl")
    shutil.copytree(FIXTURE / "train", d / "train")
    return f"{tmp_path}/http://user:{SECRET}@host"


def test_item17_redact_values_masks_every_string_of_a_nested_config():
    """issue 18 item 17: the helper masks URL credentials in every string, at any depth."""
    from factprobe.redact import redact_values

    cfg = {
        "data": f"s3://AKIAKEY:{SECRET}@bucket/lama",
        "n": 3,
        "flags": [f"http://u:{SECRET}@h/x", None, True],
        "nested": {"uri": f"https://tok:{SECRET}@example.org/f.csv?token={SECRET}"},
    }
    out = redact_values(cfg)
    assert SECRET not in json.dumps(out)
    assert out["data"] == "s3://***@bucket/lama" and out["n"] == 3 and out["flags"][1:] == [None, True]
    assert SECRET in cfg["data"]  # the caller's dict is not changed: the run uses the real value


@pytest.mark.slow
def test_item17_probe_stores_no_credentials(tmp_path, tiny_model_path, capsys):
    """issue 18 item 17: a probe whose --data / --train-data hold URL credentials runs on the real
    value, but run_config.json, the MLflow params and config_json hold them masked; the results
    key is the real config's, so the same command resumes the folder."""
    data = creds_folder(tmp_path)
    db = tmp_path / "mlruns.db"
    out = tmp_path / "o"
    argv = [
        "probe",
        "ic-lke",
        "--model",
        str(tiny_model_path("llama")),
        "--source",
        "triples",
        "--data",
        f"{data}/test.jsonl",
        "--train-data",
        f"{data}/train",
        "--examples",
        "3",
        "--choices",
        "5",
        "--relations",
        "P36",
        "--max-facts-per-relation",
        "2",
        "--device",
        "cpu",
        "--no-progress",
        "--out",
        str(out),
        "--tracking-uri",
        f"sqlite:///{db}",
    ]
    assert main(argv) == 0, capsys.readouterr().err
    assert "(2 scored now, 0 resumed)" in capsys.readouterr().out

    stored = (out / "run_config.json").read_text()
    assert SECRET not in stored and "http://***@host" in stored
    cfg = RunConfig.from_dict(
        {
            "probe": "ic-lke",
            **{k: v for k, v in json.loads(stored)["config"].items() if k != "probe"},
            "data": f"{data}/test.jsonl",
            "train_data": f"{data}/train",
        }
    )
    assert json.loads(stored)["results_key"] == cfg.results_key()  # computed from the real config

    from mlflow.tracking import MlflowClient

    c = MlflowClient(f"sqlite:///{db}")
    (run,) = c.search_runs([e.experiment_id for e in c.search_experiments()])
    params = run.data.params
    assert params["data"].startswith(f"{tmp_path}/http://***@host") and SECRET not in json.dumps(params)
    assert "http://***@host" in json.loads(params["config_json"])["train_data"]
    assert SECRET not in json.dumps(run.data.tags)

    assert main(argv) == 0  # the same command: the same results key, the folder is resumed
    assert "(0 scored now, 2 resumed)" in capsys.readouterr().out


def test_item17_tracked_run_params_are_redacted(tmp_path):
    """issue 18 item 17: every parameter a pipeline step logs (components/steps/*.py log_params)
    is stored masked, and a dataset input's source too."""
    import pandas as pd
    from mlflow.tracking import MlflowClient

    from factprobe_ops.tracking.run import TrackedRun

    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    with TrackedRun(pipeline="t", tracking_uri=uri, required=True) as run:
        run.log_params({"data": f"s3://AKIAKEY:{SECRET}@bucket/lama", "model": "m"})
        run.log_input(pd.DataFrame({"a": [1]}), name="d", source=f"s3://AKIAKEY:{SECRET}@bucket/lama", digest="x")
    got = MlflowClient(uri).get_run(run.run_id)
    assert got.data.params == {"data": "s3://***@bucket/lama", "model": "m"}
    assert SECRET not in json.dumps([i.dataset.source for i in got.inputs.dataset_inputs])


def test_item17_finetune_config_stores_no_credentials(tmp_path, tiny_model_path):
    """issue 18 item 17: finetune_config.json holds URL credentials masked; the run read the real
    file, and a retried pipeline step (same configuration) still reuses the finished folder."""
    from factprobe.finetune import FinetuneConfig, run_finetune

    d = tmp_path / "http:" / f"user:{SECRET}@host"
    d.mkdir(parents=True)
    shutil.copy(REPO / "factprobe" / "datasets" / "data" / "qa_templates.tsv", d / "qa_templates.tsv")
    cfg = FinetuneConfig(
        model=str(tiny_model_path("llama")),
        train_set="regular",
        train_size=16,
        batch_size=8,
        grad_accum=2,
        max_steps=1,
        zero_stage=0,
        lora_r=4,
        max_seq_len=256,
        device="cpu",
        qa_templates=f"{tmp_path}/http://user:{SECRET}@host/qa_templates.tsv",
        out=str(tmp_path / "ft"),
    )
    first = run_finetune(cfg, progress=False)
    stored = (tmp_path / "ft" / "finetune_config.json").read_text()
    assert SECRET not in stored and "http://***@host" in stored
    assert run_finetune(cfg, progress=False, if_finished="reuse") == first
