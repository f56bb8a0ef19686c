"""A failed local pipeline run ends with one plain line: the failed step, the first line of its
error and the path of its own log (pipelines/local_run.py `run_local`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from factprobe_ops.pipelines.local_run import failure_report, first_error_line, step_logs

ANSI = re.compile(r"\x1b\[")
CYAN, RED, GREEN, RESET = "\x1b[96m", "\x1b[91m", "\x1b[92m", "\x1b[0m"


def _kfp_log(*steps: tuple[str, str, list[str]]) -> str:
    """A log shaped like kfp 2.17's SubprocessRunner output (colours, 4-space indented output)."""
    out = [f"11:21:37.297 - INFO - Running pipeline: \x1b[95m'factprobe-probe'{RESET}", "-" * 80]
    for name, status, lines in steps:
        colour = GREEN if status == "SUCCESS" else RED
        level = "INFO" if status == "SUCCESS" else "ERROR"
        out += [f"11:21:37.301 - INFO - Executing task {CYAN}'{name}'{RESET}", "11:21:37.301 - INFO - Streamed logs:", ""]
        out += [f"    {line}" for line in lines] + ["    ", ""]
        out += [f"11:21:37.560 - {level} - Task {CYAN}'{name}'{RESET} finished with status {colour}{status}{RESET}", "-" * 80]
    return "\n".join(out) + "\n"


TRACEBACK = [
    "[KFP Executor 2026-11-23 11:21:37,346 INFO]: Looking for component `data_build`",
    "Traceback (most recent call last):",
    '  File "/work/main/components/steps/data_build.py", line 22, in run_data_build',
    "    raise ConfigError(",
    "factprobe.errors.ConfigError: unknown relation(s) P999 in countryinfo; known: P30, P36",
]


def test_step_logs_split_the_run_by_task():
    steps = step_logs(_kfp_log(("start-run", "SUCCESS", ["ok"]), ("data-build", "FAILURE", TRACEBACK)))
    assert [(name, status) for name, status, _ in steps] == [("start-run", "SUCCESS"), ("data-build", "FAILURE")]
    assert steps[1][2][1] == "Traceback (most recent call last):"
    assert not any(ANSI.search(line) for _, _, lines in steps for line in lines)


@pytest.mark.parametrize(
    "lines, expected",
    [
        (TRACEBACK, "ConfigError: unknown relation(s) P999 in countryinfo; known: P30, P36"),
        (
            [
                "loading",
                "error: data/x.csv: not UTF-8 text: byte 0xff at offset 3 (line 1)",
                "Traceback (most recent call last):",
                "SystemExit: 2",
            ],
            "data/x.csv: not UTF-8 text: byte 0xff at offset 3 (line 1)",
        ),
        (
            [
                "Traceback (most recent call last):",
                '  File "x.py", line 1',
                "KeyError: 'models'",
                "",
                "During handling of the above exception, another exception occurred:",
                "",
                "Traceback (most recent call last):",
                '  File "y.py", line 2',
                "ValueError: models.yaml does not parse",
            ],
            "ValueError: models.yaml does not parse",
        ),
        (
            ["[KFP Executor 2026 INFO]: Got executor_input:", "regression gate failed: acc dropped 0.05 > 0.02"],
            "regression gate failed: acc dropped 0.05 > 0.02",
        ),
        ([], "no output"),
        # a step that ran beside another (a ParallelFor's iterations run at once locally): deeper indent
        (
            [
                "        [KFP Executor 2026 INFO]: Got executor_input:",
                "        Traceback (most recent call last):",
                '          File "/work/main/factprobe/models/hub.py", line 138, in _resolve_hub',
                "        factprobe.errors.ModelError: unknown model 'no-such-model'",
            ],
            "ModelError: unknown model 'no-such-model'",
        ),
    ],
)
def test_first_error_line(lines, expected):
    assert first_error_line(lines) == expected


def test_failure_report_names_the_first_failed_step_and_writes_its_log(tmp_path):
    log = tmp_path / "logs" / "probe-1.log"
    log.parent.mkdir()
    log.write_text(
        _kfp_log(
            ("start-run", "SUCCESS", ["ok"]),
            ("plan-matrix", "FAILURE", TRACEBACK),
            ("data-build", "FAILURE", ["Traceback (most recent call last):", "ImportError: boom"]),
        )
    )
    error = RuntimeError(
        f"Pipeline 'p' finished with status {RED}FAILURE{RESET}. Inner task failed: "
        f"{CYAN}'plan-matrix'{RESET} inside {CYAN}'exit-handler-1'{RESET}."
    )
    line = failure_report(log, error)
    step_log = tmp_path / "logs" / "probe-1.plan-matrix.log"
    assert line == (
        f"step 'plan-matrix' failed: ConfigError: unknown relation(s) P999 in countryinfo; known: P30, P36 "
        f"(also failed: data-build); full log: {step_log}"
    )
    assert step_log.read_text().splitlines()[-1].startswith("factprobe.errors.ConfigError")
    # without a usable log: the task kfp names, ANSI codes stripped
    empty = tmp_path / "logs" / "none.log"
    empty.write_text("")
    assert failure_report(empty, error).startswith("step 'plan-matrix' failed: Pipeline 'p' finished with status FAILURE.")


@pytest.mark.pipeline
def test_failed_local_run_ends_with_the_step_and_its_error(tmp_path):
    """A real local run of the probe pipeline with an unknown relation: data-build fails (before
    any model is loaded). The last line names the step and its error; every MLflow run it started
    ends, the parent FAILED."""
    from mlflow.tracking import MlflowClient

    env = {**os.environ, "FACTPROBE_WORK": str(tmp_path / "work")}
    env.pop("MLFLOW_TRACKING_URI", None)
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "factprobe.cli",
            "pipeline",
            "run",
            "probe",
            "--param",
            'models=["smollm2-135m-instruct"]',
            "--param",
            "relations=P999",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    last = p.stderr.strip().splitlines()[-1]
    assert not ANSI.search(last), last
    m = re.fullmatch(
        r"error: step 'data-build' failed: ConfigError: unknown relation\(s\) P999 in \S+; known: .*P36.*; "
        r"full log: (?P<log>\S+\.data-build\.log)",
        last,
    )
    assert m, last
    step_log = Path(m["log"])
    assert step_log.is_file() and step_log.is_relative_to(tmp_path / "build" / "kfp-local" / "logs")
    assert "Traceback (most recent call last):" in step_log.read_text()
    run_log = step_log.with_name(step_log.name.replace(".data-build.log", ".log"))
    assert "Executing task 'data-build'" in re.sub(r"\x1b\[[0-9;]*m", "", run_log.read_text())  # the whole run's log
    c = MlflowClient(f"sqlite:///{tmp_path / 'mlruns.db'}")
    all_runs = c.search_runs([c.get_experiment_by_name("factprobe/probe").experiment_id])
    assert all_runs and all(r.info.status != "RUNNING" for r in all_runs)
    (parent,) = [r for r in all_runs if r.data.tags.get("factprobe.role") == "parent"]
    assert parent.info.status == "FAILED"


def test_compact_run_log_prints_one_line_per_step_start_and_end(tmp_path):
    """`factprobe pipeline run` without --verbose: the terminal gets a start and an end line per
    step (name, status, seconds, the step's headline); the log file keeps everything."""
    import io

    from factprobe_ops.pipelines.local_run import _RunLog

    text = _kfp_log(
        ("start-run", "SUCCESS", ["[KFP Executor 2026] INFO: " + "x" * 300]),
        ("probe-model", "SUCCESS", ['{"executor": "json"}', "headline: qa smollm2: em 0.533 over 15 items"]),
        ("report", "FAILURE", TRACEBACK),
    )
    terminal = io.StringIO()
    log = _RunLog(terminal, tmp_path / "logs" / "run.log", verbose=False)
    for i in range(0, len(text), 37):  # kfp writes in arbitrary pieces
        log.write(text[i : i + 37])
    log.close_log()
    lines = terminal.getvalue().splitlines()
    assert [line.split()[:2] for line in lines] == [
        ["start-run", "started"],
        ["start-run", "SUCCESS"],
        ["probe-model", "started"],
        ["probe-model", "SUCCESS"],
        ["report", "started"],
        ["report", "FAILURE"],
    ]
    assert re.fullmatch(r"\s+probe-model\s+SUCCESS\s+\d+\.\d s  qa smollm2: em 0\.533 over 15 items", lines[3])
    assert not ANSI.search(terminal.getvalue())
    assert log.path.read_text() == text  # the file has every byte


def test_verbose_run_log_passes_everything_through(tmp_path):
    import io

    from factprobe_ops.pipelines.local_run import _RunLog

    text = _kfp_log(("start-run", "SUCCESS", ["ok"]))
    terminal = io.StringIO()
    log = _RunLog(terminal, tmp_path / "run.log", verbose=True)
    log.write(text)
    log.close_log()
    assert terminal.getvalue() == text == log.path.read_text()
