""".github/workflows/regression-eval.yml: the documented example of the CI regression gate is
valid YAML with the shape GitHub Actions expects, and runs the command the docs promise."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / ".github" / "workflows" / "regression-eval.yml"


def load() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def steps() -> list[dict]:
    return load()["jobs"]["regress"]["steps"]


def test_workflow_is_valid_yaml_with_triggers():
    wf = load()
    # PyYAML (YAML 1.1) reads the bare key `on` as True
    triggers = wf.get("on", wf.get(True))
    assert set(triggers) == {"pull_request", "workflow_dispatch"}
    assert triggers["pull_request"]["paths"], "the gate runs only when model files change"
    assert "candidate" in triggers["workflow_dispatch"]["inputs"]
    assert wf["permissions"] == {"contents": "read"}
    job = wf["jobs"]["regress"]
    assert job["runs-on"] and job["timeout-minutes"] > 0


def test_sets_up_python_311_and_installs_with_constraints():
    setup = next(s for s in steps() if s.get("uses", "").startswith("actions/setup-python@"))
    assert str(setup["with"]["python-version"]) == "3.11"
    install = next(s for s in steps() if "pip install" in s.get("run", ""))
    extras = re.search(r"pip install -c constraints.txt -e '\.\[([^\]]*)\]'", install["run"])
    assert extras and {"tracking", "adapters"} <= set(extras.group(1).split(",")), install["run"]  # regress: MLflow, PEFT
    cache = next(s for s in steps() if s.get("uses", "").startswith("actions/cache@"))
    assert cache["with"]["path"] == "${{ env.FACTPROBE_CACHE }}"
    assert load()["jobs"]["regress"]["env"]["FACTPROBE_CACHE"]


def test_runs_factprobe_regress_and_fails_on_exit_1():
    step = next(s for s in steps() if "factprobe regress" in s.get("run", ""))
    run = step["run"]
    for flag in ("--candidate", "--baseline", "--max-drop 0.02", "--tracking-uri", "--report", "--base-model"):
        assert flag in run
    find = next(s for s in steps() if "ci_candidates.sh" in s.get("run", ""))
    assert find["env"]["CANDIDATE"] == "${{ inputs.candidate || 'path/to/candidate' }}"
    assert step["env"]["BASELINE_RUN"] == "${{ vars.FACTPROBE_BASELINE_RUN }}"
    assert step["env"]["BASE_MODEL"] == "${{ inputs.base_model }}"
    # a non-zero exit fails the job: nothing may swallow it (each candidate's code is kept, the last
    # non-zero one is the step's exit code)
    assert "continue-on-error" not in step and "|| true" not in run and "set +e" not in run
    assert "|| code=$?" in run and "status=$code" in run and run.rstrip().endswith('exit "$status"')
    # user-controlled values go through env, never pasted into a script
    for s in (step, find):
        assert not re.search(r"\$\{\{\s*(inputs|github\.event)", s["run"])


def _bash_exit_code_of_the_gate_loop(tmp_path, codes: list[int]) -> int:
    """Run the workflow step's script with `factprobe` replaced by a stub exiting with `codes` in turn."""
    import os
    import subprocess

    step = next(s for s in steps() if "factprobe regress" in s.get("run", ""))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    (tmp_path / "codes").write_text("\n".join(map(str, codes)) + "\n")
    stub = bin_dir / "factprobe"
    stub.write_text(
        f"#!/usr/bin/env bash\ncode=$(head -1 {tmp_path}/codes); sed -i 1d {tmp_path}/codes; "
        f'echo "$@" >> {tmp_path}/calls; exit $code\n'
    )
    stub.chmod(0o755)
    (tmp_path / "regression-report").mkdir()
    (tmp_path / "regression-report" / "candidates.txt").write_text("".join(f"models/c{i}\n" for i in range(len(codes))))
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "BASELINE_RUN": "abc123",
        "BASE_MODEL": "",
        "MLFLOW_TRACKING_URI": "http://mlflow.example",
    }
    p = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    return p.returncode


def test_gate_loop_fails_when_any_candidate_fails(tmp_path):
    assert _bash_exit_code_of_the_gate_loop(tmp_path / "a", [0, 0]) == 0
    assert _bash_exit_code_of_the_gate_loop(tmp_path / "b", [0, 1, 0]) == 1
    assert _bash_exit_code_of_the_gate_loop(tmp_path / "c", [2]) == 2
    calls = (tmp_path / "b" / "calls").read_text().splitlines()
    assert len(calls) == 3 and calls[1].startswith("regress --candidate models/c1 --baseline abc123")
    assert "--base-model" not in calls[1]  # empty BASE_MODEL: the adapter's own base model


def test_ci_candidates_finds_changed_adapter_and_model_folders(tmp_path):
    """scripts/ci_candidates.sh in a throwaway repository: a changed adapter file and a changed model
    weight file name their folders; a README change names nothing."""
    import subprocess

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True, text=True)

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    (tmp_path / "README.md").write_text("x")
    adapter = tmp_path / "adapters" / "known-facts-lora"
    (adapter / "sub").mkdir(parents=True)
    (adapter / "adapter_config.json").write_text("{}")
    (tmp_path / "models" / "my-llama").mkdir(parents=True)
    (tmp_path / "models" / "my-llama" / "config.json").write_text("{}")
    git("add", "-A")
    git("commit", "-qm", "base")
    (adapter / "adapter_model.safetensors").write_bytes(b"w")
    (adapter / "sub" / "notes.txt").write_text("n")
    (tmp_path / "models" / "my-llama" / "model.safetensors").write_bytes(b"w")
    (tmp_path / "README.md").write_text("y")
    git("add", "-A")
    git("commit", "-qm", "change")
    script = REPO / "scripts" / "ci_candidates.sh"
    out = subprocess.run(["bash", str(script), "HEAD~1", "HEAD"], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["adapters/known-facts-lora", "models/my-llama"]
    (tmp_path / "README.md").write_text("z")
    git("commit", "-qam", "docs only")
    only_readme = subprocess.run(["bash", str(script), "HEAD~1"], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert only_readme.stdout == ""


def test_credentials_come_from_secrets_and_report_is_uploaded():
    env = load()["jobs"]["regress"]["env"]
    for var in ("MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        assert env[var] == f"${{{{ secrets.{var} }}}}"
    upload = next(s for s in steps() if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()"
    assert upload["with"]["path"].startswith("regression-report")
