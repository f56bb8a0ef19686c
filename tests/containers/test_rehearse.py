"""`make rehearse` (scripts/rehearse.py, scripts/rehearse_env.py; issue 38 item 2): the one-line refusals and the
reading of a run's log, without podman. The rehearsal itself runs real images (minutes): k8s/README.md, "Rehearsal
on one machine", has its command and times."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def load(name: str):
    if str(REPO / "scripts") not in sys.path:
        sys.path.insert(0, str(REPO / "scripts"))
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kfp_log(*steps: tuple[str, str, str, list[str]]) -> str:
    """A local run's log as kfp's DockerRunner writes it: (step, status, image, output lines)."""
    out = []
    for name, status, image, lines in steps:
        out.append(f"07:32:01.269 - INFO - Executing task \x1b[96m'{name}'\x1b[0m")
        out.append("07:32:01.270 - INFO - Streamed logs:")
        out.append("")
        if image:
            out.append(f"    Found image '{image}'")
        out += [f"    {line}" for line in lines]
        out.append(f"07:32:14.809 - INFO - Task \x1b[96m'{name}'\x1b[0m finished with status \x1b[92m{status}\x1b[0m")
    return "\n".join(out) + "\n"


CPU, GPU = "localhost/factprobe-cpu:0.1.0-aaa", "localhost/factprobe-gpu:0.1.0-bbb"


@pytest.mark.slow  # imports the pipeline layer (~2 s)
def test_a_missing_module_names_the_step_the_image_and_the_module():
    rehearse = load("rehearse")
    log = kfp_log(
        ("data-build", "SUCCESS", CPU, ["built 4 items"]),
        (
            "probe-model",
            "FAILURE",
            GPU,
            [
                "Traceback (most recent call last):",
                '  File "<string>", line 3',
                "ModuleNotFoundError: No module named 'peft.tuners'",
            ],
        ),
    )
    assert rehearse.failed_step_line(log) == f"step 'probe-model' (image {GPU}) lacks module 'peft.tuners'"
    other = kfp_log(
        ("report", "FAILURE", CPU, ["Traceback (most recent call last):", "TypeError: f() got an unexpected keyword"])
    )
    assert rehearse.failed_step_line(other) == f"step 'report' (image {CPU}) failed: TypeError: f() got an unexpected keyword"
    assert rehearse.failed_step_line(kfp_log(("report", "SUCCESS", CPU, []))) is None


def test_every_step_must_run_in_an_image_and_probe_steps_in_the_gpu_image():
    rehearse = load("rehearse")
    log = kfp_log(("start-run", "SUCCESS", CPU, []), ("probe-model", "SUCCESS", CPU, []), ("report", "SUCCESS", "", []))
    ran = rehearse.step_images(log)
    assert ran == {"start-run": CPU, "probe-model": CPU, "report": ""}
    failures = rehearse.image_failures(ran, {"cpu": CPU, "gpu": GPU})
    assert failures == ["step 'report' ran in no image", f"step 'probe-model' ran in {CPU}, not the GPU image {GPU}"]
    assert rehearse.image_failures({"start-run": CPU, "probe-model": GPU}, {"cpu": CPU, "gpu": GPU}) == []


@pytest.mark.parametrize(
    ("others", "expected"),
    [
        ([], "image localhost/factprobe-gpu:0.1.0-new is missing: run `make images`"),
        (
            ["localhost/factprobe-gpu:0.1.0-old"],
            "image localhost/factprobe-gpu:0.1.0-new is stale (localhost/factprobe-gpu:0.1.0-old was built from older "
            "sources): run `make images`",
        ),
    ],
)
def test_a_missing_or_stale_image_is_one_line_naming_it_and_make_images(monkeypatch, others, expected):
    env = load("rehearse_env")
    monkeypatch.setattr(
        env, "wanted_tags", lambda kinds: {"cpu": "localhost/factprobe-cpu:0.1.0-new", "gpu": "localhost/factprobe-gpu:0.1.0-new"}
    )
    present = {"localhost/factprobe-cpu:0.1.0-new"}

    class Done:
        def __init__(self, rc):
            self.returncode = rc

    monkeypatch.setattr(env, "podman", lambda *a, **k: Done(0 if a[-1] in present else 1))
    monkeypatch.setattr(env, "existing_tags", lambda kind: others if kind == "gpu" else [])
    with pytest.raises(env.ImageError) as e:
        env.current_images(["cpu", "gpu"])
    assert str(e.value) == expected
    if others:  # --allow-stale runs the newest older image, with a warning
        assert env.current_images(["cpu", "gpu"], allow_stale=True)["gpu"] == others[0]


@pytest.mark.slow  # hashes the build context (seconds; more on a busy machine)
def test_the_current_tags_come_from_the_build_scripts_dry_run():
    """The tags the rehearsal asks for are the ones `make images` gives the current sources (one source of truth)."""
    env = load("rehearse_env")
    tags = env.wanted_tags(["cpu", "gpu"])
    assert set(tags) == {"cpu", "gpu"}
    assert tags["cpu"].startswith("localhost/factprobe-cpu:") and tags["gpu"].startswith("localhost/factprobe-gpu:")


def test_without_podman_or_root_one_line_says_what_to_do(monkeypatch):
    env = load("rehearse_env")
    monkeypatch.setattr(env.shutil, "which", lambda tool: None if tool == "runc" else f"/usr/bin/{tool}")
    with pytest.raises(
        env.RehearsalError, match=r"^runc not installed: `apt-get install -y --no-install-recommends podman runc`"
    ):
        env.preflight()
    monkeypatch.setattr(env.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(env.os, "geteuid", lambda: 1000)
    with pytest.raises(env.RehearsalError, match=r"run `sudo make rehearse`"):
        env.preflight()


def test_train_data_is_the_same_folder_under_each_data_root():
    rehearse = load("rehearse")
    steps, laptop = rehearse.train_pairs(True, "/mnt/factprobe/data"), rehearse.train_pairs(True, "/work/shared/data")
    assert steps == ["train_data=/mnt/factprobe/data/lpaqa/trex_train"]
    assert laptop == ["train_data=/work/shared/data/lpaqa/trex_train"] and rehearse.train_pairs(False, "/x") == []
    pairs = rehearse.run_pairs("probe", ["smollm2-135m-instruct"], steps)
    assert pairs[-1] == steps[0] and rehearse.parse_args(["--train-data"]).train_data


@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="hands the claim to UID 1000 (chown): root only")
def test_the_volume_holds_the_data_root_where_the_steps_read_it(tmp_path):
    from factprobe_ops.pipelines.platform import STORAGE_ENV

    env = load("rehearse_env")
    data = tmp_path / "shared-data"
    (data / "lpaqa" / "trex_train").mkdir(parents=True)
    (data / "lpaqa" / "trex_train" / "P36.jsonl").write_text("{}\n")
    volume = tmp_path / "volume"
    (volume / "work" / "old").mkdir(parents=True)
    copied = env.prepare_volume(volume, [], data, fresh_work=False)
    target = volume / STORAGE_ENV["FACTPROBE_DATA"]
    assert (target / "lpaqa" / "trex_train" / "P36.jsonl").read_text() == "{}\n" and "data" in copied
    assert (volume / "work" / "old").is_dir() and target.stat().st_uid == env.STEP_UID  # kept for a resume
    (data / "lpaqa" / "trex_train" / "P36.jsonl").unlink()
    env.prepare_volume(volume, [], data)  # a second copy replaces the first; a fresh work folder
    assert not (target / "lpaqa" / "trex_train" / "P36.jsonl").exists() and not (volume / "work" / "old").exists()


class _Run:
    def __init__(self, status: str, metrics: dict | None = None):
        from types import SimpleNamespace

        self.info = SimpleNamespace(status=status, start_time=int(__import__("time").time() * 1000), run_id=status)
        self.data = SimpleNamespace(tags={"factprobe.step": "probe"}, metrics=metrics or {})


class _Mlflow:
    def __init__(self):
        self.runs: list[_Run] = []

    def get_experiment_by_name(self, name):
        from types import SimpleNamespace

        return SimpleNamespace(experiment_id="1")

    def search_runs(self, ids, max_results):
        return list(self.runs)


class _Container:
    name = "probe-step"

    def __init__(self, killed):
        self.killed = killed

    def exec_run(self, cmd):
        from types import SimpleNamespace

        if "kill -TERM -1" in cmd[-1]:
            self.killed.set()
        return SimpleNamespace(exit_code=0, output=b"1 sh -ec ...\n6 python3 -m kfp.dsl.executor_main\n")


@pytest.mark.parametrize("exit_code, said", [(1, True), (137, False), (0, True)])
def test_kill_check_signals_at_the_first_checkpoint_then_checks_killed_and_resumed(tmp_path, exit_code, said):
    import threading
    from types import SimpleNamespace

    kill = load("rehearse_kill")
    killed, mlflow = threading.Event(), _Mlflow()
    calls = []

    def run_pipeline():
        calls.append(1)
        if len(calls) == 1:  # the first run: a checkpoint row, then the step waits for its signal
            folder = tmp_path / "work" / "probe" / "key"
            folder.mkdir(parents=True)
            (folder / "checkpoint.jsonl").write_text('{"row": 1}\n')
            assert killed.wait(30)
            kill.EXIT_CODES.append((GPU, exit_code))
            mlflow.runs.append(_Run("KILLED"))
            (tmp_path / "first.log").write_text("factprobe.signals.Terminated: received signal SIGTERM\n" if said else "Killed\n")
            return False, 1.0, tmp_path / "first.log"
        mlflow.runs.append(_Run("FINISHED", {"n_resumed": 3.0, "accuracy": 0.5}))
        return True, 2.0, tmp_path / "rerun.log"

    container = _Container(killed)
    container.image, container.attrs = SimpleNamespace(tags=[GPU]), {}
    docker = SimpleNamespace(containers=SimpleNamespace(list=lambda: [container]))
    failures, measured = kill.kill_check(run_pipeline, mlflow, docker, GPU, tmp_path / "work", "factprobe/probe", {})
    assert killed.is_set() and len(calls) == 2, failures
    assert measured["killed_status"] == ["KILLED"], failures
    assert measured["n_resumed"] == 3.0 and measured["accuracy"] == 0.5
    if exit_code == 1:  # kfp's executor_main lets factprobe.signals.Terminated out
        assert failures == []
    elif exit_code == 0:
        assert failures == ["kill check: the probe container exited [0]: it was not stopped"]
    else:  # the container was SIGKILLed: no Python step saw the signal
        assert failures == [
            f"kill check: no step says 'received signal SIGTERM': SIGTERM reached no Python step (log {tmp_path / 'first.log'})"
        ]


@pytest.mark.slow  # imports the pipeline layer and the integration stack (~3 s)
def test_if_ready_skips_in_one_line_where_the_rehearsal_cannot_run(monkeypatch, capsys, tmp_path):
    """.ci/run calls `rehearse.py --if-ready` after `make test`: without podman, root or a current image it says
    why and exits 0; without --if-ready the same is the one-line error, exit 2."""
    rehearse = load("rehearse")

    def no_podman():
        raise rehearse.RehearsalError("podman not installed: `apt-get install -y --no-install-recommends podman runc`")

    monkeypatch.setattr(rehearse, "preflight", no_podman)
    assert rehearse.main(["--if-ready", "--root", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == (
        "rehearsal skipped (--if-ready): podman not installed: `apt-get install -y --no-install-recommends podman runc`"
    )
    assert rehearse.main(["--root", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().startswith("error: podman not installed")
