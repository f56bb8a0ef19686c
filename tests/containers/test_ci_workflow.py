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
    assert "pip install -c constraints.txt -e ." in install["run"]
    cache = next(s for s in steps() if s.get("uses", "").startswith("actions/cache@"))
    assert cache["with"]["path"] == "${{ env.FACTPROBE_CACHE }}"
    assert load()["jobs"]["regress"]["env"]["FACTPROBE_CACHE"]


def test_runs_factprobe_regress_and_fails_on_exit_1():
    step = next(s for s in steps() if "factprobe regress" in s.get("run", ""))
    run = step["run"]
    for flag in ("--candidate", "--baseline", "--max-drop 0.02", "--tracking-uri", "--report"):
        assert flag in run
    assert step["env"]["CANDIDATE"] == "${{ inputs.candidate || 'path/to/candidate' }}"
    assert step["env"]["BASELINE_RUN"] == "${{ vars.FACTPROBE_BASELINE_RUN }}"
    # a non-zero exit fails the job: nothing may swallow it
    assert "continue-on-error" not in step and "|| true" not in run and "set +e" not in run
    # user-controlled values go through env, never pasted into the script
    assert not re.search(r"\$\{\{\s*(inputs|github\.event)", run)


def test_credentials_come_from_secrets_and_report_is_uploaded():
    env = load()["jobs"]["regress"]["env"]
    for var in ("MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        assert env[var] == f"${{{{ secrets.{var} }}}}"
    upload = next(s for s in steps() if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()"
    assert upload["with"]["path"].startswith("regression-report")
