"""Progress lines of GPU steps (components/steps/progress.py) and how `factprobe pipeline run`
shows them under the step (pipelines/local_run.py `_RunLog`)."""

import io

from factprobe_ops.components.steps.progress import PROGRESS_PREFIX, ProgressLog


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_one_line_per_interval_and_always_the_last():
    out, clock = io.StringIO(), Clock()
    log = ProgressLog("ic-lke gemma-3-270m", every_s=30, stream=out, clock=clock)
    log(10, 100)  # first batch: printed, no rate yet
    clock.t = 110
    log(20, 100)  # 10 s later: not due
    clock.t = 131
    log(40, 100)  # 31 s after the first line: 30 rows in 31 s
    clock.t = 140
    log(100, 100)  # the end is always printed
    lines = out.getvalue().splitlines()
    assert lines == [
        "progress: ic-lke gemma-3-270m: 10/100 rows (10%)",
        "progress: ic-lke gemma-3-270m: 40/100 rows (40%), 1.0 rows/s, about 62 s left",
        "progress: ic-lke gemma-3-270m: 100/100 rows (100%), 2.2 rows/s",
    ]
    assert all(line.startswith(PROGRESS_PREFIX) for line in lines)


def test_pipeline_run_summary_shows_progress_under_the_running_step(tmp_path):
    from factprobe_ops.pipelines.local_run import _RunLog

    term = io.StringIO()
    log = _RunLog(term, tmp_path / "run.log", verbose=False)
    log.write("Executing task 'probe-model'\n")
    log.write("    progress: ic-lke smollm2: 5/10 rows (50%), 2.0 rows/s, about 2 s left\n")
    log.write('    [KFP Executor 2026] {"json": 1}\n')  # executor chatter stays in the log file only
    log.write("Task 'probe-model' finished with status SUCCESS\n")
    log.close_log()
    shown = term.getvalue().splitlines()
    assert shown[0].split() == ["probe-model", "started"]
    assert shown[1].strip() == "ic-lke smollm2: 5/10 rows (50%), 2.0 rows/s, about 2 s left"
    assert shown[2].split()[:2] == ["probe-model", "SUCCESS"] and len(shown) == 3
    assert "KFP Executor" in (tmp_path / "run.log").read_text()
