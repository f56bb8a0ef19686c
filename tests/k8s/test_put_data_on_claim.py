"""scripts/put_data_on_claim.sh, the one command that puts the research data on the claim (issue 38 item 3),
run against a stand-in `kubectl` that records its calls and runs `exec` commands here, with the claim's mount
path pointing at a temporary folder: the data lands at <mount>/data (the FACTPROBE_DATA the steps get,
pipelines/platform.py STORAGE_ENV), byte for byte, in a pod that mounts the claim the steps mount, which is
deleted afterwards; a second run replaces the data; a folder that is no data root is one error line."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "put_data_on_claim.sh"
FAKE_KUBECTL = """#!/usr/bin/env bash
printf '%s\\n' "$*" >> "$KUBECTL_LOG"
if [[ $1 == -n ]]; then shift 2; fi
case $1 in
  run) for a in "$@"; do [[ $a == --overrides=* ]] && printf '%s' "${a#--overrides=}" > "$KUBECTL_LOG.overrides"; done ;;
  exec) while [[ $1 != -- ]]; do shift; done; shift; exec "$@" ;;
esac
"""


@pytest.fixture
def kubectl(tmp_path: Path) -> dict[str, str]:
    fake = tmp_path / "kubectl"
    fake.write_text(FAKE_KUBECTL)
    fake.chmod(0o755)
    return {"KUBECTL": str(fake), "KUBECTL_LOG": str(tmp_path / "kubectl.log")}


def data_root(tmp_path: Path, text: str) -> Path:
    root = tmp_path / "shared-data"
    (root / "lama" / "trex").mkdir(parents=True, exist_ok=True)
    (root / "lpaqa" / "trex_train").mkdir(parents=True, exist_ok=True)
    (root / "lama" / "trex" / "P36.jsonl").write_text(text)
    (root / "lpaqa" / "trex_train" / "P36.jsonl").write_text(text * 2)
    return root


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], env={**os.environ, **env}, capture_output=True, text=True, timeout=60)


def test_the_data_lands_where_the_steps_read_it(tmp_path, kubectl):
    from factprobe_ops.components.config import cluster_config
    from factprobe_ops.pipelines.platform import STORAGE_ENV

    mount = tmp_path / "claim"
    mount.mkdir()
    source = data_root(tmp_path, '{"sub_label": "France"}\n')
    out = run([str(source)], {**kubectl, "FACTPROBE_PVC_MOUNT": str(mount)})
    assert out.returncode == 0, out.stderr
    target = mount / STORAGE_ENV["FACTPROBE_DATA"]
    assert (target / "lama" / "trex" / "P36.jsonl").read_text() == '{"sub_label": "France"}\n'
    assert (target / "lpaqa" / "trex_train" / "P36.jsonl").read_text() == '{"sub_label": "France"}\n' * 2
    assert f"{target}: 2 files" in out.stdout and not (mount / "data.partial").exists()
    spec = json.loads(Path(kubectl["KUBECTL_LOG"] + ".overrides").read_text())["spec"]
    assert spec["volumes"][0]["persistentVolumeClaim"]["claimName"] == cluster_config().pvc_name
    assert spec["containers"][0]["volumeMounts"][0]["mountPath"] == str(mount)
    assert spec["securityContext"]["runAsUser"] == 1000 and spec["securityContext"]["runAsNonRoot"] is True
    calls = Path(kubectl["KUBECTL_LOG"]).read_text().splitlines()
    assert calls[0].startswith("-n kubeflow run factprobe-data-copy") and calls[-1].startswith("-n kubeflow delete pod")

    # a second run replaces the data with the folder's current content
    (source / "lpaqa" / "trex_train" / "P36.jsonl").unlink()
    (source / "lama" / "trex" / "P36.jsonl").write_text("new\n")
    assert run([str(source)], {**kubectl, "FACTPROBE_PVC_MOUNT": str(mount)}).returncode == 0
    assert (target / "lama" / "trex" / "P36.jsonl").read_text() == "new\n"
    assert not (target / "lpaqa" / "trex_train" / "P36.jsonl").exists()


def test_a_folder_without_lama_is_one_error_line_and_no_pod(tmp_path, kubectl):
    out = run([str(tmp_path)], kubectl)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "is not a data root" in out.stderr
    assert not Path(kubectl["KUBECTL_LOG"]).exists()
