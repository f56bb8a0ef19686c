"""`make rehearse`: a pipeline run as the cluster runs it, on this machine: every step in its image (issue 38 item 2).

    .venv/bin/python scripts/rehearse.py [--pipelines probe,nightly_sweep,regression]
                                         [--models smollm2-135m-instruct,gemma-3-270m]
                                         [--param K=V ...] [--root /var/tmp/factprobe-rehearse] [--allow-stale]
                                         [--no-laptop] [--train-data] [--kill-check]

What it does, in order (each part prints one line with its seconds):
1. The images: the CPU and GPU images `make images` builds from the current sources must exist (it builds nothing;
   missing or stale: one line naming the image and `make images`; scripts/rehearse_env.py).
2. The Docker API: `podman --runtime runc system service --time=0 unix://ROOT/podman.sock` (CONTAINERS_CONF=
   containers/podman/containers.conf), which kfp's DockerRunner reaches through DOCKER_HOST.
3. The tracking stack as on the cluster: PostgreSQL, moto's S3 server (the artifact bucket) and `mlflow server`
   (basic-auth app, artifacts proxied to S3), reached over the network (tests/integration/servers.py, `Stack`).
4. The claim: ROOT/volume with the converted models copied in once (`cache/models/<alias>`), bind-mounted at
   the cluster's mount path (FACTPROBE_PVC_MOUNT, /mnt/factprobe) with the environment `with_storage` gives a
   cluster step (FACTPROBE_CACHE, FACTPROBE_WORK, HF_HOME, TORCH_EXTENSIONS_DIR, FACTPROBE_DATA), and the research
   data (../shared/data) copied to `data/`, where scripts/put_data_on_claim.sh puts it on a cluster's claim.
5. The run: the pipeline built for the local runner with the images of step 1, run by `kfp.local.DockerRunner`
   (network host, the claim mounted, the MLflow and S3 credentials as environment under the keys the k8s secrets
   give them, `pipelines/platform.py`; the KFP pipeline root under ROOT; nothing of the checkout or its virtualenv
   is mounted). A step that fails on a missing module is one line naming the step, its image and the module.
6. The checks, per pipeline: every MLflow run is FINISHED, every step ran in an image (a probe step in the GPU
   image), artifacts reached S3, and each (model, probe)'s accuracy equals the one of a laptop run of the same
   parameters (`factprobe pipeline run`, in .venv, its own sqlite store; skipped with --no-laptop). `regression`
   (the CI gate) runs after `probe`: `factprobe baseline promote` makes the first model's probe run the baseline,
   the gate must pass and the candidate's accuracy equal that run's.

`--train-data`: the runs take `train_data` from LPAQA's T-REx training facts, the steps from the claim
(/mnt/factprobe/data/lpaqa/trex_train), the laptop run from ../shared/data; the data digests the runs record
(MLflow tag factprobe.data_digest) must be equal. `--kill-check`, instead of the pipelines: the probe pipeline's
probe step SIGTERMed at its first checkpoint as Argo's emissary signals a step, then the rerun
(scripts/rehearse_kill.py).

Exit 0 when every check holds, 1 when one fails, 2 on bad input (one `error:` line).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rehearse_env import REPO, STALE_USED, PodmanService, RehearsalError, current_images, preflight, prepare_volume
from rehearse_kill import EXIT_CODES, KILL_PARAMS, kill_check

#: the smallest run that still probes a real model end to end (`make rehearse` extends it with --models, --param)
COMMON_PARAMS = {
    "source": "countryinfo",
    "relations": "P36",
    "max_facts_per_relation": "4",
    "choices": "10",
    "examples": "10",
}
PIPELINES = ("probe", "nightly_sweep", "regression")
#: `train_data` under a data root (`--train-data`)
TRAIN_DATA = "lpaqa/trex_train"
IMAGE_KINDS = ("cpu", "gpu")
MISSING_MODULE = re.compile(r"(?:ModuleNotFoundError|ImportError): No module named '([\w.]+)'")
FOUND_IMAGE = re.compile(r"(?:Found|Pulling) image '([^']+)'")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="scripts/rehearse.py", description=__doc__.split("\n")[0])
    p.add_argument("--pipelines", default="probe", help=f"comma-separated, in this order: {', '.join(PIPELINES)}")
    p.add_argument(
        "--models",
        default="smollm2-135m-instruct,gemma-3-270m",
        help="comma-separated aliases (default: both real models, the work of make run)",
    )
    p.add_argument("--param", action="append", default=[], metavar="K=V", help="over the small defaults, every pipeline")
    p.add_argument("--root", type=Path, default=Path("/var/tmp/factprobe-rehearse"))
    p.add_argument("--allow-stale", action="store_true", help="run the newest image of each kind even if stale")
    p.add_argument(
        "--if-ready",
        action="store_true",
        help="CI: when podman, root or a current image is missing, say so in one line and exit 0 (skip) instead of 2",
    )
    p.add_argument("--no-laptop", action="store_true", help="skip the laptop runs and the accuracy comparison")
    p.add_argument(
        "--kill-check",
        action="store_true",
        help="instead of --pipelines: the probe pipeline on the first model, its probe step SIGTERMed at its first "
        "checkpoint (scripts/rehearse_kill.py), then rerun: run KILLED, rerun resumed and FINISHED, accuracy as a laptop run's",
    )
    p.add_argument(
        "--train-data",
        action="store_true",
        help="in-context examples from LPAQA's T-REx training facts: the steps read them from the data on the claim "
        f"({TRAIN_DATA}), the laptop run from ../shared/data; their data digests must be equal",
    )
    args = p.parse_args(argv)
    args.pipelines = [n.strip() for n in args.pipelines.split(",") if n.strip()]
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [n for n in args.pipelines if n not in PIPELINES]
    if unknown or not args.pipelines or not args.models:
        p.error(f"--pipelines takes {', '.join(PIPELINES)} (got {', '.join(unknown) or 'none'}); --models one alias or more")
    if "regression" in args.pipelines and "probe" not in args.pipelines[: args.pipelines.index("regression")]:
        p.error("regression gates against the probe pipeline's run: list probe before it")
    return args


def run_pairs(pipeline: str, models: list[str], given: list[str]) -> list[str]:
    """The `--param K=V` pairs of `pipeline`'s run: the small defaults, the models as the pipeline takes them (the
    regression gate: the first model against its `probe` run, promoted to the baseline), then the user's."""
    values = dict(COMMON_PARAMS)
    if pipeline == "probe":
        values |= {"models": json.dumps(models), "probes": '["ic-lke"]'}
    elif pipeline == "nightly_sweep":
        values |= {"models_yaml": f"models: [{', '.join(models)}]", "probes": '["ic-lke"]'}
    else:
        values |= {"candidate": models[0], "probe_name": "ic-lke", "baseline": "factprobe.baseline=true"}
    for pair in given:
        key, _, value = pair.partition("=")
        values[key] = value
    return [f"{k}={v}" for k, v in values.items()]


def train_pairs(on: bool, root: str) -> list[str]:
    """`train_data=<root>/lpaqa/trex_train` when `on` (`--train-data`): the steps' root is the data on the claim
    (`<mount>/data`, their FACTPROBE_DATA), the laptop's ../shared/data; [] when off."""
    return [f"train_data={root}/{TRAIN_DATA}"] if on else []


def step_environment(stack, mount: str) -> dict[str, str]:
    """What a cluster step's environment holds: the claim's folders, and the MLflow and S3 credentials under the
    variable names the k8s secrets give them (pipelines/platform.py), the S3 endpoint as FACTPROBE_S3_ENDPOINT
    makes it (AWS_ENDPOINT_URL)."""
    from integration.servers import ADMIN_PASSWORD, ADMIN_USER

    from factprobe_ops.pipelines.platform import MLFLOW_SECRET_KEYS, S3_SECRET_KEYS, STORAGE_ENV
    from factprobe_ops.tracking.conventions import git_sha

    secrets = {"MLFLOW_TRACKING_USERNAME": ADMIN_USER, "MLFLOW_TRACKING_PASSWORD": ADMIN_PASSWORD}
    secrets |= {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    env = {variable: secrets[key] for key, variable in {**MLFLOW_SECRET_KEYS, **S3_SECRET_KEYS}.items()}
    env |= {name: f"{mount}/{sub}" for name, sub in STORAGE_ENV.items()}
    env |= {
        "AWS_ENDPOINT_URL": stack.s3.endpoint,
        "AWS_DEFAULT_REGION": "us-east-1",
        "FACTPROBE_GIT_SHA": git_sha(),
        "PYTHONUNBUFFERED": "1",
        "TQDM_DISABLE": "1",
    }
    return env


def failed_step_line(log_text: str) -> str | None:
    """The first failed step in one line: 'step S (image I) lacks module M' when its output says a module is
    missing, else 'step S (image I) failed: <its first error line>' (pipelines/local_run.py first_error_line)."""
    from factprobe_ops.pipelines.local_run import first_error_line, step_logs

    for name, status, lines in step_logs(log_text):
        if status == "SUCCESS":
            continue
        text = "\n".join(lines)
        found = FOUND_IMAGE.search(text)
        image = found.group(1) if found else "unknown"
        if m := MISSING_MODULE.search(text):
            return f"step {name!r} (image {image}) lacks module {m.group(1)!r}"
        return f"step {name!r} (image {image}) failed: {first_error_line(lines)}"
    return None


def step_images(log_text: str) -> dict[str, str]:
    """step -> the image its container ran (DockerRunner's `Found image '...'` line); '' for a step without one."""
    from factprobe_ops.pipelines.local_run import step_logs

    found = {}
    for name, _, lines in step_logs(log_text):
        m = FOUND_IMAGE.search("\n".join(lines))
        found[name] = m.group(1) if m else ""
    return found


def image_failures(ran: dict[str, str], images: dict[str, str]) -> list[str]:
    """Steps that ran outside a container, or a model-loading step (probe-*) outside the GPU image."""
    bad = [f"step {s!r} ran in no image" for s, image in ran.items() if not image]
    for step, image in ran.items():
        if step.startswith("probe-") and image and image != images["gpu"]:
            bad.append(f"step {step!r} ran in {image}, not the GPU image {images['gpu']}")
    return bad


def run_container(client, image: str, command: list[str], volumes: dict, **run_args) -> int:
    """kfp's `docker_task_handler.run_docker_container` without `auto_remove`: podman's Docker API answers 500
    ("no such container"), not docker's 404, when a container that auto_remove already took is inspected, which
    kfp then reports as a failed step. The container is removed once its exit code is read. It never pulls: the
    images are this machine's (`make images`)."""
    import docker

    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        raise RehearsalError(f"image {image} is not in podman's storage: run `make images`") from None
    print(f"Found image {image!r}\n")
    container = client.containers.run(
        image=image, command=command, detach=True, stdout=True, stderr=True, volumes=volumes, **run_args
    )
    try:
        for line in container.logs(stream=True, follow=True):
            print(line.decode(errors="replace"), end="")
        code = container.wait()["StatusCode"]
        EXIT_CODES.append((image, code))
        return code
    finally:
        container.remove(force=True)


def run_in_images(name: str, pairs: list[str], images: dict[str, str], root: Path, env: dict[str, str], volume: Path, mount: str):
    """The pipeline through kfp.local.DockerRunner (module docstring, step 5); returns (ok, seconds, log path)."""
    import docker
    from kfp import local

    from factprobe_ops.pipelines.catalogue import get_pipeline, parse_params
    from factprobe_ops.pipelines.checks import check_run_values
    from factprobe_ops.pipelines.local_run import _RunLog

    for kind, ref in images.items():  # the images the steps are built with (pipelines/platform.py)
        os.environ[f"FACTPROBE_IMAGE_{kind.upper()}"] = ref
    pipe = get_pipeline(name, local=True)
    params = parse_params(pipe, pairs, name)
    check_run_values(name, params)
    pipeline_root = root / "kfp-root"
    pipeline_root.mkdir(parents=True, exist_ok=True)
    os.chmod(pipeline_root, 0o777)  # the steps run as UID 1000 and write their outputs here
    for source in (volume, pipeline_root):
        if source.resolve().is_relative_to(REPO):
            raise RehearsalError(f"{source} lies inside the checkout: the steps must not see it")
    runner = local.DockerRunner(
        network_mode="host",
        mounts=[docker.types.Mount(target=mount, source=str(volume), type="bind")],
        environment=env,
    )
    local.init(runner=runner, pipeline_root=str(pipeline_root), raise_on_error=True)
    from kfp.local import docker_task_handler

    docker_task_handler.run_docker_container = run_container
    import warnings

    # kfp's notes that cluster settings (requests, limits, display names) do nothing in a local run
    warnings.filterwarnings("ignore", message=r"Task '.*': settings \[.*\] have no effect", category=UserWarning)
    log = _RunLog(sys.stdout, root / "logs" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.log", verbose=False)
    start = time.perf_counter()
    ok = True
    import builtins

    # kfp's indented_print swaps builtins.print per task; parallel tasks (ParallelFor) restore each other's
    # indented version, so it is put back here after the run
    plain_print = builtins.print
    sys.stdout = log
    try:
        pipe(**params)
    except RuntimeError:
        ok = False
    finally:
        builtins.print = plain_print
        sys.stdout = log._stream
        log.close_log()
    return ok, time.perf_counter() - start, log.path


def mlflow_results(client, experiment: str) -> tuple[dict[tuple[str, str], float], list[str], dict[tuple[str, str], str]]:
    """((model, probe) -> accuracy, the runs that are not FINISHED, (model, probe) -> run id) of `experiment`."""
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return {}, [f"no experiment {experiment}"], {}
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    accuracy, unfinished, ids = {}, [], {}
    for r in runs:
        if r.info.status != "FINISHED":
            unfinished.append(f"{r.info.run_name or r.info.run_id} {r.info.status}")
        tags, metrics = r.data.tags, r.data.metrics
        if "accuracy" in metrics and "factprobe.model" in tags:
            key = (tags["factprobe.model"], tags.get("factprobe.probe", ""))
            accuracy[key], ids[key] = metrics["accuracy"], r.info.run_id
            DIGESTS[(experiment, client.tracking_uri, key)] = tags.get("factprobe.data_digest") or tags.get(
                "factprobe.dataset_digest"
            )
    if not runs:
        unfinished.append(f"no run in {experiment}")
    return accuracy, unfinished, ids


def promote_baseline(run_id: str, uri: str, env: dict[str, str]) -> None:
    """`factprobe baseline promote RUN_ID` (the runbook's CI-gate step) against the rehearsal's MLflow."""
    cmd = [str(Path(sys.executable).parent / "factprobe"), "baseline", "promote", run_id, "--tracking-uri", uri]
    out = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RehearsalError(f"factprobe baseline promote {run_id} failed: {(out.stderr or out.stdout).strip()[-300:]}")


def laptop_run(name: str, pairs: list[str], root: Path) -> tuple[bool, float, str]:
    """The same run in .venv (`factprobe pipeline run`), its own sqlite store and work folder."""
    import shutil

    folder = root / f"laptop-{name}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    store = f"sqlite:///{folder / 'mlruns.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "AWS_", "FACTPROBE_IMAGE_"))}
    env["FACTPROBE_WORK"] = str(folder / "work")
    cmd = [str(Path(sys.executable).parent / "factprobe"), "pipeline", "run", name, "--tracking-uri", store]
    cmd += ["--pipeline-root", str(folder / "kfp-root")] + [a for p in pairs for a in ("--param", p)]
    start = time.perf_counter()
    out = subprocess.run(cmd, env=env, cwd=folder, capture_output=True, text=True)
    (folder / "run.log").write_text(out.stdout + out.stderr)
    return out.returncode == 0, time.perf_counter() - start, store


def rehearse_pipeline(name: str, args, images, root: Path, stack, env, mount: str, found: dict) -> list[str]:
    """One pipeline in the images, then its checks (module docstring, steps 5 and 6); returns the failures.
    `found` collects (pipeline -> (model, probe) -> (accuracy, run id)) for the later pipelines."""
    from integration.servers import BUCKET
    from mlflow.tracking import MlflowClient

    from factprobe.paths import data_root
    from factprobe_ops.pipelines.platform import STORAGE_ENV
    from factprobe_ops.tracking.conventions import experiment_name

    pairs = run_pairs(name, args.models, args.param + train_pairs(args.train_data, f"{mount}/{STORAGE_ENV['FACTPROBE_DATA']}"))
    laptop_pairs = run_pairs(name, args.models, args.param + train_pairs(args.train_data, str(data_root())))
    if name == "regression":  # the CI gate: the probe run of the candidate is the baseline
        promote_baseline(
            found["probe"][(args.models[0], "ic-lke")][1],
            stack.mlflow.uri,
            {k: v for k, v in env.items() if k.startswith("MLFLOW_")},
        )
    ok, seconds, log_path = run_in_images(
        name, pairs + [f"tracking_uri={stack.mlflow.uri}"], images, root, env, root / "volume", mount
    )
    print(f"{name} in images: {'succeeded' if ok else 'FAILED'} in {seconds:.1f} s; log {log_path}", flush=True)
    TIMES[name] = seconds
    if not ok:
        line = failed_step_line(log_path.read_text(errors="replace")) or "a step failed"
        stale = f" (stale images run: {', '.join(STALE_USED)}; `make images` builds the current sources)" if STALE_USED else ""
        return [f"{name}: {line}{stale}; log {log_path}"]
    ran = step_images(log_path.read_text(errors="replace"))
    print("  steps: " + ", ".join(f"{s} {i.split('/')[-1]}" for s, i in ran.items()), flush=True)
    stored = stack.s3.client().list_objects_v2(Bucket=BUCKET).get("KeyCount", 0)
    saved = {k: v for k, v in os.environ.items() if k.startswith("MLFLOW_")}
    os.environ.update({k: v for k, v in env.items() if k.startswith("MLFLOW_")})
    try:
        accuracy, unfinished, ids = mlflow_results(MlflowClient(stack.mlflow.uri), experiment_name(name))
    finally:
        for k in [k for k in os.environ if k.startswith("MLFLOW_")]:
            del os.environ[k]
        os.environ.update(saved)
    found[name] = {k: (accuracy[k], ids[k]) for k in accuracy}
    print(f"  MLflow: accuracy {accuracy}; not FINISHED: {unfinished or 'none'}; S3: {stored} objects", flush=True)
    failures = [f"{name}: run not FINISHED: {u}" for u in unfinished] + ([] if accuracy else [f"{name}: no accuracy logged"])
    failures += [f"{name}: {f}" for f in image_failures(ran, images)] + ([] if stored else [f"no artifact in s3://{BUCKET}"])
    if name == "regression":  # same model, facts and settings as the probe run: the same accuracy
        want = {k: v[0] for k, v in found["probe"].items() if k[0] == args.models[0]}
        if accuracy != want:
            failures.append(f"regression: candidate accuracy {accuracy} differs from its probe run's {want}")
    elif not args.no_laptop:
        lap_ok, TIMES[f"{name} laptop"], store = laptop_run(name, laptop_pairs, root)
        lap_acc, _, _ = mlflow_results(MlflowClient(store), experiment_name(name))
        digests = {
            "images": digests_of(stack.mlflow.uri, experiment_name(name)),
            "laptop": digests_of(store, experiment_name(name)),
        }
        print(
            f"  laptop run: {'succeeded' if lap_ok else 'FAILED'} in {TIMES[f'{name} laptop']:.1f} s; accuracy {lap_acc}; "
            f"data digests equal: {digests['images'] == digests['laptop']} ({sorted(set(digests['images'].values()))})",
            flush=True,
        )
        if not lap_ok or lap_acc != accuracy:
            failures.append(
                f"{name}: accuracies differ: images {accuracy}, laptop {lap_acc} (log {root / f'laptop-{name}' / 'run.log'})"
            )
        if digests["images"] != digests["laptop"] or None in digests["images"].values():
            failures.append(f"{name}: data digests differ: images {digests['images']}, laptop {digests['laptop']}")
    return failures


def rehearse_kill(args, images: dict[str, str], root: Path, stack, env: dict[str, str], mount: str) -> list[str]:
    """`--kill-check` (scripts/rehearse_kill.py) on the first model, then the accuracy of its resumed run against
    a laptop run of the same parameters; returns the failures."""
    import docker
    from mlflow.tracking import MlflowClient

    from factprobe.paths import data_root
    from factprobe_ops.pipelines.platform import STORAGE_ENV
    from factprobe_ops.tracking.conventions import experiment_name

    given = [f"{k}={v}" for k, v in KILL_PARAMS.items()] + args.param
    pairs = run_pairs("probe", args.models[:1], given + train_pairs(args.train_data, f"{mount}/{STORAGE_ENV['FACTPROBE_DATA']}"))
    laptop_pairs = run_pairs("probe", args.models[:1], given + train_pairs(args.train_data, str(data_root())))

    def run_pipeline():
        return run_in_images("probe", pairs + [f"tracking_uri={stack.mlflow.uri}"], images, root, env, root / "volume", mount)

    os.environ.update({k: v for k, v in env.items() if k.startswith("MLFLOW_")})
    failures, measured = kill_check(
        run_pipeline,
        MlflowClient(stack.mlflow.uri),
        docker.DockerClient(base_url=os.environ["DOCKER_HOST"]),
        images["gpu"],
        root / "volume" / STORAGE_ENV["FACTPROBE_WORK"],
        experiment_name("probe"),
        TIMES,
    )
    if "accuracy" in measured and not args.no_laptop:
        lap_ok, TIMES["kill: laptop"], store = laptop_run("probe", laptop_pairs, root)
        lap_acc, _, _ = mlflow_results(MlflowClient(store), experiment_name("probe"))
        want = lap_acc.get((args.models[0], "ic-lke"))
        print(
            f"  kill check: laptop run {'succeeded' if lap_ok else 'FAILED'}; accuracy {want} (rerun {measured['accuracy']})",
            flush=True,
        )
        if not lap_ok or want != measured["accuracy"]:
            failures.append(f"kill check: the resumed run's accuracy {measured['accuracy']} differs from the laptop run's {want}")
    return failures


TIMES: dict[str, float] = {}
#: (experiment, tracking URI, (model, probe)) -> the run's data digest tag, filled by `mlflow_results`
DIGESTS: dict[tuple, str | None] = {}


def digests_of(uri: str, experiment: str) -> dict[tuple[str, str], str | None]:
    return {k[2]: v for k, v in DIGESTS.items() if k[0] == experiment and k[1] == uri}


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    sys.path.insert(0, str(REPO / "tests"))  # tests/integration/servers.py: the stack the integration tests use
    import shutil

    from integration.servers import Stack

    from factprobe.errors import FactprobeError
    from factprobe_ops.components.config import cluster_config

    root = args.root.resolve()
    stack = service = None
    try:
        try:
            preflight()
            t = time.perf_counter()
            images = current_images(list(IMAGE_KINDS), args.allow_stale)
        except RehearsalError as e:
            if not args.if_ready:
                raise
            print(f"rehearsal skipped (--if-ready): {e}", flush=True)
            return 0
        TIMES["images"] = time.perf_counter() - t
        print(f"images: {', '.join(images.values())} ({TIMES['images']:.1f} s)", flush=True)
        (root / "logs").mkdir(parents=True, exist_ok=True)
        mount = cluster_config().pvc_mount
        t = time.perf_counter()
        from factprobe.paths import data_root

        copied = prepare_volume(root / "volume", args.models, data_root())
        TIMES["volume"] = time.perf_counter() - t
        print(f"claim: {root / 'volume'} at {mount}; copied {', '.join(f'{m} {s:.0f} s' for m, s in copied.items())}", flush=True)
        t = time.perf_counter()
        service = PodmanService(root / "podman.sock", root / "logs" / "podman-service.log").start()
        os.environ["DOCKER_HOST"] = service.docker_host
        shutil.rmtree(root / "stack", ignore_errors=True)
        (root / "stack").mkdir()
        stack = Stack(root / "stack").start()
        TIMES["services"] = time.perf_counter() - t
        print(f"services: podman API, PostgreSQL, moto S3, MLflow {stack.mlflow.uri} ({TIMES['services']:.1f} s)", flush=True)
        env = step_environment(stack, mount)
        failures: list[str] = []
        found: dict = {}
        for name in [] if args.kill_check else args.pipelines:
            failures += rehearse_pipeline(name, args, images, root, stack, env, mount, found)
            if failures:
                break
        if args.kill_check:
            failures += rehearse_kill(args, images, root, stack, env, mount)
        print("times: " + ", ".join(f"{k} {v:.1f} s" for k, v in TIMES.items()), flush=True)
        for f in failures:
            print(f"error: {f}", file=sys.stderr)
        return 1 if failures else 0
    except (RehearsalError, FactprobeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        if stack is not None:
            stack.stop()
        if service is not None:
            service.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
