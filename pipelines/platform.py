"""Cluster placement of steps: GPU requests, node selector, tolerations, secrets, retries.

CPU steps (data build, report, bookkeeping) never request an accelerator. GPU steps request
`CONFIG.accelerator` x `CONFIG.gpu_count`, select the GPU node pool and tolerate its taint, and
retry (preemptible nodes); a sweep's unit takes its GPU count and placement from its model
(`placed_by_outputs`: a served model's unit, `gpus: 0`, runs on any node). Every step that talks to MLflow or S3 gets its credentials from the
Kubernetes secrets named in `factprobe_ops.components.config` as environment variables, never as parameters.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

from kfp import kubernetes
from kfp.dsl import PipelineTask

from factprobe.errors import ConfigError
from factprobe_ops.components.config import ClusterConfig, cluster_config

MLFLOW_SECRET_KEYS = {
    "MLFLOW_TRACKING_USERNAME": "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_TRACKING_PASSWORD": "MLFLOW_TRACKING_PASSWORD",
}
S3_SECRET_KEYS = {"AWS_ACCESS_KEY_ID": "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY": "AWS_SECRET_ACCESS_KEY"}
HF_SECRET_KEYS = {"HF_TOKEN": "HF_TOKEN"}
#: the served model's API key (k8s/secrets/vllm, the key vLLM itself reads) -> the variable the client reads first
#: (factprobe/lm/served.py KEY_VARIABLES)
SERVED_KEY_SECRET_KEYS = {"VLLM_API_KEY": "FACTPROBE_OPENAI_API_KEY"}
#: environment of steps with the PVC: variable -> folder under the mount (FACTPROBE_DATA: the research data root,
#: `lama/`, `lpaqa/`, `coherency/`, ... as in ../shared/data, put there once: k8s/README.md, "5. Research data")
STORAGE_ENV = {
    "FACTPROBE_CACHE": "cache",
    "FACTPROBE_WORK": "work",
    "HF_HOME": "hf",
    "TORCH_EXTENSIONS_DIR": "torch_extensions",
    "FACTPROBE_DATA": "data",
}
GPU_RETRIES = 2  # on a cluster: preemptible GPU nodes
# Set while a pipeline is built: the cluster settings, and whether it is for the local runner (no
# retries there: a local run fails fast instead of backing off for minutes).
_BUILD: contextvars.ContextVar[tuple[ClusterConfig, bool] | None] = contextvars.ContextVar("factprobe_build", default=None)


def read_cluster_config() -> ClusterConfig:
    """`factprobe_ops.components.config.cluster_config()`, a malformed setting (FACTPROBE_GPU_COUNT=abc, ...) as
    a ConfigError: one line naming the variable and its value, no traceback."""
    try:
        return cluster_config()
    except ConfigError:
        raise
    except ValueError as e:
        raise ConfigError(str(e)) from None


@contextmanager
def building(local: bool = False) -> Iterator[ClusterConfig]:
    """Build pipelines inside this block: the environment is read once, here (factprobe_ops.components.config);
    a malformed setting raises ConfigError (`read_cluster_config`)."""
    config = read_cluster_config()
    token = _BUILD.set((config, local))
    try:
        yield config
    finally:
        _BUILD.reset(token)


def _settings() -> tuple[ClusterConfig, bool]:
    return _BUILD.get() or (read_cluster_config(), False)


def local_build() -> bool:
    """True while a pipeline is built for the local runner (`building(local=True)`)."""
    return _settings()[1]


def with_secrets(task: PipelineTask, s3: bool = True) -> PipelineTask:
    """Credentials from Kubernetes secrets as env vars (MLflow always, S3 when the step reads/writes S3)."""
    CONFIG, _ = _settings()
    kubernetes.use_secret_as_env(task, secret_name=CONFIG.mlflow_secret, secret_key_to_env=MLFLOW_SECRET_KEYS)
    if s3:
        kubernetes.use_secret_as_env(task, secret_name=CONFIG.s3_secret, secret_key_to_env=S3_SECRET_KEYS)
    kubernetes.add_pod_label(task, "factprobe.io/role", "pipeline-step")
    # The images run as UID 1000 (containers/); KFP's launcher writes artifacts as that user.
    kubernetes.set_security_context(task, run_as_user=1000, run_as_group=1000, run_as_non_root=True)
    if CONFIG.s3_endpoint:
        task.set_env_variable("AWS_ENDPOINT_URL", CONFIG.s3_endpoint)
    # OpenMP threads wait passively (factprobe/threads.py): a spinning wait burns a pod's CPU quota; the thread
    # count itself comes from the pod's cgroup quota at run time, not from the node's cores. The local runner
    # gives each step the same through its environment (threads.step_environment, which FACTPROBE_THREAD_POLICY=off
    # turns off), so a local build leaves it to that.
    if not local_build():
        task.set_env_variable("OMP_WAIT_POLICY", "PASSIVE")
    return task


def cpu_step(task: PipelineTask, cpu: str = "1", memory: str = "4G", s3: bool = True, cache: bool = False) -> PipelineTask:
    """A CPU-only step: requests and limits, secrets, no accelerator."""
    task.set_container_image(_settings()[0].cpu_image)
    task.set_cpu_request(cpu).set_cpu_limit(cpu).set_memory_request(memory).set_memory_limit(memory)
    task.set_caching_options(cache)
    return with_secrets(task, s3=s3)


def with_storage(task: PipelineTask) -> PipelineTask:
    """The PersistentVolumeClaim `CONFIG.pvc_name` (k8s/components/model-cache-pvc) mounted at
    `CONFIG.pvc_mount` with `kubernetes.mount_pvc`, and the environment that puts the model cache,
    the probes' resumable working folders, the Hugging Face cache, compiled DeepSpeed ops and the
    research data root on it (`STORAGE_ENV`), so a rescheduled pod finds the converted model and
    resumes its checkpoint, and `train_data`, templates and relations files are read from the claim.
    Nothing in local builds (the local runner has no volumes) or with FACTPROBE_PVC=''."""
    CONFIG, local = _settings()
    if local or not CONFIG.pvc_name:
        return task
    kubernetes.mount_pvc(task, pvc_name=CONFIG.pvc_name, mount_path=CONFIG.pvc_mount)
    for name, sub in STORAGE_ENV.items():
        task.set_env_variable(name, f"{CONFIG.pvc_mount}/{sub}")
    return task


def data_step(task: PipelineTask, memory: str = "8G") -> PipelineTask:
    """The data-build step: a `cpu_step` that mounts the claim (`with_storage`), so it reads the data root
    (FACTPROBE_DATA=<mount>/data: `train_data`, the coherency relations, the BELIEF templates) where the
    probing steps read it."""
    return with_storage(cpu_step(task, memory=memory))


def with_shm(task: PipelineTask) -> PipelineTask:
    """/dev/shm as a memory-backed emptyDir of `CONFIG.shm_size` (the container default, 64 MiB,
    is too small for NCCL and the data loader workers of distributed training)."""
    CONFIG, _ = _settings()
    kubernetes.empty_dir_mount(task, volume_name="dshm", mount_path="/dev/shm", medium="Memory", size_limit=CONFIG.shm_size)
    return task


def with_hf_token(task: PipelineTask) -> PipelineTask:
    """`HF_TOKEN` from the Secret `CONFIG.hf_secret` (key HF_TOKEN), for gated hub models. Optional:
    a cluster without the Secret still runs the steps that need no gated model."""
    CONFIG, _ = _settings()
    kubernetes.use_secret_as_env(task, secret_name=CONFIG.hf_secret, secret_key_to_env=HF_SECRET_KEYS, optional=True)
    return task


def with_served_api_key(task: PipelineTask) -> PipelineTask:
    """`FACTPROBE_OPENAI_API_KEY` from the Secret `CONFIG.served_key_secret` (key VLLM_API_KEY: the key the
    vLLM server of k8s/overlays/vllm-serve requires), for probes of a served model (`openai:NAME@URL`).
    Optional: a cluster without a served model runs without the Secret. An environment variable from a
    Secret, never a parameter: the key is in no compiled pipeline, run parameter or MLflow record."""
    CONFIG, _ = _settings()
    kubernetes.use_secret_as_env(
        task, secret_name=CONFIG.served_key_secret, secret_key_to_env=SERVED_KEY_SECRET_KEYS, optional=True
    )
    return task


def model_step(task: PipelineTask) -> PipelineTask:
    """What every step that loads a model or resumes gets: the PVC, the Hugging Face token and a
    served model's API key."""
    return with_served_api_key(with_hf_token(with_storage(task)))


def gpu_step(task: PipelineTask, cpu: str = "4", memory: str = "32G") -> PipelineTask:
    """A GPU step on the GPU node pool, retried on preemption (not in local builds); it loads a
    model, so it mounts the PVC and gets the Hugging Face token (`model_step`)."""
    CONFIG, local = _settings()
    model_step(task)
    task.set_container_image(CONFIG.gpu_image)
    task.set_accelerator_type(CONFIG.accelerator).set_accelerator_limit(CONFIG.gpu_count)
    task.set_cpu_request(cpu).set_cpu_limit(cpu).set_memory_request(memory).set_memory_limit(memory)
    key, value = CONFIG.gpu_node_label
    kubernetes.add_node_selector(task, label_key=key, label_value=value)
    tkey, tvalue, effect = CONFIG.gpu_toleration
    kubernetes.add_toleration(task, key=tkey, operator="Equal", value=tvalue, effect=effect)
    if not local:
        task.set_retry(num_retries=GPU_RETRIES, backoff_duration="60s", backoff_factor=2.0)
    task.set_caching_options(False)
    return with_secrets(task, s3=True)


def gpu_placement() -> dict:
    """The GPU pool's node selector and tolerations as data ({"node_selector": {...}, "tolerations": [...]}):
    what a sweep's `unit-resources` step hands on to a unit that requests GPUs (`placed_by_outputs`)."""
    CONFIG, _ = _settings()
    key, value = CONFIG.gpu_node_label
    tkey, tvalue, effect = CONFIG.gpu_toleration
    return {"node_selector": {key: value}, "tolerations": [{"key": tkey, "operator": "Equal", "value": tvalue, "effect": effect}]}


def placed_by_outputs(task: PipelineTask, node_selector, tolerations) -> PipelineTask:
    """A `gpu_step` whose node selector and tolerations are read at run time from another step's outputs
    (`node_selector`: a dict, `tolerations`: a list; kfp-kubernetes `add_node_selector_json` /
    `add_toleration_json`): a sweep's unit with GPUs gets the GPU pool's, a served model's unit (`gpus: 0`)
    none, so it runs on CPU nodes. The static GPU label and toleration stay beside the JSON references, in
    the same entries: a backend that reads the references ignores them, and `--compat` (older backends,
    pipelines/kfp_compat.py) drops the references and keeps them."""
    kubernetes.add_node_selector_json(task, node_selector)
    kubernetes.add_toleration_json(task, tolerations)
    config = task.platform_config["kubernetes"]
    static = [t for t in config["tolerations"] if "tolerationJson" not in t]
    (dynamic,) = [t for t in config["tolerations"] if "tolerationJson" in t]
    # one entry: the static GPU toleration's fields, and the reference that replaces them at run time
    config["tolerations"] = [{**(static[0] if static else {}), **dynamic}] + static[1:]
    return task


def train_step(task: PipelineTask, cpu: str = "4", memory: str = "32G") -> PipelineTask:
    """A training step: `gpu_step` (GPU pool, tolerations, retries, PVC for checkpoints and the
    model cache, HF token) in the training image (`FACTPROBE_IMAGE_TRAIN`, with DeepSpeed), plus a
    memory-backed /dev/shm."""
    CONFIG, _ = _settings()
    gpu_step(task, cpu=cpu, memory=memory)
    task.set_container_image(CONFIG.train_image)
    return with_shm(task)
