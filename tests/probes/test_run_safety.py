"""Runs that cannot go wrong silently (issue 9): examples independent of what is scored, the
official prompt format, one writer per output folder, no run_config.json before validation,
one-line errors, SIGTERM marks the MLflow run KILLED, and input that must be refused."""

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
from factprobe.facts import Fact
from factprobe.framework.config import RunConfig
from factprobe.framework.runner import run_probe
from factprobe.paths import data_root
from factprobe.probes import ic_lke

REPO = Path(__file__).resolve().parents[2]
LAMA = data_root() / "lama"
LPAQA = data_root() / "lpaqa" / "trex_train"
needs_data = pytest.mark.skipif(not LAMA.is_dir(), reason="needs ../shared/data (FACTPROBE_DATA)")


def cli(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


# ------------------------------------------------------------------ item 3: prompt formats
def test_official_format_matches_the_worked_example():
    ex = [Fact("P36", "A", "a"), Fact("P36", "B", "b"), Fact("P36", "C", "c")]
    prefix = ic_lke.relation_prefix(ex, " : ", "official")
    text = ic_lke.fact_context(prefix, "France", " : ", "official") + ic_lke.option_continuation("Paris", " : ")
    assert text == "A : a , B : b , C : c France :  : Paris"


def test_both_formats_on_our_own_example():
    ex = [Fact("P36", "Italy", "Rome"), Fact("P36", "Spain", "Madrid")]
    paper = ic_lke.fact_context(ic_lke.relation_prefix(ex, " "), "France", " ") + ic_lke.option_continuation("Paris", " ")
    assert paper == "Italy Rome Spain Madrid France Paris"
    off = ic_lke.relation_prefix(ex, " ", "official")
    assert (
        ic_lke.fact_context(off, "France", " ", "official") + ic_lke.option_continuation("Paris", " ")
        == "Italy Rome , Spain Madrid France  Paris"
    )
    assert ic_lke.fact_context(ic_lke.relation_prefix([], " ", "official"), "France", " ", "official") == "France "


def test_official_format_scores_the_exact_string(tiny_model_path, tmp_path):
    """The scored context is the format's string, and the log-probs equal the scorer on that string."""
    fx = REPO / "tests" / "fixtures" / "mc_snapshot"
    cfg = RunConfig.from_dict(
        {
            "probe": "ic-lke",
            "model": str(tiny_model_path("llama")),
            "source": "triples",
            "data": str(fx / "test.jsonl"),
            "train_data": str(fx / "train"),
            "examples": 3,
            "choices": 5,
            "separator": " : ",
            "prompt_format": "official",
            "relations": "P36",
            "max_facts_per_relation": 2,
            "device": "cpu",
            "dtype": "float32",
        }
    )
    out = run_probe(cfg, tmp_path / "o", progress=False, log=lambda m: None)
    row = out.results.iloc[0]
    assert row["context"].endswith(f"{row['subject']} : ") and row["context"].count(" , ") == 2
    from factprobe.lm.scorer import ChoiceRequest, Scorer
    from factprobe.models import load_model

    m = load_model(str(tiny_model_path("llama")), device="cpu", dtype="float32")
    want = Scorer(m.model, m.tokenizer).score_choices([ChoiceRequest(row["context"], [f" : {o}" for o in row["options"]])])[0]
    assert max(abs(a - b) for a, b in zip(want, row["logprobs"])) < 1e-4


# ------------------------------------------------------------------ item 2: examples
@pytest.mark.slow
@needs_data
def test_a_fact_sees_the_same_context_in_small_large_and_resumed_runs(tiny_model_path, tmp_path):
    base = {
        "probe": "ic-lke",
        "model": str(tiny_model_path("gpt2")),
        "source": "lama",
        "data": str(LAMA),
        "train_data": str(LPAQA),
        "relations": "P530",
        "choices": 10,
        "examples": 8,
        "device": "cpu",
        "dtype": "float32",
    }
    small = run_probe(
        RunConfig.from_dict({**base, "max_facts_per_relation": 10}), tmp_path / "s", progress=False, log=lambda m: None
    )
    large = run_probe(
        RunConfig.from_dict({**base, "max_facts_per_relation": 40}), tmp_path / "l", progress=False, log=lambda m: None
    )
    ctx_small = dict(zip(small.results.fact_id, small.results.context))
    ctx_large = dict(zip(large.results.fact_id, large.results.context))
    shared = set(ctx_small) & set(ctx_large)
    assert len(shared) >= 5
    assert all(ctx_small[f] == ctx_large[f] for f in shared)
    # a resume: drop half of the finished rows and run again
    out = tmp_path / "l"
    rows = (out / "results.jsonl").read_text().splitlines()
    (out / "results.jsonl").write_text("\n".join(rows[: len(rows) // 2]) + "\n")
    again = run_probe(RunConfig.from_dict({**base, "max_facts_per_relation": 40}), out, progress=False, log=lambda m: None)
    assert again.n_resumed == len(rows) // 2 and again.n_scored_now == len(rows) - len(rows) // 2
    assert dict(zip(again.results.fact_id, again.results.context)) == ctx_large
    # the examples exclude every test subject of the relation (checked in tests/datasets/test_examples.py)


# ------------------------------------------------------------------ item 8: one writer per --out
def test_a_second_run_into_a_busy_folder_is_refused_at_once(tmp_path, tiny_model_path, capsys):
    out = tmp_path / "busy"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time; from factprobe.framework.checkpoint import RunFolder\n"
                f"f = RunFolder({str(out)!r}, 'k', {{}}).__enter__(); print('locked', flush=True); time.sleep(60)"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        start = time.monotonic()
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "factprobe.cli",
                "probe",
                "ic-lke",
                "--model",
                str(tiny_model_path("gpt2")),
                "--out",
                str(out),
                "--no-track",
                "--no-progress",
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )
        assert time.monotonic() - start < 30
        assert p.returncode == 2
        assert f"output folder {out} is in use by host" in p.stderr and f"pid {holder.pid}" in p.stderr
        assert not (out / "run_config.json").exists()
    finally:
        holder.kill()
        holder.wait()
    # the holder died (SIGKILL): its stale lock is taken over
    rc, _, err = cli(
        capsys,
        "probe",
        "ic-lke",
        "--model",
        str(tiny_model_path("gpt2")),
        "--out",
        str(out),
        "--no-track",
        "--no-progress",
        "--max-facts-per-relation",
        "2",
        "--choices",
        "5",
        "--examples",
        "3",
        "--device",
        "cpu",
    )
    assert rc == 0, err


# ------------------------------------------------------------------ item 9: run_config after validation
def test_a_failed_run_leaves_no_config_that_refuses_the_corrected_rerun(tmp_path, tiny_model_path, capsys):
    out = tmp_path / "o"
    common = [
        "probe",
        "ic-lke",
        "--model",
        str(tiny_model_path("gpt2")),
        "--out",
        str(out),
        "--no-track",
        "--no-progress",
        "--choices",
        "5",
        "--examples",
        "3",
        "--max-facts-per-relation",
        "2",
        "--device",
        "cpu",
    ]
    rc, _, err = cli(capsys, *common, "--relations", "P999")
    assert rc == 2 and "unknown relation(s) P999" in err
    assert not (out / "run_config.json").exists()
    rc, _, err = cli(capsys, *common, "--relations", "P36")
    assert rc == 0, err
    assert json.loads((out / "run_config.json").read_text())["config"]["relations"] == ["P36"]


# ------------------------------------------------------------------ items 11 and 14: one line each
@pytest.mark.parametrize(
    "argv, code, needle",
    [
        (["--relations", " , "], 2, "relations=' , ': empty relation id"),
        (["--token-budget", "0"], 2, "token_budget=0: must be >= 1"),
        (["--token-budget", "-5"], 2, "token_budget=-5: must be >= 1"),
        (["--out", "/dev/null/sub"], 2, "/dev/null/sub"),
    ],
)
def test_bad_input_and_os_errors_are_one_line(capsys, argv, code, needle, tiny_model_path):
    rc, _, err = cli(capsys, "probe", "ic-lke", "--model", str(tiny_model_path("gpt2")), "--no-track", *argv)
    lines = err.strip().splitlines()
    assert rc == code and len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], err


def test_a_dropped_relation_reason_is_not_prefixed_twice(capsys, tiny_model_path, tmp_path):
    rc, _, err = cli(
        capsys,
        "probe",
        "ic-lke",
        "--model",
        str(tiny_model_path("gpt2")),
        "--no-track",
        "--out",
        str(tmp_path / "o"),
        "--relations",
        "P30",
        "--choices",
        "100",
    )
    assert rc == 2 and "P30: P30" not in err and "largest supported is" in err, err


def test_skip_small_relations_probes_the_rest(capsys, tiny_model_path, tmp_path):
    rc, out, err = cli(
        capsys,
        "probe",
        "ic-lke",
        "--model",
        str(tiny_model_path("gpt2")),
        "--no-track",
        "--no-progress",
        "--out",
        str(tmp_path / "o"),
        "--relations",
        "P30,P36",
        "--choices",
        "100",
        "--skip-small-relations",
        "--examples",
        "3",
        "--max-facts-per-relation",
        "2",
        "--device",
        "cpu",
    )
    assert rc == 0, err
    m = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert list(m["per_relation"]) == ["P36"] and "P30" in m["dropped_relations"]
    assert m["distractor_pool_size"]["P30"] < 100 <= m["distractor_pool_size"]["P36"]
    json.loads((tmp_path / "o" / "metrics.json").read_text(), parse_constant=lambda c: pytest.fail(f"bare {c} in metrics.json"))


def test_debug_shows_the_traceback(capsys, tiny_model_path):
    with pytest.raises(Exception, match="token_budget=0"):
        main(["--debug", "probe", "ic-lke", "--model", str(tiny_model_path("gpt2")), "--no-track", "--token-budget", "0"])


# ------------------------------------------------------------------ item 13: SIGTERM
@pytest.mark.slow
@needs_data
def test_sigterm_keeps_the_checkpoint_and_marks_the_mlflow_run_killed(tmp_path, tiny_model_path):
    out = tmp_path / "o"
    env = {**os.environ}
    env.pop("MLFLOW_TRACKING_URI", None)
    cmd = [
        sys.executable,
        "-m",
        "factprobe.cli",
        "probe",
        "ic-lke",
        "--model",
        str(tiny_model_path("gpt2")),
        "--source",
        "lama",
        "--data",
        str(LAMA),
        "--relations",
        "P19,P20,P27,P101",
        "--choices",
        "50",
        "--examples",
        "20",
        "--out",
        str(out),
        "--tracking-uri",
        f"sqlite:///{tmp_path / 'mlruns.db'}",
        "--no-progress",
        "--device",
        "cpu",
    ]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while not (out / "checkpoint.jsonl").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, "the run finished before it could be terminated"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    kept = (out / "checkpoint.jsonl").read_text().splitlines()
    assert kept and all(json.loads(line)["key"] for line in kept)
    assert not (out / "results.jsonl").exists()
    from mlflow.tracking import MlflowClient

    c = MlflowClient(f"sqlite:///{tmp_path / 'mlruns.db'}")
    (run,) = c.search_runs([c.get_experiment_by_name("factprobe/probe").experiment_id])
    assert run.info.status == "KILLED"
