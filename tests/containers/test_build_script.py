"""scripts/build_images.sh (issue 13, item 3): tags with the package version and the git sha,
pushes to the registry given by a flag, and prints the settings the pipelines read. Checked with
--dry-run (no container engine on CI)."""

import re
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "build_images.sh"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize(
    "tool, build, push", [("docker", "docker build", "docker push"), ("buildah", "buildah bud", "buildah push")]
)
def test_dry_run_builds_tags_and_pushes_all_three_images(tool, build, push):
    p = run("--registry", "registry.example.com/ml/", "--tool", tool, "--dry-run")
    assert p.returncode == 0, p.stderr
    sha = subprocess.run(
        ["git", "-C", str(SCRIPT.parent), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    for kind in ("cpu", "gpu", "train"):
        ref = re.search(rf"registry\.example\.com/ml/factprobe-{kind}:0\.1\.0-{sha}(-dirty)?", p.stdout)
        assert ref, p.stdout
        assert f"+ {build} -f {SCRIPT.parents[1]}/containers/Dockerfile.{kind} -t {ref[0]}" in p.stdout
        assert f"+ {push} {ref[0]}" in p.stdout
        assert f"export FACTPROBE_IMAGE_{kind.upper()}={ref[0]}" in p.stdout


def test_no_push_and_one_image():
    p = run("--registry", "r.example.com", "--images", "gpu", "--no-push", "--dry-run")
    assert p.returncode == 0 and "push" not in p.stdout.replace("--no-push", "") and "factprobe-cpu" not in p.stdout
    assert "factprobe-train" not in p.stdout and "export FACTPROBE_IMAGE_GPU=" in p.stdout


def test_train_image_alone_prints_the_training_setting():
    """FACTPROBE_IMAGE_TRAIN is the setting the fine-tuning steps read (components/config.py)."""
    p = run("--registry", "r.example.com", "--images", "train", "--dry-run")
    assert p.returncode == 0, p.stderr
    assert re.search(r"docker build -f \S+/containers/Dockerfile\.train -t r\.example\.com/factprobe-train:0\.1\.0-", p.stdout)
    assert re.search(r"^export FACTPROBE_IMAGE_TRAIN=r\.example\.com/factprobe-train:0\.1\.0-\w+", p.stdout, re.MULTILINE)
    assert "factprobe-gpu" not in p.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "--registry is required"),
        (["--registry", "bad registry"], "is not a valid image repository prefix"),
        (["--registry", "r.example.com", "--tool", "podman"], "--tool must be docker or buildah"),
        (["--registry", "r.example.com", "--images", "tpu"], "--images takes cpu, gpu, train and/or minio"),
        (["--registry", "r.example.com", "--bogus"], "unknown argument '--bogus'"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(args, message):
    p = run(*args, "--dry-run")
    assert p.returncode == 2 and message in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_minio_is_built_from_its_dockerfile_and_tagged_with_its_release():
    """The tracking stack's MinIO (containers/Dockerfile.minio) is tagged with the MinIO release it
    builds, which is the tag the StatefulSet runs (k8s/base/minio/statefulset.yaml)."""
    p = run("--registry", "r.example.com", "--images", "minio", "--dry-run")
    assert p.returncode == 0, p.stderr
    dockerfile = SCRIPT.parents[1] / "containers" / "Dockerfile.minio"
    release = re.search(r"^ARG MINIO_RELEASE=(RELEASE\.\S+)$", dockerfile.read_text(), re.MULTILINE)[1]
    assert f"docker build -f {dockerfile} -t r.example.com/minio:{release} {SCRIPT.parents[1]}/containers" in p.stdout
    assert f"kustomize edit set image ghcr.io/factprobe/minio=r.example.com/minio:{release}" in p.stdout
    sts = (SCRIPT.parents[1] / "k8s" / "base" / "minio" / "statefulset.yaml").read_text()
    assert f"image: ghcr.io/factprobe/minio:{release}" in sts
