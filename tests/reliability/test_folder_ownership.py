"""Issue 18 ("Trust across commands"), items 1, 2 and 21b: one lock-and-kind mechanism for every
command that writes an output folder; a refused run leaves no MLflow run; `--out` naming a file
is one sentence. Real processes (`python -m factprobe.cli ...`) and real signals; tiny RANDOM
models (never a result)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from factprobe.cli import main

REPO = Path(__file__).resolve().parents[2]
FT_ARGS = [
    "--train-set",
    "regular",
    "--train-size",
    "16",
    "--batch-size",
    "8",
    "--grad-accum",
    "2",
    "--max-steps",
    "1",
    "--zero-stage",
    "0",
    "--lora-r",
    "4",
    "--max-seq-len",
    "256",
    "--device",
    "cpu",
    "--no-progress",
]


def probe_args(model: Path, out: Path, *extra: str) -> list[str]:
    return [
        "probe",
        "qa",
        "--model",
        str(model),
        "--relations",
        "P36",
        "--max-facts-per-relation",
        "2",
        "--device",
        "cpu",
        "--no-progress",
        "--out",
        str(out),
        *extra,
    ]


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    got = capsys.readouterr()
    return rc, got.out, got.err


def spawn(*argv: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "factprobe.cli", *argv],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def finished_finetune_folder(out: Path) -> Path:
    """What a finished `factprobe finetune` leaves (the files of the version before the marker)."""
    (out / "adapter").mkdir(parents=True)
    (out / "adapter" / "adapter_config.json").write_text("{}")
    (out / "finetune_config.json").write_text(json.dumps({"config": {"model": "m"}, "fingerprint": {}}))
    (out / "trainer_state.json").write_text(json.dumps({"log_history": []}))
    (out / "metrics.json").write_text(json.dumps({"train_loss": 1.25, "steps": 1}))
    return out


def error_line(err: str) -> str:
    lines = [x for x in err.strip().splitlines() if x.startswith("error: ")]
    assert len(lines) == 1, err
    return lines[0]


def mlflow_runs(uri: str, db: Path) -> list:
    if not db.exists():
        return []
    from mlflow.tracking import MlflowClient

    c = MlflowClient(uri)
    ids = [e.experiment_id for e in c.search_experiments()]
    return c.search_runs(ids) if ids else []


# ------------------------------------------------------------------ item 1
@pytest.mark.slow  # starts factprobe in a fresh Python (torch import): 4-14 s CPU
def test_item1_probe_into_a_finished_finetune_folder_is_refused(tmp_path, tiny_model_path):
    """issue 18 item 1: `probe qa` into a finished fine-tuning folder is refused in one line naming
    what the folder holds; its metrics.json is untouched (it used to be overwritten, exit 0)."""
    ft = finished_finetune_folder(tmp_path / "ft")
    before = (ft / "metrics.json").read_text()
    p = subprocess.run(
        [sys.executable, "-m", "factprobe.cli", *probe_args(tiny_model_path("gpt2"), ft, "--no-track")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    line = error_line(p.stderr)
    assert p.returncode == 2, p.stderr
    assert f"{ft} holds a fine-tuning run (finetune_config.json" in line and "a probe run cannot write into it" in line
    assert (ft / "metrics.json").read_text() == before
    assert not (ft / "results.jsonl").exists() and not (ft / "run_config.json").exists()


@pytest.mark.slow  # starts factprobe in a fresh Python (torch import): 4-14 s CPU
def test_item1_finetune_into_a_probe_folder_is_called_a_probe_run(tmp_path, tiny_model_path, capsys):
    """issue 18 item 1: `finetune` into a probe's folder is refused, the message calls it a probe run."""
    out = tmp_path / "p"
    rc, _, err = cli(capsys, *probe_args(tiny_model_path("gpt2"), out, "--no-track"))
    assert rc == 0, err
    before = (out / "metrics.json").read_text()
    # --train-size 1 made the old code fail later, for another reason (one effective batch); the
    # refusal must come first, before the training set or the model
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "factprobe.cli",
            "finetune",
            "--model",
            str(tiny_model_path("llama")),
            "--out",
            str(out),
            *FT_ARGS,
            "--train-size",
            "1",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    line = error_line(p.stderr)
    assert p.returncode == 2
    assert f"{out} holds a probe run (qa); finetune cannot write into it; use another --out" in line, line
    assert (out / "metrics.json").read_text() == before and not (out / "finetune_config.json").exists()


@pytest.mark.slow  # starts factprobe in a fresh Python (torch import): 4-14 s CPU
def test_item1_a_probe_and_a_finetune_started_at_once_exactly_one_writes(tmp_path, tiny_model_path):
    """issue 18 item 1 ("the same holds when the two run at once"): a probe and a finetune started
    together into one empty folder: exactly one proceeds, the other is refused in one line."""
    out = tmp_path / "both"
    procs = {
        "probe": spawn(*probe_args(tiny_model_path("gpt2"), out, "--no-track")),
        "finetune": spawn("finetune", "--model", str(tiny_model_path("llama")), "--out", str(out), *FT_ARGS),
    }
    try:
        refused: dict[str, str] = {}
        deadline = time.monotonic() + 240
        while not refused and time.monotonic() < deadline:
            for kind, p in procs.items():
                if p.poll() is not None and p.returncode == 2:
                    refused[kind] = p.stderr.read()
            if procs["probe"].poll() == 0 and procs["finetune"].poll() is not None:
                break
            time.sleep(0.2)
        assert len(refused) == 1, {k: (p.poll(), p.stderr.read() if p.poll() is not None else "") for k, p in procs.items()}
        ((loser, err),) = refused.items()
        winner = "finetune" if loser == "probe" else "probe"
        line = error_line(err)
        holds = {"probe": "holds a probe run", "finetune": "holds a fine-tuning run"}[winner]
        writer = {"probe": "a probe run cannot write into it", "finetune": "finetune cannot write into it"}[loser]
        assert holds in line and writer in line, line
        if winner == "probe":
            assert procs["probe"].wait(timeout=240) == 0
            assert json.loads((out / "run_config.json").read_text())["config"]["probe"] == "qa"
        else:
            assert not (out / "run_config.json").exists() and not (out / "results.jsonl").exists()
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=60)


@pytest.mark.slow  # starts factprobe in a fresh Python (torch import): 4-14 s CPU
def test_item1_a_killed_probe_is_taken_over_at_once_and_its_kind_stays(tmp_path, tiny_model_path):
    """issue 18 item 1: the lock is one O_EXCL file for every kind; a holder killed by SIGKILL on
    this host is taken over at once (no wait for the stale timeout); its folder stays a probe
    folder for a later finetune. The lock names the holder's host and pid."""
    out = tmp_path / "k"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import time; from factprobe.run_folder import claim\n"
                f"c = claim({str(out)!r}, 'probe', 'qa'); c.__enter__(); print('locked', flush=True); time.sleep(120)"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "factprobe.cli",
                "finetune",
                "--model",
                str(tiny_model_path("llama")),
                "--out",
                str(out),
                *FT_ARGS,
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        line = error_line(p.stderr)
        assert (
            p.returncode == 2
            and f"{out} holds a probe run (qa, in progress, host " in line
            and f"pid {holder.pid})" in line
            and "finetune cannot write into it" in line
        ), line
    finally:
        holder.kill()
        holder.wait()
    p = subprocess.run(
        [sys.executable, "-m", "factprobe.cli", *probe_args(tiny_model_path("gpt2"), out, "--no-track")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr


# ------------------------------------------------------------------ item 2
@pytest.mark.slow
def test_item2_a_refused_probe_leaves_no_mlflow_run(tmp_path, tiny_model_path, capsys):
    """issue 18 item 2: a probe refused at validation, at the folder's kind or at its lock creates
    no MLflow run (a FAILED one used to appear); a run that passes does."""
    db = tmp_path / "mlruns.db"
    uri = f"sqlite:///{db}"
    track = ("--tracking-uri", uri)
    model = tiny_model_path("gpt2")
    rc, _, err = cli(capsys, *probe_args(model, tmp_path / "v", *track), "--relations", "P999")
    assert rc == 2 and "P999" in error_line(err)
    assert mlflow_runs(uri, db) == []

    rc, _, err = cli(capsys, *probe_args(model, finished_finetune_folder(tmp_path / "ft"), *track))
    assert rc == 2 and "holds a fine-tuning run" in error_line(err)
    assert mlflow_runs(uri, db) == []

    busy = tmp_path / "busy"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import time; from factprobe.run_folder import claim\n"
                f"c = claim({str(busy)!r}, 'probe', 'qa'); c.__enter__(); print('locked', flush=True); time.sleep(120)"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        rc, _, err = cli(capsys, *probe_args(model, busy, *track))
        assert rc == 2 and f"pid {holder.pid}" in error_line(err)
    finally:
        holder.kill()
        holder.wait()
    assert mlflow_runs(uri, db) == []

    rc, _, err = cli(capsys, *probe_args(model, tmp_path / "ok", *track))
    assert rc == 0, err
    runs = mlflow_runs(uri, db)
    assert [r.info.status for r in runs] == ["FINISHED"]


# ------------------------------------------------------------------ item 21b
@pytest.mark.parametrize("command", ["probe", "finetune"])
def test_item21b_out_that_is_a_file_is_one_sentence(tmp_path, tiny_model_path, capsys, command):
    """issue 18 item 21b: `--out` naming a file is refused in one sentence, not 'File exists'."""
    f = tmp_path / "x"
    f.write_text("not a folder")
    if command == "probe":
        argv = probe_args(tiny_model_path("gpt2"), f, "--no-track")
    else:
        argv = ["finetune", "--model", str(tiny_model_path("llama")), "--out", str(f), *FT_ARGS]
    rc, _, err = cli(capsys, *argv)
    assert rc == 2 and error_line(err).startswith(f"error: --out {f} is a file, not a folder"), err
    assert f.read_text() == "not a folder"


def test_item2_a_refused_pipeline_probe_step_leaves_no_child_run(tmp_path, tiny_model_path):
    """issue 18 item 2, pipeline path (components/steps/probe.py): a probe step whose work folder
    holds another kind of run is refused before its child MLflow run exists."""
    from factprobe.errors import ConfigError
    from factprobe.framework.registry import get_probe
    from factprobe.framework.runner import run_identity
    from factprobe_ops.components.steps._common import run_config
    from factprobe_ops.components.steps.probe import run_probe_step, work_dir, work_key
    from factprobe_ops.tracking.context import RunContext
    from factprobe_ops.tracking.run import TrackedRun

    db = tmp_path / "mlruns.db"
    uri = f"sqlite:///{db}"
    config = {"relations": "P36", "max_facts_per_relation": 2, "device": "cpu"}
    model = str(tiny_model_path("gpt2"))
    cfg = run_config(config, probe="qa", model=model)
    prepared = get_probe("qa").prepare(cfg)
    prepared.save(tmp_path / "items" / (get_probe("qa").dataset or "qa"))
    work = work_dir(str(tmp_path / "work"), work_key(cfg, run_identity(cfg, prepared)))
    finished_finetune_folder(work)
    with TrackedRun(pipeline="probe", tracking_uri=uri, required=True) as parent:
        pass
    with pytest.raises(ConfigError, match="holds a fine-tuning run"):
        run_probe_step(
            str(tmp_path / "items"),
            str(tmp_path / "res"),
            model,
            "qa",
            config,
            RunContext(tracking_uri=uri, trigger="local", parent_run_id=parent.run_id),
            work_root=str(tmp_path / "work"),
        )
    assert [r.info.run_id for r in mlflow_runs(uri, db)] == [parent.run_id]


@pytest.mark.slow
def test_item2_a_refused_pipeline_finetune_step_leaves_no_child_run(tmp_path, tiny_model_path):
    """issue 18 item 2, pipeline path (components/steps/finetune_train.py): a training step whose work
    folder holds a probe's results is refused before its child MLflow run exists."""
    from factprobe.errors import ConfigError
    from factprobe_ops.components.steps.finetune import finetune_config, train_out_dir
    from factprobe_ops.components.steps.finetune_train import run_train_step
    from factprobe_ops.tracking.context import RunContext
    from factprobe_ops.tracking.run import TrackedRun

    db = tmp_path / "mlruns.db"
    uri = f"sqlite:///{db}"
    model = str(tiny_model_path("llama"))
    ft = {
        "train_size": 16,
        "batch_size": 8,
        "grad_accum": 2,
        "max_steps": 1,
        "zero_stage": 0,
        "lora_r": 4,
        "max_seq_len": 256,
        "device": "cpu",
    }
    work = train_out_dir(
        str(tmp_path / "work"), "", model, "regular", finetune_config(ft, model, "regular", None, "-").fingerprint_digest()
    )
    work.mkdir(parents=True)
    (work / "run_config.json").write_text(json.dumps({"results_key": "k", "config": {"probe": "qa"}}))
    (work / "results.jsonl").write_text("")
    with TrackedRun(pipeline="finetune_known_unknown", tracking_uri=uri, required=True) as parent:
        pass
    with pytest.raises(ConfigError, match=r"holds a probe run \(qa\); finetune cannot write into it"):
        run_train_step(
            "",
            str(tmp_path / "adapter"),
            model,
            "regular",
            ft,
            RunContext(tracking_uri=uri, pipeline="finetune_known_unknown", trigger="local", parent_run_id=parent.run_id),
            work_root=str(tmp_path / "work"),
        )
    assert [r.info.run_id for r in mlflow_runs(uri, db)] == [parent.run_id]


def test_item2_a_refused_regress_candidate_leaves_no_mlflow_run(tmp_path, tiny_model_path, capsys):
    """issue 18 item 2, `regress`: a candidate probe refused at the folder claim (its --out holds a
    fine-tuning run) creates no MLflow run (it used to leave a FAILED `regress-candidate-*` run)."""
    model = tiny_model_path("gpt2")
    base = tmp_path / "base"
    rc, _, err = cli(
        capsys,
        "probe",
        "ic-lke",
        "--model",
        str(model),
        "--relations",
        "P36",
        "--max-facts-per-relation",
        "4",
        "--choices",
        "3",
        "--examples",
        "2",
        "--device",
        "cpu",
        "--no-progress",
        "--no-track",
        "--out",
        str(base),
    )
    assert rc == 0, err
    db = tmp_path / "mlruns.db"
    uri = f"sqlite:///{db}"
    rc, _, err = cli(
        capsys,
        "regress",
        "--candidate",
        str(model),
        "--baseline",
        str(base),
        "--tracking-uri",
        uri,
        "--out",
        str(finished_finetune_folder(tmp_path / "ft")),
    )
    assert rc == 2 and "holds a fine-tuning run" in error_line(err)
    assert mlflow_runs(uri, db) == []
