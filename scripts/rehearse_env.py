"""What `make rehearse` (scripts/rehearse.py) sets up around a pipeline run: the images, the Docker API and the volume.

- `current_images(kinds)`: the tags `make images` would build from the sources as they are now (read from
  `scripts/build_images.sh --local --dry-run`, which asks podman nothing), each checked to exist in podman's
  storage; a missing or stale image (an older tag of the same kind: built from other sources) is one line naming
  it and `make images` (`ImageError`), unless `allow_stale` takes the newest tag there is, with a warning line.
- `PodmanService`: `podman --runtime runc system service --time=0 unix://SOCKET` with CONTAINERS_CONF at
  containers/podman/containers.conf (runc; no raised open-files limit), i.e. the Docker API kfp's DockerRunner
  talks to (`DOCKER_HOST`); stopped with its process group.
- `prepare_volume(root, models, mount)`: the folder that plays the cluster's PVC (`factprobe-cache`, mounted at
  `FACTPROBE_PVC_MOUNT`, /mnt/factprobe): the converted models copied once into `cache/models/<alias>` (the
  runbook's `kubectl cp` step), the research data at `data/` (the steps' FACTPROBE_DATA; the runbook's
  scripts/put_data_on_claim.sh), a fresh `work/`, everything owned by UID 1000, the steps' user.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONTAINERS_CONF = REPO / "containers" / "podman" / "containers.conf"
STEP_UID = 1000  # the images' user (containers/README.md, "Runtime conventions")
#: the stale images `current_images(allow_stale=True)` chose (a failed step then says so)
STALE_USED: list[str] = []


class RehearsalError(RuntimeError):
    """One line for the user: what is wrong and what to run."""


class ImageError(RehearsalError):
    pass


def preflight() -> None:
    """podman and runc installed, running as root: else one line saying what to do."""
    missing = [t for t in ("podman", "runc") if shutil.which(t) is None]
    if missing:
        raise RehearsalError(
            f"{' and '.join(missing)} not installed: `apt-get install -y --no-install-recommends podman runc` as root, "
            "then `make images` and `make rehearse`"
        )
    if os.geteuid() != 0:
        raise RehearsalError("the rehearsal runs podman (runc) as root: run `sudo make rehearse`")


def podman(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}
    return subprocess.run(["podman", "--runtime", "runc", *args], capture_output=True, text=True, env=env, timeout=timeout)


def wanted_tags(kinds: list[str]) -> dict[str, str]:
    """kind -> the tag `make images` gives the image of the current sources (`build_images.sh --local --dry-run`)."""
    out = subprocess.run(
        [str(REPO / "scripts" / "build_images.sh"), "--local", "--dry-run", "--images", ",".join(kinds)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if out.returncode != 0:
        raise ImageError(f"scripts/build_images.sh --local --dry-run failed: {(out.stderr or out.stdout).strip()[-300:]}")
    tags = dict(re.findall(r"^export FACTPROBE_IMAGE_([A-Z]+)=(\S+)$", out.stdout, flags=re.MULTILINE))
    return {k: tags[k.upper()] for k in kinds}


def existing_tags(kind: str) -> list[str]:
    """localhost/factprobe-<kind> tags in podman's storage, newest first."""
    out = podman(
        "images", "--noheading", "--sort", "created", "--format", "{{.Repository}}:{{.Tag}}", f"localhost/factprobe-{kind}"
    )
    return [t for t in out.stdout.split() if t.startswith(f"localhost/factprobe-{kind}:")]


def current_images(kinds: list[str], allow_stale: bool = False) -> dict[str, str]:
    """kind -> the image to run (see the module docstring); ImageError when one is missing or stale."""
    chosen = {}
    for kind, ref in wanted_tags(kinds).items():
        if podman("image", "exists", ref).returncode == 0:
            chosen[kind] = ref
            continue
        others = existing_tags(kind)
        if allow_stale and others:
            print(f"warning: {ref} is not built; using {others[0]}, built from older sources (--allow-stale)", flush=True)
            chosen[kind] = others[0]
            STALE_USED.append(others[0])
            continue
        state = f"stale ({others[0]} was built from older sources)" if others else "missing"
        raise ImageError(f"image {ref} is {state}: run `make images`")
    return chosen


@dataclass
class PodmanService:
    """The Docker API over a unix socket (see the module docstring)."""

    socket: Path
    log: Path
    proc: subprocess.Popen | None = None

    @property
    def docker_host(self) -> str:
        return f"unix://{self.socket}"

    def start(self, timeout: float = 60) -> PodmanService:
        self.socket.unlink(missing_ok=True)
        env = {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                ["podman", "--runtime", "runc", "system", "service", "--time=0", self.docker_host],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        import docker

        start = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                raise RehearsalError(f"podman system service exited with {self.proc.returncode}: {self.log.read_text()[-300:]}")
            if self.socket.exists():
                try:
                    docker.DockerClient(base_url=self.docker_host).ping()
                    return self
                except Exception:  # noqa: BLE001 - not answering yet
                    pass
            if time.monotonic() - start > timeout:
                raise RehearsalError(f"podman system service did not answer on {self.socket} within {timeout:.0f} s")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=20)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None
        self.socket.unlink(missing_ok=True)


def host_model_folder(alias: str) -> Path:
    """The converted model on this machine (`factprobe models path`: converts it once when missing)."""
    exe = Path(sys.executable).parent / "factprobe"
    out = subprocess.run([str(exe), "models", "path", alias], capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise RehearsalError(f"factprobe models path {alias} failed: {(out.stderr or out.stdout).strip()[-300:]}")
    return Path(out.stdout.strip().splitlines()[-1])


def prepare_volume(volume: Path, models: list[str], data: Path | None = None, fresh_work: bool = True) -> dict[str, float]:
    """The claim's folders under `volume` (see the module docstring); returns alias -> seconds its copy took
    (0 when it was there already), and "data" -> seconds the research data took: `data` (a data root,
    ../shared/data) copied to `volume/data`, the FACTPROBE_DATA of the steps, as scripts/put_data_on_claim.sh
    puts it on a cluster's claim. `fresh_work=False` keeps `work/` (a rerun that must resume)."""
    from factprobe_ops.pipelines.platform import STORAGE_ENV

    copied = {}
    for sub in STORAGE_ENV.values():
        (volume / sub).mkdir(parents=True, exist_ok=True)
    if fresh_work:  # every rehearsal computes its results: nothing resumes from the last one
        shutil.rmtree(volume / "work")
        (volume / "work").mkdir()
    if data is not None:
        t = time.monotonic()
        target = volume / STORAGE_ENV["FACTPROBE_DATA"]
        partial = target.with_name("data.partial")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(data, partial)
        shutil.rmtree(target)
        partial.rename(target)
        copied["data"] = time.monotonic() - t
    for alias in models:
        target = volume / "cache" / "models" / alias
        t = time.monotonic()
        if not (target / "factprobe_complete.json").exists():
            source = host_model_folder(alias)
            shutil.rmtree(target, ignore_errors=True)
            partial = target.with_name(f".{alias}.partial")
            shutil.rmtree(partial, ignore_errors=True)
            shutil.copytree(source, partial)
            partial.rename(target)
        copied[alias] = time.monotonic() - t
    chown_tree(volume)
    return copied


def chown_tree(root: Path, uid: int = STEP_UID) -> None:
    """`root` and everything under it owned by the steps' user (the claim's fsGroup does this on a cluster)."""
    os.chown(root, uid, uid)
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            os.chown(os.path.join(folder, name), uid, uid, follow_symlinks=False)
