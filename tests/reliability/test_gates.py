"""Issue 18 items 15, 16 and 18c: `baseline promote` and `regress` accept only what the gate can gate.

`regress` gates runs of probes that declare a per-fact verdict (the multiple-choice ic-lke, eic-lke,
hgp, mmp, mc-items; plug-ins too: tests/reliability/test_verdict_contract.py) fact by fact; `baseline promote`
refuses every other run in one line naming what `regress` needs, and `regress` refuses such a
baseline, and a bad `--max-drop` / `--alpha`, before it probes the candidate.
Runs are hand-made: results folders and MLflow runs in a sqlite store under tmp_path.
"""

import json
import math
import re

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from factprobe.cli import main
from factprobe.errors import ConfigError
from factprobe_ops.tracking.baseline import BASELINE_TAG, promote

#: the built-in gateable probes come first; a plug-in registered by another test of this worker may follow
NEEDS = "regress gates runs of probes that declare a boolean verdict per fact (ic-lke, eic-lke, hgp, mmp, mc-items"


def no_verdict(probe: str) -> str:
    """The refusal of a run whose probe declares no verdict, up to what regress needs: `is a qa run
    (closed-book QA ...), with no verdict per fact; `."""
    from factprobe.framework.registry import get_probe

    return f"is a {probe} run ({get_probe(probe).description.split(':')[0].strip()}), with no verdict per fact; "


def mc_rows(n=6):
    return [
        {
            "fact_id": f"P36|Q{i}|Q{i + 100}",
            "relation": "P36",
            "subject": f"S{i}",
            "gold": f"O{i}",
            "prediction": f"O{i}",
            "correct": i % 2 == 0,
        }
        for i in range(n)
    ]


def qa_rows(n=6):
    return [
        {
            "fact_id": f"P36|Q{i}|Q{i + 100}",
            "relation": "P36",
            "question": "q?",
            "answer": "a",
            "gold": ["a"],
            "em": 1.0,
            "f1": 1.0,
            "contains": 1.0,
            "correct": True,
            "setting": "closed-book",
            "shots": 5,
        }
        for i in range(n)
    ]


#: the measurement identity a probe run records (factprobe.identity): the gate compares only like with like
IDENTITY = {
    "model_revision": "local-sha256:0",
    "data_digest": "sha256:0",
    "config_key": "k",
    "numerics": {"dtype": "float32", "device": "cpu", "transformers": "5.0.0"},
    "inputs": [],
}


def folder(path, probe, rows):
    path.mkdir(parents=True)
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "run_config.json").write_text(
        json.dumps({"config": {"probe": probe, "model": "m"}, "results_key": "k", "identity": IDENTITY})
    )
    return path


@pytest.fixture
def store(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    client = MlflowClient(uri)
    exp = client.create_experiment("factprobe/probe", artifact_location=(tmp_path / "artifacts").as_uri())

    def run(probe, metrics, rows=None):
        r = client.create_run(
            exp,
            tags={
                "factprobe.probe": probe,
                "factprobe.data_digest": IDENTITY["data_digest"],
                "factprobe.numerics": json.dumps(IDENTITY["numerics"]),
            },
        )
        for k, v in metrics.items():
            client.log_metric(r.info.run_id, k, v)
        if rows is not None:
            f = tmp_path / f"per_fact-{r.info.run_id}" / "per_fact.parquet"
            f.parent.mkdir()
            pd.DataFrame(rows).to_parquet(f)
            client.log_artifact(r.info.run_id, str(f), "tables")
        client.set_terminated(r.info.run_id)
        return r.info.run_id

    return client, run, uri


@pytest.fixture
def probed(monkeypatch):
    """Records every candidate probe `regress` would start (none should start in these tests)."""
    calls = []

    def fake(model, params, out, args):
        calls.append(model)
        raise AssertionError("regress probed the candidate")

    monkeypatch.setattr("factprobe_ops.tracking.regress._probe_candidate", fake)
    return calls


def test_promote_refuses_runs_regress_cannot_gate(store, capsys):
    """issue 18 item 15: qa, counterfactual, coherency and belief runs are refused in one line
    that names what regress needs; an ic-lke run needs its acc metric and per-fact table."""
    client, run, _ = store
    refused = {
        "qa": run("qa", {"em": 0.5}, qa_rows()),
        "counterfactual": run("counterfactual", {"em": 0.5}, qa_rows()),
        "coherency": run("coherency", {"coherency": 0.5}, [{"fact_id": "f", "relation": "P36", "coherent": True}]),
        "belief-icl": run("belief-icl", {"acc_1": 0.5}, [{**r, "template": "t1"} for r in mc_rows()]),
    }
    for probe, rid in refused.items():
        assert main(["baseline", "promote", rid]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: run {rid} {no_verdict(probe)}{NEEDS}"), err
        assert "`correct`" in err[0]
        assert client.get_run(rid).data.tags.get(BASELINE_TAG) is None
    no_table = run("ic-lke", {"accuracy": 0.5})
    with pytest.raises(ConfigError, match=re.escape(f"run {no_table} has no tables/per_fact.parquet artifact; {NEEDS}")):
        promote(no_table)
    no_acc = run("ic-lke", {"macro_accuracy": 0.5}, mc_rows())
    with pytest.raises(ConfigError, match=f"run {no_acc} has no `accuracy` metric \\(the ic-lke headline\\)"):
        promote(no_acc)
    good = run("hgp", {"accuracy": 0.5}, [{**r, "template": "t1"} for r in mc_rows()])
    assert promote(good) == [] and client.get_run(good).data.tags[BASELINE_TAG] == "true"


def test_regress_refuses_an_ungateable_baseline_before_probing(store, tmp_path, capsys, probed):
    """issue 18 item 15: a qa baseline (folder or MLflow run) is refused in one line before the
    candidate is probed; so is a qa run given as the candidate."""
    _, run, _ = store
    model = tmp_path / "model"
    model.mkdir()
    qa_folder = folder(tmp_path / "qa-run", "qa", qa_rows())
    qa_run = run("qa", {"em": 1.0}, qa_rows())
    for baseline in (str(qa_folder), qa_run):
        rc = main(["regress", "--candidate", str(model), "--baseline", baseline, "--no-track", "--out", str(tmp_path / "o")])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and err[0].startswith(f"error: baseline {baseline} {no_verdict('qa')}")
        assert NEEDS in err[0]
    assert probed == [] and not (tmp_path / "o").exists()
    mc = folder(tmp_path / "mc-run", "ic-lke", mc_rows())
    rc = main(["regress", "--candidate", str(qa_folder), "--baseline", str(mc), "--no-track"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith(f"error: candidate {qa_folder} {no_verdict('qa')}{NEEDS}")
    # a folder without run_config.json is judged by its table: rows without a verdict are refused
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "results.jsonl").write_text(json.dumps({"fact_id": "f", "relation": "P36", "correct": None}) + "\n")
    assert main(["regress", "--candidate", str(model), "--baseline", str(bare), "--no-track"]) == 2
    assert "rows without a boolean `correct`" in capsys.readouterr().err
    assert probed == []


@pytest.mark.parametrize(
    "option, value",
    [
        ("--max-drop", "nan"),
        ("--max-drop", "inf"),
        ("--max-drop", "-0.01"),
        ("--max-drop", "1"),
        ("--alpha", "nan"),
        ("--alpha", "0"),
        ("--alpha", "1"),
        ("--alpha", "1.5"),
        ("--alpha=", "-inf"),
        ("--max-drop", "abc"),
        ("--alpha", ""),
    ],
)
def test_regress_validates_max_drop_and_alpha(tmp_path, capsys, probed, option, value):
    """issue 18 items 16 and 18c: --max-drop must be finite in [0, 1), --alpha finite in (0, 1);
    otherwise one line (no traceback), before the candidate is probed."""
    mc = folder(tmp_path / "mc-run", "ic-lke", mc_rows())
    model = tmp_path / "model"
    model.mkdir()
    given = [option + value] if option.endswith("=") else [option, value]  # `--alpha -inf` reads as an option
    rc = main(["regress", "--candidate", str(model), "--baseline", str(mc), "--no-track", *given])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    name = option.rstrip("=")
    interval = "[0, 1)" if name == "--max-drop" else "(0, 1)"
    assert err[0] == f"error: {name} must be a number in {interval}, got {value!r}"
    assert probed == []


def test_regress_accepts_the_edges(tmp_path, capsys):
    """issue 18 item 16: --max-drop 0 (no tolerance) and an alpha near 1 are valid settings."""
    mc = folder(tmp_path / "mc-run", "ic-lke", mc_rows())
    rc = main(["regress", "--candidate", str(mc), "--baseline", str(mc), "--no-track", "--max-drop", "0", "--alpha", "0.99"])
    assert rc == 0 and "regression gate: PASS" in capsys.readouterr().out


def test_pipeline_gate_step_refuses_what_it_cannot_gate(tmp_path):
    """issue 18 items 15 and 16, pipeline side: the regression pipeline's gate step refuses a qa
    baseline and a NaN max_drop in one line (ConfigError) instead of a stack of pandas errors."""
    from factprobe_ops.components.steps.regression_gate import run_gate
    from factprobe_ops.tracking.context import RunContext

    mc = folder(tmp_path / "mc-run", "ic-lke", mc_rows())
    qa = folder(tmp_path / "qa-run", "qa", qa_rows())
    with pytest.raises(ConfigError, match=re.escape(f"baseline {qa} {no_verdict('qa')}{NEEDS}")):
        run_gate(str(mc), str(qa), 0.02, 0.05, str(tmp_path / "gate.md"), RunContext(tracking_uri="none"))
    with pytest.raises(ConfigError, match=r"^max_drop must be a number in \[0, 1\), got nan$"):
        run_gate(str(mc), str(mc), math.nan, 0.05, str(tmp_path / "gate.md"), RunContext(tracking_uri="none"))
    assert (
        run_gate(str(mc), str(mc), 0.02, 0.05, str(tmp_path / "gate.md"), RunContext(tracking_uri="none"))["decision"] == "PASS"
    )
