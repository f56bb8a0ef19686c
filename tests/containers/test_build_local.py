"""`make images` = scripts/build_images.sh --local (scripts/build_images_local.sh; issue 38 item 1): the three images
built here with podman from the registry build's Dockerfiles, changed only through build arguments (a local
base, the CPU torch wheel from pip's find-links folder), tagged by a digest of the build context; and the one-line
refusals on a machine without podman or without root. Checked with --dry-run and stand-in tools: a real build
takes minutes (containers/README.md, "Local builds"), too slow for the suite."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "build_images.sh"
PIN = re.search(r"^torch==(\S+)$", (REPO / "constraints.txt").read_text(), re.MULTILINE)[1]
INSTALL = "apt-get install -y --no-install-recommends podman runc debootstrap"


def run(*args: str, env: dict[str, str] | None = None, script: Path = SCRIPT) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(script), *args], capture_output=True, text=True, timeout=60, check=False, env=env or os.environ.copy()
    )


def pip_env(find_links: Path) -> dict[str, str]:
    """pip's configuration reduced to one find-links folder (PIP_CONFIG_FILE=/dev/null: no config file is read)."""
    return {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": str(find_links)}


def builds(stdout: str) -> dict[str, str]:
    """kind -> the printed `podman ... build` command line."""
    found = {}
    for line in stdout.splitlines():
        if "--target deps" in line:
            continue
        if m := re.match(r"\+ podman --runtime runc build .* -f \S+/containers/Dockerfile\.(\w+) ", line):
            found[m[1]] = line
    return found


def test_local_dry_run_builds_the_three_images_on_the_local_base_with_the_cpu_wheel(tmp_path):
    (tmp_path / f"torch-{PIN}+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").touch()
    p = run("--local", "--dry-run", env=pip_env(tmp_path))
    assert p.returncode == 0, p.stderr
    assert f"+ export CONTAINERS_CONF={REPO}/containers/podman/containers.conf" in p.stdout
    cmds = builds(p.stdout)
    assert sorted(cmds) == ["cpu", "gpu", "train"], p.stdout
    for kind, cmd in cmds.items():
        # the deps stage first, tagged so that `podman image prune` keeps the dependency layers (the build cache)
        deps = cmd.replace(re.search(r" -t \S+ --label \S+", cmd)[0], f" --target deps -t localhost/factprobe-cache:{kind}-deps")
        assert p.stdout.index(deps) < p.stdout.index(cmd), p.stdout
        ref = re.search(rf" -t (localhost/factprobe-{kind}:0\.1\.0-([0-9a-f]{{12}})) ", cmd)
        assert ref, cmd
        assert f"--label io.factprobe.source-digest={ref[2]}" in cmd
        for part in (
            "--network host",
            "--pull=never",
            "--build-arg BASE_IMAGE=localhost/factprobe-base:bookworm",
            f"-v {tmp_path}:/opt/torch-wheels:ro",  # the wheel folder, read-only
            "--build-arg TORCH_FIND_LINKS=/opt/torch-wheels",
            "--build-arg TORCH_INDEX_URL=https://pypi.org/simple",  # torch's dependencies only: torch is installed
            "-v /var/tmp/factprobe-build-pip.XXXXXX:/etc/xdg/pip:ro",  # a pip.conf with the host's CA bundle as cert
        ):
            assert part in cmd, (part, cmd)
        assert cmd.endswith(f" {REPO}")
        assert ("--build-arg PYTHON=python3" in cmd) == (kind != "cpu"), cmd  # Debian's python3 for the CUDA files
        assert f"export FACTPROBE_IMAGE_{kind.upper()}={ref[1]}" in p.stdout
    assert "push" not in p.stdout


@pytest.mark.parametrize(
    "wheel",
    [
        None,  # an empty folder
        f"torch-{PIN}-cp311-cp311-manylinux_2_28_x86_64.whl",  # the CUDA build
        "torch-1.0.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",  # not the pinned version
        f"torch-{PIN}+cpu-cp312-cp312-manylinux_2_28_x86_64.whl",  # not the base's Python 3.11
    ],
)
def test_without_the_pinned_cpu_wheel_torch_comes_from_the_cpu_index(tmp_path, wheel):
    if wheel:
        (tmp_path / wheel).touch()
    p = run("--local", "--dry-run", "--images", "gpu", env=pip_env(tmp_path))
    assert p.returncode == 0, p.stderr
    cmd = builds(p.stdout)["gpu"]
    assert "--build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in cmd, cmd
    assert "TORCH_FIND_LINKS" not in cmd and str(tmp_path) not in cmd
    assert f"torch-{PIN}+cpu-cp311" in p.stdout  # says why


def copy_of_the_build_inputs(dest: Path) -> Path:
    """What the local build reads, with a two-module stand-in for each package."""
    for name in (
        "scripts/build_images.sh",
        "scripts/build_images_local.sh",
        ".dockerignore",
        "pyproject.toml",
        "constraints.txt",
        "README.md",
        "LICENSE",
        "containers/Dockerfile.cpu",
        "containers/podman/containers.conf",
    ):
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, dest / name)
    for pkg in ("factprobe", "factprobe_ops", "components", "pipelines", "tracking"):  # the wheel's folders (package-dir)
        (dest / pkg).mkdir()
        (dest / pkg / "__init__.py").write_text("")
        (dest / pkg / "a.py").write_text("A = 1\n")
    return dest


@pytest.mark.slow  # eight dry runs: ~2 s on 2 busy cores
def test_the_tag_is_a_digest_of_the_dockerfile_and_the_build_context(tmp_path):
    """The tag changes with a file the image is built from or a build argument, and only then: `make images` skips
    an image whose tag exists, and the rehearsal can tell a stale image."""
    root = copy_of_the_build_inputs(tmp_path / "repo")
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / f"torch-{PIN}+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").touch()

    def tag(wheels: Path = tmp_path / "wheels") -> str:
        p = run("--local", "--dry-run", "--images", "cpu", env=pip_env(wheels), script=root / SCRIPT.relative_to(REPO))
        assert p.returncode == 0, p.stderr
        return re.search(r"^export FACTPROBE_IMAGE_CPU=localhost/factprobe-cpu:(\S+)$", p.stdout, re.MULTILINE)[1]

    first = tag()
    assert re.fullmatch(r"0\.1\.0-[0-9a-f]{12}", first) and tag() == first
    # outside the context (.dockerignore) or excluded inside it: same tag
    (root / "factprobe" / "__pycache__").mkdir()
    (root / "factprobe" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    (root / "notes.txt").write_text("not in the context\n")
    (root / "scripts" / "other.sh").write_text("echo\n")
    assert tag() == first
    changed = []
    for path, text in [("factprobe/a.py", "A = 2\n"), ("factprobe_ops/new.py", ""), ("constraints.txt", "x==1\n")]:
        with (root / path).open("a") as f:
            f.write(text)
        changed.append(tag())
    with (root / "containers" / "Dockerfile.cpu").open("a") as f:
        f.write("# a comment\n")
    changed.append(tag())
    (tmp_path / "no-wheel").mkdir()
    changed.append(tag(tmp_path / "no-wheel"))  # other build arguments: torch from the CPU index
    assert len({first, *changed}) == 1 + len(changed), changed


@pytest.mark.parametrize(
    "args, message",
    [
        (["--registry", "r.example.com"], "--local builds with podman into local storage: leave out --registry and --tool"),
        (["--images", "minio"], "--local builds cpu, gpu and/or train, got 'minio'"),
    ],
)
def test_local_bad_arguments_are_one_line(args, message):
    p = run("--local", *args, "--dry-run")
    assert p.returncode == 2 and p.stderr.strip() == f"build_images.sh: {message}", p.stderr


def bin_dir(path: Path, *, uid: int, with_tools: bool) -> Path:
    """A PATH of its own: the few real tools the script and the Makefile need before they check, an `id` that says
    `uid`, and podman/runc/debootstrap stand-ins that record a call (they must not be reached) or none at all."""
    path.mkdir()
    for tool in ("bash", "env", "dirname", "grep"):
        (path / tool).symlink_to(shutil.which(tool))
    (path / "id").write_text(f'#!/bin/sh\n[ "$1" = -u ] && echo {uid} && exit 0\nexec {shutil.which("id")} "$@"\n')
    if with_tools:
        for tool in ("podman", "runc", "debootstrap"):
            (path / tool).write_text(f"#!/bin/sh\necho {tool} >> {path}/called\nexit 97\n")
    for f in path.iterdir():
        if not f.is_symlink():
            f.chmod(0o755)
    return path


def make_images(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [shutil.which("make"), "-s", "-C", str(REPO), "images"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": str(path), "HOME": str(path)},
    )


def the_line(p: subprocess.CompletedProcess) -> str:
    """The one line the build printed (make's own `make: *** [...] Error 2` aside), with nothing on stdout."""
    assert p.returncode != 0 and p.stdout == "", (p.returncode, p.stdout)
    lines = [line for line in p.stderr.splitlines() if not line.startswith("make")]
    assert len(lines) == 1, p.stderr
    return lines[0]


@pytest.mark.parametrize("via", ["make", "script"])
def test_without_podman_one_line_says_what_to_install(tmp_path, via):
    path = bin_dir(tmp_path / "bin", uid=0, with_tools=False)
    assert not shutil.which("podman", path=str(path))
    if via == "make":
        p = make_images(path)
    else:
        p = run("--local", env={"PATH": str(path), "HOME": str(tmp_path)})
        assert p.returncode == 2
    line = the_line(p)
    assert line.startswith("build_images.sh: podman runc debootstrap not installed"), line
    assert INSTALL in line and "make images" in line


@pytest.mark.parametrize("via", ["make", "script"])
def test_without_root_one_line_says_how_to_run_it(tmp_path, via):
    path = bin_dir(tmp_path / "bin", uid=1000, with_tools=True)
    if via == "make":
        p = make_images(path)
    else:
        p = run("--local", env={"PATH": str(path), "HOME": str(tmp_path)})
        assert p.returncode == 2
    line = the_line(p)
    assert line.startswith("build_images.sh: local image builds run podman (runc) and debootstrap as root"), line
    assert "sudo make images" in line
    assert not (path / "called").exists(), "a tool ran before the checks"


def test_the_makefile_images_target_runs_the_local_build():
    make = (REPO / "Makefile").read_text()
    phony = re.search(r"^\.PHONY:(.*)$", make, re.MULTILINE)[1].split()
    assert "images" in phony
    recipe = re.search(r"^images:[^\n]*\n((?:\t[^\n]*\n)+)", make, re.MULTILINE)
    assert recipe and "scripts/build_images.sh --local" in recipe[1], recipe


def podman_stand_in(path: Path, *, image_exists: bool) -> Path:
    """A PATH dir shadowing podman, runc, debootstrap and `id -u` (root). The podman stand-in records its calls;
    `image exists` says yes for the base, for an image it built and as `image_exists` says for the rest; `build`
    records the pip.conf and whether the CA bundle is in the folder mounted at /etc/xdg/pip; `images` lists the
    built tag and an older one."""
    path.mkdir()
    log = path / "podman.log"
    (path / "podman").write_text(f"""#!/bin/bash
echo "$*" >> {log}
shift 2  # --runtime runc
case "$1 $2" in
  "image exists") [[ "$3" == localhost/factprobe-base:* || -e {path}/built ]] && exit 0; exit {0 if image_exists else 1} ;;
  "image inspect") echo 2345000000 ;;
  "images "*) echo localhost/factprobe-cpu:0.1.0-0123456789ab; cat {path}/built ;;
  "run "*) echo "torch 2.13.0+cpu" ;;
  "build "*) prev=""; for a in "$@"; do [ "$prev" = -t ] && echo "$a" > {path}/built; prev="$a"; done
    for a in "$@"; do
      if [[ "$a" == *:/etc/xdg/pip:ro ]]; then d="${{a%%:*}}"; cat "$d/pip.conf" >> {log}; [ -s "$d/ca.crt" ] && echo "ca ok" >> {log}; fi
    done ;;
esac
""")
    for tool in ("runc", "debootstrap"):
        (path / tool).write_text("#!/bin/sh\nexit 97\n")
    (path / "id").write_text(f'#!/bin/sh\n[ "$1" = -u ] && echo 0 && exit 0\nexec {shutil.which("id")} "$@"\n')
    for f in path.iterdir():
        f.chmod(0o755)
    return log


def test_an_image_whose_tag_exists_is_not_built_again(tmp_path):
    log = podman_stand_in(tmp_path / "bin", image_exists=True)
    (tmp_path / f"torch-{PIN}+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").touch()
    env = {**pip_env(tmp_path), "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    p = run("--local", "--images", "cpu,train", env=env)
    assert p.returncode == 0, p.stderr
    for kind in ("cpu", "train"):
        assert re.search(rf"^# localhost/factprobe-{kind}:0\.1\.0-[0-9a-f]{{12}} is up to date .*: not rebuilt$", p.stdout, re.M)
    assert " build " not in log.read_text() and "/etc/xdg/pip" not in log.read_text()


def test_a_build_gets_pip_the_hosts_ca_bundle_checks_torch_and_drops_the_superseded_tag(tmp_path):
    log = podman_stand_in(tmp_path / "bin", image_exists=False)
    (tmp_path / f"torch-{PIN}+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").touch()
    env = {**pip_env(tmp_path), "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    p = run("--local", "--images", "cpu", env=env)
    assert p.returncode == 0, p.stderr
    calls = log.read_text()
    assert "[global]\ncert = /etc/xdg/pip/ca.crt\nca ok\n" in calls, calls
    mount = re.search(r"-v (/var/tmp/factprobe-build-pip\.\w+):/etc/xdg/pip:ro", calls)
    assert mount and not Path(mount[1]).exists(), "the pip.conf folder is removed after the build"
    assert re.search(r"^--runtime runc run --rm --pull=never --network none localhost/factprobe-cpu:\S+ python -c", calls, re.M)
    assert re.search(r"^# localhost/factprobe-cpu:\S+: 2345 MB, built in \d+ s$", p.stdout, re.M), p.stdout
    # the image of earlier sources goes, the new one stays
    assert "--runtime runc rmi localhost/factprobe-cpu:0.1.0-0123456789ab\n" in calls
    assert len(re.findall(r" rmi ", calls)) == 1, calls
    assert re.search(r"^--runtime runc build .* --target deps -t localhost/factprobe-cache:cpu-deps /", calls, re.M), calls


def test_a_dry_run_asks_podman_nothing(tmp_path):
    """The rehearsal reads the current tags from a dry run; podman could make it wait for a running build."""
    log = podman_stand_in(tmp_path / "bin", image_exists=True)
    (tmp_path / f"torch-{PIN}+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").touch()
    p = run("--local", "--dry-run", env={**pip_env(tmp_path), "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"})
    assert p.returncode == 0, p.stderr
    assert not log.exists(), log.read_text()
    assert len(re.findall(r"^export FACTPROBE_IMAGE_", p.stdout, re.M)) == 3
